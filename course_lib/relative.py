"""Relative position representations: Shaw et al. (2018) and the T5 bucketed bias.

**Shaw et al.** learn vectors for clipped relative distances ``j - i`` and add them to
the keys and values seen by each query:

.. math::

    e_{ij} = \\frac{q_i \\cdot (k_j + a^K_{ij})}{\\sqrt{d}}, \\qquad
    z_i = \\sum_j \\alpha_{ij} (v_j + a^V_{ij}), \\qquad
    a_{ij} = w_{\\mathrm{clip}(j - i, -K, K)}.

**T5** (Raffel et al., 2020) replaces the vectors by one learned scalar per head and
*bucket*: small distances get their own bucket, larger ones share log-spaced buckets
whose edges are set by ``max_distance``; the last bucket is shared by every distance
from well before ``max_distance`` on (91 bidirectional, 113 causal with the defaults
32 and 128).

Queries are the *last* ``q_len`` of the ``k_len`` key positions throughout (KV cache).

References: P. Shaw, J. Uszkoreit, A. Vaswani, "Self-Attention with Relative Position
Representations", NAACL 2018. C. Raffel et al., "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer", JMLR 2020.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from ._validate import (
    describe,
    fail,
    require_float_tensor,
    require_head_dim,
    require_int,
    require_ndim,
    require_positive_int,
    require_qkv,
    require_tensor,
)

__all__ = [
    "ShawRelativeAttention",
    "T5RelativeBias",
    "relative_position_index",
    "shaw_relative_attention",
    "t5_relative_position_bucket",
]


def _lengths(fn: str, q_len: object, k_len: object) -> tuple[int, int]:
    q = require_positive_int(fn, "q_len", q_len)
    k = q if k_len is None else require_positive_int(fn, "k_len", k_len)
    if k < q:
        fail(
            fn,
            f"k_len must be at least q_len (queries are the last q_len of the k_len "
            f"positions), got q_len={q} and k_len={k}",
        )
    return q, k


def _relative_positions(q_len: int, k_len: int) -> torch.Tensor:
    """``j - (i + k_len - q_len)`` as a ``(q_len, k_len)`` long grid (queries last)."""
    query_pos = torch.arange(q_len) + (k_len - q_len)  # (q_len,)
    return torch.arange(k_len)[None, :] - query_pos[:, None]  # (q_len, k_len)


def relative_position_index(q_len: int, k_len: int, max_distance: int) -> torch.Tensor:
    """Shaw et al.'s row index into the relative tables for each (query, key) pair.

    .. math::

        \\mathrm{idx}[i, j] = \\mathrm{clip}(j - i', -K, K) + K, \\qquad
        i' = i + k_{len} - q_{len}

    Args:
        q_len: number of queries (the last ``q_len`` positions), at least 1.
        k_len: number of keys, at least ``q_len``.
        max_distance: the clipping distance ``K``, at least 1.

    Returns:
        ``(q_len, k_len)`` long tensor with values in ``[0, 2K]``; ``K`` is distance 0.

    Paper: Shaw et al. 2018, section 3.2 (the clipped edge labels).

    >>> relative_position_index(3, 3, 1)
    tensor([[1, 2, 2],
            [0, 1, 2],
            [0, 0, 1]])
    >>> relative_position_index(1, 4, 2)
    tensor([[0, 0, 1, 2]])
    """
    fn = "relative_position_index"
    q, k = _lengths(fn, q_len, k_len)
    K = require_positive_int(fn, "max_distance", max_distance)
    return _relative_positions(q, k).clamp(-K, K) + K  # (q_len, k_len)


@functools.lru_cache(maxsize=4)
def _cached_relative_index(
    q_len: int, k_len: int, max_distance: int, device: torch.device
) -> torch.Tensor:
    """:func:`relative_position_index` on ``device``, cached per lengths (read only).

    Four entries of ``8 * q_len * k_len`` bytes at most; a layer calls it with one
    length, so the grid is built once instead of at every forward.
    """
    with torch.inference_mode(False):  # usable later outside inference_mode too
        return relative_position_index(q_len, k_len, max_distance).to(device)


def shaw_relative_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a_k: torch.Tensor,
    a_v: torch.Tensor,
    max_distance: int,
    *,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention with Shaw et al.'s relative key and value vectors.

    .. math::

        e_{ij} = \\frac{q_i \\cdot k_j + q_i \\cdot a^K_{ij}}{\\sqrt{d}}, \\quad
        \\alpha_{ij} = \\mathrm{softmax}_j(e_{ij}), \\quad
        z_i = \\sum_j \\alpha_{ij} v_j + \\sum_j \\alpha_{ij} a^V_{ij}

    No ``(q_len, k_len, head_dim)`` tensor is built: ``q_i \\cdot a^K_r`` is computed
    for the ``2K+1`` table rows and gathered, and the attention weights are summed per
    table row (scatter-add) before multiplying by ``a^V``. The tables are shared by all
    heads, which the paper allows (Shaw et al. 2018, §3.1) and its memory count assumes
    (§3.3); its base models learned a pair of tables per layer and head, its big models
    one per layer (§4.1). For a table per head, call this once per head.

    Args:
        q: ``(batch, heads, q_len, head_dim)`` queries (the last ``q_len`` positions).
        k: ``(batch, heads, k_len, head_dim)`` keys.
        v: ``(batch, heads, k_len, head_dim)`` values.
        a_k: ``(2K+1, head_dim)`` key table, row ``r`` for relative distance ``r - K``.
        a_v: ``(2K+1, head_dim)`` value table.
        max_distance: ``K``, the clipping distance.
        mask: optional boolean mask broadcastable to ``(batch, heads, q_len, k_len)``,
            True = attend.

    Returns:
        ``(out, weights)``: ``(batch, heads, q_len, head_dim)`` and the attention
        weights ``(batch, heads, q_len, k_len)``.

    Paper: Shaw et al. 2018, eq. (3)-(4).
    """
    fn = "shaw_relative_attention"
    heads, q_len, k_len = require_qkv(fn, q, k, v)
    batch, dim = q.shape[0], q.shape[-1]
    if v.shape[-1] != dim:
        fail(
            fn,
            f"v must have head_dim {dim} like q and k (a_v is added to it), got "
            f"v {tuple(v.shape)}",
        )
    K = require_positive_int(fn, "max_distance", max_distance)
    for name, table in (("a_k", a_k), ("a_v", a_v)):
        require_ndim(
            fn,
            name,
            require_float_tensor(fn, name, table),
            2,
            "(2*max_distance+1, head_dim)",
        )
        if table.shape != (2 * K + 1, dim):
            fail(
                fn,
                f"{name} must have shape (2*max_distance+1, head_dim) = "
                f"({2 * K + 1}, {dim}), got {describe(table)}",
            )
    idx = _cached_relative_index(q_len, k_len, K, q.device)  # (Lq, Lk), cached
    idx = idx.expand(batch, heads, q_len, k_len)  # (B, H, Lq, Lk)

    content = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    q_table = q @ a_k.transpose(0, 1)  # (B, H, Lq, 2K+1)
    position = q_table.gather(-1, idx)  # (B, H, Lq, Lk)
    scores = (content + position) / math.sqrt(dim)
    if mask is not None:
        mask = require_tensor(fn, "mask", mask)
        if mask.dtype != torch.bool:
            fail(
                fn,
                f"mask must be a boolean tensor (True = attend), got {describe(mask)}",
                TypeError,
            )
        try:
            fits = torch.broadcast_shapes(mask.shape, scores.shape) == scores.shape
        except RuntimeError:
            fits = False
        if not fits:
            fail(
                fn,
                f"mask must broadcast to {tuple(scores.shape)}, got {describe(mask)}",
            )
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # (B, H, Lq, Lk)

    per_row = weights.new_zeros(batch, heads, q_len, 2 * K + 1)
    per_row = per_row.scatter_add(-1, idx, weights)  # (B, H, Lq, 2K+1)
    out = weights @ v + per_row @ a_v  # (B, H, Lq, D)
    return out, weights


class ShawRelativeAttention(nn.Module):
    """Multi-head self-attention with Shaw et al.'s relative key/value vectors.

    Args:
        d_model: model width, divisible by ``n_heads``.
        n_heads: number of heads.
        max_distance: clipping distance ``K`` (the tables have ``2K+1`` rows).
        causal: mask keys after their query.

    >>> layer = ShawRelativeAttention(8, 2, max_distance=3)
    >>> layer(torch.zeros(1, 5, 8)).shape
    torch.Size([1, 5, 8])
    """

    def __init__(
        self, d_model: int, n_heads: int, max_distance: int, *, causal: bool = False
    ) -> None:
        super().__init__()
        fn = "ShawRelativeAttention"
        self.head_dim = require_head_dim(fn, d_model, n_heads)
        self.n_heads = n_heads
        self.max_distance = require_positive_int(fn, "max_distance", max_distance)
        self.causal = bool(causal)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        rows = 2 * self.max_distance + 1
        self.a_k = nn.Parameter(torch.randn(rows, self.head_dim) * self.head_dim**-0.5)
        self.a_v = nn.Parameter(torch.randn(rows, self.head_dim) * self.head_dim**-0.5)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x (batch, seq, d_model)`` -> ``(batch, seq, d_model)``."""
        fn = "ShawRelativeAttention.forward"
        require_ndim(
            fn, "x", require_float_tensor(fn, "x", x), 3, "(batch, seq, d_model)"
        )
        batch, seq, _ = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, D)
        if self.causal:
            causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
            mask = causal if mask is None else mask & causal
        z, _ = shaw_relative_attention(
            q, k, v, self.a_k, self.a_v, self.max_distance, mask=mask
        )
        z = z.transpose(1, 2).reshape(batch, seq, -1)  # (B, S, d_model)
        return self.out(z)


def t5_relative_position_bucket(
    relative_position: torch.Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """Map relative positions ``key - query`` to T5's buckets.

    Bidirectional: half the buckets serve keys at or before the query
    (``relative_position <= 0``), the other half, offset by ``num_buckets/2``, keys
    after it. Causal (``bidirectional=False``): every key after the query (positive
    ``relative_position``) falls in bucket 0, and all buckets serve the past. Within a
    half of ``B`` buckets, with ``n = |relative_position|`` and ``E = B/2`` exact
    buckets:

    .. math::

        \\mathrm{bucket}(n) = \\begin{cases} n & n < E \\\\
        \\min\\Big(B - 1, E + \\Big\\lfloor \\frac{\\ln(n/E)}{\\ln(D/E)} (B - E)
        \\Big\\rfloor\\Big) & n \\ge E \\end{cases}

    with ``D = max_distance``. The logarithm is evaluated in float32 in this order, as
    in the Mesh TensorFlow code T5 was trained with. That makes the same rounding likely
    but does not guarantee it: two float32 ``log`` implementations need not agree bit
    for bit, and a distance whose value lands within a rounding error of a whole number
    can fall in either of two buckets (settings such as 18 buckets at distance 64 do, in
    float64). The course's tests compare it with Hugging Face's PyTorch port (the same
    ``torch.log``) out to four times ``max_distance``.

    Args:
        relative_position: integer tensor of ``key_position - query_position``.
        bidirectional: whether keys after the query get their own buckets.
        num_buckets: total number of buckets (even when bidirectional).
        max_distance: ``D``, the distance at which the uncapped formula would reach
            bucket ``B``. Distances at or beyond it share the last bucket, and so do
            shorter ones: the last bucket starts at
            ``ceil(E * (D / E) ** ((B - E - 1) / (B - E)))`` (91 bidirectional, 113
            causal with the defaults).

    Returns:
        long tensor of bucket ids in ``[0, num_buckets)``, same shape as the input.

    Paper: Raffel et al. 2020, section 2.1; ``_relative_position_bucket`` of Mesh
    TensorFlow.

    >>> t5_relative_position_bucket(torch.tensor([-3, -1, 0, 1, 3]), num_buckets=8,
    ...                             max_distance=16)
    tensor([2, 1, 0, 5, 6])
    >>> t5_relative_position_bucket(torch.tensor([-3, -1, 0, 1, 3]),
    ...                             bidirectional=False, num_buckets=8, max_distance=16)
    tensor([3, 1, 0, 0, 0])
    """
    fn = "t5_relative_position_bucket"
    rel = require_tensor(fn, "relative_position", relative_position)
    if rel.is_floating_point() or rel.is_complex() or rel.dtype == torch.bool:
        fail(
            fn,
            f"relative_position must be an integer tensor (key - query), "
            f"got {describe(rel)}",
            TypeError,
        )
    buckets = require_int(fn, "num_buckets", num_buckets, minimum=2)
    max_dist = require_positive_int(fn, "max_distance", max_distance)
    rel = rel.long()
    if bidirectional:
        if buckets % 2 != 0 or buckets < 4:
            fail(
                fn,
                f"num_buckets must be even and at least 4 when bidirectional, "
                f"got {buckets}",
            )
        buckets //= 2
        offset = (rel > 0).long() * buckets  # keys after the query use the upper half
        n = rel.abs()
    else:
        offset = torch.zeros_like(rel)
        n = (-rel).clamp(min=0)  # future keys -> 0
    max_exact = buckets // 2
    if max_dist <= max_exact:
        fail(
            fn,
            f"max_distance must exceed the {max_exact} exact buckets "
            f"(num_buckets={num_buckets}, bidirectional={bidirectional}), "
            f"got {max_dist}",
        )
    n_large = n.clamp(min=max_exact).float()  # log is only used where n >= max_exact
    scaled = (
        torch.log(n_large / max_exact)
        / math.log(max_dist / max_exact)
        * (buckets - max_exact)
    )
    large = (max_exact + scaled.long()).clamp(max=buckets - 1)
    return offset + torch.where(n < max_exact, n, large)


class T5RelativeBias(nn.Module):
    """T5's learned relative position bias: one scalar per head and bucket.

    .. math::

        B_h[i, j] = b_{h, \\mathrm{bucket}(j - i)}

    The bucket grid for the largest length seen is cached (queries last; shorter
    requests slice it).

    Args:
        num_heads: number of heads.
        num_buckets: number of buckets.
        max_distance: ``D`` of :func:`t5_relative_position_bucket`; the last bucket
            starts before it (at 91 bidirectional, 113 causal, with 32 buckets and
            ``D = 128``).
        bidirectional: encoder (True) or decoder (False) bucketing.

    >>> bias = T5RelativeBias(4, num_buckets=8, max_distance=16)
    >>> bias(3, 5).shape
    torch.Size([4, 3, 5])
    """

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ) -> None:
        super().__init__()
        fn = "T5RelativeBias"
        self.num_heads = require_positive_int(fn, "num_heads", num_heads)
        self.num_buckets = require_int(fn, "num_buckets", num_buckets, minimum=2)
        self.max_distance = require_positive_int(fn, "max_distance", max_distance)
        self.bidirectional = bool(bidirectional)
        t5_relative_position_bucket(  # validate the bucket settings once
            torch.zeros(1, dtype=torch.long),
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        self.embedding = nn.Embedding(self.num_buckets, self.num_heads)
        self.register_buffer(
            "buckets", torch.zeros(0, 0, dtype=torch.long), persistent=False
        )

    def bucket_grid(self, q_len: int, k_len: int | None = None) -> torch.Tensor:
        """Bucket ids ``(q_len, k_len)``; queries are the last ``q_len`` keys."""
        q, k = _lengths("T5RelativeBias.bucket_grid", q_len, k_len)
        if self.buckets.shape[-1] < k:
            grid = t5_relative_position_bucket(
                _relative_positions(k, k),
                bidirectional=self.bidirectional,
                num_buckets=self.num_buckets,
                max_distance=self.max_distance,
            )
            self.buckets = grid.to(self.buckets.device)  # (k, k)
        return self.buckets[k - q : k, :k]  # (q_len, k_len)

    def forward(self, q_len: int, k_len: int | None = None) -> torch.Tensor:
        """Return the bias ``(num_heads, q_len, k_len)``."""
        grid = self.bucket_grid(q_len, k_len)  # (Lq, Lk)
        return self.embedding(grid).permute(2, 0, 1)  # (H, Lq, Lk)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )
