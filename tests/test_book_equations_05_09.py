"""Equations and erratum claims of book chapters 5-9, checked independently.

Each test names the chapter statement it checks. Library behaviour that the library's
own tests already cover (slope rule, bias loops, Shaw/T5/Transformer-XL/DA brute
force, convention converters) is not repeated; what is tested here is what the
chapters derive or claim on top of it, and every mistake of chapter 9: each wrong
snippet is re-written as a minimal function and shown to disagree with the library.
"""

from __future__ import annotations

import math
import re

import pytest
import sympy as sp
import torch
import torch.nn.functional as F
from torch import nn

import course_lib as cl

# --------------------------------------------------------------------------------------
# Chapter 5: ALiBi
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_power_of_two_slopes_first_term_equals_ratio(n: int) -> None:
    """m_h = r^h with r = 2^(-8/n): the first slope is the ratio."""
    slopes = cl.alibi_slopes(n).double()
    r = 2.0 ** (-8.0 / n)
    assert slopes[0].item() == pytest.approx(r, rel=1e-6)
    if n > 1:
        ratios = slopes[1:] / slopes[:-1]
        assert torch.allclose(ratios, torch.full((n - 1,), r, dtype=torch.float64))


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_slopes_of_n_heads_are_every_second_slope_of_2n(n: int) -> None:
    """For powers of two, slopes(n) == slopes(2n)[1::2]."""
    assert torch.equal(cl.alibi_slopes(2 * n)[1::2], cl.alibi_slopes(n))


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12, 20, 24, 40, 48])
def test_extra_heads_take_slopes_of_the_2c_model_it_lacks(n: int) -> None:
    """Chapter 5: first c slopes are those of c heads, the rest are slopes of 2c heads
    that the c-head model does not have, steepest first."""
    c = 1 << (n.bit_length() - 1)
    slopes = cl.alibi_slopes(n)
    assert torch.equal(slopes[:c], cl.alibi_slopes(c))
    missing = cl.alibi_slopes(2 * c)[0::2]  # odd exponents in units of 8/(2c)
    assert torch.equal(slopes[c:], missing[: n - c])
    assert not set(slopes[c:].tolist()) & set(cl.alibi_slopes(c).tolist())


def test_bias_before_the_scaling_is_a_sqrt_d_gentler_slope(
    gen: torch.Generator,
) -> None:
    """Adding -m|i-j| before dividing by sqrt(d) equals slopes m / sqrt(d) after."""
    d, h, s = 64, 4, 7
    q, k = torch.randn(2, h, s, d, generator=gen, dtype=torch.float64)
    bias = cl.alibi_bias(h, s).double()
    before = torch.softmax((q @ k.transpose(-2, -1) + bias) / math.sqrt(d), dim=-1)
    gentler = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d) + bias / 8, dim=-1)
    right = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d) + bias, dim=-1)
    assert torch.allclose(before, gentler)
    assert not torch.allclose(before, right, atol=1e-3)


def test_bloom_form_differs_by_m_times_query_position() -> None:
    """m j - (-m(i' - j)) = m i' exactly, for every visible key (queries last)."""
    h, q_len, k_len = 12, 4, 9
    diff = cl.alibi_bias_bloom_style(h, q_len, k_len) - cl.alibi_bias(h, q_len, k_len)
    query_pos = torch.arange(q_len) + k_len - q_len
    expected = cl.alibi_slopes(h)[:, None] * query_pos[None, :].float()  # (H, Lq)
    visible = cl.causal_mask(q_len, k_len)
    for i in range(q_len):
        row = diff[:, i, visible[i]]
        assert torch.allclose(row, expected[:, i : i + 1].expand_as(row), atol=1e-5)


def test_bidirectional_plus_mj_pulls_every_query_to_the_last_key() -> None:
    """Chapter 5: with equal content, -m|i-j| peaks at the query, +m j at the end."""
    h, s = 8, 9
    paper = torch.softmax(cl.alibi_bias(h, s), dim=-1)
    bloom = torch.softmax(cl.alibi_bias_bloom_style(h, s), dim=-1)
    assert torch.equal(paper.argmax(-1), torch.arange(s).expand(h, s))
    assert torch.equal(bloom.argmax(-1), torch.full((h, s), s - 1))


@pytest.mark.parametrize("length", [1, 5, 200])
def test_neutral_attention_is_a_truncated_geometric_distribution(length: int) -> None:
    """Eq. (alibi-geometric): w(d) = e^{-md}(1-e^{-m}) / (1-e^{-m(i+1)})."""
    h = 8
    q = torch.zeros(1, h, 1, 2, dtype=torch.float64)
    k = torch.ones(1, h, length, 2, dtype=torch.float64)
    bias = cl.alibi_bias(h, 1, length, causal=True).double()
    _, w = cl.scaled_dot_product_attention(q, k, k, bias=bias)
    m = cl.alibi_slopes(h).double()[:, None]
    dist = torch.arange(length - 1, -1, -1, dtype=torch.float64)
    formula = torch.exp(-m * dist) * (1 - torch.exp(-m)) / (1 - torch.exp(-m * length))
    assert torch.allclose(w[0, :, 0], formula, atol=1e-12)


def test_tail_mass_beyond_distance_is_bounded_by_exp_minus_m_d() -> None:
    """Mass beyond D is (e^{-mD}-e^{-m(i+1)})/(1-e^{-m(i+1)}) <= e^{-mD}."""
    h, length = 8, 300
    m = cl.alibi_slopes(h).double()[:, None]
    dist = torch.arange(length, dtype=torch.float64)
    w = torch.softmax(-m * dist, dim=-1)  # (H, L): weight of distance d
    tail = w.flip(-1).cumsum(-1).flip(-1)  # (H, L): mass at distances >= D
    closed = (torch.exp(-m * dist) - torch.exp(-m * length)) / (
        1 - torch.exp(-m * length)
    )
    assert torch.allclose(tail, closed, atol=1e-12)
    assert torch.all(tail <= torch.exp(-m * dist) + 1e-12)


def test_half_the_attention_lies_within_ln2_over_m() -> None:
    """Half-lives 1.4, 2.8, ..., 177 tokens for 8 heads (long rows)."""
    slopes = cl.alibi_slopes(8).double()
    half_life = math.log(2) / slopes
    assert [round(t, 1) for t in half_life.tolist()] == [
        1.4,
        2.8,
        5.5,
        11.1,
        22.2,
        44.4,
        88.7,
        177.4,
    ]
    dist = torch.arange(20_000, dtype=torch.float64)
    for m, t in zip(slopes.tolist(), half_life.tolist(), strict=True):
        cum = torch.softmax(-m * dist, dim=-1).cumsum(0)
        first_half = int(torch.nonzero(cum >= 0.5)[0])  # smallest D with mass >= 1/2
        assert t - 1 <= first_half <= t  # cum(D) = 1 - e^{-m(D+1)} crosses at ln2/m - 1


# --------------------------------------------------------------------------------------
# Chapter 6: relative positions
# --------------------------------------------------------------------------------------


def test_shaw_value_term_is_a_scatter_add_of_weights(gen: torch.Generator) -> None:
    """sum_j alpha_ij a^V_ij = sum_r (sum_{j: r(i,j)=r} alpha_ij) w_r, explicitly."""
    q_len, k_len, d, K = 3, 7, 4, 2
    alpha = torch.softmax(
        torch.randn(q_len, k_len, generator=gen, dtype=torch.float64), -1
    )
    w_v = torch.randn(2 * K + 1, d, generator=gen, dtype=torch.float64)
    rows = cl.relative_position_index(q_len, k_len, K)
    literal = torch.stack(
        [sum(alpha[i, j] * w_v[rows[i, j]] for j in range(k_len)) for i in range(q_len)]
    )
    binned = torch.zeros(q_len, 2 * K + 1, dtype=torch.float64)
    for i in range(q_len):
        for j in range(k_len):
            binned[i, rows[i, j]] += alpha[i, j]
    assert torch.allclose(binned @ w_v, literal)


def test_shaw_position_logits_beyond_clip_are_equal(gen: torch.Generator) -> None:
    """Chapter 6: with equal keys, every key further than K gets the same logit, so a
    longer history only renormalises the weights of the last keys."""
    d, K = 8, 2
    w_k, w_v = torch.randn(2, 2 * K + 1, d, generator=gen)
    same = torch.ones(1, 1, 10, d)
    q = torch.randn(1, 1, 1, d, generator=gen)
    _, w10 = cl.shaw_relative_attention(q, same, same, w_k, w_v, K)
    _, w6 = cl.shaw_relative_attention(q, same[:, :, :6], same[:, :, :6], w_k, w_v, K)
    far = w10[0, 0, 0, : 10 - K - 1]
    assert torch.allclose(far, far[0].expand_as(far))
    ratio = w10[0, 0, 0, -6:] / w6[0, 0, 0]
    assert torch.allclose(ratio, ratio[0].expand(6))


@pytest.mark.parametrize(
    ("num_buckets", "max_distance", "bidirectional"),
    [
        (32, 128, True),
        (32, 128, False),
        (8, 16, True),
        (64, 256, True),
        (16, 1000, False),
    ],
)
def test_t5_last_bucket_starts_before_max_distance(
    num_buckets: int, max_distance: int, bidirectional: bool
) -> None:
    """Chapter 6: the cap B-1 is reached at r = ceil(E (D/E)^((B-E-1)/(B-E))) (91)."""
    B = num_buckets // 2 if bidirectional else num_buckets
    E = B // 2
    start = math.ceil(E * (max_distance / E) ** ((B - E - 1) / (B - E)) - 1e-9)
    past = -torch.arange(0, 3 * max_distance)
    buckets = cl.t5_relative_position_bucket(
        past,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    first_last = int(torch.nonzero(buckets == B - 1)[0])
    assert abs(first_last - start) <= 1  # float32 log at the edge may move it by one
    assert first_last < max_distance
    if (num_buckets, max_distance, bidirectional) == (32, 128, True):
        assert first_last == 91


def test_bucket_starts_printed_in_chapter_6() -> None:
    past = -torch.arange(0, 200)
    buckets = cl.t5_relative_position_bucket(past)
    starts = {int(b): int(torch.nonzero(buckets == b)[0]) for b in buckets.unique()}
    assert starts == {
        0: 0,
        1: 1,
        2: 2,
        3: 3,
        4: 4,
        5: 5,
        6: 6,
        7: 7,
        8: 8,
        9: 12,
        10: 16,
        11: 23,
        12: 32,
        13: 46,
        14: 64,
        15: 91,
    }


def test_distance_only_biases_are_toeplitz() -> None:
    """ALiBi, T5 bucket grid and Shaw rows are constant along every diagonal."""
    L = 9
    delta = torch.arange(L)[None, :] - torch.arange(L)[:, None]
    for b in (
        cl.alibi_bias(4, L)[2],
        cl.t5_relative_position_bucket(delta).float(),
        cl.relative_position_index(L, L, 3).float(),
    ):
        for offset in range(-L + 1, L):
            diag = torch.diagonal(b, offset)
            assert torch.equal(diag, diag[0].expand_as(diag))


def linear_distance_bias(L: int, s: float) -> torch.Tensor:
    """The repository's bias s(1 - |i-j|/L), re-expressed from its formula."""
    pos = torch.arange(L, dtype=torch.float64)
    return s * (1 - (pos[None, :] - pos[:, None]).abs() / L)


def test_linear_distance_bias_example_values() -> None:
    """The repository's printed 5x5 example (s=0.1) follows from the formula."""
    b = linear_distance_bias(5, 0.1)
    first_row = [0.10, 0.08, 0.06, 0.04, 0.02]
    assert torch.allclose(b[0], torch.tensor(first_row, dtype=torch.float64))
    assert torch.allclose(b, b.T)


@pytest.mark.parametrize("L", [3, 5, 16, 64])
def test_linear_distance_bias_is_single_slope_alibi(
    gen: torch.Generator, L: int
) -> None:
    """s(1-|i-j|/L) = s + (s/L)(-|i-j|), equal to ALiBi with slope s/L after softmax."""
    s = 0.1
    minus_distance = cl.alibi_bias(1, L)[0].double() / cl.alibi_slopes(1)[0].double()
    assert torch.allclose(linear_distance_bias(L, s), s + (s / L) * minus_distance)
    scores = torch.randn(3, L, L, generator=gen, dtype=torch.float64)
    a = torch.softmax(scores + linear_distance_bias(L, s), dim=-1)
    b = torch.softmax(scores + (s / L) * minus_distance, dim=-1)
    assert torch.allclose(a, b)


def test_linear_distance_bias_slope_shrinks_with_length() -> None:
    s = 0.1
    gaps = [
        (linear_distance_bias(L, s)[0, 3] - linear_distance_bias(L, s)[0, 0]).item()
        for L in (8, 64, 512)
    ]
    assert gaps == pytest.approx([-0.0375, -0.0046875, -0.05859375e-2])
    assert (s / 512) * 20 == pytest.approx(2.0**-8, rel=0.03)  # "twenty times gentler"


# --------------------------------------------------------------------------------------
# Chapter 7: Transformer-XL
# --------------------------------------------------------------------------------------


def _vec(name: str, n: int = 3) -> sp.Matrix:
    return sp.Matrix(sp.symbols(f"{name}0:{n}"))


def test_absolute_score_expands_into_four_terms() -> None:
    """Eq. (xl-absolute), symbolically with 2x3 projections."""
    e_i, e_j, u_i, u_j = (_vec(n) for n in ("ei", "ej", "ui", "uj"))
    w_q = sp.Matrix(2, 3, sp.symbols("wq0:6"))
    w_k = sp.Matrix(2, 3, sp.symbols("wk0:6"))
    lhs = ((e_i + u_i).T * w_q.T * w_k * (e_j + u_j))[0]
    pairs = ((e_i, e_j), (e_i, u_j), (u_i, e_j), (u_i, u_j))
    assert sp.expand(lhs - sum((x.T * w_q.T * w_k * y)[0] for x, y in pairs)) == 0


def test_relative_score_is_two_products() -> None:
    """Eq. (xl-relative) with q = Wq E, k = W_kE E, r = W_kR R is (xl-two-products)."""
    e_i, e_j, rel, u, v = (_vec(n) for n in ("ei", "ej", "R", "u", "v"))
    w_q = sp.Matrix(3, 3, sp.symbols("wq0:9"))
    w_ke = sp.Matrix(3, 3, sp.symbols("we0:9"))
    w_kr = sp.Matrix(3, 3, sp.symbols("wr0:9"))
    q, k, r = w_q * e_i, w_ke * e_j, w_kr * rel
    four = (
        (e_i.T * w_q.T * w_ke * e_j)[0]
        + (e_i.T * w_q.T * w_kr * rel)[0]
        + (u.T * w_ke * e_j)[0]
        + (v.T * w_kr * rel)[0]
    )
    assert sp.expand((q + u).dot(k) + (q + v).dot(r) - four) == 0


@pytest.mark.parametrize(("q_len", "k_len"), [(1, 1), (3, 3), (3, 5), (4, 9), (2, 7)])
def test_rel_shift_index_arithmetic(q_len: int, k_len: int) -> None:
    """Chapter 7's proof: valid entries read x[i, j+Lq-1-i]; the first future key reads
    the pad (0); later ones read row i+1 at column j - i' - 2."""
    x = (
        100 * (torch.arange(q_len)[:, None] + 1) + torch.arange(k_len)[None, :] + 1
    ).double()  # every entry distinct, nonzero
    out = cl.rel_shift(x)
    for i in range(q_len):
        i_abs = i + k_len - q_len
        for j in range(k_len):
            flat = q_len + i * k_len + j
            assert flat == i * (k_len + 1) + (q_len + j - i)
            if j <= i_abs:
                assert out[i, j] == x[i, j + q_len - 1 - i]
            elif j == i_abs + 1:
                assert out[i, j] == 0
            else:
                assert out[i, j] == x[i + 1, j - i_abs - 2]


def test_rel_shift_printed_steps() -> None:
    """The labelled 3x5 example of chapter 7 (tens = row + 1, units = distance)."""
    q_len, k_len = 3, 5
    x = (
        10 * (torch.arange(q_len)[:, None] + 1)
        + (k_len - 1 - torch.arange(k_len)[None, :])
    ).float()
    expected = torch.tensor(
        [[12.0, 11, 10, 0, 24], [23, 22, 21, 20, 0], [34, 33, 32, 31, 30]]
    )
    assert torch.equal(cl.rel_shift(x), expected)


def test_unmasked_shift_leaks_the_next_query(gen: torch.Generator) -> None:
    """Without the mask, row i's entries after the first future key use q_{i+1}."""
    q_len, k_len, d = 3, 5, 4
    r = torch.randn(1, k_len, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, k_len, d, generator=gen, dtype=torch.float64)
    u = v = torch.zeros(1, d, dtype=torch.float64)
    q = torch.randn(1, 1, q_len, d, generator=gen, dtype=torch.float64).requires_grad_()

    unmasked = cl.rel_shift(torch.einsum("bhqd,hkd->bhqk", q + v[:, None], r))
    grad_row0 = torch.autograd.grad(unmasked[0, 0, 0].sum(), q)[0]
    assert grad_row0[0, 0, 1].abs().sum() > 0  # row 0 depends on query 1
    masked = cl.rel_attention_scores(q, k, r, u, v)
    visible = masked[0, 0, 0][masked[0, 0, 0].isfinite()].sum()
    grad_masked = torch.autograd.grad(visible, q)[0]
    assert torch.all(grad_masked[0, 0, 1:] == 0)


# --------------------------------------------------------------------------------------
# Chapter 8: DA-Transformer
# --------------------------------------------------------------------------------------

_x, _v = sp.symbols("x v", real=True)
_F = (1 + sp.exp(_v)) / (1 + sp.exp(_v - _x))


def test_da_requirements_symbolically() -> None:
    assert sp.simplify(_F.subs(_x, 0)) == 1
    assert sp.limit(_F, _x, -sp.oo) == 0
    assert sp.simplify(sp.limit(_F, _x, sp.oo) - (1 + sp.exp(_v))) == 0
    derivative = sp.diff(_F, _x)
    expected = (1 + sp.exp(_v)) * sp.exp(_v - _x) / (1 + sp.exp(_v - _x)) ** 2
    assert sp.simplify(derivative - expected) == 0  # a product of positive factors


def test_da_sigmoid_and_softplus_forms() -> None:
    sigmoid = 1 / (1 + sp.exp(-(_x - _v)))
    assert sp.simplify(_F - (1 + sp.exp(_v)) * sigmoid) == 0
    log_form = sp.log(1 + sp.exp(_v)) - sp.log(1 + sp.exp(_v - _x))
    assert sp.simplify(sp.exp(log_form) - _F) == 0
    dist = torch.linspace(0, 30, 61, dtype=torch.float64)
    for w, v in ((0.7, 1.5), (-0.3, 0.0), (2.0, -1.0)):
        sig = (1 + math.exp(v)) * torch.sigmoid(w * dist - v)
        assert torch.allclose(cl.da_rescale(dist, w, v), sig)


def test_da_literal_formula_overflows_where_library_is_exact() -> None:
    big = torch.tensor(800.0, dtype=torch.float64)
    literal = (1 + torch.exp(big)) / (1 + torch.exp(big - 2.0))
    assert literal.isnan()
    assert cl.da_rescale(2.0, 1.0, 800.0).item() == pytest.approx(math.exp(2.0))


def test_da_relu_ties_all_negative_matches() -> None:
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[-0.5, 0.0], [-3.0, 0.0], [2.0, 0.0]]]])
    for w in (-1.0, 0.0, 1.0):
        _, weights = cl.da_attention(q, k, k, torch.tensor([w]), torch.tensor([0.5]))
        assert weights[0, 0, 0, 0] == weights[0, 0, 0, 1]
        assert weights[0, 0, 0, 2] > weights[0, 0, 0, 0]


def test_da_is_not_an_additive_bias(gen: torch.Generator) -> None:
    """The additive term reproducing DA, (ReLU(s) R_hat - s) / sqrt(d), changes with
    the queries."""
    d, h, s = 8, 3, 5
    w, v = torch.tensor([-0.5, 0.0, 0.4]), torch.tensor([1.0, 0.0, 2.0])
    k = torch.randn(1, h, s, d, generator=gen)
    dist = (torch.arange(s)[:, None] - torch.arange(s)[None, :]).abs().float()
    r_hat = cl.da_rescale(dist, w[:, None, None], v[:, None, None])

    def implied(q: torch.Tensor) -> torch.Tensor:
        raw = q @ k.transpose(-2, -1)
        return (F.relu(raw) * r_hat - raw) / math.sqrt(d)

    q_a, q_b = torch.randn(2, 1, h, s, d, generator=gen)
    for q in (q_a, q_b):  # the implied bias does reproduce DA's weights
        _, weights = cl.da_attention(q, k, k, w, v)
        plain = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d) + implied(q), -1)
        assert torch.allclose(weights, plain, atol=1e-6)
    assert (implied(q_a) - implied(q_b)).abs().max() > 0.1


def test_da_layer_adds_two_parameters_per_head() -> None:
    torch.manual_seed(0)
    layer = cl.DAAttention(16, 4)
    projections = 16 * 48 + 16 * 16  # W_q, W_k, W_v and the output, no biases
    assert sum(p.numel() for p in layer.parameters()) - projections == 2 * 4


# --------------------------------------------------------------------------------------
# Chapter 9: conventions checked against peers
# --------------------------------------------------------------------------------------


def test_marian_is_concatenated_with_paper_frequencies() -> None:
    from transformers.models.marian.modeling_marian import (
        MarianSinusoidalPositionalEmbedding,
    )

    weight = MarianSinusoidalPositionalEmbedding(20, 16).create_weight()
    assert torch.allclose(
        weight, cl.sinusoidal_encoding(20, 16, layout="concat"), atol=1e-6
    )
    assert not torch.allclose(weight, cl.sinusoidal_encoding(20, 16), atol=1e-2)


@pytest.mark.parametrize("d_model", [8, 16, 64])
def test_fairseq_is_concatenated_with_shifted_base_and_offset(d_model: int) -> None:
    from transformers.models.fsmt.modeling_fsmt import SinusoidalPositionalEmbedding

    half = d_model // 2
    length, padding_idx = 30, 1
    table = SinusoidalPositionalEmbedding.get_embedding(length, d_model, padding_idx)
    ours = cl.sinusoidal_encoding(
        length, d_model, base=10000 ** (half / (half - 1)), layout="concat"
    )
    assert torch.allclose(table[padding_idx + 1 :], ours[padding_idx + 1 :], atol=1e-4)
    assert torch.all(table[padding_idx] == 0)
    assert not torch.allclose(
        table[2:],
        cl.sinusoidal_encoding(length, d_model, layout="concat")[2:],
        atol=1e-3,
    )


def test_gptj_rotary_is_interleaved(gen: torch.Generator) -> None:
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb

    x = torch.randn(1, 2, 9, 16, generator=gen)  # (batch, heads, seq, dim)
    angles = cl.rope_angles(torch.arange(9), 16).float()
    gptj = apply_rotary_pos_emb(
        x.transpose(1, 2), angles.sin()[None], angles.cos()[None]
    ).transpose(1, 2)
    assert torch.allclose(gptj, cl.apply_rope(x), atol=1e-5)
    assert not torch.allclose(gptj, cl.apply_rope(x, convention="half"), atol=1e-2)


def test_boolean_mask_meanings_in_torch(gen: torch.Generator) -> None:
    """F.scaled_dot_product_attention: True = attend; nn.MultiheadAttention: blocked."""
    s, d = 5, 8
    x = torch.randn(1, 1, s, d, generator=gen)
    causal = cl.causal_mask(s, s)
    ours, _ = cl.scaled_dot_product_attention(x, x, x, mask=causal)
    assert torch.allclose(
        F.scaled_dot_product_attention(x, x, x, attn_mask=causal), ours, atol=1e-6
    )
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(d, 1, batch_first=True)
    with torch.no_grad():
        _, w = mha(x[0], x[0], x[0], attn_mask=~causal)
    assert torch.equal(w[0] > 0, causal)


def test_t5_has_no_inverse_sqrt_scaling() -> None:
    """Chapter 6/9: T5 adds its bias to unscaled q.k (scores = q k^T + bias)."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    torch.manual_seed(0)
    config = T5Config(
        d_model=8,
        d_kv=4,
        num_heads=2,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        dropout_rate=0.0,
    )
    attn = T5Attention(config, has_relative_attention_bias=False).eval()
    x = torch.randn(1, 5, 8)
    q = attn.q(x).view(1, 5, 2, 4).transpose(1, 2)
    k = attn.k(x).view(1, 5, 2, 4).transpose(1, 2)
    v = attn.v(x).view(1, 5, 2, 4).transpose(1, 2)
    with torch.no_grad():
        out = attn(x)[0]
        unscaled = torch.softmax(q @ k.transpose(-2, -1), -1) @ v
    expected = attn.o(unscaled.transpose(1, 2).reshape(1, 5, 8))
    assert torch.allclose(out, expected, atol=1e-5)


# --------------------------------------------------------------------------------------
# Chapter 9: errata. Each wrong snippet, re-written minimally, disagrees with the lib.
# --------------------------------------------------------------------------------------


def _chapter_9_listing(name: str):
    """A function chapter 9 shows only in the open edition (a ```python listing in a
    ``{only} not class_edition`` block, not executed when the page is built)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "book" / "09-conventions-errata.md"
            ).read_text()
    blocks = re.findall(r"::::\{only\} not class_edition\n(.*?)\n::::", text, re.S)
    (code,) = [c for b in blocks for c in re.findall(r"```python\n(.*?)```", b, re.S)
               if f"def {name}(" in c]
    namespace = {"torch": torch, "cl": cl}
    exec(code, namespace)  # noqa: S102 - the course's own chapter
    return namespace[name]


def test_chapter_9_open_edition_listings_do_what_the_chapter_says(gen) -> None:
    """Errata 1 and 3 list the tutorials' functions in the open edition only (in
    the class edition they would be one edit away from exercises 2 and 4); the
    chapter's executed cells use what these listings compute, checked here."""
    doubled = _chapter_9_listing("sinusoids_exponent_doubled")
    for d_model in (8, 64):
        assert torch.allclose(doubled(100, d_model),
                              sinusoids_exponent_doubled(100, d_model))
        assert torch.allclose(doubled(100, d_model), cl.sinusoidal_encoding(
            100, d_model, base=1e8).double(), atol=1e-5)
    mixed = _chapter_9_listing("rope_mixed_pairing")
    x = torch.randn(2, 6, 8, generator=gen, dtype=torch.float64)
    assert torch.allclose(mixed(x), rope_mixed_pairing(x))
    reordered = cl.apply_rope(x)[..., cl.interleaved_to_half_permutation(8)]
    assert torch.allclose(mixed(x), reordered)


def sinusoids_exponent_doubled(max_len: int, d_model: int) -> torch.Tensor:
    """Erratum 1 (seed 000): the column index where the pair index belongs."""
    pos = torch.arange(max_len, dtype=torch.float64)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for col in range(0, d_model, 2):
        angle = pos / 10000 ** (2 * col / d_model)
        pe[:, col], pe[:, col + 1] = angle.sin(), angle.cos()
    return pe


@pytest.mark.parametrize("d_model", [8, 64, 128])
def test_erratum_doubled_exponent(d_model: int) -> None:
    wrong = sinusoids_exponent_doubled(100, d_model)
    assert (wrong - cl.sinusoidal_encoding(100, d_model).double()).abs().max() > 0.5
    assert torch.allclose(
        wrong, cl.sinusoidal_encoding(100, d_model, base=1e8).double(), atol=1e-5
    )


def test_erratum_doubled_exponent_wastes_twice_the_pairs() -> None:
    """32% vs 66% of the pairs turn by less than one radian over 512 tokens."""
    shares = []
    for base in (1e4, 1e8):
        omega = cl.rope_frequencies(512, base=base, dtype=torch.float64)
        shares.append(round((omega * 511 < 1.0).double().mean().item(), 2))
    expected = [1 - math.log(511) / math.log(10000), 1 - math.log(511) / math.log(1e8)]
    assert shares == pytest.approx(expected, abs=0.01)
    assert [round(s * 100) for s in shares] == [32, 66]


def test_erratum_invariance_is_equivariance(gen: torch.Generator) -> None:
    """Erratum 2 (seed 001): attention is equivariant, not invariant; pooling is."""
    x = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    w = [torch.randn(8, 8, generator=gen, dtype=torch.float64) for _ in range(3)]
    p = cl.permutation_matrix([2, 0, 4, 1, 3]).double()
    out, out_perm = cl.self_attention(x, *w), cl.self_attention(p @ x, *w)
    assert torch.allclose(out_perm, p @ out)
    assert not torch.allclose(out_perm, out, atol=1e-2)
    assert torch.allclose(out_perm.mean(0), out.mean(0))


def rope_mixed_pairing(x: torch.Tensor) -> torch.Tensor:
    """Erratum 3 (seed 001): reads pairs (2i, 2i+1), writes [first | second] halves."""
    angle = cl.rope_angles(torch.arange(x.shape[-2]), x.shape[-1]).to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat(
        [a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], dim=-1
    )


@pytest.mark.parametrize("head_dim", [4, 8, 16])
def test_erratum_mixed_rope_pairing(gen: torch.Generator, head_dim: int) -> None:
    x = torch.randn(2, 6, head_dim, generator=gen, dtype=torch.float64)
    mixed = rope_mixed_pairing(x)
    for convention in ("interleaved", "half"):
        assert (mixed - cl.apply_rope(x, convention=convention)).abs().max() > 0.1
    perm = cl.interleaved_to_half_permutation(head_dim)
    assert torch.allclose(mixed, cl.apply_rope(x)[..., perm])
    q, k = x[0], x[1]  # silent for scores ...
    assert torch.allclose(
        rope_mixed_pairing(q) @ rope_mixed_pairing(k).T,
        cl.apply_rope(q) @ cl.apply_rope(k).T,
    )
    twice = rope_mixed_pairing(rope_mixed_pairing(q))  # ... but does not compose
    once = cl.apply_rope(q, 2 * torch.arange(6))
    assert torch.allclose(cl.apply_rope(cl.apply_rope(q)), once)
    assert (twice - once[..., perm]).abs().max() > 0.1
    assert (twice - once).abs().max() > 0.1


def slopes_inverse_powers(n: int) -> torch.Tensor:
    """Erratum 4a (seed 003): {2^-1, ..., 2^-h}."""
    return 2.0 ** -torch.arange(1, n + 1, dtype=torch.float64)


def slopes_power_of_two_formula(n: int) -> torch.Tensor:
    """Erratum 4b: 2^(-8k/n) applied to every n (the power-of-two rule only)."""
    return 2.0 ** (-8 * torch.arange(1, n + 1, dtype=torch.float64) / n)


def test_erratum_alibi_slopes() -> None:
    for n in range(1, 65):
        lib = cl.alibi_slopes(n).double()
        assert torch.allclose(slopes_inverse_powers(n), lib) == (n == 8)
        power_of_two = n & (n - 1) == 0
        assert torch.allclose(slopes_power_of_two_formula(n), lib) == power_of_two
    assert slopes_inverse_powers(16)[-1] == 2.0**-16


def position_ids_minus_one_after_mask(mask: torch.Tensor) -> torch.Tensor:
    """Erratum 5 (seed 001): cumsum times mask, minus one."""
    return torch.cumsum(mask, dim=1) * mask - 1


def test_erratum_padding_position_ids() -> None:
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    printed_in_source = torch.tensor([[0, 1, 2, 0, 0], [0, 1, 2, 3, 4]])
    wrong = position_ids_minus_one_after_mask(right)
    assert not torch.equal(wrong, printed_in_source)  # the comment is not the output
    assert wrong[0, 3:].tolist() == [-1, -1]
    assert torch.equal(cl.position_ids_from_attention_mask(right), printed_in_source)
    for mask in (right, left):
        lib = cl.position_ids_from_attention_mask(mask)
        wrong = position_ids_minus_one_after_mask(mask)
        real = mask.bool()
        assert torch.equal(wrong[real], lib[real])  # real tokens are right
        assert torch.all(wrong[~real] == -1) and torch.all(lib[~real] == 0)
        assert torch.equal((torch.cumsum(mask, 1) - 1) * mask, lib)  # the fix
    table = cl.sinusoidal_encoding(512, 8)
    assert torch.equal(
        table[position_ids_minus_one_after_mask(right)][0, 3], table[511]
    )
    with pytest.raises(IndexError):
        nn.Embedding(512, 8)(position_ids_minus_one_after_mask(right))


def sinusoids_without_sine(max_len: int, d_model: int) -> torch.Tensor:
    """Erratum 6 (seed 000): the angles p / 10000^(2 floor(j/2)/d), no sin or cos."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    j = torch.arange(d_model)[None, :]
    return pos / 10000 ** (2 * (j // 2) / d_model)


def test_erratum_sinusoids_without_sine() -> None:
    angles = sinusoids_without_sine(1024, 64)
    # angles are integers p * 1 (exact); |sin| may reach 1 + eps32 from a 1-ulp kernel
    eps32 = torch.finfo(torch.float32).eps
    assert angles.max() == 1023
    assert cl.sinusoidal_encoding(1024, 64).abs().max() <= 1 + eps32
    fixed = torch.where(torch.arange(64) % 2 == 0, angles.sin(), angles.cos())
    assert torch.allclose(fixed, cl.sinusoidal_encoding(1024, 64).double(), atol=1e-4)


def relative_scores_wrong_axes(q: torch.Tensor, table: torch.Tensor, K: int):
    """Erratum 7 (seed 000): matmul of (B, H, S, D) with a (S, S, D) table."""
    seq = q.shape[-2]
    offsets = torch.arange(seq)[None, :] - torch.arange(seq)[:, None]
    a = table[offsets.clamp(-K, K) + K]  # (S, S, D)
    return q @ a.transpose(-2, -1)


def test_erratum_relative_scores_wrong_axes(gen: torch.Generator) -> None:
    K, d = 3, 4
    table = torch.randn(2 * K + 1, d, generator=gen, dtype=torch.float64)
    with pytest.raises(RuntimeError):  # the source's own sizes: 8 heads, 20 positions
        relative_scores_wrong_axes(
            torch.randn(2, 8, 20, d, dtype=torch.float64), table, K
        )
    seq = heads = 5
    q = torch.randn(1, heads, seq, d, generator=gen, dtype=torch.float64)
    rows = cl.relative_position_index(seq, seq, K)
    correct = torch.einsum("bhid,ijd->bhij", q, table[rows])
    wrong = relative_scores_wrong_axes(q, table, K)
    assert (wrong - correct).abs().max() > 0.1
    for h in range(heads):  # what it computes: head h uses the offsets of query h
        assert torch.allclose(wrong[0, h], q[0, h] @ table[rows[h]].T)
    zeros = torch.zeros_like(q)
    _, w_lib = cl.shaw_relative_attention(q, zeros, zeros, table, table, K)
    assert torch.allclose(w_lib, (correct / math.sqrt(d)).softmax(-1))


def index_shifted_twice(seq: int, window: int) -> torch.Tensor:
    """Erratum 8 (seed 000): shift by w-1, clamp, shift by w-1 again."""
    offsets = torch.arange(seq)[:, None] - torch.arange(seq)[None, :] + window - 1
    return offsets.clamp(-(window - 1), window - 1) + window - 1


@pytest.mark.parametrize(("seq", "window"), [(8, 4), (16, 16), (32, 5)])
def test_erratum_index_shifted_twice(seq: int, window: int) -> None:
    K = window - 1
    intended = 2 * K - cl.relative_position_index(seq, seq, K)  # clip(i-j)+K
    past = torch.ones(seq, seq, dtype=torch.bool).tril()
    twice = index_shifted_twice(seq, window)
    assert twice[past].unique().tolist() == [2 * K]
    assert intended[past].unique().numel() == min(seq, K + 1)
    assert not torch.equal(twice, intended)


def test_erratum_positions_on_the_batch_axis(gen: torch.Generator) -> None:
    """Erratum 9 (seed 000): batch-first tensors in a seq-first layer mix sentences."""
    torch.manual_seed(0)
    seq_first = nn.MultiheadAttention(16, 2)
    batch_first = nn.MultiheadAttention(16, 2, batch_first=True)
    batch_first.load_state_dict(seq_first.state_dict())
    batch = torch.randn(2, 6, 16, generator=gen) + cl.sinusoidal_encoding(6, 16)
    other = batch.clone()
    other[1] += 1.0
    with torch.no_grad():
        leak = (
            seq_first(batch, batch, batch)[0][0] - seq_first(other, other, other)[0][0]
        )
        clean = (
            batch_first(batch, batch, batch)[0][0]
            - batch_first(other, other, other)[0][0]
        )
    assert leak.abs().max() > 0.1 and torch.all(clean == 0)


def test_erratum_inverted_causal_mask(gen: torch.Generator) -> None:
    """Erratum 10 (seed 000): triu(ones, 1) == 0 means attend; nn.MHA reads blocked."""
    s = 5
    tutorial_mask = torch.triu(torch.ones(s, s), diagonal=1) == 0
    assert torch.equal(tutorial_mask, cl.causal_mask(s, s))
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 1, batch_first=True)
    x = torch.randn(1, s, 8, generator=gen)
    with torch.no_grad():
        _, w = mha(x, x, x, attn_mask=tutorial_mask)
    assert torch.isnan(w[0, -1]).all()
    finite = w[0, :-1]
    assert torch.equal(finite > 0, ~cl.causal_mask(s, s)[:-1])  # only the future


def test_slip_t5_sign_reversal_uses_future_buckets() -> None:
    """Seed 001's 'T5' bias uses query - key; T5 uses key - query."""
    past = -torch.arange(1, 200)
    assert torch.all(cl.t5_relative_position_bucket(past) < 16)
    assert torch.all(cl.t5_relative_position_bucket(-past) >= 16)


def test_slip_mean_square_of_sinusoids_is_one_half() -> None:
    pe = cl.sinusoidal_encoding(10_000, 512).double()
    assert pe.pow(2).mean().item() == pytest.approx(0.5, abs=1e-6)
    assert torch.allclose(
        pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2,
        torch.ones(10_000, 256, dtype=torch.float64),
        atol=1e-6,
    )


def test_slip_index_range_stops_at_half_minus_one() -> None:
    d = 8
    pe = cl.sinusoidal_encoding(4, d)
    last_pair = d // 2 - 1
    assert pe.shape[1] == 2 * last_pair + 2  # columns 2i, 2i+1 for i <= d/2 - 1
    assert torch.allclose(
        pe[3, 2 * last_pair],
        torch.sin(torch.tensor(3 / 10000 ** (2 * last_pair / d))),
        atol=1e-6,
    )


def test_t5_bias_lives_in_the_first_layer_only() -> None:
    """Chapter 6: T5 computes the bias once and reuses it in every layer."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(
        d_model=8,
        d_kv=4,
        d_ff=16,
        num_heads=2,
        num_layers=3,
        vocab_size=11,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    )
    model = T5EncoderModel(config)
    owners = [
        block.layer[0].SelfAttention.has_relative_attention_bias
        for block in model.encoder.block
    ]
    assert owners == [True, False, False]


def test_partial_rotary_defaults_named_in_chapter_9() -> None:
    """GPT-J rotates 64 of its 256 head dimensions, GPT-NeoX a quarter of each head."""
    from transformers import GPTJConfig, GPTNeoXConfig

    gptj = GPTJConfig()
    assert (gptj.rotary_dim, gptj.n_embd // gptj.n_head) == (64, 256)
    assert GPTNeoXConfig().rope_parameters["partial_rotary_factor"] == 0.25


# --------------------------------------------------------------------------------------
# Issue 18: claims of chapters 5-8 restated after the expert read
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_power_of_two_slope_range_has_an_upper_end_that_depends_on_n(n: int) -> None:
    """Chapter 5: the slopes lie in [2^-8, 2^(-8/n)]; only the lower end is fixed."""
    slopes = cl.alibi_slopes(n).double()
    assert slopes.min().item() == 2.0**-8
    assert slopes.max().item() == pytest.approx(2.0 ** (-8.0 / n), rel=1e-6)


def test_paper_text_and_code_rules_differ_only_off_powers_of_two() -> None:
    """Chapter 5: the paper's text gives 2^(-8h/n) for every n; the library follows the
    authors' code, which agrees at powers of two and differs elsewhere (12 heads)."""
    for n in range(1, 65):
        text = 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)
        same = torch.allclose(cl.alibi_slopes(n).double(), text, rtol=1e-6)
        assert same == (n & (n - 1) == 0), n


def test_symmetric_alibi_cannot_tell_a_sequence_from_its_mirror(
    gen: torch.Generator,
) -> None:
    """Chapter 5: without a mask, reversing the input reverses the output; the causal
    mask breaks the symmetry."""
    h, s, d = 4, 9, 8
    q, k, v = (torch.randn(1, h, s, d, generator=gen, dtype=torch.float64)
               for _ in range(3))

    def attend(bias):
        def run(q, k, v):
            return cl.scaled_dot_product_attention(q, k, v, bias=bias.double())[0]
        return run

    sym = attend(cl.alibi_bias(h, s))
    assert torch.allclose(sym(q.flip(2), k.flip(2), v.flip(2)), sym(q, k, v).flip(2))
    causal = attend(cl.alibi_bias(h, s, causal=True))
    gap = (causal(q.flip(2), k.flip(2), v.flip(2)) - causal(q, k, v).flip(2)).abs()
    assert gap.max() > 0.1


def test_t5_bucket_start_formula_for_every_log_bucket() -> None:
    """Chapter 6, eq. t5-bucket-start: bucket b >= E first holds distance
    ceil(E (D/E)^((b-E)/(B-E))), both variants, several settings; with the defaults
    the last bucket starts at 91 (bidirectional) and 113 (causal)."""
    r = torch.arange(0, 5000)
    for bidirectional in (True, False):
        for n, D in ((32, 128), (8, 16), (64, 256), (16, 40), (12, 50)):
            B = n // 2 if bidirectional else n
            E = B // 2
            past = cl.t5_relative_position_bucket(
                -r, bidirectional=bidirectional, num_buckets=n, max_distance=D
            )
            for b in range(E, B):
                start = math.ceil(E * (D / E) ** ((b - E) / (B - E)))
                assert int(r[past == b].min()) == start, (bidirectional, n, D, b)
    for bidirectional, expected in ((True, 91), (False, 113)):
        past = cl.t5_relative_position_bucket(-r, bidirectional=bidirectional)
        assert int(r[past == past.max()].min()) == expected


def test_rel_shift_copies_once_then_only_views() -> None:
    """Chapter 7: the pad is the one copy; the result lives in the padded buffer (one
    extra row of L_q numbers), the reshapes copy nothing."""
    for q_len, k_len in ((3, 5), (4, 4), (1, 7)):
        x = torch.randn(2, q_len, k_len)
        out = cl.rel_shift(x)
        assert out.untyped_storage().nbytes() == 2 * q_len * (k_len + 1) * 4
        assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


@pytest.mark.parametrize("q_len,k_len", [(1, 1), (3, 5), (4, 4), (2, 9)])
def test_bidirectional_shift_needs_lk_plus_lq_minus_one_columns(q_len, k_len) -> None:
    """Chapter 7: keys after the query add distances down to -(L_q - 1)."""
    query_pos = torch.arange(q_len) + k_len - q_len
    distances = query_pos[:, None] - torch.arange(k_len)[None, :]
    assert distances.unique().numel() == k_len + q_len - 1
    assert distances.max() == k_len - 1 and distances.min() == -(q_len - 1)


def _run_segments(layers, x, seg):
    mems, outs = [None] * len(layers), []
    for s in range(0, x.shape[1], seg):
        h = x[:, s : s + seg]
        for n, layer in enumerate(layers):
            h, mems[n] = layer(h, mems[n])
        outs.append(h)
    return torch.cat(outs, dim=1)


def _run_at_once(layers, x, mask=None):
    for layer in layers:
        x, _ = layer(x, attn_mask=mask)
    return x


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_recurrence_equals_banded_full_pass_and_differs_from_segment_three(
    gen: torch.Generator, depth: int
) -> None:
    """Chapter 7: with mem_len = segment length, segments 1-2 equal the full pass at
    any depth; segment 3 differs even with one layer; the recurrence equals a full
    pass with a block-banded mask at every layer; N layers reach N segments back."""
    torch.manual_seed(1)
    S, n_seg = 4, 4
    layers = [cl.RelMultiHeadAttention(16, 2, mem_len=S).double() for _ in range(depth)]
    x = torch.randn(1, n_seg * S, 16, generator=gen, dtype=torch.float64)
    seg = torch.arange(n_seg * S) // S
    rec = _run_segments(layers, x, S)
    full = _run_at_once(layers, x)
    assert (rec - full)[:, seg < 2].abs().max() < 1e-10
    assert (rec - full)[:, seg == 2].abs().max() > 1e-4
    banded = seg[None, :] >= seg[:, None] - 1
    torch.testing.assert_close(rec, _run_at_once(layers, x, banded))
    changed = x.clone()
    changed[:, seg == 0] += 1.0
    moved = (_run_segments(layers, changed, S) - rec).abs()
    for s in range(1, n_seg):  # segment s sees segment 0 iff s <= depth
        assert (moved[:, seg == s].max() > 1e-6) == (s <= depth), (depth, s)


def test_da_local_head_spreads_with_length_alibi_does_not() -> None:
    """Chapter 8: R_hat -> 0 sends far logits to 0, not -inf. Middle query, every
    rectified scaled score 2, w = -0.5, v = 1: the share within |d| <= 2 falls from
    about a half (L = 21) to about 1 % (L = 2001); ALiBi (m = 0.5) keeps ~72 %."""
    da, alibi = [], []
    for L in (21, 201, 2001):
        d = (torch.arange(L) - L // 2).abs().double()
        near = d <= 2
        da.append((2.0 * cl.da_rescale(d, -0.5, 1.0)).softmax(-1)[near].sum().item())
        alibi.append((2.0 - 0.5 * d).softmax(-1)[near].sum().item())
    # independent closed form for DA: 5 near keys and L - 5 far ones
    for L, share in zip((21, 201, 2001), da, strict=True):
        d = (torch.arange(L) - L // 2).abs().double()
        r_hat = (1 + math.e) / (1 + torch.exp(1.0 + 0.5 * d))
        e = torch.exp(2.0 * r_hat)
        assert share == pytest.approx((e[d <= 2].sum() / e.sum()).item(), rel=1e-9)
    assert da[0] > 0.45 and 0.05 < da[1] < 0.15 and da[2] < 0.015
    assert da[0] > da[1] > da[2]
    assert max(alibi) - min(alibi) < 0.01 and min(alibi) > 0.7


def test_da_literal_formula_fails_only_for_large_v() -> None:
    """Chapter 8: in float32 the literal ratio is nan (v = 100, wR = 2) or inf
    (v = 100, wR = 20) where the value is finite; a large -wR alone gives the right
    0."""

    def literal(v, wr):
        v = torch.tensor(v)
        return ((1 + torch.exp(v)) / (1 + torch.exp(v - wr))).item()

    assert math.isnan(literal(100.0, 2.0))
    assert math.isinf(literal(100.0, 20.0))
    assert literal(0.0, -200.0) == 0.0
    assert cl.da_rescale(2.0, 1.0, 100.0).item() == pytest.approx(math.exp(2.0), 1e-5)
    assert cl.da_rescale(20.0, 1.0, 100.0).item() == pytest.approx(math.exp(20.0), 1e-5)


def test_f_softplus_cuts_off_above_twenty_the_library_does_not() -> None:
    """Chapter 8: F.softplus(x) returns x for x > 20; da_rescale stays exact."""
    x = torch.tensor(25.0, dtype=torch.float64)
    exact = 25.0 + math.log1p(math.exp(-25.0))
    assert F.softplus(x).item() == 25.0 != exact
    # R_hat with v = 25, wR = 0.5: exp(softplus(25) - softplus(24.5)) in float64
    want = (1 + math.exp(25.0)) / (1 + math.exp(24.5))
    got = cl.da_rescale(torch.tensor(0.5, dtype=torch.float64), 1.0, 25.0).item()
    assert got == pytest.approx(want, rel=1e-14)
    cut = math.exp(F.softplus(torch.tensor(25.0, dtype=torch.float64)).item()
                   - F.softplus(torch.tensor(24.5, dtype=torch.float64)).item())
    assert abs(cut - want) / want > 1e-12


def test_t5_has_one_table_per_stack_and_none_in_cross_attention() -> None:
    """Chapter 6: one table per stack (bidirectional in the encoder, causal in the
    decoder), shared by the stack's layers; cross-attention has no position bias."""
    from transformers import T5Config, T5Model

    torch.manual_seed(0)
    config = T5Config(
        d_model=8, d_kv=4, d_ff=16, num_heads=2, num_layers=2, num_decoder_layers=2,
        vocab_size=11, relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    )
    model = T5Model(config)
    enc = model.encoder.block[0].layer[0].SelfAttention
    dec = model.decoder.block[0].layer[0].SelfAttention
    assert enc.has_relative_attention_bias and dec.has_relative_attention_bias
    assert enc.relative_attention_bias is not dec.relative_attention_bias
    assert not enc.is_decoder and dec.is_decoder  # bidirectional vs causal buckets
    for block in model.decoder.block:
        assert not block.layer[1].EncDecAttention.has_relative_attention_bias
    for stack in (model.encoder, model.decoder):
        later = stack.block[1:]
        assert not any(
            b.layer[0].SelfAttention.has_relative_attention_bias for b in later
        )
