"""Parity of course_lib.rope_scaled_frequencies with Hugging Face transformers.

Each case builds a real ``LlamaConfig`` with ``rope_parameters`` and calls
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", ...)``,
exactly as a Llama model does at load time.

Tolerance (relative, float32, u = 2**-24 the unit roundoff): transformers computes
``1 / (base ** (arange(0, d, 2) / d))`` in float32. The exponent x = 2i/d is rounded
(relative error u), which moves base**x by ln(base**x) * u <= ln(base) * u; base itself
is rounded to float32 (x * u <= u); powf is accurate to about 2u; the reciprocal, the
division by a factor and our single rounding of the float64 result add u each. So
|hf - ours| / ours <= (ln(base) + 6) u. YaRN's blend ``a (1 - e) + b e`` adds two
products and a sum (3u), and the float32 ramp value e (absolute error u) moves the
blend by |a - b| u <= s * ours * u, since ours >= b / s: (s + 3) u more. The attention
factors are computed by the same float64 formulas on both sides: 1e-14 relative.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from course_lib import rope_scaled_frequencies

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

U = 2.0**-24


def _config(head_dim: int, max_position: int, rope_parameters: dict) -> LlamaConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LlamaConfig(
            hidden_size=head_dim * 2,
            num_attention_heads=2,
            head_dim=head_dim,
            max_position_embeddings=max_position,
            rope_parameters=rope_parameters,
        )


def _hf(rope_type: str, config: LlamaConfig, seq_len: int | None = None):
    fn = ROPE_INIT_FUNCTIONS[rope_type]
    if seq_len is None:
        return fn(config, "cpu")
    return fn(config, "cpu", seq_len=seq_len)


def _assert_close(hf: torch.Tensor, ours: torch.Tensor, rtol: float) -> None:
    assert hf.dtype == ours.dtype == torch.float32
    assert hf.shape == ours.shape
    rel = ((hf.double() - ours.double()).abs() / ours.double()).max().item()
    assert rel <= rtol, f"max relative difference {rel:.3e} > {rtol:.3e}"


HEAD_DIMS = (16, 64, 128)
BASES = (10000.0, 500000.0)
FACTORS = (2.0, 4.0, 8.0, 16.0)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("factor", FACTORS)
def test_linear(head_dim, base, factor):
    cfg = _config(
        head_dim, 4096, {"rope_type": "linear", "rope_theta": base, "factor": factor}
    )
    inv_hf, att_hf = _hf("linear", cfg)
    inv, att = rope_scaled_frequencies(
        head_dim, base=base, method="linear", factor=factor
    )
    _assert_close(inv_hf, inv, (math.log(base) + 6) * U)
    assert att == att_hf == 1.0


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("factor", (2.0, 8.0))
@pytest.mark.parametrize("seq_len", (100, 2048, 2049, 5000, 40000))
def test_dynamic_below_and_above_original(head_dim, base, factor, seq_len):
    original = 2048  # for "dynamic", HF reads L from max_position_embeddings
    cfg = _config(
        head_dim,
        original,
        {"rope_type": "dynamic", "rope_theta": base, "factor": factor},
    )
    inv_hf, att_hf = _hf("dynamic", cfg, seq_len=seq_len)
    inv, att = rope_scaled_frequencies(
        head_dim,
        base=base,
        method="dynamic",
        factor=factor,
        original_max_position=original,
        seq_len=seq_len,
    )
    s = factor * max(seq_len, original) / original - (factor - 1)
    base_eff = base * s ** (head_dim / (head_dim - 2))
    _assert_close(inv_hf, inv, (math.log(base_eff) + 6) * U)
    assert att == att_hf == 1.0
    if seq_len <= original:  # inside the training length nothing changes
        plain, _ = rope_scaled_frequencies(
            head_dim, base=base, method="linear", factor=1.0
        )
        _assert_close(plain, inv, 0.0)


YARN_EXTRAS = (
    {},
    {"beta_fast": 16.0, "beta_slow": 2.0},
    {"mscale": 1.0, "mscale_all_dim": 0.707},
    {"attention_factor": 1.3},
    {"truncate": False},
)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("extra", YARN_EXTRAS, ids=lambda e: ",".join(e) or "defaults")
def test_yarn(head_dim, base, factor, extra):
    original = 4096
    params = {
        "rope_type": "yarn",
        "rope_theta": base,
        "factor": factor,
        "original_max_position_embeddings": original,
        **extra,
    }
    cfg = _config(head_dim, int(original * factor), params)
    inv_hf, att_hf = _hf("yarn", cfg)
    inv, att = rope_scaled_frequencies(
        head_dim,
        base=base,
        method="yarn",
        factor=factor,
        original_max_position=original,
        **extra,
    )
    _assert_close(inv_hf, inv, (math.log(base) + 6 + factor + 3) * U)
    assert math.isclose(att, att_hf, rel_tol=1e-14)


def test_yarn_factor_from_max_position():
    cfg = _config(
        64,
        32768,
        {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": None,
            "original_max_position_embeddings": 4096,
        },
    )
    inv_hf, att_hf = _hf("yarn", cfg)
    inv, att = rope_scaled_frequencies(
        64, method="yarn", factor=None, original_max_position=4096, max_position=32768
    )
    _assert_close(inv_hf, inv, (math.log(10000.0) + 6 + 8 + 3) * U)
    assert math.isclose(att, att_hf, rel_tol=1e-14)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("bands", ((1.0, 4.0), (2.0, 8.0)))
@pytest.mark.parametrize("original", (2048, 8192))
def test_llama3(head_dim, base, factor, bands, original):
    low, high = bands
    cfg = _config(
        head_dim,
        int(original * factor),
        {
            "rope_type": "llama3",
            "rope_theta": base,
            "factor": factor,
            "low_freq_factor": low,
            "high_freq_factor": high,
            "original_max_position_embeddings": original,
        },
    )
    inv_hf, att_hf = _hf("llama3", cfg)
    inv, att = rope_scaled_frequencies(
        head_dim,
        base=base,
        method="llama3",
        factor=factor,
        original_max_position=original,
        low_freq_factor=low,
        high_freq_factor=high,
    )
    # The band formula is continuous in the wavelength (mu = 0 and mu = 1 at the band
    # edges), so a band decision that flips on a last-bit difference changes nothing
    # beyond the blend's own rounding (3u, as for YaRN, with mu's error times s).
    _assert_close(inv_hf, inv, (math.log(base) + 6 + factor + 3) * U)
    assert att == att_hf == 1.0


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("seq_len", (None, 1000, 4096, 4097, 20000))
@pytest.mark.parametrize("given", ("factor", "max_position", "attention_factor"))
def test_longrope(head_dim, base, seq_len, given):
    original, max_position = 4096, 131072
    gen = torch.Generator().manual_seed(head_dim + int(base))
    short = (
        1.0 + torch.rand(head_dim // 2, generator=gen, dtype=torch.float64)
    ).tolist()
    long = (
        1.0 + 40 * torch.rand(head_dim // 2, generator=gen, dtype=torch.float64)
    ).tolist()
    params = {
        "rope_type": "longrope",
        "rope_theta": base,
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": original,
    }
    kwargs = {}
    if given == "factor":
        params["factor"] = kwargs["factor"] = 16.0
    elif given == "max_position":
        kwargs["factor"] = None
        kwargs["max_position"] = max_position
    else:
        params["factor"] = kwargs["factor"] = 16.0
        params["attention_factor"] = kwargs["attention_factor"] = 1.1
    cfg = _config(head_dim, max_position, params)
    inv_hf, att_hf = _hf("longrope", cfg, seq_len=seq_len)
    if seq_len is not None:
        kwargs["seq_len"] = seq_len
    inv, att = rope_scaled_frequencies(
        head_dim,
        base=base,
        method="longrope",
        original_max_position=original,
        short_factor=short,
        long_factor=long,
        **kwargs,
    )
    # float32 factor lists (u) and one more product (u) on top of the base formula
    _assert_close(inv_hf, inv, (math.log(base) + 8) * U)
    assert math.isclose(att, att_hf, rel_tol=1e-14)
