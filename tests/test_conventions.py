"""Converters between sin/cos layouts, RoPE pairings and ALiBi bias forms."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    alibi_bias,
    alibi_bias_bloom_style,
    alibi_forms_softmax_gap,
    alibi_slopes,
    apply_rope,
    causal_mask,
    concat_to_interleaved_permutation,
    interleaved_to_concat_permutation,
    rope_half_to_interleaved_weights,
    rope_interleaved_to_half_weights,
    sincos_concat_to_interleaved,
    sincos_interleaved_to_concat,
    sinusoidal_encoding,
)

# --- sin/cos layouts ------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [2, 4, 6, 64])
def test_sincos_converters_match_both_layouts(d_model):
    interleaved = sinusoidal_encoding(33, d_model)
    concat = sinusoidal_encoding(33, d_model, layout="concat")
    torch.testing.assert_close(sincos_interleaved_to_concat(interleaved), concat)
    torch.testing.assert_close(sincos_concat_to_interleaved(concat), interleaved)
    if d_model > 2:
        assert not torch.equal(interleaved, concat)


@pytest.mark.parametrize("d_model", [2, 8, 10])
def test_sincos_permutations_are_inverse_and_explicit(d_model):
    p = interleaved_to_concat_permutation(d_model)
    q = concat_to_interleaved_permutation(d_model)
    assert p.dtype == q.dtype == torch.long
    assert p[q].tolist() == list(range(d_model)) == q[p].tolist()
    half = d_model // 2
    for i in range(half):
        assert (
            p[i] == 2 * i and p[half + i] == 2 * i + 1
        )  # concat[j] = interleaved[p[j]]
        assert q[2 * i] == i and q[2 * i + 1] == half + i


def test_sincos_converters_keep_leading_dims(gen):
    x = torch.randn(2, 3, 8, generator=gen)
    y = sincos_interleaved_to_concat(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y[..., :4], x[..., 0::2])
    torch.testing.assert_close(sincos_concat_to_interleaved(y), x)


# --- RoPE weights ---------------------------------------------------------------------


def _hf_permute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The reshape Hugging Face's Llama conversion script applies to W_q and W_k."""
    dim1, dim2 = w.shape
    return (
        w.view(n_heads, dim1 // n_heads // 2, 2, dim2)
        .transpose(1, 2)
        .reshape(dim1, dim2)
    )


@pytest.mark.parametrize(
    ("n_heads", "head_dim", "d_model"), [(1, 2, 3), (4, 8, 32), (3, 16, 5)]
)
def test_rope_weight_conversion_is_the_hf_llama_permutation(
    gen, n_heads, head_dim, d_model
):
    w = torch.randn(n_heads * head_dim, d_model, generator=gen)
    converted = rope_interleaved_to_half_weights(w, n_heads, head_dim)
    torch.testing.assert_close(converted, _hf_permute(w, n_heads), rtol=0, atol=0)
    torch.testing.assert_close(
        rope_half_to_interleaved_weights(converted, n_heads, head_dim),
        w,
        rtol=0,
        atol=0,
    )


def test_rope_weight_conversion_handles_bias_vectors(gen):
    b = torch.arange(12.0)
    converted = rope_interleaved_to_half_weights(b, 2, 6)
    assert converted.tolist() == [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11]
    torch.testing.assert_close(rope_half_to_interleaved_weights(converted, 2, 6), b)


@settings(max_examples=10, deadline=None)
@given(
    n_heads=st.integers(1, 4),
    half_dim=st.integers(1, 8),
    d_model=st.integers(1, 12),
    seq=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_converted_weights_give_identical_scores(n_heads, half_dim, d_model, seq, seed):
    head_dim = 2 * half_dim
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(seq, d_model, generator=g, dtype=torch.float64)
    w_q, w_k = (
        torch.randn(n_heads * head_dim, d_model, generator=g, dtype=torch.float64)
        for _ in "qk"
    )
    b_q = torch.randn(n_heads * head_dim, generator=g, dtype=torch.float64)

    def scores(wq, wk, bq, convention):
        q = (x @ wq.T + bq).reshape(seq, n_heads, head_dim).transpose(0, 1)  # (H, S, D)
        k = (x @ wk.T).reshape(seq, n_heads, head_dim).transpose(0, 1)  # (H, S, D)
        q, k = (
            apply_rope(q, convention=convention),
            apply_rope(k, convention=convention),
        )
        return q @ k.transpose(-1, -2)  # (H, S, S)

    reference = scores(w_q, w_k, b_q, "interleaved")
    half = scores(
        rope_interleaved_to_half_weights(w_q, n_heads, head_dim),
        rope_interleaved_to_half_weights(w_k, n_heads, head_dim),
        rope_interleaved_to_half_weights(b_q, n_heads, head_dim),
        "half",
    )
    torch.testing.assert_close(half, reference)
    back = scores(
        rope_half_to_interleaved_weights(
            rope_interleaved_to_half_weights(w_q, n_heads, head_dim), n_heads, head_dim
        ),
        w_k,
        b_q,
        "interleaved",
    )
    torch.testing.assert_close(back, reference)


# --- ALiBi forms ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_heads", "q_len", "k_len"), [(1, 1, 1), (4, 5, 5), (6, 3, 8)]
)
def test_alibi_bloom_style_is_slope_times_key_index(n_heads, q_len, k_len):
    bias = alibi_bias_bloom_style(n_heads, q_len, k_len)
    assert bias.shape == (n_heads, q_len, k_len) and bias.dtype == torch.float32
    slopes = alibi_slopes(n_heads)
    for h in range(n_heads):
        for i in range(q_len):
            for j in range(k_len):
                assert float(bias[h, i, j]) == pytest.approx(float(slopes[h]) * j)
    assert alibi_bias_bloom_style(2, 4).shape == (2, 4, 4)


@pytest.mark.parametrize(("q_len", "k_len"), [(5, 5), (3, 9), (1, 4)])
def test_forms_differ_by_a_row_constant_under_the_causal_mask(q_len, k_len):
    n_heads = 8
    paper = alibi_bias(n_heads, q_len, k_len).double()
    bloom = alibi_bias_bloom_style(n_heads, q_len, k_len).double()
    allowed = causal_mask(q_len, k_len)
    gap = (bloom - paper).masked_fill(~allowed, float("nan"))  # (H, q_len, k_len)
    # On every allowed entry, bloom - paper = m_h * i' with i' the query's position.
    i_abs = torch.arange(q_len, dtype=torch.float64) + (k_len - q_len)  # (q_len,)
    expected = alibi_slopes(n_heads).double()[:, None] * i_abs  # (H, q_len)
    torch.testing.assert_close(
        gap,
        expected[..., None].expand_as(gap).masked_fill(~allowed, float("nan")),
        equal_nan=True,
        atol=1e-5,
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    ("n_heads", "q_len", "k_len"), [(4, 6, 6), (12, 3, 10), (5, 7, 7)]
)
def test_forms_agree_after_softmax_only_with_a_causal_mask(gen, n_heads, q_len, k_len):
    scores = torch.randn(n_heads, q_len, k_len, generator=gen)
    assert alibi_forms_softmax_gap(scores, causal=True) < 1e-6
    assert alibi_forms_softmax_gap(scores, causal=False) > 1e-2


def test_softmax_gap_equals_direct_computation(gen):
    scores = torch.randn(3, 4, 4, generator=gen, dtype=torch.float64)
    paper = torch.softmax(scores + alibi_bias(3, 4).double(), -1)
    bloom = torch.softmax(scores + alibi_bias_bloom_style(3, 4).double(), -1)
    assert alibi_forms_softmax_gap(scores, causal=False) == pytest.approx(
        float((paper - bloom).abs().max())
    )
