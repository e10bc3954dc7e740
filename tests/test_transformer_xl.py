"""Transformer-XL: rel_shift, the four-term scores, sinusoids, segment recurrence."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import (
    RelMultiHeadAttention,
    rel_attention_scores,
    rel_attention_scores_gather,
    rel_shift,
    relative_sinusoidal_embedding,
    transformer_xl_mask,
)

SIZES = [(1, 1), (1, 5), (3, 3), (4, 7), (5, 6), (2, 9), (8, 8)]


def shift_gather(x: torch.Tensor) -> torch.Tensor:
    """out[..., i, j] = x[..., i, j + q_len - 1 - i] by indexing (NaN elsewhere)."""
    q_len, k_len = x.shape[-2:]
    out = torch.full_like(x, float("nan"))
    for i in range(q_len):
        for j in range(k_len):
            if j <= i + k_len - q_len:
                out[..., i, j] = x[..., i, j + q_len - 1 - i]
    return out


@pytest.mark.parametrize("q_len,k_len", SIZES)
@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
def test_rel_shift_equals_gather_in_valid_region(gen, q_len, k_len, lead) -> None:
    x = torch.randn(*lead, q_len, k_len, generator=gen)
    got = rel_shift(x)
    want = shift_gather(x)
    valid = transformer_xl_mask(q_len, k_len)
    assert got.shape == x.shape
    assert torch.equal(got[..., valid], want[..., valid])


@pytest.mark.parametrize("q_len,k_len", [(3, 3), (4, 7), (5, 6), (8, 8)])
def test_rel_shift_garbage_comes_from_the_next_query(gen, q_len, k_len) -> None:
    """Above the valid region the shift leaves the zero pad or numbers of row i+1,
    i.e. scores of a *different query*: they must be masked, never used."""
    x = torch.randn(q_len, k_len, generator=gen) + 10.0  # no accidental zeros
    got = rel_shift(x)
    for i in range(q_len):
        for j in range(i + k_len - q_len + 1, k_len):
            c = q_len + j - i - k_len - 1  # column in the padded row i + 1
            want = 0.0 if c == 0 else x[i + 1, c - 1]
            assert got[i, j] == want
            assert not torch.isclose(got[i, j], x[i]).any()


def test_rel_shift_columns_hold_descending_distances() -> None:
    """With column c = distance k_len-1-c, the shifted entry (i, j) is i' - j."""
    q_len, k_len = 4, 7
    distances = torch.arange(k_len - 1, -1, -1, dtype=torch.float32).expand(q_len, -1)
    got = rel_shift(distances)
    query = torch.arange(q_len)[:, None] + (k_len - q_len)
    want = (query - torch.arange(k_len)[None, :]).float()
    valid = transformer_xl_mask(q_len, k_len)
    assert torch.equal(got[valid], want[valid])


def _inputs(gen, B, H, Lq, Lk, D):
    def t(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return t(B, H, Lq, D), t(B, H, Lk, D), t(H, Lk, D), t(H, D), t(H, D)


def four_terms_loop(q, k, r, u, v):
    """Dai et al. eq. (3) term by term; r row c holds distance Lk-1-c."""
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    out = torch.full((B, H, Lq, Lk), float("-inf"), dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                query = i + Lk - Lq
                for j in range(query + 1):
                    r_ij = r[h, Lk - 1 - (query - j)]  # embedding of distance i'-j
                    a = q[b, h, i] @ k[b, h, j]  # content
                    b_ = q[b, h, i] @ r_ij  # content-dependent position
                    c = u[h] @ k[b, h, j]  # global content bias
                    d = v[h] @ r_ij  # global position bias
                    out[b, h, i, j] = (a + b_ + c + d) / math.sqrt(D)
    return out


@pytest.mark.parametrize("Lq,Lk", [(1, 1), (3, 3), (4, 7), (1, 6), (6, 6)])
def test_rel_attention_scores_equals_four_term_loop(gen, Lq, Lk) -> None:
    q, k, r, u, v = _inputs(gen, 2, 3, Lq, Lk, 4)
    got = rel_attention_scores(q, k, r, u, v)
    want = four_terms_loop(q, k, r, u, v)
    assert got.shape == (2, 3, Lq, Lk)
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite])


@pytest.mark.parametrize("Lq,Lk", [(3, 3), (4, 7), (2, 9)])
def test_gather_reference_equals_shift(gen, Lq, Lk) -> None:
    q, k, r, u, v = _inputs(gen, 2, 2, Lq, Lk, 8)
    shifted = rel_attention_scores(q, k, r, u, v)
    gathered = rel_attention_scores_gather(q, k, r, u, v)
    torch.testing.assert_close(gathered, shifted)


def test_masked_region_is_minus_inf_and_softmax_ignores_it(gen) -> None:
    Lq, Lk = 4, 7
    q, k, r, u, v = _inputs(gen, 1, 2, Lq, Lk, 4)
    scores = rel_attention_scores(q, k, r, u, v)
    future = ~transformer_xl_mask(Lq, Lk)
    assert future.any()
    assert torch.isneginf(scores[..., future]).all()
    assert torch.isfinite(scores[..., ~future]).all()
    assert (scores.softmax(-1)[..., future] == 0).all()


def test_unmasked_shift_would_change_attention(gen) -> None:
    """Unmasked, the garbage entries get softmax weight: the mask is mandatory."""
    Lq, Lk, D = 5, 5, 4
    q, k, r, u, v = _inputs(gen, 1, 2, Lq, Lk, D)
    content = (q + u[None, :, None]) @ k.transpose(-2, -1)
    position = rel_shift(torch.einsum("bhqd,hkd->bhqk", q + v[None, :, None], r))
    unmasked = ((content + position) / math.sqrt(D)).softmax(-1)
    masked = rel_attention_scores(q, k, r, u, v).softmax(-1)
    assert (unmasked - masked).abs().max() > 1e-2


def test_u_and_v_terms_matter(gen) -> None:
    q, k, r, u, v = _inputs(gen, 1, 2, 3, 5, 4)
    base = rel_attention_scores(q, k, r, u, v)
    finite = torch.isfinite(base)
    for changed in (
        rel_attention_scores(q, k, r, torch.zeros_like(u), v),
        rel_attention_scores(q, k, r, u, torch.zeros_like(v)),
    ):
        assert (changed[finite] - base[finite]).abs().max() > 1e-3


def test_relative_sinusoidal_embedding_loop() -> None:
    k_len, d = 6, 8
    got = relative_sinusoidal_embedding(k_len, d)
    assert got.shape == (k_len, d) and got.dtype == torch.float32
    for c in range(k_len):
        t = k_len - 1 - c
        for i in range(d // 2):
            freq = 10000.0 ** (-2 * i / d)
            assert math.isclose(got[c, i], math.sin(t * freq), abs_tol=1e-6)
            assert math.isclose(got[c, d // 2 + i], math.cos(t * freq), abs_tol=1e-6)


def test_relative_sinusoidal_embedding_clamp_len() -> None:
    full = relative_sinusoidal_embedding(10, 6)
    clamped = relative_sinusoidal_embedding(10, 6, clamp_len=3)
    # distances 9..3 (rows 0..6) all become distance 3 (row 6 of the full table)
    assert torch.equal(clamped[:7], full[6].expand(7, -1))
    assert torch.equal(clamped[6:], full[6:])
    assert torch.equal(relative_sinusoidal_embedding(10, 6, clamp_len=20), full)


def _layer(mem_len: int, clamp_len: int | None = None) -> RelMultiHeadAttention:
    torch.manual_seed(0)
    layer = RelMultiHeadAttention(16, 4, mem_len=mem_len, clamp_len=clamp_len)
    with torch.no_grad():  # make u, v large enough that the test sees them
        layer.u.normal_()
        layer.v.normal_()
    return layer.double()


def test_layer_equals_functional_composition(gen) -> None:
    layer = _layer(mem_len=0)
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    out, mems = layer(x)
    q, k, v = layer.qkv(x).view(2, 5, 3, 4, 4).permute(2, 0, 3, 1, 4)
    pos = relative_sinusoidal_embedding(5, 16, dtype=torch.float64)
    r = layer.r_proj(pos).view(5, 4, 4).transpose(0, 1)
    weights = four_terms_loop(q, k, r, layer.u, layer.v).softmax(-1)
    want = layer.out((weights @ v).transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(out, want)
    assert mems.shape == (2, 0, 16)


def test_two_segments_with_memory_equal_the_concatenation(gen) -> None:
    layer = _layer(mem_len=6)
    x = torch.randn(2, 12, 16, generator=gen, dtype=torch.float64)
    full, _ = layer(x)  # causal over all 12 positions
    out1, mems = layer(x[:, :6])
    out2, mems2 = layer(x[:, 6:], mems)
    torch.testing.assert_close(torch.cat([out1, out2], 1), full)
    assert torch.equal(mems, x[:, :6]) and torch.equal(mems2, x[:, 6:])


def test_three_segments_equal_banded_window(gen) -> None:
    """With mem_len = S, a query of segment 3 sees segment 2 and its own past only."""
    S = 4
    layer = _layer(mem_len=S, clamp_len=5)
    x = torch.randn(1, 3 * S, 16, generator=gen, dtype=torch.float64)
    outs, mems = [], None
    for s in range(3):
        out, mems = layer(x[:, s * S : (s + 1) * S], mems)
        outs.append(out)
    segment = torch.arange(3 * S) // S
    window = segment[None, :] >= segment[:, None] - 1  # previous segment or later
    full, _ = layer(x, attn_mask=window)
    torch.testing.assert_close(torch.cat(outs, 1), full)
    plain, _ = layer(x)  # without the window the last segment sees further back
    assert (plain[:, 2 * S :] - full[:, 2 * S :]).abs().max() > 1e-4


def test_memory_is_detached_and_capped(gen) -> None:
    layer = RelMultiHeadAttention(8, 2, mem_len=3)
    x1 = torch.randn(1, 5, 8, generator=gen, requires_grad=True)
    _, mems = layer(x1)
    assert mems.shape == (1, 3, 8) and not mems.requires_grad
    out2, mems2 = layer(torch.randn(1, 2, 8, generator=gen), mems)
    assert mems2.shape == (1, 3, 8)
    assert torch.equal(mems2[:, :1], mems[:, 2:])
    out2.sum().backward()
    assert x1.grad is None


def test_layer_clamp_len_beyond_length_changes_nothing(gen) -> None:
    x = torch.randn(1, 6, 16, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(_layer(0, clamp_len=50)(x)[0], _layer(0)(x)[0])
    assert (_layer(0, clamp_len=1)(x)[0] - _layer(0)(x)[0]).abs().max() > 1e-6


@pytest.mark.parametrize(
    "q_len,k_len", [(1, 1), (1, 6), (2, 3), (3, 5), (4, 4), (5, 12)]
)
def test_rel_shift_bidirectional_equals_index_formula(gen, q_len, k_len) -> None:
    """out[..., i, j] = x[..., i, j + q_len - 1 - i] for EVERY entry (no mask)."""
    from course_lib import rel_shift_bidirectional

    x = torch.randn(2, 3, q_len, k_len + q_len - 1, generator=gen)
    out = rel_shift_bidirectional(x)
    assert out.shape == (2, 3, q_len, k_len)
    for i in range(q_len):
        for j in range(k_len):
            assert torch.equal(out[..., i, j], x[..., i, j + q_len - 1 - i])


@pytest.mark.parametrize("q_len,k_len", [(2, 3), (3, 7), (4, 4)])
def test_rel_shift_bidirectional_holds_signed_distances(q_len, k_len) -> None:
    """Chapter 7: with L_k + L_q - 1 columns every entry is the distance i' - j, and the
    causal rel_shift of the same wide input agrees on its first k_len columns."""
    from course_lib import rel_shift, rel_shift_bidirectional

    width = k_len + q_len - 1
    x = (k_len - 1 - torch.arange(width)).float().expand(q_len, width).clone()
    query_pos = torch.arange(q_len)[:, None] + k_len - q_len
    want = (query_pos - torch.arange(k_len)[None, :]).float()
    assert torch.equal(rel_shift_bidirectional(x), want)
    assert torch.equal(rel_shift(x)[..., :k_len], want)


def test_rel_shift_bidirectional_rejects_a_too_narrow_input() -> None:
    from course_lib import rel_shift_bidirectional

    with pytest.raises(ValueError, match="k_len would be"):
        rel_shift_bidirectional(torch.zeros(4, 5))  # k_len = 2 < q_len = 4
