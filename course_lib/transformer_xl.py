"""Transformer-XL relative attention (Dai et al., 2019).

Transformer-XL splits the score between query ``i`` and key ``j`` into four terms (their
eq. (3)), with ``R_{i-j}`` a sinusoid of the distance and ``W_{k,R}`` its projection:

.. math::

    A^{\\mathrm{rel}}_{ij} =
    \\underbrace{q_i^\\top k_j}_{(a)\\ \\text{content}}
    + \\underbrace{q_i^\\top W_{k,R} R_{i-j}}_{(b)\\ \\text{content-position}}
    + \\underbrace{u^\\top k_j}_{(c)\\ \\text{global content bias}}
    + \\underbrace{v^\\top W_{k,R} R_{i-j}}_{(d)\\ \\text{global position bias}}

computed as ``(q + u) k^T + rel_shift((q + v) r^T)`` where ``r`` holds the projected
embeddings for the descending distances ``k_len-1, ..., 0``. ``rel_shift`` realigns each
row from "column = distance" to "column = key" by a pad-and-reshape. The entries it
produces for keys after the query are leftovers of neighbouring rows, not scores: the
causal mask, which a causal language model applies anyway, must go on the shifted
scores, and this shift cannot serve attention without that mask (Dai et al., App. B
compute only the past distances).

Keys are the cached memory of the previous segment followed by the current segment:
queries are the *last* ``q_len`` of the ``k_len`` positions.

Reference: Z. Dai, Z. Yang, Y. Yang, J. Carbonell, Q. Le, R. Salakhutdinov,
"Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context", ACL 2019.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import (
    describe,
    fail,
    require_even,
    require_float_tensor,
    require_int,
    require_ndim,
    require_positive_int,
)

__all__ = [
    "RelMultiHeadAttention",
    "RelPartialLearnableMultiHeadAttention",
    "rel_attention_scores",
    "rel_attention_scores_gather",
    "rel_shift",
    "rel_shift_bidirectional",
    "relative_sinusoidal_embedding",
    "transformer_xl_mask",
]


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """Realign scores indexed by distance into scores indexed by key (pad and reshape).

    Input column ``c`` holds relative distance ``k_len - 1 - c``. Padding one zero
    column on the left and reading the ``q_len * (k_len + 1)`` numbers back with rows
    of length ``k_len`` (after dropping the first ``q_len``) shifts row ``i`` left by
    ``q_len - 1 - i``:

    .. math::

        \\mathrm{out}[\\dots, i, j] = x[\\dots, i, j + q_{len} - 1 - i]
        \\quad\\text{for } j \\le i + k_{len} - q_{len},

    which is distance ``i + k_len - q_len - j``. Other entries are leftovers of the
    neighbouring row or the zero pad: mask them.

    Args:
        x: ``(..., q_len, k_len)`` scores, ``q_len <= k_len``.

    Returns:
        ``(..., q_len, k_len)`` shifted scores (a new tensor).

    Paper: Dai et al. 2019, appendix B (efficient computation).

    >>> x = torch.tensor([[2., 1., 0.], [2., 1., 0.]])  # distances 2, 1, 0
    >>> rel_shift(x)  # row i=1 is query position 2: distances 2, 1, 0 to keys 0, 1, 2
    tensor([[1., 0., 0.],
            [2., 1., 0.]])
    """
    fn = "rel_shift"
    require_ndim(
        fn,
        "x",
        require_float_tensor(fn, "x", x),
        tuple(range(2, 9)),
        "(..., q_len, k_len)",
    )
    *lead, q_len, k_len = x.shape
    if q_len == 0 or k_len < q_len:
        fail(
            fn,
            f"x must be (..., q_len, k_len) with 1 <= q_len <= k_len, "
            f"got {describe(x)}",
        )
    padded = F.pad(x, (1, 0))  # (..., Lq, Lk + 1)
    padded = padded.reshape(*lead, k_len + 1, q_len)  # same numbers, rows of length Lq
    return padded[..., 1:, :].reshape(*lead, q_len, k_len)  # (..., Lq, Lk)


def rel_shift_bidirectional(x: torch.Tensor) -> torch.Tensor:
    """Realign scores indexed by a signed distance into scores indexed by key.

    For attention without a causal mask (an encoder, or XLNet's two-stream attention)
    a query also needs the distances of the keys after it. With the queries the last
    ``q_len`` of ``k_len`` positions (query ``i`` at ``i' = i + k_len - q_len``), the
    distances ``i' - j`` run from ``k_len - 1`` down to ``-(q_len - 1)``: the input has
    ``k_len + q_len - 1`` columns, column ``c`` holding distance ``k_len - 1 - c``.

    .. math::

        \\mathrm{out}[\\dots, i, j] = x[\\dots, i, j + q_{len} - 1 - i],
        \\qquad 0 \\le j < k_{len},

    valid for every entry (no mask needed). Computed as the causal shift is: one zero
    column padded on the left, the numbers read with rows of length ``q_len``, the
    first row dropped and the rest read back with rows of ``k_len + q_len - 1``, of
    which the first ``k_len`` columns are kept.

    Args:
        x: ``(..., q_len, k_len + q_len - 1)`` scores, descending signed distances.

    Returns:
        ``(..., q_len, k_len)`` scores, column ``j`` for key ``j``.

    Paper: Dai et al. 2019, appendix B (the causal case); Yang et al. 2019 (XLNet)
    use distances ``k_len`` down to ``-q_len + 1`` (one column more) for their
    bidirectional streams.

    >>> x = torch.tensor([[2., 1., 0., -1.], [2., 1., 0., -1.]])  # Lq=2, Lk=3
    >>> rel_shift_bidirectional(x)  # query 0 sits at position 1, query 1 at 2
    tensor([[ 1.,  0., -1.],
            [ 2.,  1.,  0.]])
    """
    fn = "rel_shift_bidirectional"
    require_ndim(
        fn,
        "x",
        require_float_tensor(fn, "x", x),
        tuple(range(2, 9)),
        "(..., q_len, k_len + q_len - 1)",
    )
    *lead, q_len, width = x.shape
    k_len = width - q_len + 1
    if q_len == 0 or k_len < q_len:
        fail(
            fn,
            f"x must be (..., q_len, k_len + q_len - 1) with 1 <= q_len <= k_len, "
            f"got {describe(x)} (k_len would be {k_len})",
        )
    padded = F.pad(x, (1, 0))  # (..., Lq, W + 1)
    padded = padded.reshape(*lead, width + 1, q_len)  # same numbers, rows of length Lq
    rows = padded[..., 1:, :].reshape(*lead, q_len, width)  # (..., Lq, W)
    return rows[..., :k_len]  # (..., Lq, Lk)


def transformer_xl_mask(q_len: int, k_len: int) -> torch.Tensor:
    """Boolean mask, True where key ``j`` may be attended: ``j <= i + k_len - q_len``.

    Returns:
        ``(q_len, k_len)`` bool tensor (queries are the last ``q_len`` positions).

    >>> transformer_xl_mask(2, 3)
    tensor([[ True,  True, False],
            [ True,  True,  True]])
    """
    fn = "transformer_xl_mask"
    q = require_positive_int(fn, "q_len", q_len)
    k = require_positive_int(fn, "k_len", k_len)
    if k < q:
        fail(fn, f"k_len must be at least q_len, got q_len={q} and k_len={k}")
    return torch.ones(q, k, dtype=torch.bool).tril(diagonal=k - q)  # (Lq, Lk)


def _check_scores_args(
    fn: str,
    q: torch.Tensor,
    k: torch.Tensor,
    r: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
) -> tuple[int, int, int, int, int]:
    for name, x, nd, layout in (
        ("q", q, 4, "(batch, heads, q_len, head_dim)"),
        ("k", k, 4, "(batch, heads, k_len, head_dim)"),
        ("r", r, 3, "(heads, k_len, head_dim)"),
        ("u", u, 2, "(heads, head_dim)"),
        ("v", v, 2, "(heads, head_dim)"),
    ):
        require_ndim(fn, name, require_float_tensor(fn, name, x), nd, layout)
    batch, heads, q_len, dim = q.shape
    k_len = k.shape[2]
    if k.shape != (batch, heads, k_len, dim):
        fail(
            fn,
            f"k must be (batch, heads, k_len, head_dim) = ({batch}, {heads}, "
            f"k_len, {dim}) like q {tuple(q.shape)}, got {describe(k)}",
        )
    if r.shape != (heads, k_len, dim):
        fail(
            fn,
            f"r must be (heads, k_len, head_dim) = ({heads}, {k_len}, {dim}), "
            f"one row per distance k_len-1..0, got {describe(r)}",
        )
    for name, x in (("u", u), ("v", v)):
        if x.shape != (heads, dim):
            fail(
                fn,
                f"{name} must be (heads, head_dim) = ({heads}, {dim}), "
                f"got {describe(x)}",
            )
    if q_len == 0 or k_len < q_len:
        fail(
            fn,
            f"need 1 <= q_len <= k_len, got q {tuple(q.shape)} and k {tuple(k.shape)}",
        )
    return batch, heads, q_len, k_len, dim


def rel_attention_scores(
    q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Transformer-XL attention scores with the four terms of Dai et al. eq. (3).

    .. math::

        S_{ij} = \\frac{(q_i + u) \\cdot k_j + (q_i + v) \\cdot r_{i' - j}}{\\sqrt{D}},
        \\qquad i' = i + L_k - L_q,

    and ``-inf`` where ``j > i'`` (key after the query). ``(q + u) k^T`` gives terms
    (a) and (c); ``rel_shift((q + v) r^T)`` gives (b) and (d).

    Only two tensors of the scores' size are made: ``1/sqrt(D)`` is applied to the
    small ``(B, H, Lq, D)`` operands, (a) + (c) is accumulated by ``baddbmm_`` into
    the shifted (b) + (d), and the mask is applied in place. No ``(Lq, Lk, D)``
    tensor of per-pair embeddings ever exists.

    Args:
        q: ``(B, H, Lq, D)`` queries (the last ``Lq`` positions).
        k: ``(B, H, Lk, D)`` keys (memory then current segment).
        r: ``(H, Lk, D)`` projected relative embeddings, row ``c`` for distance
            ``Lk - 1 - c``.
        u: ``(H, D)`` global content bias.
        v: ``(H, D)`` global position bias.

    Returns:
        ``(B, H, Lq, Lk)`` masked scores, ready for softmax.

    Paper: Dai et al. 2019, eq. (3) and appendix B.
    """
    fn = "rel_attention_scores"
    _, _, q_len, k_len, dim = _check_scores_args(fn, q, k, r, u, v)
    scale = 1.0 / math.sqrt(dim)
    q_v = (q + v[None, :, None, :]) * scale  # (B, H, Lq, D)
    by_distance = q_v @ r.transpose(-2, -1)  # (B, H, Lq, Lk): b + d, column = distance
    scores = rel_shift(by_distance)  # (B, H, Lq, Lk): column = key
    q_u = ((q + u[None, :, None, :]) * scale).reshape(-1, q_len, dim)  # (B*H, Lq, D)
    keys = k.reshape(-1, k_len, dim).transpose(1, 2)  # (B*H, D, Lk)
    scores.view(-1, q_len, k_len).baddbmm_(q_u, keys)  # += a + c, in place
    future = ~transformer_xl_mask(q_len, k_len).to(q.device)  # (Lq, Lk)
    return scores.masked_fill_(future, float("-inf"))


def rel_attention_scores_gather(
    q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Reference :func:`rel_attention_scores` aligning distances by an index gather.

    Same arguments, result and equation; the position term reads column
    ``Lk - 1 - (i' - j) = j + Lq - 1 - i`` of ``(q + v) r^T`` with an explicit
    ``gather`` instead of :func:`rel_shift`. Used by tests and benchmarks.

    Returns:
        ``(B, H, Lq, Lk)`` masked scores.
    """
    fn = "rel_attention_scores_gather"
    batch, heads, q_len, k_len, dim = _check_scores_args(fn, q, k, r, u, v)
    content = (q + u[None, :, None, :]) @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    by_distance = torch.einsum("bhqd,hkd->bhqk", q + v[None, :, None, :], r)
    column = torch.arange(k_len)[None, :] + (q_len - 1) - torch.arange(q_len)[:, None]
    column = column.clamp(0, k_len - 1).to(q.device)  # (Lq, Lk); clamped cells masked
    position = by_distance.gather(-1, column.expand(batch, heads, q_len, k_len))
    scores = (content + position) / math.sqrt(dim)  # (B, H, Lq, Lk)
    future = ~transformer_xl_mask(q_len, k_len).to(q.device)
    return scores.masked_fill(future, float("-inf"))


def relative_sinusoidal_embedding(
    k_len: int,
    d_model: int,
    *,
    clamp_len: int | None = None,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Sinusoids of the descending distances ``k_len-1, ..., 0`` (Transformer-XL).

    .. math::

        R_t = [\\sin(t\\,\\omega_0), \\dots, \\sin(t\\,\\omega_{d/2-1}) \\mid
        \\cos(t\\,\\omega_0), \\dots, \\cos(t\\,\\omega_{d/2-1})],
        \\quad \\omega_i = \\mathrm{base}^{-2i/d}

    for ``t = min(distance, clamp_len)``: sines then cosines (concatenated layout), as
    in the authors' ``PositionalEmbedding``. ``clamp_len`` makes all distances beyond it
    share one embedding.

    Args:
        k_len: number of key positions (memory + segment), at least 1.
        d_model: embedding width, even.
        clamp_len: optional largest distance represented (at least 0).
        base: frequency base.
        dtype: floating dtype of the result.

    Returns:
        ``(k_len, d_model)`` tensor, row ``c`` for distance ``k_len - 1 - c``.

    Paper: Dai et al. 2019, section 3.3.

    >>> relative_sinusoidal_embedding(3, 2)  # [sin t, cos t] for t = 2, 1, 0
    tensor([[ 0.9093, -0.4161],
            [ 0.8415,  0.5403],
            [ 0.0000,  1.0000]])
    """
    fn = "relative_sinusoidal_embedding"
    k = require_positive_int(fn, "k_len", k_len)
    d = require_even(fn, "d_model", require_positive_int(fn, "d_model", d_model))
    if isinstance(base, bool) or not isinstance(base, int | float) or not base > 0:
        fail(fn, f"base must be a positive number, got {describe(base)}")
    distance = torch.arange(k - 1, -1, -1, dtype=torch.float64)  # (Lk,)
    if clamp_len is not None:
        distance = distance.clamp(
            max=require_int(fn, "clamp_len", clamp_len, minimum=0)
        )
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angle = distance[:, None] * inv_freq[None, :]  # (Lk, d/2)
    return torch.cat([angle.sin(), angle.cos()], dim=-1).to(dtype)  # (Lk, d)


class RelMultiHeadAttention(nn.Module):
    """Transformer-XL relative multi-head attention with segment-level recurrence.

    Queries come from the current segment ``x``; keys and values from
    ``[memory; x]``, where the memory holds the (detached) layer inputs of previous
    segments, at most ``mem_len`` positions. Scores use :func:`rel_attention_scores`
    with learned global biases ``u`` and ``v`` and projected sinusoids of the
    distances (clamped at ``clamp_len``).

    Args:
        d_model: model width.
        n_heads: number of heads.
        head_dim: width per head (default ``d_model // n_heads``).
        mem_len: positions kept as memory for the next segment (0 = none).
        clamp_len: optional largest distance with its own embedding.

    Forward: ``x (batch, seq, d_model)``, optional ``mems (batch, mem, d_model)`` and
    ``attn_mask`` (bool ``(seq, mem + seq)``, True = attend, combined with the causal
    mask); returns ``(out (batch, seq, d_model), new_mems (batch, <= mem_len,
    d_model))``.

    Paper: Dai et al. 2019 (``RelPartialLearnableMultiHeadAttn`` of the authors' code).

    >>> layer = RelMultiHeadAttention(8, 2, mem_len=4)
    >>> out, mems = layer(torch.zeros(1, 3, 8))
    >>> out.shape, mems.shape
    (torch.Size([1, 3, 8]), torch.Size([1, 3, 8]))
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,
        *,
        mem_len: int = 0,
        clamp_len: int | None = None,
    ) -> None:
        super().__init__()
        fn = "RelMultiHeadAttention"
        self.d_model = require_even(
            fn, "d_model", require_positive_int(fn, "d_model", d_model)
        )
        self.n_heads = require_positive_int(fn, "n_heads", n_heads)
        if head_dim is None:
            if d_model % n_heads != 0:
                fail(
                    fn,
                    f"d_model must be divisible by n_heads when head_dim is not "
                    f"given, got d_model={d_model} and n_heads={n_heads}",
                )
            head_dim = d_model // n_heads
        self.head_dim = require_positive_int(fn, "head_dim", head_dim)
        self.mem_len = require_int(fn, "mem_len", mem_len, minimum=0)
        self.clamp_len = (
            None
            if clamp_len is None
            else require_int(fn, "clamp_len", clamp_len, minimum=0)
        )
        inner = self.n_heads * self.head_dim
        self.qkv = nn.Linear(d_model, 3 * inner, bias=False)
        self.r_proj = nn.Linear(d_model, inner, bias=False)  # W_{k,R}
        self.out = nn.Linear(inner, d_model, bias=False)
        self.u = nn.Parameter(torch.zeros(self.n_heads, self.head_dim))
        self.v = nn.Parameter(torch.zeros(self.n_heads, self.head_dim))
        nn.init.normal_(self.u, std=0.02)
        nn.init.normal_(self.v, std=0.02)

    def forward(
        self,
        x: torch.Tensor,
        mems: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``x`` to ``[mems; x]``; return the output and the next memory."""
        fn = "RelMultiHeadAttention.forward"
        require_ndim(
            fn, "x", require_float_tensor(fn, "x", x), 3, "(batch, seq, d_model)"
        )
        batch, seq, width = x.shape
        if width != self.d_model or seq == 0:
            fail(
                fn,
                f"x must be (batch, seq>=1, d_model={self.d_model}), got {describe(x)}",
            )
        if mems is None:
            mems = x.new_zeros(batch, 0, width)
        require_ndim(
            fn,
            "mems",
            require_float_tensor(fn, "mems", mems),
            3,
            "(batch, mem, d_model)",
        )
        if mems.shape[0] != batch or mems.shape[2] != width:
            fail(
                fn,
                f"mems must be (batch={batch}, mem, d_model={width}), "
                f"got {describe(mems)}",
            )
        cat = torch.cat([mems.detach(), x], dim=1)  # (B, M + S, d_model)
        k_len = cat.shape[1]
        heads, dim = self.n_heads, self.head_dim

        qkv = self.qkv(cat).view(batch, k_len, 3, heads, dim)  # (B, M+S, 3, H, D)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, M+S, D)
        q = q[:, :, k_len - seq :]  # (B, H, S, D): queries of the current segment only
        pos = relative_sinusoidal_embedding(
            k_len, width, clamp_len=self.clamp_len, dtype=x.dtype
        ).to(x.device)
        r = self.r_proj(pos).view(k_len, heads, dim).transpose(0, 1)  # (H, M+S, D)

        scores = rel_attention_scores(q, k, r, self.u, self.v)  # (B, H, S, M+S)
        if attn_mask is not None:
            if (
                not isinstance(attn_mask, torch.Tensor)
                or attn_mask.dtype != torch.bool
                or attn_mask.shape != (seq, k_len)
            ):
                fail(
                    fn,
                    f"attn_mask must be a bool tensor of shape (seq, mem + seq) "
                    f"= ({seq}, {k_len}), got {describe(attn_mask)}",
                )
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        z = (weights @ v).transpose(1, 2).reshape(batch, seq, heads * dim)  # (B,S,H*D)
        new_mems = cat[:, max(0, k_len - self.mem_len) :].detach()  # (B, <=mem_len, d)
        return self.out(z), new_mems

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, "
            f"head_dim={self.head_dim}, mem_len={self.mem_len}, "
            f"clamp_len={self.clamp_len}"
        )


RelPartialLearnableMultiHeadAttention = RelMultiHeadAttention
