"""Shaw et al. relative attention and T5 relative position buckets."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import (
    ShawRelativeAttention,
    T5RelativeBias,
    relative_position_index,
    shaw_relative_attention,
    t5_relative_position_bucket,
)

# --------------------------------------------------------------------------- Shaw


@pytest.mark.parametrize("q_len,k_len,K", [(1, 1, 1), (4, 4, 2), (3, 7, 2), (5, 9, 10)])
def test_relative_position_index_equals_loop(q_len: int, k_len: int, K: int) -> None:
    got = relative_position_index(q_len, k_len, K)
    assert got.shape == (q_len, k_len) and got.dtype == torch.long
    for i in range(q_len):
        for j in range(k_len):
            absolute = i + k_len - q_len
            assert got[i, j] == max(-K, min(K, j - absolute)) + K


def test_relative_position_index_is_toeplitz_with_zero_on_query_diagonal() -> None:
    idx = relative_position_index(6, 6, 3)
    assert torch.equal(idx.diagonal(), torch.full((6,), 3))
    assert torch.equal(idx[1:, 1:], idx[:-1, :-1])
    assert idx.min() == 0 and idx.max() == 6


def shaw_loop(q, k, v, a_k, a_v, K, mask=None):
    """Eq. (3)-(4) of Shaw et al. with explicit loops over batch, head, i and j."""
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    out = torch.zeros(B, H, Lq, v.shape[-1], dtype=q.dtype)
    weights = torch.zeros(B, H, Lq, Lk, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                absolute = i + Lk - Lq
                e = torch.empty(Lk, dtype=q.dtype)
                for j in range(Lk):
                    r = max(-K, min(K, j - absolute)) + K
                    e[j] = q[b, h, i] @ (k[b, h, j] + a_k[r]) / math.sqrt(D)
                    if mask is not None and not mask[i, j]:
                        e[j] = float("-inf")
                alpha = e.softmax(0)
                weights[b, h, i] = alpha
                for j in range(Lk):
                    r = max(-K, min(K, j - absolute)) + K
                    out[b, h, i] += alpha[j] * (v[b, h, j] + a_v[r])
    return out, weights


def _shaw_inputs(gen, B, H, Lq, Lk, D, K):
    def t(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return (
        t(B, H, Lq, D),
        t(B, H, Lk, D),
        t(B, H, Lk, D),
        t(2 * K + 1, D),
        t(2 * K + 1, D),
    )


@pytest.mark.parametrize(
    "B,H,Lq,Lk,D,K", [(1, 1, 1, 1, 2, 1), (2, 3, 5, 5, 4, 2), (1, 2, 3, 8, 6, 3)]
)
def test_shaw_equals_brute_force(gen, B, H, Lq, Lk, D, K) -> None:
    q, k, v, a_k, a_v = _shaw_inputs(gen, B, H, Lq, Lk, D, K)
    out, weights = shaw_relative_attention(q, k, v, a_k, a_v, K)
    want_out, want_w = shaw_loop(q, k, v, a_k, a_v, K)
    assert out.shape == (B, H, Lq, D) and weights.shape == (B, H, Lq, Lk)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(weights, want_w)


def test_shaw_with_causal_mask_equals_brute_force(gen) -> None:
    q, k, v, a_k, a_v = _shaw_inputs(gen, 2, 2, 6, 6, 4, 2)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    out, weights = shaw_relative_attention(q, k, v, a_k, a_v, 2, mask=mask)
    want_out, want_w = shaw_loop(q, k, v, a_k, a_v, 2, mask)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(weights, want_w)
    assert (weights.masked_select(~mask) == 0).all()


def test_shaw_with_zero_tables_is_plain_attention(gen) -> None:
    from course_lib import causal_mask, scaled_dot_product_attention

    q, k, v, _, _ = _shaw_inputs(gen, 2, 3, 4, 6, 8, 2)
    zeros = torch.zeros(5, 8, dtype=torch.float64)
    mask = causal_mask(4, 6)
    out, weights = shaw_relative_attention(q, k, v, zeros, zeros, 2, mask=mask)
    plain, plain_weights = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, plain)
    torch.testing.assert_close(weights, plain_weights)


def test_shaw_value_table_shifts_output_by_weighted_rows(gen) -> None:
    """A constant a^V row adds exactly that row (weights sum to 1)."""
    q, k, v, a_k, _ = _shaw_inputs(gen, 1, 2, 4, 4, 3, 1)
    row = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    base, _ = shaw_relative_attention(q, k, v, a_k, torch.zeros(3, 3).double(), 1)
    shifted, _ = shaw_relative_attention(q, k, v, a_k, row.expand(3, 3), 1)
    torch.testing.assert_close(shifted - base, row.expand_as(base))


def test_shaw_is_translation_invariant(gen) -> None:
    """Scores depend on clipped j - i, not on absolute positions: shifting the
    whole sequence inside a longer one leaves the relative part unchanged."""
    q, k, v, a_k, a_v = _shaw_inputs(gen, 1, 1, 4, 4, 4, 2)
    out, _ = shaw_relative_attention(q, k, v, a_k, a_v, 2)
    # the same four tokens, as the last four of eight, with the first four masked out
    pad = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    k8, v8 = torch.cat([pad, k], 2), torch.cat([pad, v], 2)
    mask = torch.zeros(4, 8, dtype=torch.bool)
    mask[:, 4:] = True
    out8, _ = shaw_relative_attention(q, k8, v8, a_k, a_v, 2, mask=mask)
    torch.testing.assert_close(out8, out)


def test_shaw_module_matches_functional(gen) -> None:
    torch.manual_seed(0)
    layer = ShawRelativeAttention(12, 3, max_distance=2, causal=True).double()
    x = torch.randn(2, 5, 12, generator=gen, dtype=torch.float64)
    got = layer(x)
    q, k, v = layer.qkv(x).view(2, 5, 3, 3, 4).permute(2, 0, 3, 1, 4)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    z, _ = shaw_loop(q, k, v, layer.a_k, layer.a_v, 2, mask)
    want = layer.out(z.transpose(1, 2).reshape(2, 5, 12))
    assert got.shape == (2, 5, 12)
    torch.testing.assert_close(got, want)


def test_shaw_module_has_gradients_for_tables(gen) -> None:
    layer = ShawRelativeAttention(8, 2, max_distance=3)
    layer(torch.randn(1, 6, 8, generator=gen)).square().sum().backward()
    assert layer.a_k.grad is not None and layer.a_k.grad.abs().sum() > 0
    assert layer.a_v.grad is not None and layer.a_v.grad.abs().sum() > 0


# --------------------------------------------------------------------------- T5


SETTINGS = [(32, 128), (8, 16), (16, 20), (64, 256), (6, 40)]


@pytest.mark.parametrize("num_buckets,max_distance", SETTINGS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_monotone_per_sign(num_buckets, max_distance, bidirectional) -> None:
    n = torch.arange(0, 4 * max_distance)
    kwargs = dict(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    past = t5_relative_position_bucket(-n, **kwargs)  # keys before the query
    assert (past.diff() >= 0).all() and (past.diff() <= 1).all()
    assert past.min() >= 0 and past.max() < num_buckets
    half = num_buckets // 2 if bidirectional else num_buckets
    assert past[0] == 0 and past[-1] == half - 1
    if bidirectional:
        future = t5_relative_position_bucket(n[1:], **kwargs)
        assert (future.diff() >= 0).all()
        assert future.min() >= half and future.max() == num_buckets - 1
        # symmetric: distance +d uses the mirror bucket of -d, offset by half
        torch.testing.assert_close(future - half, past[1:])


@pytest.mark.parametrize("num_buckets,max_distance", SETTINGS)
def test_t5_causal_puts_every_future_key_in_bucket_zero(num_buckets, max_distance):
    future = torch.arange(1, 5 * max_distance)
    got = t5_relative_position_bucket(
        future, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(got, torch.zeros_like(future))


@pytest.mark.parametrize("num_buckets,max_distance", SETTINGS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_small_distances_exact_and_far_ones_shared(
    num_buckets, max_distance, bidirectional
) -> None:
    half = num_buckets // 2 if bidirectional else num_buckets
    exact = half // 2
    n = torch.arange(exact)
    kwargs = dict(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(t5_relative_position_bucket(-n, **kwargs), n)
    far = -torch.arange(max_distance, 3 * max_distance)
    assert (t5_relative_position_bucket(far, **kwargs) == half - 1).all()


def t5_bucket_scalar(
    rel: int, bidirectional: bool, num_buckets: int, max_distance: int
):
    """One relative position at a time, from the description in the T5 paper and
    Mesh TensorFlow (float32 logarithm, truncation toward zero)."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if rel > 0:
            bucket += num_buckets
        n = abs(rel)
    else:
        n = max(-rel, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    ratio = torch.tensor(n / exact, dtype=torch.float32)
    large = torch.log(ratio) / math.log(max_distance / exact) * (num_buckets - exact)
    return bucket + min(exact + int(large.item()), num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_equal_scalar_loop(bidirectional: bool) -> None:
    rel = torch.arange(-300, 301)
    got = t5_relative_position_bucket(rel, bidirectional=bidirectional)
    want = [t5_bucket_scalar(int(r), bidirectional, 32, 128) for r in rel]
    assert got.tolist() == want


def test_t5_bucket_keeps_shape_and_accepts_int32() -> None:
    rel = torch.arange(-6, 6, dtype=torch.int32).view(3, 4)
    got = t5_relative_position_bucket(rel, num_buckets=8, max_distance=16)
    assert got.shape == (3, 4) and got.dtype == torch.long


def test_t5_bias_module_looks_up_buckets() -> None:
    torch.manual_seed(0)
    bias = T5RelativeBias(3, num_buckets=8, max_distance=16, bidirectional=False)
    got = bias(4, 9)
    assert got.shape == (3, 4, 9)
    weight = bias.embedding.weight  # (buckets, heads)
    for i in range(4):
        for j in range(9):
            rel = j - (i + 5)
            b = t5_bucket_scalar(rel, False, 8, 16)
            torch.testing.assert_close(got[:, i, j], weight[b])


def test_t5_bias_module_caches_bucket_grid() -> None:
    bias = T5RelativeBias(2, num_buckets=8, max_distance=16)
    bias(6)
    assert bias.buckets.shape == (6, 6)
    grid = bias.bucket_grid(2, 5)
    assert bias.buckets.shape == (6, 6)  # reused
    rel = torch.arange(5)[None, :] - (torch.arange(2)[:, None] + 3)
    want = t5_relative_position_bucket(rel, num_buckets=8, max_distance=16)
    assert torch.equal(grid, want)
    bias(3, 10)
    assert bias.buckets.shape == (10, 10)
    assert "buckets" not in bias.state_dict()


def test_t5_kv_cache_bias_equals_full_rows() -> None:
    """Decoding one query against t+1 cached keys gives row t of the full bias."""
    torch.manual_seed(0)
    bias = T5RelativeBias(4, bidirectional=False)
    full = bias(12)
    for t in range(12):
        assert torch.equal(bias(1, t + 1)[:, 0], full[:, t, : t + 1])


def test_t5_bias_in_library_attention_equals_manual(gen) -> None:
    """T5RelativeBias plugs into course_lib's attention as an additive bias."""
    from course_lib import scaled_dot_product_attention

    torch.manual_seed(0)
    bias = T5RelativeBias(2, num_buckets=8, max_distance=16)
    q = torch.randn(1, 2, 5, 4, generator=gen)
    k = torch.randn(1, 2, 5, 4, generator=gen)
    v = torch.randn(1, 2, 5, 4, generator=gen)
    with torch.no_grad():
        out, _ = scaled_dot_product_attention(q, k, v, bias=bias(5))
        want = (q @ k.transpose(-2, -1) / 2.0 + bias(5)).softmax(-1) @ v
    torch.testing.assert_close(out, want)
