"""Defining properties of course_lib.rope_scaling (independent of transformers).

All comparisons are in float64 (``dtype=torch.float64``); a tolerance of k * 2**-52
counts the roundings between the two sides of each equation (noted per test).
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import (
    ROPE_SCALING_METHODS,
    apply_rope,
    dynamic_ntk_factor,
    ntk_scaled_base,
    rope_angles,
    rope_frequencies,
    rope_scaled_frequencies,
    yarn_attention_factor,
    yarn_correction_dim,
)

EPS = 2.0**-52
F64 = torch.float64


def _theta(d, base=10000.0):
    return rope_frequencies(d, base=base, dtype=F64)


def _rel(a, b):
    return ((a - b).abs() / b.abs()).max().item()


def test_methods_listed():
    assert ROPE_SCALING_METHODS == (
        "linear",
        "ntk",
        "dynamic",
        "yarn",
        "llama3",
        "longrope",
    )


@pytest.mark.parametrize("d", (8, 64))
@pytest.mark.parametrize("s", (2.0, 8.0))
def test_linear_equals_positions_divided_by_factor(d, s):
    # rotating position m with theta/s is rotating position m/s with theta:
    # the angles m * (theta / s) and (m / s) * theta differ by two roundings.
    inv, att = rope_scaled_frequencies(d, method="linear", factor=s, dtype=F64)
    m = torch.arange(0, 4000, 7, dtype=F64)
    assert _rel(m[1:, None] * inv, (m[1:, None] / s) * _theta(d)) <= 4 * EPS
    assert att == 1.0


def test_linear_rotation_equals_interpolated_position():
    # factor 2: position 2m rotated with the scaled frequencies == position m unscaled
    d, s = 16, 2.0
    inv, _ = rope_scaled_frequencies(d, method="linear", factor=s, dtype=F64)
    m = torch.arange(50)
    scaled = (2 * m).to(F64)[:, None] * inv
    assert torch.allclose(scaled, rope_angles(m, d), rtol=4 * EPS, atol=0)


@pytest.mark.parametrize("method", ["linear", "ntk", "dynamic", "yarn", "llama3"])
@pytest.mark.parametrize("d", (4, 32, 128))
def test_factor_one_is_identity(method, d):
    inv, att = rope_scaled_frequencies(
        d, method=method, factor=1.0, original_max_position=2048, dtype=F64
    )
    # yarn: theta * (1 - g) + theta * g differs from theta by 2 roundings
    assert _rel(inv, _theta(d)) <= 2 * EPS
    assert att == 1.0


@pytest.mark.parametrize("d", (4, 16, 128))
@pytest.mark.parametrize("s", (2.0, 4.0, 32.0))
def test_ntk_base_formula(d, s):
    base = 10000.0
    assert math.isclose(
        ntk_scaled_base(base, s, d), base * s ** (d / (d - 2)), rel_tol=0
    )
    inv, _ = rope_scaled_frequencies(d, base=base, method="ntk", factor=s, dtype=F64)
    theta = _theta(d)
    # pair 0 untouched, the last pair slowed by exactly s (the defining property)
    assert inv[0].item() == 1.0
    # b'^(-(d-2)/d) = b^(-(d-2)/d) / s up to the pow's rounding, amplified by
    # ln(b') * (d-2)/d ~ 14 at most here, plus 4 more roundings
    assert math.isclose(inv[-1].item(), theta[-1].item() / s, rel_tol=(20 + 4) * EPS)
    # in between, every pair is slowed by less than s and by at least 1
    ratio = theta / inv
    assert torch.all(ratio >= 1 - 4 * EPS) and torch.all(ratio <= s * (1 + 24 * EPS))
    assert torch.all(ratio[1:] >= ratio[:-1] * (1 - 4 * EPS))


def test_dynamic_factor_formula():
    assert dynamic_ntk_factor(4.0, 100, 2048) == 1.0
    assert dynamic_ntk_factor(4.0, 2048, 2048) == 1.0
    # linear in the length past L with slope s / L
    assert math.isclose(dynamic_ntk_factor(4.0, 4096, 2048), 4.0 * 2 - 3.0, rel_tol=0)
    d, s, L, n = 32, 4.0, 2048, 6000
    inv, _ = rope_scaled_frequencies(
        d, method="dynamic", factor=s, original_max_position=L, seq_len=n, dtype=F64
    )
    ntk, _ = rope_scaled_frequencies(
        d, method="ntk", factor=s * n / L - (s - 1), dtype=F64
    )
    assert torch.equal(inv, ntk)


@pytest.mark.parametrize("d", (32, 128))
@pytest.mark.parametrize("base", (10000.0, 500000.0))
@pytest.mark.parametrize("s", (4.0, 16.0))
def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones(d, base, s):
    L = 4096
    inv, _ = rope_scaled_frequencies(
        d, base=base, method="yarn", factor=s, original_max_position=L, dtype=F64
    )
    theta = _theta(d, base)
    turns = L * theta / (2 * math.pi)  # full rotations of pair i within L
    fast = turns > 32 * 1.5 * 2  # well past beta_fast after the floor of the index
    slow = turns < 1 / 2  # well past beta_slow after the ceil
    assert fast.any() and slow.any()
    assert torch.equal(inv[fast], theta[fast])  # untouched
    assert _rel(inv[slow], theta[slow] / s) <= 2 * EPS  # interpolated by s
    # every pair lies between the two, monotonically blended
    assert torch.all(inv <= theta * (1 + 2 * EPS))
    assert torch.all(inv >= theta / s * (1 - 2 * EPS))


def test_yarn_correction_dim_inverts_turn_count():
    d, base, L = 64, 10000.0, 4096
    for r in (1.0, 32.0):
        i = yarn_correction_dim(r, d, base, L)
        turns = L * base ** (-2 * i / d) / (2 * math.pi)
        assert math.isclose(turns, r, rel_tol=64 * EPS)


def test_yarn_attention_factor():
    assert yarn_attention_factor(1.0) == 1.0
    assert math.isclose(
        yarn_attention_factor(16.0), 0.1 * math.log(16.0) + 1, rel_tol=0
    )
    assert math.isclose(
        yarn_attention_factor(16.0, 1.0, 0.5),
        (0.1 * math.log(16.0) + 1) / (0.05 * math.log(16.0) + 1),
        rel_tol=2 * EPS,
    )
    _, att = rope_scaled_frequencies(
        64, method="yarn", factor=8.0, original_max_position=2048
    )
    assert att == yarn_attention_factor(8.0)


@pytest.mark.parametrize("s", (8.0, 2.0))
def test_llama3_bands(s):
    d, base, L, lo, hi = 128, 500000.0, 8192, 1.0, 4.0
    inv, att = rope_scaled_frequencies(
        d,
        base=base,
        method="llama3",
        factor=s,
        original_max_position=L,
        dtype=F64,
        low_freq_factor=lo,
        high_freq_factor=hi,
    )
    theta = _theta(d, base)
    wl = 2 * math.pi / theta
    high, low = wl < L / hi, wl > L / lo
    medium = ~high & ~low
    assert high.any() and low.any() and medium.any()
    assert torch.equal(inv[high], theta[high])
    assert _rel(inv[low], theta[low] / s) <= EPS
    ratio = theta[medium] / inv[medium]  # strictly between the two bands' ratios
    assert torch.all(ratio > 1) and torch.all(ratio < s)
    mu = (L / wl[medium] - lo) / (hi - lo)
    assert (
        _rel(inv[medium], (1 - mu) * theta[medium] / s + mu * theta[medium]) <= 4 * EPS
    )
    assert att == 1.0


def test_longrope_selects_factor_lists():
    d, L = 8, 4096
    short, long = [1.0, 1.5, 2.0, 3.0], [1.0, 4.0, 16.0, 64.0]
    kw = dict(
        method="longrope",
        factor=32.0,
        original_max_position=L,
        short_factor=short,
        long_factor=long,
        dtype=F64,
    )
    inv_s, att = rope_scaled_frequencies(d, seq_len=L, **kw)
    inv_l, _ = rope_scaled_frequencies(d, seq_len=L + 1, **kw)
    theta = _theta(d)
    assert _rel(inv_s, theta / torch.tensor(short, dtype=F64)) <= EPS
    assert _rel(inv_l, theta / torch.tensor(long, dtype=F64)) <= EPS
    assert math.isclose(att, math.sqrt(1 + math.log(32) / math.log(L)), rel_tol=0)


def test_scaled_angles_stay_inside_trained_range():
    # the point of interpolation: over 8x the length, the slowest pair turns no
    # further than it did over the training length (s L theta/s = L theta, 2 roundings)
    d, L, s = 64, 1024, 8.0
    theta = _theta(d)
    for method in ("linear", "yarn", "llama3"):
        inv, _ = rope_scaled_frequencies(
            d, method=method, factor=s, original_max_position=L, dtype=F64
        )
        assert s * L * inv[-1] <= L * theta[-1] * (1 + 4 * EPS)


def test_scaled_frequencies_feed_apply_rope_shape():
    inv, _ = rope_scaled_frequencies(
        8, method="yarn", factor=4.0, original_max_position=64
    )
    assert inv.shape == (4,) and inv.dtype == torch.float32
    x = torch.randn(1, 1, 3, 8)
    assert apply_rope(x).shape == x.shape


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        (dict(method="pi", factor=2.0), ValueError, "'linear', 'ntk', 'dynamic'"),
        (dict(method="yarn", factor=2.0), ValueError, "needs original_max_position"),
        (dict(method="llama3", factor=2.0), ValueError, "needs original_max_position"),
        (dict(method="linear", factor=0.5), ValueError, "at least 1"),
        (dict(method="linear", factor="2"), TypeError, "real number"),
        (dict(method="linear", factor=None), ValueError, "needs a factor"),
        (dict(method="linear", factor=2.0, beta_fast=32), TypeError, "does not take"),
        (
            dict(method="yarn", factor=2.0, original_max_position=0),
            ValueError,
            "positive integer",
        ),
        (
            dict(
                method="yarn",
                factor=2.0,
                original_max_position=64,
                beta_fast=1,
                beta_slow=2,
            ),
            ValueError,
            "beta_fast must be larger",
        ),
        (
            dict(
                method="llama3",
                factor=2.0,
                original_max_position=64,
                low_freq_factor=4.0,
                high_freq_factor=1.0,
            ),
            ValueError,
            "high_freq_factor must be larger",
        ),
        (
            dict(
                method="longrope",
                factor=2.0,
                original_max_position=64,
                short_factor=[1.0] * 4,
            ),
            ValueError,
            "needs long_factor",
        ),
        (
            dict(
                method="longrope",
                factor=2.0,
                original_max_position=64,
                short_factor=[1.0] * 3,
                long_factor=[1.0] * 4,
            ),
            ValueError,
            "4 entries",
        ),
        (
            dict(method="dynamic", factor=2.0, original_max_position=64, seq_len=1.5),
            ValueError,
            "seq_len must be a positive integer",
        ),
    ],
)
def test_bad_input_messages(kwargs, exc, words):
    with pytest.raises(exc, match="^rope_scaled_frequencies: ") as info:
        rope_scaled_frequencies(8, **kwargs)
    assert words in str(info.value)


def test_odd_head_dim_rejected():
    with pytest.raises(ValueError, match="even"):
        rope_scaled_frequencies(7, method="linear", factor=2.0)


# --- RotaryEmbedding(scaling=...) -------------------------------------------------

from course_lib import RotaryEmbedding  # noqa: E402


def _unit(angle):
    return torch.polar(torch.ones_like(angle), angle)


# atol 1e-12 below: angles up to ~100 rad carry ~100 ulp of float64 (2e-14) in
# cos/sin, times |x| < 6 and a few products: well under 1e-12, far above rounding.
def _x(seq, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 2, seq, d, generator=g, dtype=F64)


@pytest.mark.parametrize("convention", ("interleaved", "half"))
def test_rotary_linear_scaling_is_interpolated_positions(convention):
    # position 2m with factor 2 is position m without scaling (angles equal up to
    # 4 roundings; cos/sin of the same float64 angle)
    rope = RotaryEmbedding(
        8, convention=convention, scaling={"method": "linear", "factor": 2.0}
    )
    x = _x(20)
    even = torch.arange(0, 40, 2)
    got = rope(x, even)
    want = apply_rope(x, torch.arange(20), convention=convention)
    assert torch.allclose(got, want, rtol=0, atol=64 * EPS)


def test_rotary_yarn_applies_frequencies_and_attention_factor():
    scaling = {"method": "yarn", "factor": 8.0, "original_max_position": 64}
    rope = RotaryEmbedding(16, scaling=scaling)
    inv, att = rope_scaled_frequencies(16, dtype=F64, **scaling)
    assert att > 1
    x = _x(100, 16)
    y = rope(x)
    # a rotation times att: every pair's norm grows by att exactly (up to rounding)
    pair_norm = lambda t: t.unflatten(-1, (-1, 2)).norm(dim=-1)  # noqa: E731
    assert torch.allclose(pair_norm(y), att * pair_norm(x), rtol=32 * EPS, atol=0)
    # and the angle is m * inv: compare with the complex form built independently
    z = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous())
    m = torch.arange(100, dtype=F64)[:, None]
    want = torch.view_as_real(z * att * _unit(m * inv)).flatten(-2)
    assert torch.allclose(y, want, rtol=0, atol=1e-12)


def test_rotary_dynamic_recomputes_past_original_length():
    L = 32
    rope = RotaryEmbedding(
        8,
        max_seq_len=16,
        scaling={"method": "dynamic", "factor": 2.0, "original_max_position": L},
    )
    short = _x(L)
    assert torch.allclose(rope(short), apply_rope(short), rtol=0, atol=64 * EPS)
    long = _x(3 * L)
    inv, _ = rope_scaled_frequencies(
        8,
        method="dynamic",
        factor=2.0,
        original_max_position=L,
        seq_len=3 * L,
        dtype=F64,
    )
    z = torch.view_as_complex(long.unflatten(-1, (-1, 2)).contiguous())
    m = torch.arange(3 * L, dtype=F64)[:, None]
    want = torch.view_as_real(z * _unit(m * inv)).flatten(-2)
    assert torch.allclose(rope(long), want, rtol=0, atol=1e-12)
    # back below the original length: plain RoPE again
    assert torch.allclose(rope(short), apply_rope(short), rtol=0, atol=64 * EPS)


@pytest.mark.parametrize(
    ("scaling", "exc", "words"),
    [
        ("linear", TypeError, "must be a dict"),
        ({"factor": 2.0}, TypeError, "must be a dict"),
        ({"method": "yarn", "factor": 2.0}, ValueError, "needs original_max_position"),
        ({"method": "linear", "factor": 2.0, "seq_len": 5}, ValueError, "seq_len"),
    ],
)
def test_rotary_scaling_errors(scaling, exc, words):
    with pytest.raises(exc, match=words):
        RotaryEmbedding(8, scaling=scaling)


# --- figures of chapter 11 ---------------------------------------------------------


def test_wavelength_figure_splits_pairs_at_training_length():
    from course_lib import viz

    fig = viz.plot_rope_wavelengths_vs_training(64, 1000)
    seen, unseen = fig.axes[0].lines[:2]
    assert (seen.get_ydata() <= 1000).all() and (unseen.get_ydata() > 1000).all()
    wl = 2 * math.pi / _theta(64)
    assert len(seen.get_ydata()) == int((wl <= 1000).sum())


def test_ratio_figure_lines_are_the_library_slowdowns():
    from course_lib import viz

    fig = viz.plot_scaled_frequency_ratios(32, 512, base=10000.0, factor=4.0)
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    theta = _theta(32)
    for method in ("linear", "ntk", "yarn", "llama3"):
        inv, _ = rope_scaled_frequencies(
            32, method=method, factor=4.0, original_max_position=512, dtype=F64
        )
        assert torch.allclose(
            torch.tensor(lines[method].get_ydata()), theta / inv, rtol=0, atol=0
        )
    assert torch.allclose(
        torch.tensor(lines["linear"].get_ydata()), torch.full((16,), 4.0, dtype=F64)
    )


def test_ntk_slowdown_per_pair_is_a_power_of_the_factor():
    # chapter 11: theta_i / theta_i' = s^(2i/(d-2)); each side carries the pow's
    # rounding amplified by ln(b') ~ 15, plus two divisions
    d, s = 64, 4.0
    inv, _ = rope_scaled_frequencies(d, method="ntk", factor=s, dtype=F64)
    i = torch.arange(d // 2, dtype=F64)
    assert _rel(_theta(d) / inv, s ** (2 * i / (d - 2))) <= 40 * EPS


def test_wavelength_formula():
    # chapter 11: lambda_i = 2 pi / theta_i = 2 pi b^(2i/d)
    d, b = 32, 10000.0
    i = torch.arange(d // 2, dtype=F64)
    assert _rel(2 * math.pi / _theta(d, b), 2 * math.pi * b ** (2 * i / d)) <= 8 * EPS


def test_rope_modules_import_no_private_name_and_no_circle():
    """rope imports rope_scaling (the scaled tables); rope_scaling imports neither
    rope nor another module's private helper (issue 20: the circle through
    ``_check_head_dim`` is gone; shared checks live in ``_validate``)."""
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "course_lib"
    imports = {}
    for module in ("rope", "rope_scaling"):
        tree = ast.parse((folder / f"{module}.py").read_text(encoding="utf-8"))
        imports[module] = [
            (node.module, alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1
            for alias in node.names
        ]
        for source, name in imports[module]:
            assert not name.startswith("_"), (module, source, name)
    assert ("rope_scaling", "rope_scaled_frequencies") in imports["rope"]
    assert all(source != "rope" for source, _ in imports["rope_scaling"])


@pytest.mark.parametrize("L", (64, 2048))
@pytest.mark.parametrize("n", (1, 64, 100, 2048, 4096, 16384))
def test_dynamic_without_factor_is_the_papers_rule(L, n):
    """YaRN section 3.3: s = max(1, l/L); it equals Hugging Face's rule with slope 1."""
    s = max(1.0, n / L)
    assert math.isclose(dynamic_ntk_factor(None, n, L), s, rel_tol=2 * EPS)
    assert math.isclose(dynamic_ntk_factor(1.0, n, L), s, rel_tol=2 * EPS)
    d = 16
    inv, att = rope_scaled_frequencies(
        d, method="dynamic", factor=None, original_max_position=L, seq_len=n,
        dtype=F64,
    )
    ntk, _ = rope_scaled_frequencies(d, method="ntk", factor=s, dtype=F64)
    # the same float64 operations on both sides, up to the factor's own rounding
    assert _rel(inv, ntk) <= 16 * EPS and att == 1.0


@pytest.mark.parametrize("ratio", (2, 4, 8))
def test_dynamic_factor_is_a_slope_not_the_target_ratio(ratio):
    """Passing factor = T/L together with seq_len = T (as chapter 12's first run did)
    gives (T/L)^2 - T/L + 1: 3, 13, 57 at 2L, 4L, 8L, not T/L."""
    L = 32
    T = ratio * L
    trap = dynamic_ntk_factor(float(ratio), T, L)
    assert math.isclose(trap, ratio**2 - ratio + 1, rel_tol=4 * EPS)
    assert trap > ratio
    assert dynamic_ntk_factor(None, T, L) == ratio  # the paper's rule: exact here


def test_rotary_dynamic_without_factor_follows_the_length():
    L, d = 16, 8
    rope = RotaryEmbedding(d, scaling={"method": "dynamic", "original_max_position": L})
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, 3 * L, d, dtype=F64, generator=gen)
    out = rope(x)
    inv, _ = rope_scaled_frequencies(
        d, method="dynamic", factor=None, original_max_position=L, seq_len=3 * L,
        dtype=F64,
    )
    angles = torch.arange(3 * L, dtype=F64)[:, None] * inv  # (3L, d/2)
    # rotate pair by pair with the expected angles (interleaved pairing)
    xr = x.reshape(1, 1, 3 * L, d // 2, 2)
    c, s_ = angles.cos(), angles.sin()
    want = torch.stack(
        (xr[..., 0] * c - xr[..., 1] * s_, xr[..., 0] * s_ + xr[..., 1] * c), dim=-1
    ).reshape(x.shape)
    assert torch.allclose(out, want, rtol=0, atol=1e-12)


def test_llama3_blend_is_the_papers_ramp_with_alpha_1_beta_4():
    """Llama 3.1's bands equal YaRN's section-3.2 blend h(theta) with gamma(r),
    r = L / wavelength, alpha = 1, beta = 4 (and no temperature)."""
    from course_lib import yarn_paper_ramp

    for d, base, L, s in ((128, 500000.0, 8192, 8.0), (64, 10000.0, 2048, 4.0)):
        theta = _theta(d, base)
        turns = L * theta / (2 * math.pi)
        g = yarn_paper_ramp(turns, 1.0, 4.0)
        assert g.min() >= 0 and g.max() <= 1
        inv, att = rope_scaled_frequencies(
            d, base=base, method="llama3", factor=s, original_max_position=L,
            dtype=F64,
        )
        # a blend of two products: a few ulps of the larger term
        assert _rel(inv, (1 - g) * theta / s + g * theta) <= 8 * EPS and att == 1.0


def test_paper_ramp_and_index_ramp_agree_at_the_ends_only():
    from course_lib import yarn_correction_range, yarn_paper_ramp, yarn_ramp

    d, base, L = 128, 10000.0, 4096
    theta = _theta(d, base)
    turns = L * theta / (2 * math.pi)
    keep_paper = yarn_paper_ramp(turns, 1.0, 32.0)
    low, high = yarn_correction_range(32.0, 1.0, d, base, L)
    keep_code = 1 - yarn_ramp(low, high, d // 2)
    assert torch.equal(keep_paper[turns >= 32] == 1, keep_code[turns >= 32] == 1)
    assert bool((keep_paper[turns <= 1] == 0).all())
    assert bool((keep_code[turns <= 1] <= keep_paper[turns <= 1] + 0.1).all())
    middle = (turns > 1) & (turns < 32)
    assert (keep_paper[middle] - keep_code[middle]).abs().max() > 0.1


@pytest.mark.parametrize("L", [16, 32, 64])
def test_yarn_fast_end_above_the_fastest_pair_is_clipped_to_pair_0(L):
    """Issue 33: no pair turns more than L / 2 pi times in L tokens (theta_0 = 1), so
    any beta_fast from L / 2 pi up (LLaMA's 32 included, at these L) puts the ramp's
    fast end at pair 0 and gives the same frequencies (the docstrings say so)."""
    import course_lib as cl

    d, base, s = 16, 10000.0, 4.0
    fastest = L / (2 * math.pi)
    assert fastest < 32
    ref = cl.rope_scaled_frequencies(d, base=base, method="yarn", factor=s,
                                     original_max_position=L, dtype=torch.float64,
                                     beta_fast=fastest * (1 + 1e-9), beta_slow=1.0)
    for beta_fast in (fastest * 1.5, 32.0, 1000.0):
        low, _ = cl.yarn_correction_range(beta_fast, 1.0, d, base, L)
        assert low == 0
        got = cl.rope_scaled_frequencies(d, base=base, method="yarn", factor=s,
                                         original_max_position=L,
                                         dtype=torch.float64, beta_fast=beta_fast,
                                         beta_slow=1.0)
        assert torch.equal(got[0], ref[0]) and got[1] == ref[1]
    at_fastest = cl.yarn_correction_dim(fastest, d, base, L)
    assert at_fastest == pytest.approx(0.0, abs=1e-12)
