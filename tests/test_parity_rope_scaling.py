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


# --- whole Hugging Face configs, as they stand in config.json, through from_hf --------
# (the rope keys of each model's config.json; transformers 4 layout: rope_theta and,
# for Phi-3, original_max_position_embeddings at the top level)

PHI35_LONG = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
    1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661,
    3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
    7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945,
    24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
    50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305,
    58.21000289916992, 60.1400032043457, 62.61000442504883, 62.62000274658203,
    62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
    63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938,
    64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062,
]
PHI35_SHORT = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
    1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
    1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
    1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
    1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
    1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713,
    2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533,
]

# name -> (head_dim, config keys). Llama 3.1 8B; Qwen2.5-7B-Instruct with the YaRN
# block its model card gives for 128k; DeepSeek-V3 (qk_rope_head_dim 64); Phi-3.5-mini
# (head_dim 3072 / 32 = 96); a dynamic NTK block; LongChat-13B-16k's linear block.
REAL_CONFIGS = {
    "llama-3.1-8b": (128, {
        "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192,
                         "rope_type": "llama3"}}),
    "qwen2.5-7b-yarn": (128, {
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768,
                         "type": "yarn"}}),
    "deepseek-v3": (64, {
        "max_position_embeddings": 163840, "rope_theta": 10000,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
                         "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"}}),
    "phi-3.5-mini": (96, {
        "max_position_embeddings": 131072, "rope_theta": 10000.0,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"long_factor": PHI35_LONG, "short_factor": PHI35_SHORT,
                         "type": "longrope"}}),
    "dynamic-ntk": (128, {
        "max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "dynamic", "factor": 2.0}}),
    "longchat-13b-16k": (128, {
        "max_position_embeddings": 16384, "rope_theta": 10000.0,
        "rope_scaling": {"type": "linear", "factor": 8.0}}),
}


def _real_cases():
    """(name, seq_len): every config at its own length; the length-dependent types
    (dynamic, longrope) also below and far above the training length."""
    for name, (_, keys) in sorted(REAL_CONFIGS.items()):
        yield name, None
        scaling = keys["rope_scaling"]
        if scaling.get("rope_type", scaling.get("type")) in ("dynamic", "longrope"):
            yield name, 1000
            yield name, 200000


@pytest.mark.parametrize("name,seq_len", list(_real_cases()))
def test_real_configs_through_from_hf(name, seq_len):
    """The dict from config.json, passed as it is, gives Hugging Face's numbers."""
    from course_lib import from_hf_rope_parameters

    head_dim, keys = REAL_CONFIGS[name]
    scaling = keys["rope_scaling"]
    rope_type = scaling.get("rope_type", scaling.get("type"))
    hf_params = dict(scaling, rope_theta=keys["rope_theta"])
    if "original_max_position_embeddings" in keys:  # Phi-3 keeps it at the top
        hf_params["original_max_position_embeddings"] = keys[
            "original_max_position_embeddings"]
    cfg = _config(head_dim, keys["max_position_embeddings"], hf_params)
    inv_hf, att_hf = _hf(rope_type, cfg, seq_len=seq_len)
    kwargs = from_hf_rope_parameters(
        scaling,
        rope_theta=keys["rope_theta"],
        max_position_embeddings=keys["max_position_embeddings"],
        original_max_position_embeddings=keys.get("original_max_position_embeddings"),
    )
    if seq_len is not None:
        kwargs["seq_len"] = seq_len
    inv, att = rope_scaled_frequencies(head_dim, **kwargs)
    base = kwargs["base"]
    if rope_type == "dynamic" and seq_len is not None:
        a, L = kwargs["factor"], kwargs["original_max_position"]
        base = base * (a * max(seq_len, L) / L - (a - 1)) ** (
            head_dim / (head_dim - 2))
    factor = float(kwargs["factor"] or 64.0)  # longrope: its lists reach 64.8
    _assert_close(inv_hf, inv, (math.log(base) + 8 + factor + 3) * U)
    assert math.isclose(att, att_hf, rel_tol=1e-14)


def test_from_hf_rejects_what_it_cannot_follow():
    from course_lib import from_hf_rope_parameters

    with pytest.raises(ValueError, match="rope_theta is missing"):
        from_hf_rope_parameters({"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="rope_type must be one of"):
        from_hf_rope_parameters({"rope_type": "proportional", "rope_theta": 1e4})
    with pytest.raises(ValueError, match="needs max_position_embeddings"):
        from_hf_rope_parameters({"rope_type": "dynamic", "factor": 2.0,
                                 "rope_theta": 1e4})
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        from_hf_rope_parameters({"rope_type": "linear", "factor": 2.0,
                                 "rope_theta": 1e4, "partial_rotary_factor": 0.5})
    with pytest.raises(ValueError, match="does not implement the keys extra"):
        from_hf_rope_parameters({"rope_type": "yarn", "factor": 2.0, "extra": 1,
                                 "rope_theta": 1e4,
                                 "original_max_position_embeddings": 64})
    plain = from_hf_rope_parameters({"rope_type": "default", "rope_theta": 1e4})
    inv, att = rope_scaled_frequencies(16, **plain)
    want = 1e4 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    assert torch.allclose(inv.double(), want, rtol=U * 16) and att == 1.0


@pytest.mark.parametrize("seq_len", (100, 2048, 5000, 40000))
def test_papers_dynamic_rule_is_hf_with_factor_one(seq_len):
    """YaRN's s = max(1, l/L) (factor=None here) equals Hugging Face's dynamic type
    with factor 1."""
    L, d, base = 2048, 64, 10000.0
    cfg = _config(d, L, {"rope_type": "dynamic", "rope_theta": base, "factor": 1.0})
    inv_hf, _ = _hf("dynamic", cfg, seq_len=seq_len)
    inv, _ = rope_scaled_frequencies(d, base=base, method="dynamic", factor=None,
                                     original_max_position=L, seq_len=seq_len)
    s = max(1.0, seq_len / L)
    _assert_close(inv_hf, inv, (math.log(base * s ** (d / (d - 2))) + 6) * U)
