"""Attention, causal masks and permutation equivariance."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    causal_mask,
    permutation_matrix,
    permute_tokens,
    scaled_dot_product_attention,
    self_attention,
    sinusoidal_encoding,
)


def _loop_attention(q, k, v, bias=None, mask=None):
    """Attention written element by element from Vaswani et al., eq. (1)."""
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    out = torch.zeros(lq, v.shape[-1], dtype=torch.float64)
    weights = torch.zeros(lq, lk, dtype=torch.float64)
    for i in range(lq):
        logits = []
        for j in range(lk):
            s = sum(float(q[i, c]) * float(k[j, c]) for c in range(d)) / math.sqrt(d)
            if bias is not None:
                s += float(bias[i, j])
            allowed = mask is None or bool(mask[i, j])
            logits.append(s if allowed else None)
        top = max(x for x in logits if x is not None)
        exps = [0.0 if x is None else math.exp(x - top) for x in logits]
        total = sum(exps)
        for j in range(lk):
            weights[i, j] = exps[j] / total
            out[i] += weights[i, j] * v[j].double()
    return out, weights


@pytest.mark.parametrize(("lq", "lk"), [(4, 4), (2, 5)])
def test_sdpa_equals_elementwise_loop(gen, lq, lk):
    d = 3
    q = torch.randn(lq, d, generator=gen, dtype=torch.float64)
    k = torch.randn(lk, d, generator=gen, dtype=torch.float64)
    v = torch.randn(lk, 2, generator=gen, dtype=torch.float64)
    bias = torch.randn(lq, lk, generator=gen, dtype=torch.float64)
    mask = causal_mask(lq, lk)
    out, w = scaled_dot_product_attention(q, k, v, bias=bias, mask=mask)
    ref_out, ref_w = _loop_attention(q, k, v, bias, mask)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=0)


def test_bias_is_added_after_scaling_and_not_scaled():
    # With q = 0 the scores vanish, so the weights are softmax(bias) exactly: a bias
    # divided by sqrt(d) would give a flatter distribution.
    d = 16
    q = torch.zeros(1, 1, 2, d)
    k = torch.ones(1, 1, 3, d)
    v = torch.eye(3).reshape(1, 1, 3, 3)
    bias = torch.tensor([[[0.0, 1.0, 2.0], [3.0, 0.0, -1.0]]])  # (1, 2, 3)
    _, w = scaled_dot_product_attention(q, k, v, bias=bias)
    torch.testing.assert_close(w[0], torch.softmax(bias, dim=-1))
    # And the product q.k is divided by sqrt(d): q = k = e makes every score 1/sqrt(d)
    # for the matching key and 0 otherwise.
    q = torch.eye(3)[:, None].expand(3, 1, 3).reshape(1, 1, 3, 3) * 4.0
    _, w = scaled_dot_product_attention(q, torch.eye(3)[None, None], v)
    expected = torch.softmax(torch.eye(3) * 4.0 / math.sqrt(3), dim=-1)
    torch.testing.assert_close(w[0, 0], expected)


def test_weights_are_a_distribution_and_masked_keys_get_zero(gen):
    q, k, v = (torch.randn(2, 3, 6, 4, generator=gen) for _ in range(3))
    mask = causal_mask(6)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert out.shape == (2, 3, 6, 4) and w.shape == (2, 3, 6, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 6))
    assert torch.all(w[..., ~mask] == 0)
    assert torch.all(w[..., mask] > 0)


def test_fully_masked_rows_give_zero_weights_not_nan(gen):
    q, k, v = (torch.randn(1, 2, 4, 3, generator=gen) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert torch.all(w[..., 1, :] == 0) and torch.all(out[..., 1, :] == 0)
    ref, ref_w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out[..., [0, 2, 3], :], ref[..., [0, 2, 3], :])
    # The same through an all -inf bias row.
    bias = torch.zeros(2, 4, 4)
    bias[:, 2] = float("-inf")
    out, w = scaled_dot_product_attention(q, k, v, bias=bias)
    assert torch.all(w[..., 2, :] == 0) and not torch.isnan(out).any()
    torch.testing.assert_close(w[..., 0, :], ref_w[..., 0, :])


def test_sdpa_broadcasts_bias_and_keeps_leading_dims(gen):
    q = torch.randn(5, 2, 3, 4, generator=gen)
    k = torch.randn(5, 2, 6, 4, generator=gen)
    v = torch.randn(5, 2, 6, 7, generator=gen)
    bias = torch.randn(2, 3, 6, generator=gen)
    out, w = scaled_dot_product_attention(q, k, v, bias=bias)
    assert out.shape == (5, 2, 3, 7) and w.shape == (5, 2, 3, 6)
    for b in range(5):
        ref, _ = scaled_dot_product_attention(q[b], k[b], v[b], bias=bias)
        torch.testing.assert_close(out[b], ref)


def test_causal_mask_equals_explicit_rule():
    for q_len, k_len in [(1, 1), (3, 3), (2, 5), (1, 4), (4, 9)]:
        m = causal_mask(q_len, k_len)
        assert m.dtype == torch.bool and m.shape == (q_len, k_len)
        for i in range(q_len):
            for j in range(k_len):
                assert bool(m[i, j]) == (j <= i + k_len - q_len)
    torch.testing.assert_close(
        causal_mask(5), torch.ones(5, 5, dtype=torch.bool).tril(), rtol=0, atol=0
    )
    # The last query of a KV-cache step sees every key.
    assert causal_mask(3, 8)[-1].all() and causal_mask(3, 8)[0].sum() == 6


def test_permutation_matrix_definition():
    perm = [3, 0, 2, 1]
    p = permutation_matrix(perm)
    x = torch.arange(12.0).reshape(4, 3)
    for i, pi in enumerate(perm):
        torch.testing.assert_close((p @ x)[i], x[pi])
    torch.testing.assert_close(p.T @ p, torch.eye(4))
    torch.testing.assert_close(permute_tokens(x, perm), p @ x)
    torch.testing.assert_close(permute_tokens(x, torch.tensor(perm)), p @ x)


@settings(max_examples=15, deadline=None)
@given(
    seq=st.integers(1, 7),
    d_model=st.integers(1, 6),
    batch=st.sampled_from([None, 2]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_self_attention_is_permutation_equivariant(seq, d_model, batch, seed, data):
    perm = data.draw(st.permutations(list(range(seq))))
    g = torch.Generator().manual_seed(seed)
    shape = (seq, d_model) if batch is None else (batch, seq, d_model)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    w_q, w_k = (torch.randn(d_model, 3, generator=g, dtype=torch.float64) for _ in "qk")
    w_v = torch.randn(d_model, 5, generator=g, dtype=torch.float64)
    p = permutation_matrix(perm).double()

    out = self_attention(x, w_q, w_k, w_v)
    assert out.shape == (*shape[:-1], 5)
    torch.testing.assert_close(self_attention(p @ x, w_q, w_k, w_v), p @ out)
    torch.testing.assert_close(
        self_attention(permute_tokens(x, perm), w_q, w_k, w_v),
        permute_tokens(out, perm),
    )


def test_adding_positions_breaks_equivariance(gen):
    x = torch.randn(6, 8, generator=gen)
    w = [torch.randn(8, 8, generator=gen) for _ in range(3)]
    perm = [5, 4, 3, 2, 1, 0]
    pe = sinusoidal_encoding(6, 8)
    permuted_then = self_attention(permute_tokens(x, perm) + pe, *w)
    then_permuted = permute_tokens(self_attention(x + pe, *w), perm)
    assert (permuted_then - then_permuted).abs().max() > 1e-2


def test_self_attention_equals_manual_formula(gen):
    x = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    w_q, w_k, w_v = (
        torch.randn(4, 3, generator=gen, dtype=torch.float64) for _ in "qkv"
    )
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(3), -1) @ v
    torch.testing.assert_close(self_attention(x, w_q, w_k, w_v), expected)
