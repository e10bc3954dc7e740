"""Claims of chapters 3 (offsets are rotations) and 4 (RoPE) added by the review of
issue 18, item 5: each computable sentence the review added or corrected is checked
here, independently of the chapter's own cells.

Chapter 3: a narrow head (W_Q W_K^T of rank d_k) still attends j places back; the
hand-computation numbers of the summary are computed (glue), not typed.
Chapter 4: what the real part of RoFormer's requirement admits (A^m q, A^-T^n k for any
invertible A) and what the complex form rules out; the length factor must be geometric
(a(m) = zeta^m) and gamma = 0 is forced by f(x, 0) = q; eq. 16 with non-square W_q, W_k;
float32 angles at 2^17 and 2^20 positions; the GPT-NeoX float16 report (position 1857,
pair 1 of a 32-dimensional head); RotaryEmbedding cast to bfloat16 rounds only its
tables, while float16 frequencies do not; the all-ones decay caption.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import course_lib as cl
from course_lib import viz

ROOT = Path(__file__).resolve().parent.parent
CH3 = ROOT / "book" / "03-rotation.md"
CH4 = ROOT / "book" / "04-rope.md"


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def _ccw(a: float) -> torch.Tensor:
    return torch.tensor(
        [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64
    )


# --------------------------------------------------------------------------------------
# Chapter 3
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("d_k", "j"), [(2, 1), (8, 3), (16, 10), (64, 5)])
def test_narrow_head_still_attends_j_places_back(d_k: int, j: int) -> None:
    """W_Q = first d_k coordinates, W_K = M(j)^T W_Q: rank d_k, and the score is
    sum over the kept pairs of cos((p - q - j) w_i), largest at q = p - j."""
    d_model, n = 64, 50
    pe = cl.sinusoidal_encoding(n, d_model).double()
    w_q = torch.eye(d_model, dtype=torch.float64)[:, :d_k]
    w_k = cl.offset_matrix(j, d_model, dtype=torch.float64).T @ w_q
    assert torch.linalg.matrix_rank(w_q @ w_k.T).item() == d_k
    scores = (pe @ w_q) @ (pe @ w_k).T  # (n, n)
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    offsets = torch.arange(n)[:, None] - torch.arange(n)[None, :] - j  # p - q - j
    expected = torch.cos(offsets[..., None] * omega[: d_k // 2]).sum(-1)
    torch.testing.assert_close(scores, expected, atol=1e-6, rtol=0)
    assert torch.equal(scores[j:].argmax(-1), torch.arange(n - j))


def test_offset_matrix_attention_is_nearly_flat_until_scaled_up() -> None:
    """Chapter 3 (issue 33): with W_Q W_K^T = M(j) the raw score peaks j places back,
    but softmax(score / sqrt(64)) over 40 keys is nearly flat: at p = 20 about 7.4 %
    on key 17 against 6.4 % on the next best (uniform 2.5 %); c M(j) with c = 8 puts
    more than half the weight there. Scores from the closed form
    sum_i cos((p - q - j) w_i), not from the library's matrix."""
    d, n, j = 64, 40, 3
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    offsets = torch.arange(n)[:, None] - torch.arange(n)[None, :] - j  # p - q - j
    scores = torch.cos(offsets[..., None] * omega).sum(-1)  # (n, n)
    for c, low, high in ((1, 0.07, 0.075), (8, 0.5, 1.0)):
        w = torch.softmax(c * scores / math.sqrt(d), dim=-1)
        assert torch.equal(w[j:].argmax(-1), torch.arange(n - j))
        top, nxt = w[20].topk(2).values.tolist()
        assert low < top < high
        if c == 1:
            assert 0.06 < nxt < 0.065 and top < 3 / n
    text = CH3.read_text(encoding="utf-8")
    for name in ("rot_attn_top", "rot_attn_next", "rot_attn_top_c8"):
        assert f'glue("{name}"' in text and f"{{glue:text}}`{name}:" in text
    assert "every position attends to the one" not in text


def test_hand_dot_figure_shows_both_sides_and_its_caption_is_glued() -> None:
    """Review S1 (issue 33): the anchors of fig-rot-hand-dot leave offsets on both
    sides, so the caption's peaks at +-2 pi and +-4 pi are in the plotted data; the
    caption's numbers are glued from the figure's lines, and the rotation section
    writes its offset k, not j (N2)."""
    n, anchors = 60, (20, 25)
    text = CH3.read_text(encoding="utf-8")
    assert f"viz.plot_dot_product_vs_distance({n}, 4, anchors={anchors})" in text
    fig = viz.plot_dot_product_vs_distance(n, 4, anchors=anchors)
    (k_a, y_a), (k_b, _) = (line.get_data() for line in fig.axes[1].lines[:2])
    k = np.arange(-max(anchors), n)
    curve = np.cos(k) + np.cos(k / 100)  # the closed form, d_model = 4
    inner = (curve[1:-1] > curve[:-2]) & (curve[1:-1] > curve[2:])
    peaks = k[1:-1][inner]
    for target in (2 * math.pi, 4 * math.pi):
        for sign in (1, -1):
            nearest = round(sign * target)
            assert nearest in peaks and nearest in k_a and nearest in k_b
    caption = text[text.index("name: fig-rot-hand-dot") - 900 :]
    caption = caption[: caption.index("name: fig-rot-hand-dot")]
    for name in ("len", "a", "b", "lo", "hi", "peak1", "peak2"):
        assert f"{{glue:text}}`hand_dot_{name}`" in caption
    assert "6.28" not in caption and "12.57" not in caption
    assert "M(j)" not in text and "q + j" not in text


def test_chapter_3_gives_both_of_vaswanis_reasons() -> None:
    """Vaswani et al. §3.5 give two reasons for the sinusoids: relative attention (a
    hypothesis) and extrapolation to longer sequences; chapter 3 quotes both."""
    text = " ".join(CH3.read_text(encoding="utf-8").split())
    assert "give two reasons for the sinusoids" in text
    assert "may allow the model to extrapolate" in text
    assert "in one sentence" not in text


def test_chapter_3_numbers_are_glued_and_right() -> None:
    """The summary's dot products and the 'cos 5' and '2 pi - 6' remarks come from glue,
    and the glued expressions give the rounded values the text shows."""
    text = CH3.read_text(encoding="utf-8")
    for name, fmt in (
        ("dot_offset_1", ".4f"),
        ("dot_offset_5", ".4f"),
        ("cos_5", ".2f"),
        ("two_pi_minus_6", ".2f"),
    ):
        assert f"{{glue:text}}`{name}:{fmt}`" in text
        assert f'glue("{name}"' in text
    for typed in ("1.5403", "1.2824", "0.28$"):
        assert typed not in text
    assert f"{math.cos(1) + math.cos(0.01):.4f}" == "1.5403"
    assert f"{math.cos(5) + math.cos(0.05):.4f}" == "1.2824"
    assert f"{math.cos(5):.2f}" == f"{2 * math.pi - 6:.2f}" == "0.28"


def test_chapter_3_reread_claims_are_checked() -> None:
    """Chapter 3 (re-read, helper A): M(1) for d_model = 8 turns its blocks by 1, 0.1,
    0.01 and 0.001 radians; PE(0) . PE(6) = cos 6 + cos 0.06 is larger than
    PE(0) . PE(1) (glued and asserted, not only printed); the score
    PE_p^T M(k) PE_q peaks at q = p - k for every p >= k (brute force over 500
    positions and three offsets, the closed form sum_i cos((p - q - k) w_i)); the
    direction R(m theta) is cited to RoFormer's section."""
    omega8 = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    assert torch.allclose(omega8, torch.tensor([1, 0.1, 0.01, 0.001], dtype=torch.float64))
    assert math.cos(6) + math.cos(0.06) > math.cos(1) + math.cos(0.01)
    omega = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    p = torch.arange(500, dtype=torch.float64)
    for k in (1, 3, 37):
        diff = p[:, None] - p[None, :] - k  # p - q - k
        scores = torch.cos(diff[..., None] * omega).sum(-1)  # (500, 500)
        assert torch.equal(scores[k:].argmax(dim=-1), torch.arange(500 - k))
        assert (scores[k:].max(dim=-1).values - 32).abs().max() < 1e-9
    text = CH3.read_text(encoding="utf-8")
    flat = " ".join(text.split())
    assert "assert dot_offset_6 > float(exact[0, 1])" in text
    assert f'glue("dot_offset_6"' in text and "{glue:text}`dot_offset_6:" in text
    assert "torch.tensor([1, 0.1, 0.01, 0.001]" in text
    assert "for every position, the raw score" not in flat
    assert "for every position $p \\ge k$" in flat
    assert "{cite}`su2021roformer`, §3.2.1, eq. 13" in flat
    # second pass: what the text reads off SymPy and the figure is asserted, not printed
    import sympy as sp

    def pe4(pos: int) -> sp.Matrix:
        slow = sp.Rational(pos, 100)
        return sp.Matrix([sp.sin(pos), sp.cos(pos), sp.sin(slow), sp.cos(slow)])

    assert sp.simplify(pe4(0).dot(pe4(1)) - pe4(5).dot(pe4(6))) == 0
    assert sp.simplify(pe4(0).dot(pe4(5)) - sp.cos(5) - sp.cos(sp.Rational(1, 20))) == 0
    for asserted in ("assert sp.simplify(exact[0, 1] - exact[5, 6]) == 0",
                     "assert sp.simplify(sym_dot - by_formula) == 0",
                     "assert turns[0] > 0"):
        assert asserted in text, asserted


# --------------------------------------------------------------------------------------
# Chapter 4: the requirement
# --------------------------------------------------------------------------------------


def _as_complex(v: torch.Tensor) -> complex:
    return complex(v[0].item(), v[1].item())


@pytest.mark.parametrize("kind", ["random", "stretch", "scaled_rotation"])
def test_real_requirement_admits_any_invertible_matrix(gen, kind: str) -> None:
    """Queries A^m q and keys (A^-T)^n k give offset-only dot products for any
    invertible A; the complex product q_m conj(k_n) is offset-only only when A is a
    scaled rotation zeta R(theta) (its imaginary part rules stretches out)."""
    q, k = torch.randn(2, 2, generator=gen, dtype=torch.float64)
    if kind == "random":
        a = torch.randn(2, 2, generator=gen, dtype=torch.float64) + 2 * torch.eye(
            2, dtype=torch.float64
        )
        a = a / abs(torch.linalg.det(a).item()) ** 0.5  # |det A| = 1
    elif kind == "stretch":
        a = torch.diag(torch.tensor([1.1, 0.9], dtype=torch.float64))
    else:
        a = 0.95 * _ccw(0.7)
    assert abs(torch.linalg.det(a).item()) > 1e-3
    a_inv_t = torch.linalg.inv(a).T

    def power(mat, e):
        return torch.linalg.matrix_power(mat, e)

    placements = [(1, 0), (3, 2), (5, 4), (2, 4), (4, 6)]
    by_offset: dict[int, list[tuple[float, complex]]] = {}
    scale = 1.0
    for m, n in placements:
        qm, kn = power(a, m) @ q, power(a_inv_t, n) @ k
        scale = max(scale, (qm.norm() * kn.norm()).item())
        prod = _as_complex(qm) * _as_complex(kn).conjugate()
        by_offset.setdefault(m - n, []).append(((qm @ kn).item(), prod))
    for values in by_offset.values():
        dots = [v[0] for v in values]
        assert max(dots) - min(dots) < 1e-12 * scale  # the real requirement holds
        assert dots[0] == pytest.approx(values[0][1].real, abs=1e-12)
    imag_spread = max(
        max(v[1].imag for v in vals) - min(v[1].imag for v in vals)
        for vals in by_offset.values()
    )
    if kind == "scaled_rotation":
        assert imag_spread < 1e-9
    else:
        assert imag_spread > 1e-3


def test_length_factor_must_be_geometric_and_gamma_is_forced(gen) -> None:
    """a(m) on queries and 1/a(n) on keys keep the score offset-only when
    a(m) = zeta^m, not for a(m) = 1 + 0.1 m; a phase gamma at position 0 breaks
    f(x, 0) = q."""
    q, k = torch.randn(2, 2, generator=gen, dtype=torch.float64)
    theta = 0.4

    def score(a, m, n):
        return ((a(m) * _ccw(m * theta) @ q) @ (_ccw(n * theta) @ k / a(n))).item()

    for a, offset_only in ((lambda p: 0.9**p, True), (lambda p: 1 + 0.1 * p, False)):
        same = [score(a, m, m - 1) for m in (1, 4, 9)]
        assert (max(same) - min(same) < 1e-9) is offset_only
    gamma = 0.3
    f_at_0 = _ccw(0 * theta + gamma) @ q
    assert (f_at_0 - q).abs().max() > 1e-2  # gamma != 0 moves q at position 0


@pytest.mark.parametrize(("d", "d_model"), [(2, 5), (8, 12), (16, 6)])
def test_eq_16_with_rectangular_projections(gen, d: int, d_model: int) -> None:
    """(rope-score): (R_m W_q x_m)^T (R_n W_k x_n) = x_m^T W_q^T R_{n-m} W_k x_n, the
    transpose on W_q included, for W_q, W_k of shape (d, d_model)."""
    w_q, w_k = torch.randn(2, d, d_model, generator=gen, dtype=torch.float64)
    x_m, x_n = torch.randn(2, d_model, generator=gen, dtype=torch.float64)
    theta = cl.rope_frequencies(d, dtype=torch.float64)

    def big_r(pos):
        return torch.block_diag(*[_ccw(pos * t) for t in theta.tolist()])

    for m, n in ((0, 0), (5, 2), (3, 11), (400, 399)):
        lhs = (big_r(m) @ w_q @ x_m) @ (big_r(n) @ w_k @ x_n)
        rhs = x_m @ w_q.T @ big_r(n - m) @ w_k @ x_n
        assert lhs.item() == pytest.approx(rhs.item(), abs=1e-9)


# --------------------------------------------------------------------------------------
# Chapter 4: precision
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [2**17, 2**20])
def test_float32_angles_at_long_positions(length: int) -> None:
    """Angles m theta_i computed in float32 (frequency and product rounded) are off by
    at most m theta_i 2^-23, and their cosines by more than bfloat16's 2^-9 rounding
    near 2^17 and 2^20 positions; the library's angles are float64."""
    theta = cl.rope_frequencies(128, base=500_000.0, dtype=torch.float64)
    m = torch.arange(length - 4096, length)
    exact = m.double()[:, None] * theta
    in_f32 = (m.float()[:, None] * theta.float()).double()
    err = (in_f32 - exact).abs()
    assert (err <= exact * 2.0**-23 * (1 + 1e-6)).all()
    cos_err = (in_f32.cos() - exact.cos()).abs().max().item()
    assert cos_err > 2.0**-9
    assert cos_err <= err.max().item() + 1e-12
    if length == 2**20:
        short = 2**17
        m_s = torch.arange(short - 4096, short)
        ex_s = m_s.double()[:, None] * theta
        f_s = (m_s.float()[:, None] * theta.float()).double()
        assert cos_err > (f_s.cos() - ex_s.cos()).abs().max().item()
    lib = cl.rope_angles(m, 128, base=500_000.0)
    assert lib.dtype == torch.float64
    torch.testing.assert_close(lib, exact, rtol=4 * 2.0**-52, atol=0)


def test_gpt_neox_float16_report() -> None:
    """EleutherAI/gpt-neox issue 1003: head_dim 32, position 1857, feature 1: the
    float32 angle is 1044.2678, the float16 one 1045, and the cosines differ by
    more than 0.5."""
    theta_1 = cl.rope_frequencies(32)[1]
    assert theta_1.item() == pytest.approx(10000.0 ** (-2 / 32), rel=1e-7)
    angle_f32 = 1857 * theta_1
    assert angle_f32.item() == pytest.approx(1044.2678, abs=1e-3)
    angle_f16 = torch.tensor(1857.0).half() * theta_1.half()
    assert angle_f16.item() == 1045.0
    diff = abs(math.cos(1045.0) - math.cos(angle_f32.item()))
    assert diff > 0.5
    assert diff == pytest.approx(
        (angle_f16.float().cos() - angle_f32.cos()).abs().item(), abs=1e-5
    )


def test_module_cast_to_bfloat16_rounds_only_its_tables(gen) -> None:
    """RotaryEmbedding(...).to(torch.bfloat16) holds bfloat16 cos/sin tables and
    rotates within (|a| + |b|) 2^-9 of the float64 rotation; rotating with float16
    frequencies is off by far more."""
    q = torch.randn(2, 6, 128, generator=gen, dtype=torch.float64)
    pos = torch.arange(4000, 4006)
    reference = cl.apply_rope(q, pos)
    rope = cl.RotaryEmbedding(128, max_seq_len=4096).to(torch.bfloat16)
    assert rope.cos_cached.dtype == torch.bfloat16
    got = rope(q, pos)
    a, b = q[..., 0::2], q[..., 1::2]
    bound = ((a.abs() + b.abs()) * 2.0**-9).repeat_interleave(2, dim=-1)
    assert ((got - reference).abs() <= bound + 1e-12).all()
    theta_f16 = cl.rope_frequencies(128, dtype=torch.float16).double()
    angles = pos.double()[:, None] * theta_f16
    pairs = torch.view_as_complex(q.reshape(2, 6, 64, 2).contiguous())
    wrong = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles))
    assert (wrong.flatten(-2) - reference).abs().max() > 0.2


# --------------------------------------------------------------------------------------
# Chapter 4: figure captions and text
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [2, 8, 16])
def test_rope_rotation_is_the_sinusoid_shift_matrix_backwards(dim: int, gen) -> None:
    """Chapter 4: R_{Theta, m} = M(-m) of chapter 3 (B(-a) = R(a)), checked against
    rotations built here, pair by pair."""
    x = torch.randn(5, dim, generator=gen, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    for m in (0, 1, 7, -3, 250):
        r = torch.block_diag(*[_ccw(m * th) for th in theta.tolist()])
        torch.testing.assert_close(
            cl.offset_matrix(-m, dim, dtype=torch.float64), r, atol=1e-12, rtol=0
        )
        torch.testing.assert_close(
            x @ r.T, cl.apply_rope(x, torch.full((5,), m)), atol=1e-12, rtol=0
        )


def test_bfloat16_tables_and_float16_frequencies() -> None:
    """Chapter 4, precision cell: at positions 4000..4003 (head 128) the bfloat16
    cos/sin tables of a cast RotaryEmbedding are within 2^-9 of the exact values, and
    cosines from float16 frequencies are off by more than 0.2."""
    pos = torch.arange(4000, 4004)
    theta = 10000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    exact = pos.double()[:, None] * theta  # (4, 64)
    rope = cl.RotaryEmbedding(128, max_seq_len=4096).to(torch.bfloat16)
    for table, fn in ((rope.cos_cached, torch.cos), (rope.sin_cached, torch.sin)):
        assert (table[pos].double() - fn(exact)).abs().max() <= 2.0**-9
    theta_f16 = theta.to(torch.float16).double()
    assert (
        torch.cos(pos.double()[:, None] * theta_f16) - torch.cos(exact)
    ).abs().max() > 0.2


def test_chapter_4_length_factor_and_implicit_requirement() -> None:
    """Issue 33: the chapter says the length factor that breaks relative scores is one
    applied alike to queries and keys (zeta^m / zeta^-n keeps them), and that RoFormer
    assumes the complex-product requirement implicitly (eq. 21 is the real inner
    product; eqs. 23-24 split lengths and angles)."""
    text = " ".join(CH4.read_text(encoding="utf-8").split())
    assert "a length factor applied alike to queries and keys" in text
    assert "The paper assumes this stronger requirement implicitly" in text
    assert "Its eq. 21 asks only for the real inner product" in text
    assert "off by two" not in text
    assert "RoFormer (§3.4.1) asks for more" not in text


def test_all_ones_decay_caption() -> None:
    """Figure fig-rope-decay, right panel: (2/d) sum_i cos(r theta_i) for d = 128 falls
    from 1 at r = 0 to about 0.3 at r = 250 (caption)."""
    theta = cl.rope_frequencies(128, dtype=torch.float64)
    ones = torch.ones(1, 251, 128, dtype=torch.float64)
    rotated = cl.apply_rope(ones)[0]  # positions 0..250
    score = rotated @ rotated[0] / 128
    assert score[0].item() == pytest.approx(1.0)
    torch.testing.assert_close(
        score,
        (2 / 128)
        * torch.cos(torch.arange(251, dtype=torch.float64)[:, None] * theta).sum(-1),
    )
    assert score[250].item() == pytest.approx(0.3, abs=0.05)
    # Not monotone (review M3): the minimum on [0, 250] lies below the end value, so
    # the caption states both, glued from the plotted curves, and says "with ripples".
    assert score.min().item() < score[250].item() - 0.05
    assert 200 < int(score.argmin()) < 250
    text = CH4.read_text("utf-8")
    assert "falls from 1 to about 0.3 over 250 positions" not in text
    assert "with ripples, to {glue:text}`decay_min:.2f`" in text
    for name in (
        "decay_min",
        "decay_argmin",
        "decay_end_1e4",
        "decay_end_5e5",
        "bound_250_1e4",
        "bound_250_5e5",
        "abel_loosest",
        "longest_10000",
        "longest_500000",
        "slow_pairs_10000",
        "slow_pairs_500000",
    ):
        assert f"{{glue:text}}`{name}" in text, name
        prefix = name.rsplit("_", 1)[0]  # names glued in a loop: glue(f"prefix_...
        assert f'glue("{name}"' in text or f'glue(f"{prefix}_' in text
    assert "viz.plot_rope_decay(128, bases=(10_000.0, 500_000.0))" in text
    for typed in (
        "2.6\n      million",
        "instead of 54 000",
        "almost half",
        "a few units",
    ):
        assert typed not in text, typed


def test_chapter_4_states_the_papers_conventions() -> None:
    """The review's notes on RoFormer's own text stay in the chapter: §3.4.1 writes
    n - m, eq. 16 drops the transpose, gamma = 0 is forced; theta_q, theta_k are
    renamed psi (theta is the frequency); the precision numbers are glued."""
    text = CH4.read_text(encoding="utf-8")
    for phrase in (
        "§3.4.1 writes the same steps with the offset as $n - m$",
        "prints $W_q$ where $W_q^\\top$ is meant",
        "already forces it",
        "RoFormer calls them $\\theta_q$",
        "{cite}`gptneox2023rotaryfp16`",
        "{cite}`hf2024ropeprecision`",
        "{cite}`meta2023llamacode`",
    ):
        assert phrase in text, phrase
    assert not re.search(r"\\theta_q\s*-|\\theta_k\s*-|\+ \\theta_k", text)
    for name in ("f32_cos_128k", "f32_cos_1m", "f64_err_1m", "neox_cos_err"):
        assert f'glue("{name}"' in text and f"{{glue:text}}`{name}:" in text


def test_abel_bound_is_hundreds_of_times_the_score() -> None:
    """Chapter 4: the bound of (rope-abel) is 'very loose (hundreds to thousands here,
    against scores of a few units)': for random Gaussian q, k with d = 64 the bound is
    above 100 and typically more than 50 times the score."""
    theta = cl.rope_frequencies(64, dtype=torch.float64)
    ratios = []
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        q, k = torch.randn(2, 64, generator=g, dtype=torch.float64)
        h = torch.complex(q[0::2], q[1::2]) * torch.complex(k[0::2], k[1::2]).conj()
        h_next = torch.cat((h[1:], torch.zeros(1, dtype=h.dtype)))
        for r in (0, 5, 50, 500):
            e = torch.polar(torch.ones_like(theta), r * theta)
            score = (h * e).sum().real.abs().item()
            bound = ((h_next - h).abs().max() * e.cumsum(0).abs().sum()).item()
            assert score <= bound and bound > 100
            ratios.append(bound / max(score, 1e-12))
    assert sorted(ratios)[len(ratios) // 2] > 50
    # Review M1: the chapter's assert is relative (bound > 10 |score|), not a constant
    # that standard-normal scores of standard deviation sqrt(64) = 8 can exceed.
    assert min(ratios) > 10
    text = " ".join(CH4.read_text("utf-8").split())
    assert "assert bound > 10 * abs(score)" in text
    # re-read A1: sqrt(d) and the bounds' range are glued from the cell, not typed
    assert "of order $\\sqrt d =$ {glue:text}`abel_sqrt_d:.0f`" in text
    for name in ("abel_bound_min", "abel_bound_max", "abel_sqrt_d"):
        assert f'glue("{name}"' in text and f"{{glue:text}}`{name}:" in text
    assert "assert min(bounds) >= 100" in text


@pytest.mark.parametrize("r", [10, 100, 250, 1000])
def test_larger_base_shifts_the_decay_to_longer_distances(r: int) -> None:
    """Chapter 4, the base: with base 500 000 both RoFormer's bound factor
    (1/(d/2)) sum_j |S_j| and the all-ones score (2/d) sum_i cos(r theta_i) are larger
    at distance r than with base 10 000 (d = 128)."""
    values = {}
    for base in (10_000.0, 500_000.0):
        theta = cl.rope_frequencies(128, base=base, dtype=torch.float64)
        e = torch.polar(torch.ones_like(theta), r * theta)
        values[base] = (
            e.cumsum(0).abs().mean().item(),
            (2 / 128) * torch.cos(r * theta).sum().item(),
        )
    assert values[500_000.0][0] > values[10_000.0][0]
    assert values[500_000.0][1] > values[10_000.0][1]
    assert (
        "at a distance of 250, the bound factor and the all-ones score"
        in CH4.read_text("utf-8").replace("\n", " ")
    )


def test_chapter_4_reads_the_dial_size_and_checks_the_rounding_grid() -> None:
    """Chapter 4 (re-read, A2, A3): the interactive figure's caption reads the head
    size and the number of pairs from the figure's own data, and the precision
    section's "257 becomes 256" and "exact up to 2048" are asserted, not only printed.
    The values are recomputed here from the figure data and from torch's rounding."""
    from course_lib.viz.interactive import figure_data

    text = CH4.read_text("utf-8")
    assert "The seven pairs of a 14-dimensional head" not in text
    for name in ("rope_dial_pairs", "rope_dial_dim"):
        assert f'glue("{name}"' in text and f"{{glue:text}}`{name}`" in text
    dial = figure_data("rope")
    paper_base = dial["sliders"][0]["default"]
    assert 2 * len(dial["frequencies"][str(paper_base)]) == dial["head_dim"]
    assert "assert float(torch.tensor(257.0, dtype=torch.bfloat16)) == 256.0" in text
    assert float(torch.tensor(257.0, dtype=torch.bfloat16)) == 256.0
    assert float(torch.tensor(2049.0, dtype=torch.float16)) == 2048.0
    assert float(torch.tensor(2048.0, dtype=torch.float16)) == 2048.0


def test_chapter_4_hugging_face_rope_precision_is_measured() -> None:
    """Chapter 4 (re-read, A4): the installed transformers forms the Llama angles in
    float32 without an autocast switch, and its inv_freq buffer follows a model-wide
    cast; the chapter glues the measured cosine errors instead of stating the pull
    request's autocast fix as the current code. Recomputed here in float64."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    text = CH4.read_text("utf-8")
    assert "now computes the angles in float32 with autocast switched off" not in text
    for name in ("hf_version", "hf_bf16_err", "hf_cast_err"):
        assert f'glue("{name}"' in text and f"{{glue:text}}`{name}" in text
    config = LlamaConfig(
        hidden_size=256, num_attention_heads=2, head_dim=128, num_key_value_heads=2
    )
    pos = torch.arange(4000, 4004)
    theta = 10_000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    angles = pos.double()[:, None] * theta
    exact = torch.cat((angles, angles), dim=-1).cos()
    cast = LlamaRotaryEmbedding(config).to(torch.float16)
    assert cast.inv_freq.dtype == torch.float16
    cos, _ = cast(torch.zeros(1, 4, 128, dtype=torch.float16), pos[None])
    assert (cos[0].double() - exact).abs().max() > 0.2
    plain = LlamaRotaryEmbedding(config)
    cos, _ = plain(torch.zeros(1, 4, 128, dtype=torch.bfloat16), pos[None])
    # bfloat16 rounding of a value in [-1, 1] (2^-9) plus float32 angles near 4000 rad
    assert (cos[0].double() - exact).abs().max() <= 2.0**-9 + 4004 * 2.0**-22
