"""ALiBi: attention with linear biases (Press, Smith and Lewis, 2022).

ALiBi adds no vector to the token embeddings. Each head ``h`` penalises the attention
score of query ``i`` and key ``j`` in proportion to their distance:

.. math::

    \\mathrm{score}_h(i, j) = \\frac{q_i \\cdot k_j}{\\sqrt{d}} - m_h \\, |i - j|,

with fixed head slopes ``m_h`` forming a geometric sequence. The bias is added after the
``1/sqrt(d)`` scaling and is not itself scaled. Queries are the *last* ``q_len`` of the
``k_len`` key positions, so the same function serves KV-cache decoding.

Reference: O. Press, N. A. Smith, M. Lewis, "Train Short, Test Long: Attention with
Linear Biases Enables Input Length Extrapolation", ICLR 2022.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from ._flex import causal_block_mask, compiled_flex_attention
from ._validate import (
    fail,
    require_positive_int,
    require_qkv,
)

__all__ = [
    "ALiBi",
    "alibi_attention",
    "alibi_bias",
    "alibi_flex_attention",
    "alibi_slopes",
]


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The ALiBi head slopes for any number of heads (float32).

    For ``n`` a power of two the slopes are the geometric sequence

    .. math::

        m_h = 2^{-8h/n}, \\qquad h = 1, \\dots, n.

    Otherwise, with ``c`` the largest power of two below ``n``, the first ``c`` slopes
    are those of ``c`` heads and the remaining ``n - c`` are every other slope of the
    ``2c``-head sequence, starting with the first: :math:`2^{-8(2j+1)/(2c)}`,
    ``j = 0, ..., n - c - 1``.

    Args:
        n_heads: number of attention heads, at least 1.

    Returns:
        ``(n_heads,)`` float32 tensor of slopes, largest first within each part.

    Paper: Press et al. 2022, section 3 (p. 5), for powers of two; the paper's text
    uses :math:`2^{-8h/n}` for every ``n``, the rule above for other ``n`` is the
    authors' code (``get_slopes``), which Bloom copies and this library follows.

    >>> alibi_slopes(8)
    tensor([0.5000, 0.2500, 0.1250, 0.0625, 0.0312, 0.0156, 0.0078, 0.0039])
    >>> (-alibi_slopes(12).log2()).tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 0.5, 1.5, 2.5, 3.5]
    """
    n = require_positive_int("alibi_slopes", "n_heads", n_heads)
    closest = 1 << (n.bit_length() - 1)  # largest power of two <= n
    base = torch.arange(1, closest + 1, dtype=torch.float64) * (8.0 / closest)
    extra = torch.arange(n - closest, dtype=torch.float64) * 2 + 1
    exponents = torch.cat([base, extra * (8.0 / (2 * closest))])  # (n_heads,)
    return torch.pow(2.0, -exponents).to(torch.float32)


def _query_offset(fn: str, q_len: object, k_len: object) -> tuple[int, int, int]:
    q = require_positive_int(fn, "q_len", q_len)
    k = q if k_len is None else require_positive_int(fn, "k_len", k_len)
    if k < q:
        fail(
            fn,
            f"k_len must be at least q_len (queries are the last q_len of the k_len "
            f"positions), got q_len={q} and k_len={k}",
        )
    return q, k, k - q


def alibi_bias(
    n_heads: int, q_len: int, k_len: int | None = None, *, causal: bool = False
) -> torch.Tensor:
    """The additive ALiBi bias ``-m_h |i - j|`` for every head, query and key.

    .. math::

        B_h[i, j] = -m_h \\, |(i + k_{len} - q_{len}) - j|

    Query ``i`` sits at absolute position ``i + k_len - q_len`` (queries are the last
    ``q_len`` of ``k_len`` positions, as in KV-cache decoding).

    Args:
        n_heads: number of heads (slopes from :func:`alibi_slopes`).
        q_len: number of queries, at least 1.
        k_len: number of keys, at least ``q_len``; defaults to ``q_len``.
        causal: if True, entries where the key comes after its query are ``-inf``.

    Returns:
        ``(n_heads, q_len, k_len)`` float32 bias, added to the scaled scores.

    Paper: Press et al. 2022, eq. in section 3 (written with ``-m (i - j)`` for the
    causal case; the symmetric ``|i - j|`` form extends it to bidirectional attention).

    >>> alibi_bias(1, 3)[0] * 256
    tensor([[ 0., -1., -2.],
            [-1.,  0., -1.],
            [-2., -1.,  0.]])
    >>> alibi_bias(2, 1, 3, causal=True)
    tensor([[[-0.1250, -0.0625,  0.0000]],
    <BLANKLINE>
            [[-0.0078, -0.0039,  0.0000]]])
    """
    fn = "alibi_bias"
    slopes = alibi_slopes(require_positive_int(fn, "n_heads", n_heads))
    q, k, offset = _query_offset(fn, q_len, k_len)
    query_pos = torch.arange(q) + offset  # (q_len,)
    distance = (query_pos[:, None] - torch.arange(k)[None, :]).abs()  # (q_len, k_len)
    bias = 0.0 - slopes[:, None, None] * distance  # (n_heads, q_len, k_len); +0 at i=j
    if causal:
        future = torch.arange(k)[None, :] > query_pos[:, None]  # (q_len, k_len)
        bias = bias.masked_fill(future, float("-inf"))
    return bias


class ALiBi(nn.Module):
    """ALiBi bias provider with a cache, shaped as a 4-D float mask for SDPA.

    The bias for the largest length built so far is kept as a non-persistent buffer
    ``(1, H, L, L)``; requests up to ``L`` keys are slices of it (queries last). A
    request for more keys rebuilds it at the new length, so for token-by-token
    decoding call the module once at the longest length first (a warm-up): every
    later step is then a view of the buffer.

    Args:
        n_heads: number of heads.
        causal: put ``-inf`` where a key follows its query.

    >>> alibi = ALiBi(4, causal=True)
    >>> alibi(2, 5).shape
    torch.Size([1, 4, 2, 5])
    >>> torch.equal(alibi(2, 5)[0], alibi_bias(4, 2, 5, causal=True))
    True
    """

    def __init__(self, n_heads: int, *, causal: bool = False) -> None:
        super().__init__()
        self.n_heads = require_positive_int("ALiBi", "n_heads", n_heads)
        self.causal = bool(causal)
        self.register_buffer(
            "bias", torch.empty(1, self.n_heads, 0, 0), persistent=False
        )

    def forward(self, q_len: int, k_len: int | None = None) -> torch.Tensor:
        """Return the bias ``(1, n_heads, q_len, k_len)`` (queries last)."""
        q, k, offset = _query_offset("ALiBi.forward", q_len, k_len)
        if self.bias.shape[-1] < k:
            full = alibi_bias(self.n_heads, k, causal=self.causal)  # (H, k, k)
            self.bias = full[None].to(self.bias.device)  # (1, H, k, k)
        return self.bias[:, :, offset : offset + q, :k]  # (1, H, q_len, k_len)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, causal={self.causal}"


# Mask blocks built by alibi_attention, most recently used last. Bounded in bytes: a
# model at a fixed length reuses one entry; token-by-token decoding makes small ones.
_MASK_CACHE: OrderedDict[tuple, tuple[tuple[int, int, int, torch.Tensor], ...]] = (
    OrderedDict()
)
MASK_CACHE_BYTES = 256 * 2**20
# Causal attention is cut into blocks of this many queries (see alibi_attention).
QUERY_BLOCK = 256


def _alibi_mask_blocks(
    n_heads: int,
    q_len: int,
    k_len: int,
    causal: bool,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[tuple[int, int, int, torch.Tensor], ...]:
    """SDPA float masks ``(1, H, stop - start, keys)``, one per block of queries.

    Each entry is ``(start, stop, keys, mask)``: queries ``start:stop`` attend to
    keys ``:keys``. Without ``causal`` there is one block with every key. Built once
    per shape, dtype and device and cached; the least recently used entries are
    dropped while the cache holds more than ``MASK_CACHE_BYTES``, and an entry larger
    than that is not kept (it is built again at every call).
    """
    key = (n_heads, q_len, k_len, causal, dtype, device)
    blocks = _MASK_CACHE.get(key)
    if blocks is not None:
        _MASK_CACHE.move_to_end(key)
        return blocks
    # A mask born under inference_mode could not be saved for a later backward pass.
    with torch.inference_mode(False):
        bias = alibi_bias(n_heads, q_len, k_len, causal=causal)  # (H, Lq, Lk)
        bias = bias.to(device=device, dtype=dtype)[None]  # (1, H, Lq, Lk)
        step = QUERY_BLOCK if causal else q_len
        offset = k_len - q_len  # query i sits at position i + offset
        entries = []
        for start in range(0, q_len, step):  # blocks of queries, not positions
            stop = min(start + step, q_len)
            keys = stop + offset  # keys the block's last query may see
            mask = bias[:, :, start:stop, :keys].clone()  # (1, H, stop-start, keys)
            entries.append((start, stop, keys, mask))
        blocks = tuple(entries)
    if sum(m.numel() * m.element_size() for *_, m in blocks) <= MASK_CACHE_BYTES:
        _MASK_CACHE[key] = blocks
        while _cache_bytes() > MASK_CACHE_BYTES:  # drop the least recently used
            _MASK_CACHE.popitem(last=False)
    return blocks


def _cache_bytes() -> int:
    return sum(
        m.numel() * m.element_size()
        for blocks in _MASK_CACHE.values()
        for *_, m in blocks
    )


def alibi_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True
) -> torch.Tensor:
    """Attention with ALiBi through PyTorch's ``scaled_dot_product_attention``.

    .. math::

        \\mathrm{out}_h = \\mathrm{softmax}\\Big(\\frac{Q_h K_h^\\top}{\\sqrt{d}}
        + B_h\\Big) V_h, \\qquad B_h = \\texttt{alibi\\_bias}(H, L_q, L_k)_h

    The bias is passed as a 4-D ``(1, H, L_q, L_k)`` float mask (a 3-D mask sends SDPA
    to its slow math backend), built once per shape, dtype and device and kept in a
    small cache (at most ``MASK_CACHE_BYTES`` in all), so repeated calls at one length
    cost only the attention. Queries are the last ``L_q`` of the ``L_k`` positions.

    With ``causal``, SDPA given a float mask would still compute every score the mask
    sets to ``-inf`` (it skips masked blocks only for ``is_causal=True``, which cannot
    carry a bias). So the queries are cut into blocks of ``QUERY_BLOCK`` and each block
    attends only to the keys up to its last query: about half the work is skipped.

    Args:
        q: ``(batch, heads, q_len, head_dim)`` queries.
        k: ``(batch, heads, k_len, head_dim)`` keys, ``k_len >= q_len``.
        v: ``(batch, heads, k_len, v_dim)`` values.
        causal: mask keys that come after their query (default True, as in the paper).

    Returns:
        ``(batch, heads, q_len, v_dim)`` attention output.

    Paper: Press et al. 2022.
    """
    n_heads, q_len, k_len = require_qkv("alibi_attention", q, k, v)
    blocks = _alibi_mask_blocks(n_heads, q_len, k_len, bool(causal), q.dtype, q.device)
    if len(blocks) == 1:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=blocks[0][3]
        )  # (B, H, Lq, Dv)
    outs = [
        F.scaled_dot_product_attention(
            q[:, :, start:stop], k[:, :, :keys], v[:, :, :keys], attn_mask=mask
        )  # (B, H, stop - start, Dv)
        for start, stop, keys, mask in blocks
    ]
    return torch.cat(outs, dim=2)  # (B, H, Lq, Dv)


def alibi_flex_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    compiled: bool = True,
) -> torch.Tensor:
    """ALiBi attention through ``flex_attention``: the bias is a ``score_mod``.

    .. math::

        s_h(i, j) = \\frac{q_i \\cdot k_j}{\\sqrt{d}} - m_h\\, |i' - j|, \\qquad
        i' = i + L_k - L_q

    No ``(H, L_q, L_k)`` bias exists in memory: the compiled kernel adds
    :math:`-m_h |i' - j|` to each score as it computes it, and with ``causal`` a block
    mask skips the blocks above the diagonal. Compilation (a C++ compiler on CPU)
    happens once per shape; for token-by-token decoding, where the shape changes at
    every step, use :func:`alibi_attention`.

    Args:
        q: ``(batch, heads, q_len, head_dim)`` queries (the last ``q_len`` positions).
        k: ``(batch, heads, k_len, head_dim)`` keys, ``k_len >= q_len``.
        v: ``(batch, heads, k_len, v_dim)`` values.
        causal: mask keys that come after their query.
        compiled: use ``torch.compile(flex_attention)``; False runs PyTorch's eager
            reference, which materialises the scores (for tests and tiny inputs).

    Returns:
        ``(batch, heads, q_len, v_dim)``, equal to :func:`alibi_attention` (tested).

    Paper: Press et al. 2022; FlexAttention: Dong et al. 2024.
    """
    from torch.nn.attention.flex_attention import flex_attention

    n_heads, q_len, k_len = require_qkv("alibi_flex_attention", q, k, v)
    offset = k_len - q_len
    slopes = alibi_slopes(n_heads).to(device=q.device, dtype=q.dtype)  # (H,)

    def alibi_score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx + offset - kv_idx).abs()

    block_mask = causal_block_mask(q_len, k_len, q.device) if causal else None
    attend = compiled_flex_attention() if compiled else flex_attention
    return attend(
        q, k, v, score_mod=alibi_score_mod, block_mask=block_mask
    )  # (B, H, Lq, Dv)
