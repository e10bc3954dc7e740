"""Rotary position embedding: definition, properties, conventions, cache, decoding."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    RotaryEmbedding,
    apply_rope,
    apply_rope_complex,
    causal_mask,
    interleaved_to_half_permutation,
    rope_angles,
    rope_frequencies,
    scaled_dot_product_attention,
)

CONVENTIONS = ["interleaved", "half"]


def _rope_loop(
    x: torch.Tensor, positions, base: float, convention: str
) -> torch.Tensor:
    """RoPE by explicit 2x2 rotation matrices, one pair and one position at a time."""
    seq, d = x.shape[-2], x.shape[-1]
    out = x.clone().double()
    for t in range(seq):
        m = int(positions[t])
        for i in range(d // 2):
            theta = base ** (-2 * i / d)
            c, s = math.cos(m * theta), math.sin(m * theta)
            rot = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
            a, b = (
                (2 * i, 2 * i + 1) if convention == "interleaved" else (i, i + d // 2)
            )
            pair = torch.stack((x[..., t, a], x[..., t, b]), -1).double()  # (..., 2)
            new = pair @ rot.T
            out[..., t, a], out[..., t, b] = new[..., 0], new[..., 1]
    return out


def test_frequencies_follow_the_paper():
    for d in (2, 4, 10, 64):
        theta = rope_frequencies(d, dtype=torch.float64)
        assert theta.shape == (d // 2,)
        expected = torch.tensor([10000.0 ** (-2 * i / d) for i in range(d // 2)])
        torch.testing.assert_close(theta, expected.double())
    assert rope_frequencies(8).dtype == torch.float32
    torch.testing.assert_close(
        rope_frequencies(8, base=500000.0, dtype=torch.float64),
        torch.tensor([500000.0 ** (-i / 4) for i in range(4)], dtype=torch.float64),
    )
    torch.testing.assert_close(
        rope_angles(torch.tensor([3]), 4),
        torch.tensor([[3.0, 0.03]], dtype=torch.float64),
    )


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize(("seq", "d", "offset"), [(5, 2, 0), (4, 8, 0), (3, 6, 17)])
def test_apply_rope_equals_rotation_loop(gen, convention, seq, d, offset):
    x = torch.randn(2, 3, seq, d, generator=gen, dtype=torch.float64)
    positions = torch.arange(offset, offset + seq)
    expected = _rope_loop(x, positions, 10000.0, convention)
    ours = apply_rope(x, positions, convention=convention)
    torch.testing.assert_close(ours, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        apply_rope(x, positions, base=10.0, convention=convention),
        _rope_loop(x, positions, 10.0, convention),
        atol=1e-12,
        rtol=0,
    )


def test_position_zero_is_identity_and_conventions_differ(gen):
    x = torch.randn(1, 4, 8, generator=gen)
    for convention in CONVENTIONS:
        torch.testing.assert_close(
            apply_rope(x, torch.zeros(4, dtype=torch.long), convention=convention), x
        )
    assert (apply_rope(x) - apply_rope(x, convention="half")).abs().max() > 1e-2


@settings(max_examples=20, deadline=None)
@given(
    half_dim=st.integers(1, 16),
    seq=st.integers(1, 9),
    offset=st.integers(0, 5000),
    convention=st.sampled_from(CONVENTIONS),
    seed=st.integers(0, 2**16),
)
def test_rope_preserves_norms(half_dim, seq, offset, convention, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, seq, 2 * half_dim, generator=g, dtype=torch.float64)
    positions = torch.arange(offset, offset + seq)
    y = apply_rope(x, positions, convention=convention)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))


@settings(max_examples=20, deadline=None)
@given(
    m=st.integers(0, 3000),
    n=st.integers(0, 3000),
    shift=st.integers(-3000, 3000),
    half_dim=st.integers(1, 32),
    convention=st.sampled_from(CONVENTIONS),
    seed=st.integers(0, 2**16),
)
def test_score_depends_only_on_relative_position(
    m, n, shift, half_dim, convention, seed
):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 2 * half_dim, generator=g, dtype=torch.float64)

    def score(a: int, b: int) -> float:
        rq = apply_rope(q, torch.tensor([a]), convention=convention)
        rk = apply_rope(k, torch.tensor([b]), convention=convention)
        return float((rq * rk).sum())

    # Negative positions are allowed in the functional form: only m - n matters.
    assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-9)
    assert score(m - n, 0) == pytest.approx(score(m, n), abs=1e-9)


def test_scores_decay_is_not_constant(gen):
    # The relative score is a genuine function of the distance (not constant).
    q = torch.ones(1, 64)
    scores = [
        float(apply_rope(q, torch.tensor([d]))[0] @ apply_rope(q, torch.tensor([0]))[0])
        for d in (0, 1, 10, 100)
    ]
    assert scores[0] == pytest.approx(64.0, rel=1e-6)
    assert max(scores[1:]) < scores[0] - 1


@pytest.mark.parametrize("head_dim", [2, 4, 8, 64])
def test_interleaved_to_half_permutation(gen, head_dim):
    perm = interleaved_to_half_permutation(head_dim)
    assert perm.dtype == torch.long
    expected = list(range(0, head_dim, 2)) + list(range(1, head_dim, 2))
    assert perm.tolist() == expected
    x = torch.randn(2, 3, 7, head_dim, generator=gen)
    positions = torch.arange(4, 11)
    torch.testing.assert_close(
        apply_rope(x[..., perm], positions, convention="half"),
        apply_rope(x, positions)[..., perm],
    )


def test_converting_conventions_leaves_scores_unchanged(gen):
    n_heads, head_dim, d_model, seq = 3, 8, 12, 6
    x = torch.randn(2, seq, d_model, generator=gen, dtype=torch.float64)
    w_q = torch.randn(n_heads * head_dim, d_model, generator=gen, dtype=torch.float64)
    w_k = torch.randn(n_heads * head_dim, d_model, generator=gen, dtype=torch.float64)
    perm = interleaved_to_half_permutation(head_dim)

    def scores(wq, wk, convention):
        q = (x @ wq.T).reshape(2, seq, n_heads, head_dim).transpose(1, 2)  # (B,H,S,D)
        k = (x @ wk.T).reshape(2, seq, n_heads, head_dim).transpose(1, 2)
        q, k = (
            apply_rope(q, convention=convention),
            apply_rope(k, convention=convention),
        )
        return q @ k.transpose(-1, -2)  # (B, H, S, S)

    def per_head(w):
        return w.reshape(n_heads, head_dim, d_model)[:, perm].reshape(w.shape)

    reference = scores(w_q, w_k, "interleaved")
    torch.testing.assert_close(scores(per_head(w_q), per_head(w_k), "half"), reference)
    # Unconverted weights with the other convention give different scores.
    assert (scores(w_q, w_k, "half") - reference).abs().max() > 1e-2


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_kv_cache_decoding_equals_full_forward(gen, convention):
    b, h, seq, d = 2, 3, 10, 8
    q, k, v = (torch.randn(b, h, seq, d, generator=gen) for _ in range(3))
    rope = RotaryEmbedding(d, convention=convention, max_seq_len=2)
    full, _ = scaled_dot_product_attention(rope(q), rope(k), v, mask=causal_mask(seq))

    # Prefill 4 tokens, then decode one token at a time, then a chunk of 3.
    keys, values, outputs = [], [], []
    for start, stop in [(0, 4), (4, 5), (5, 6), (6, 7), (7, 10)]:
        positions = torch.arange(start, stop)
        keys.append(apply_rope(k[..., start:stop, :], positions, convention=convention))
        values.append(v[..., start:stop, :])
        q_step = rope(q[..., start:stop, :], positions)
        k_all, v_all = torch.cat(keys, dim=-2), torch.cat(values, dim=-2)
        out, _ = scaled_dot_product_attention(
            q_step, k_all, v_all, mask=causal_mask(stop - start, stop)
        )
        outputs.append(out)
    torch.testing.assert_close(torch.cat(outputs, dim=-2), full)
    # Forgetting the offset (positions restart at 0) breaks it.
    wrong = rope(q[..., 9:10, :])
    assert (wrong - rope(q)[..., 9:10, :]).abs().max() > 1e-3


def test_complex_form_equals_reference(gen):
    x = torch.randn(2, 3, 7, 16, generator=gen)
    positions = torch.arange(20, 27)
    torch.testing.assert_close(
        apply_rope_complex(x, positions), apply_rope(x, positions), atol=1e-6, rtol=1e-6
    )
    x64 = x.double()
    torch.testing.assert_close(
        apply_rope_complex(x64, positions, base=100.0),
        apply_rope(x64, positions, base=100.0),
    )


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_module_equals_functional_and_grows_its_cache(gen, convention):
    rope = RotaryEmbedding(16, convention=convention, base=1000.0, max_seq_len=4)
    assert rope.cached_len == 4
    x = torch.randn(2, 2, 9, 16, generator=gen)
    torch.testing.assert_close(
        rope(x), apply_rope(x, base=1000.0, convention=convention)
    )
    assert rope.cached_len >= 9
    positions = torch.arange(300, 309)
    torch.testing.assert_close(
        rope(x, positions), apply_rope(x, positions, base=1000.0, convention=convention)
    )
    assert rope.cached_len >= 309
    # A smaller request reuses the cache without shrinking it.
    before = rope.cached_len
    rope(x[..., :3, :])
    assert rope.cached_len == before


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_partial_rotary_rotates_only_the_leading_features(gen, convention):
    x = torch.randn(2, 5, 12, generator=gen)
    rope = RotaryEmbedding(12, rotary_dim=4, convention=convention)
    y = rope(x)
    torch.testing.assert_close(
        y[..., :4], apply_rope(x[..., :4], convention=convention)
    )
    torch.testing.assert_close(y[..., 4:], x[..., 4:], rtol=0, atol=0)


def test_dtypes_are_kept(gen):
    x = torch.randn(1, 2, 6, 8, generator=gen)
    ref = apply_rope(x.double())
    for dtype, tol in [
        (torch.float16, 2e-3),
        (torch.bfloat16, 2e-2),
        (torch.float32, 1e-6),
    ]:
        y = apply_rope(x.to(dtype))
        assert y.dtype == dtype
        torch.testing.assert_close(y.double(), ref, atol=tol, rtol=tol)
        z = RotaryEmbedding(8)(x.to(dtype))
        assert z.dtype == dtype
        torch.testing.assert_close(z.double(), ref, atol=tol, rtol=tol)
    assert apply_rope(x.double()).dtype == torch.float64


def test_large_positions_stay_accurate():
    # Angles are formed in float64: at position 1e6 a float32 angle would be off by
    # up to ~0.03 rad.
    x = torch.tensor([[1.0, 0.0]])
    y = apply_rope(x, torch.tensor([1_000_000]))
    expected = torch.tensor([[math.cos(1e6), math.sin(1e6)]])
    torch.testing.assert_close(y, expected, atol=1e-6, rtol=0)


def test_batched_positions_broadcast(gen):
    # Left-padded batches need per-sequence positions of shape (batch, 1, seq).
    x = torch.randn(2, 3, 5, 8, generator=gen)
    positions = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])[:, None, :]
    y = apply_rope(x, positions)
    torch.testing.assert_close(y[0, :, 2:], apply_rope(x[0, :, 2:]))
    torch.testing.assert_close(y[1], apply_rope(x[1]))
    torch.testing.assert_close(RotaryEmbedding(8)(x, positions), y)
