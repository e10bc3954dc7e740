"""The fast paths equal the readable reference forms the book explains.

RoPE: ``RotaryEmbedding`` (cached complex or ``addcmul_`` factors, rotate-half in
blocks of positions) vs ``apply_rope``.
ALiBi: ``alibi_attention`` (cached mask, query blocks) and ``alibi_flex_attention``
against attention with the ``alibi_bias`` added. Transformer-XL: the fused
``rel_attention_scores`` against the index gather and the paper's sum, pair by pair.
Shaw and T5: the cached grids against fresh ones. Each in float32 and float64, both
conventions where there are two, several shapes, positions with offsets, gradients.
"""

from __future__ import annotations

import math
import shutil
import warnings

import pytest
import torch
import torch.nn.functional as F

from course_lib import (
    RotaryEmbedding,
    T5RelativeBias,
    alibi_attention,
    alibi_bias,
    alibi_flex_attention,
    apply_rope,
    rel_attention_scores,
    rel_attention_scores_gather,
    relative_position_index,
    scaled_dot_product_attention,
    shaw_relative_attention,
    t5_relative_position_bucket,
)
from course_lib import alibi as alibi_module
from course_lib import relative as relative_module
from course_lib import rope as rope_module
from course_lib.rope import _rotate, _rotate_cached, _writable_directly

CONVENTIONS = ["interleaved", "half"]
DTYPES = [torch.float32, torch.float64]


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to rounding: a few ulps of the dtype (torch's default tolerances)."""
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected)


# --------------------------------------------------------------------------- RoPE


def _positions(kind: str, shape: tuple[int, ...]) -> torch.Tensor | None:
    seq = shape[-2]
    if kind == "default":
        return None
    if kind == "offset":  # decoding after 1000 cached tokens
        return torch.arange(1000, 1000 + seq)
    if kind == "shuffled":
        return torch.randperm(seq, generator=torch.Generator().manual_seed(1)) * 7
    # "batched": left padding, one row of positions per sequence, (batch, 1, seq)
    per_row = torch.stack([torch.arange(seq), (torch.arange(seq) - 2).clamp(min=0)])
    return per_row[:, None, :]


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("shape", "positions"),
    [
        (shape, kind)
        for shape in [(2, 3, 7, 8), (2, 4, 33, 64), (5, 2)]
        for kind in ["default", "offset", "shuffled"]
    ]
    + [((2, 3, 7, 8), "batched"), ((2, 1, 5, 64), "batched")],
)
def test_rotary_embedding_equals_apply_rope(gen, convention, dtype, shape, positions):
    x = torch.randn(*shape, generator=gen, dtype=dtype)
    pos = _positions(positions, shape)
    rope = RotaryEmbedding(shape[-1], convention=convention, max_seq_len=4)
    expected = apply_rope(x, pos, convention=convention)
    close(rope(x, pos), expected)
    close(rope(x, pos), expected)  # second call: factors from the cache


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_fast_rotation_equals_reference_rotation(gen, convention):
    """_rotate_cached with factors built here equals _rotate with cos and sin."""
    x = torch.randn(3, 2, 5, 12, generator=gen, dtype=torch.float64)
    angles = torch.rand(5, 6, generator=gen, dtype=torch.float64) * 100
    cos, sin = angles.cos(), angles.sin()
    if convention == "interleaved":
        factors = (torch.polar(torch.ones_like(angles), angles),)
    else:
        factors = (torch.cat((cos, cos), dim=-1), sin)
    close(_rotate_cached(x, factors, convention), _rotate(x, cos, sin, convention))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_rotary_embedding_on_strided_inputs(gen, convention):
    # Heads split from (batch, seq, heads, d) by a transpose: not contiguous.
    x = torch.randn(2, 9, 3, 16, generator=gen).transpose(1, 2)  # (2, 3, 9, 16)
    rope = RotaryEmbedding(16, convention=convention)
    close(rope(x), apply_rope(x.contiguous(), convention=convention))
    # Partial rotation with an odd head_dim: the rotated slice has odd strides.
    y = torch.randn(2, 5, 7, generator=gen, dtype=torch.float64)
    partial = RotaryEmbedding(7, rotary_dim=4, convention=convention)(y)
    close(partial[..., :4], apply_rope(y[..., :4], convention=convention))
    assert torch.equal(partial[..., 4:], y[..., 4:])


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_rotary_embedding_gradient_equals_reference(gen, convention):
    x = torch.randn(2, 3, 6, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(2, 3, 6, 8, generator=gen, dtype=torch.float64)
    positions = torch.arange(5, 11)
    rope = RotaryEmbedding(8, convention=convention)
    grads = []
    for fn in (
        lambda t: rope(t, positions),
        lambda t: apply_rope(t, positions, convention=convention),
    ):
        leaf = x.clone().requires_grad_(True)
        (fn(leaf) * w).sum().backward()
        grads.append(leaf.grad)
    close(grads[0], grads[1])
    # The gradient of a rotation is the inverse rotation of the upstream gradient.
    close(grads[0], apply_rope(w, -positions, convention=convention))


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("dtype", [*DTYPES, torch.bfloat16])
def test_rotary_embedding_writes_into_out(gen, convention, dtype):
    x = torch.randn(2, 3, 6, 8, generator=gen).to(dtype)
    positions = torch.arange(40, 46)
    rope = RotaryEmbedding(8, convention=convention)
    expected = rope(x, positions)
    close(expected, apply_rope(x, positions, convention=convention))
    # A fresh buffer, then x itself (in place), then a slice of a key cache.
    out = torch.full_like(x, math.nan)
    assert rope(x, positions, out=out) is out
    close(out, expected)
    inplace = x.clone()
    assert rope(inplace, positions, out=inplace) is inplace
    close(inplace, expected)
    cache = torch.zeros(2, 3, 50, 8, dtype=dtype)
    rope(x, positions, out=cache[:, :, 40:46])
    close(cache[:, :, 40:46], expected)
    assert not cache[:, :, :40].any() and not cache[:, :, 46:].any()


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_out_is_written_directly_when_safe(gen, convention):
    """No temporary where one is not needed; never a direct write that would read
    already overwritten input (rotate-half reads both halves after writing)."""
    x = torch.randn(2, 3, 6, 8, generator=gen)
    cache = torch.zeros(2, 3, 50, 8)
    assert _writable_directly(torch.empty_like(x), x, convention)
    assert _writable_directly(cache[:, :, 40:46], x, convention)
    assert _writable_directly(x, x, convention) == (convention == "interleaved")
    assert not _writable_directly(x[:, :, 1:], x[:, :, :-1], convention)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_rotary_embedding_out_with_partial_rotation(gen, convention):
    x = torch.randn(2, 5, 7, generator=gen, dtype=torch.float64)  # odd head_dim
    rope = RotaryEmbedding(7, rotary_dim=4, convention=convention)
    out = torch.empty_like(x)
    rope(x, out=out)
    close(out, rope(x))
    inplace = x.clone()
    rope(inplace, out=inplace)
    close(inplace, rope(x))


def test_rotary_embedding_out_is_checked(gen):
    rope = RotaryEmbedding(8)
    x = torch.randn(1, 2, 4, 8, generator=gen)
    for bad, words in [
        (torch.empty(1, 2, 5, 8), ["out", "(1, 2, 4, 8)", "(1, 2, 5, 8)"]),
        (torch.empty(1, 2, 4, 8, dtype=torch.float64), ["out", "torch.float64"]),
        ([0.0], ["out", "torch.Tensor"]),
    ]:
        with pytest.raises((ValueError, TypeError)) as err:
            rope(x, out=bad)
        assert "RotaryEmbedding.forward" in str(err.value)
        assert all(w in str(err.value) for w in words), str(err.value)
    with pytest.raises(ValueError, match="RotaryEmbedding.forward: out is for"):
        rope(x.requires_grad_(True), out=torch.empty_like(x))
    with torch.no_grad():  # without autograd, out is fine
        rope(x, out=torch.empty_like(x))


def test_rotary_factors_are_built_once_and_rebuilt_when_the_cache_grows(gen):
    rope = RotaryEmbedding(8, max_seq_len=16)
    x = torch.randn(1, 2, 10, 8, generator=gen)
    rope(x)
    factors = rope._cached_factors(torch.float32, x.device)
    rope(x)
    assert rope._cached_factors(torch.float32, x.device) is factors
    assert factors[0].dtype == torch.complex64 and factors[0].shape == (16, 4)
    long = torch.randn(1, 2, 40, 8, generator=gen)
    close(rope(long), apply_rope(long))  # beyond the first cache: regrown
    assert rope._cached_factors(torch.float32, x.device)[0].shape[0] >= 40
    half = RotaryEmbedding(8, convention="half", max_seq_len=16)
    cos2, sin = half._cached_factors(torch.float64, x.device)
    assert cos2.shape == (16, 8) and sin.shape == (16, 4)
    assert torch.equal(cos2[:, :4], cos2[:, 4:])


def _half_error_bound(x, cos2, sin):
    """How far two correct float evaluations of the rotate-half rotation may differ.

    Each output is ``x1 cos - x2 sin`` (or ``x2 cos + x1 sin``) from at most three
    roundings (two products and the sum, or fewer where the CPU fuses them into an
    FMA, and which happens may depend on where a vector loop's tail falls). With unit
    roundoff ``u = eps/2`` one evaluation is within ``2u (1 + u) (|x1 cos| + |x2
    sin|)`` of the exact value, so two evaluations differ by at most twice that:
    ``2 eps (1 + eps) (|x1 cos| + |x2 sin|)``.
    """
    half = x.shape[-1] // 2
    cos = cos2[..., :half]
    x1, x2 = x[..., :half].abs(), x[..., half:].abs()
    size = torch.cat(
        (x1 * cos.abs() + x2 * sin.abs(), x2 * cos.abs() + x1 * sin.abs()), -1
    )
    eps = torch.finfo(x.dtype).eps
    return 2 * eps * (1 + eps) * size


def _one_block(monkeypatch):
    monkeypatch.setattr(rope_module, "BLOCK_BYTES_PER_THREAD", 1 << 40)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("positions", ["default", "offset", "batched"])
def test_half_rotation_in_blocks_equals_one_pass(gen, monkeypatch, dtype, positions):
    """Blocks of 3 positions (a ragged last block of 2 for seq=11) give the rotation
    of one pass over all positions, and the exact rotation with the same tables."""
    shape = (2, 3, 11, 16)
    x = torch.randn(*shape, generator=gen, dtype=dtype)
    pos = _positions(positions, shape)
    rope = RotaryEmbedding(16, convention="half", max_seq_len=4)
    rope(x, pos)  # grow the cache
    cos2, sin = rope._cached_factors(dtype, x.device)
    idx = torch.arange(11) if pos is None else pos
    cos2, sin = cos2[idx], sin[idx]  # (..., 11, 16), (..., 11, 8)
    per_position = 2 * 3 * 16 * x.element_size()
    budget = (3 * per_position) // torch.get_num_threads() + 1  # 3 positions a block
    monkeypatch.setattr(rope_module, "BLOCK_BYTES_PER_THREAD", budget)
    monkeypatch.setattr(rope_module, "MAX_BLOCKS", 4)
    assert rope_module._half_block(x) == 3
    blocked = rope(x, pos)
    out = torch.full_like(x, math.nan)
    assert rope(x, pos, out=out) is out  # out= goes through the blocks too
    _one_block(monkeypatch)
    whole = rope(x, pos)
    bound = _half_error_bound(x, cos2, sin)
    assert ((blocked - whole).abs() <= bound).all()
    assert ((out - whole).abs() <= bound).all()
    if dtype == torch.float32:  # products of float32 are exact in float64
        exact = _rotate_cached(x.double(), (cos2.double(), sin.double()), "half")
        assert ((blocked.double() - exact).abs() <= bound.double() / 2).all()
    close(blocked, apply_rope(x, pos, convention="half"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seq", [1, 4, 5, 7])
def test_half_rotation_blocks_on_strided_inputs_out_and_in_place(
    gen, monkeypatch, dtype, seq
):
    """Blocks of 2 positions (one block, whole blocks, a ragged last block of one)
    on a non-contiguous x (transposed, a slice of wider rows), written fresh, into
    a slice of a key cache and in place: at every block boundary the rotation of
    one pass within the rounding bound, and nothing outside the slice written."""
    shape = (2, 3, seq, 12)
    wide = torch.randn(2, seq, 3, 16, generator=gen, dtype=dtype)
    x = wide.transpose(1, 2)[..., 2:14]  # heads split by a transpose, rows of 16
    assert not x.is_contiguous()
    rope = RotaryEmbedding(12, convention="half", max_seq_len=2)
    pos = torch.arange(3, 3 + seq)
    rope(x, pos)  # grow the cache
    cos2, sin = (f[pos] for f in rope._cached_factors(dtype, x.device))
    per_position = 2 * 3 * 12 * x.element_size()
    budget = (2 * per_position) // torch.get_num_threads() + 1  # 2 positions a block
    monkeypatch.setattr(rope_module, "BLOCK_BYTES_PER_THREAD", budget)
    monkeypatch.setattr(rope_module, "MAX_BLOCKS", 4)
    assert rope_module._half_block(x) == 2
    fresh = rope(x, pos)
    cache = torch.zeros(2, 3, seq + 4, 12, dtype=dtype)
    rope(x, pos, out=cache[:, :, 2 : 2 + seq])
    inplace = x.clone()
    assert rope(inplace, pos, out=inplace) is inplace
    _one_block(monkeypatch)
    whole = rope(x.contiguous(), pos)
    bound = _half_error_bound(x, cos2, sin)
    for got in (fresh, cache[:, :, 2 : 2 + seq], inplace):
        assert got.shape == shape
        assert ((got - whole).abs() <= bound).all()
    assert not cache[:, :, :2].any() and not cache[:, :, 2 + seq :].any()
    close(fresh, apply_rope(x, pos, convention="half"))


def test_half_rotation_blocks_are_whole_positions(monkeypatch):
    """The block size follows the bytes per position (all batch rows and heads of
    a position share its table row): one position per block when a single position
    is over the budget, all of them when everything fits or when it would take more
    than MAX_BLOCKS blocks."""
    x = torch.randn(2, 4, 5, 8)  # 2 * 4 * 8 * 4 = 256 bytes per position
    threads = torch.get_num_threads()
    monkeypatch.setattr(rope_module, "MAX_BLOCKS", 5)
    for budget, step in [(1, 1), (256 * 2, 2 * threads), (1 << 40, None)]:
        monkeypatch.setattr(rope_module, "BLOCK_BYTES_PER_THREAD", budget)
        if step is None:
            assert rope_module._half_block(x) >= 5
        else:
            assert rope_module._half_block(x) == step
    # Five blocks of one position are more than MAX_BLOCKS = 4: one pass instead,
    # unless a single thread does all the work (no thread waits for another).
    monkeypatch.setattr(rope_module, "MAX_BLOCKS", 4)
    monkeypatch.setattr(rope_module, "BLOCK_BYTES_PER_THREAD", 1)
    for threads, step in [(2, 5), (1, 1)]:
        monkeypatch.setattr(rope_module.torch, "get_num_threads", lambda t=threads: t)
        assert rope_module._half_block(x) == step


@pytest.mark.parametrize("blocks", ["several", "one"])
def test_half_rotation_gradients_in_blocks(gen, monkeypatch, blocks):
    """First and second derivatives of the blocked rotation (float64, finite
    differences), and the first derivative is the inverse rotation (derived: the
    rotation is orthogonal, so its transpose rotates by the opposite angles)."""
    if blocks == "several":  # six blocks of one position
        monkeypatch.setattr(rope_module, "BLOCK_BYTES_PER_THREAD", 1)
        monkeypatch.setattr(rope_module, "MAX_BLOCKS", 6)
    rope = RotaryEmbedding(8, convention="half")
    positions = torch.arange(3, 9)
    x = torch.randn(2, 1, 6, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rope(t, positions), (x,))
    assert torch.autograd.gradgradcheck(lambda t: rope(t, positions), (x,))
    w = torch.randn(2, 1, 6, 8, generator=gen, dtype=torch.float64)
    (grad,) = torch.autograd.grad((rope(x, positions) * w).sum(), x)
    close(grad, apply_rope(w, -positions, convention="half"))


# -------------------------------------------------------------------------- ALiBi


def _alibi_reference(q, k, v, causal):
    bias = alibi_bias(q.shape[1], q.shape[2], k.shape[2], causal=causal)
    return scaled_dot_product_attention(q, k, v, bias=bias.to(q.dtype))[0]


def _qkv(gen, q_len, k_len, dtype, batch=2, heads=3, dim=8):
    q = torch.randn(batch, heads, q_len, dim, generator=gen, dtype=dtype)
    k = torch.randn(batch, heads, k_len, dim, generator=gen, dtype=dtype)
    v = torch.randn(batch, heads, k_len, dim, generator=gen, dtype=dtype)
    return q, k, v


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 queries, so small inputs span several blocks; a fresh cache."""
    monkeypatch.setattr(alibi_module, "QUERY_BLOCK", 4)
    monkeypatch.setattr(alibi_module, "_MASK_CACHE", type(alibi_module._MASK_CACHE)())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lengths", [(1, 1), (5, 5), (9, 9), (3, 11), (10, 13)])
def test_alibi_attention_equals_reference(gen, small_blocks, dtype, causal, lengths):
    q, k, v = _qkv(gen, *lengths, dtype)
    expected = _alibi_reference(q, k, v, causal)
    close(alibi_attention(q, k, v, causal=causal), expected)
    close(alibi_attention(q, k, v, causal=causal), expected)  # from the cache


def test_alibi_attention_blocks_cover_the_queries_and_only_visible_keys(small_blocks):
    blocks = alibi_module._alibi_mask_blocks(2, 10, 13, True, torch.float32, "cpu")
    assert [(a, b, keys) for a, b, keys, _ in blocks] == [
        (0, 4, 7),
        (4, 8, 11),
        (8, 10, 13),
    ]
    full = alibi_bias(2, 10, 13, causal=True)
    for start, stop, keys, mask in blocks:
        assert mask.shape == (1, 2, stop - start, keys) and mask.is_contiguous()
        assert torch.equal(mask[0], full[:, start:stop, :keys])
        assert torch.isinf(full[:, start:stop, keys:]).all()  # what a block skips


def test_alibi_attention_at_the_default_block_size(gen):
    q, k, v = _qkv(gen, 300, 300, torch.float32, batch=1, heads=2)
    assert len(alibi_module._alibi_mask_blocks(2, 300, 300, True, q.dtype, "cpu")) == 2
    close(alibi_attention(q, k, v), _alibi_reference(q, k, v, True))


def test_alibi_mask_cache_reuses_and_stays_bounded(gen, small_blocks, monkeypatch):
    q, k, v = _qkv(gen, 6, 6, torch.float32)
    alibi_attention(q, k, v)
    (entry,) = alibi_module._MASK_CACHE.values()
    alibi_attention(q, k, v)
    (again,) = alibi_module._MASK_CACHE.values()
    assert again is entry
    # Five masks of 18 float32 each under a budget of three: least recently used go.
    alibi_module._MASK_CACHE.clear()
    monkeypatch.setattr(alibi_module, "MASK_CACHE_BYTES", 3 * 18 * 4)
    build = alibi_module._alibi_mask_blocks
    for heads, k_len in [(1, 18), (2, 9), (3, 6), (6, 3), (9, 2)]:
        build(heads, 1, k_len, True, torch.float32, torch.device("cpu"))
    assert [key[0] for key in alibi_module._MASK_CACHE] == [3, 6, 9]
    build(3, 1, 6, True, torch.float32, torch.device("cpu"))  # used again: newest
    build(1, 1, 18, True, torch.float32, torch.device("cpu"))  # rebuilt: drops 6
    assert [key[0] for key in alibi_module._MASK_CACHE] == [9, 3, 1]
    assert alibi_module._cache_bytes() == 3 * 18 * 4
    # A mask larger than the whole budget is built, not kept, and evicts nothing.
    big = build(4, 1, 64, True, torch.float32, torch.device("cpu"))
    assert big[0][3].shape == (1, 4, 1, 64)
    assert [key[0] for key in alibi_module._MASK_CACHE] == [9, 3, 1]


def test_alibi_mask_made_in_inference_mode_serves_training(gen, small_blocks):
    q, k, v = _qkv(gen, 6, 6, torch.float64)
    with torch.inference_mode():
        alibi_attention(q, k, v)
    leaf = q.clone().requires_grad_(True)
    alibi_attention(leaf, k, v).sum().backward()  # the cached mask is not an
    reference = q.clone().requires_grad_(True)  # inference tensor
    _alibi_reference(reference, k, v, True).sum().backward()
    close(leaf.grad, reference.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lengths", [(6, 6), (2, 7)])
def test_alibi_flex_attention_equals_reference(gen, dtype, causal, lengths):
    q, k, v = _qkv(gen, *lengths, dtype)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without torch.compile.*")
        out = alibi_flex_attention(q, k, v, causal=causal, compiled=False)
    close(out, _alibi_reference(q, k, v, causal))


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="torch.compile on CPU needs a C++ compiler",
)
def test_compiled_alibi_flex_attention_equals_reference(gen):
    q, k, v = _qkv(gen, 128, 128, torch.float32, batch=1, heads=2, dim=16)
    out = alibi_flex_attention(q, k, v, causal=True)
    torch.testing.assert_close(out, _alibi_reference(q, k, v, True))


def test_sdpa_3d_and_4d_masks_agree(gen):
    """The 4-D mask alibi_attention passes computes what the 3-D (H, S, S) one does."""
    q, k, v = _qkv(gen, 7, 7, torch.float32)
    bias = alibi_bias(3, 7, causal=True)  # (H, S, S)
    out3 = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    out4 = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
    close(out4, out3)
    close(out4, _alibi_reference(q, k, v, True))


# ------------------------------------------------------------------ Transformer-XL


def _xl_inputs(gen, batch, heads, q_len, k_len, dim, dtype):
    shapes = [
        (batch, heads, q_len, dim),
        (batch, heads, k_len, dim),
        (heads, k_len, dim),
        (heads, dim),
        (heads, dim),
    ]
    return [torch.randn(*s, generator=gen, dtype=dtype) for s in shapes]


def _xl_pairwise(q, k, r, u, v):
    """Dai et al. eq. (3), one (query, key) pair at a time (vectorised over heads)."""
    batch, heads, q_len, dim = q.shape
    k_len = k.shape[2]
    out = torch.full((batch, heads, q_len, k_len), -math.inf, dtype=q.dtype)
    for i in range(q_len):
        pos = i + k_len - q_len
        for j in range(pos + 1):
            r_ij = r[:, k_len - 1 - (pos - j)]  # (H, D): distance pos - j
            score = ((q[:, :, i] + u) * k[:, :, j]).sum(-1)
            score = score + ((q[:, :, i] + v) * r_ij).sum(-1)
            out[:, :, i, j] = score / math.sqrt(dim)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "sizes", [(1, 1, 1, 1), (2, 3, 4, 4), (2, 2, 3, 8), (1, 4, 6, 9)]
)
def test_rel_attention_scores_equals_gather_and_pairwise(gen, dtype, sizes):
    batch, heads, q_len, k_len = sizes
    args = _xl_inputs(gen, batch, heads, q_len, k_len, 8, dtype)
    fast = rel_attention_scores(*args)
    close(fast, rel_attention_scores_gather(*args))
    close(fast, _xl_pairwise(*args))


def test_rel_attention_scores_accepts_strided_keys(gen):
    q, k, r, u, v = _xl_inputs(gen, 2, 3, 4, 6, 8, torch.float64)
    k_strided = k.transpose(1, 2).contiguous().transpose(1, 2)  # same values
    assert not k_strided.is_contiguous()
    close(rel_attention_scores(q, k_strided, r, u, v), _xl_pairwise(q, k, r, u, v))


def test_rel_attention_scores_gradients_equal_gather(gen):
    args = _xl_inputs(gen, 2, 2, 3, 5, 4, torch.float64)
    mask = torch.isfinite(rel_attention_scores_gather(*args))
    weights = torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    grads = []
    for fn in (rel_attention_scores, rel_attention_scores_gather):
        leaves = [a.clone().requires_grad_(True) for a in args]
        (fn(*leaves).masked_fill(~mask, 0.0) * weights).sum().backward()
        grads.append([leaf.grad for leaf in leaves])
    for fast, reference in zip(*grads, strict=True):
        close(fast, reference)


# -------------------------------------------------------------------- Shaw and T5


def test_shaw_index_is_cached_per_lengths_and_equals_a_fresh_one(gen):
    relative_module._cached_relative_index.cache_clear()
    q, k, v = _qkv(gen, 3, 7, torch.float64)
    a_k, a_v = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    out, _ = shaw_relative_attention(q, k, v, a_k, a_v, 2)
    out_again, _ = shaw_relative_attention(q, k, v, a_k, a_v, 2)
    info = relative_module._cached_relative_index.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    cached = relative_module._cached_relative_index(3, 7, 2, q.device)
    assert torch.equal(cached, relative_position_index(3, 7, 2))
    assert torch.equal(out, out_again)
    # Independent: the paper's sum with the table rows looked up pair by pair.
    idx = relative_position_index(3, 7, 2)
    scores = q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, a_k[idx])
    weights = (scores / math.sqrt(8)).softmax(-1)
    expected = weights @ v + torch.einsum("bhij,ijd->bhid", weights, a_v[idx])
    close(out, expected)


def test_t5_bucket_grid_is_built_once_and_sliced(gen):
    bias = T5RelativeBias(2, num_buckets=8, max_distance=16, bidirectional=False)
    big = bias.bucket_grid(12)
    storage = bias.buckets.data_ptr()
    small = bias.bucket_grid(3, 9)
    assert bias.buckets.data_ptr() == storage  # no new grid for a shorter request
    query_pos = torch.arange(3)[:, None] + 6  # queries are the last 3 of 9
    fresh = t5_relative_position_bucket(
        torch.arange(9)[None, :] - query_pos,
        bidirectional=False,
        num_buckets=8,
        max_distance=16,
    )
    assert torch.equal(small, fresh)
    assert big.shape == (12, 12)
