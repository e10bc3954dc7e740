r"""Scaled dot-product attention, causal masks and token permutations.

Attention (Vaswani et al., 2017) compares every query with every key:

.. math::

    \operatorname{Attn}(Q, K, V) = \operatorname{softmax}\!\left(
        \frac{Q K^\top}{\sqrt{d}} + B\right) V

where :math:`B` is an optional additive bias (ALiBi, T5, ...) added *after* the
:math:`1/\sqrt{d}` scaling. Nothing in this formula knows where a token sits in the
sequence: permuting the tokens permutes the output in the same way
(permutation *equivariance*). That is why transformers need positional encodings, and
the helpers :func:`permutation_matrix` and :func:`permute_tokens` let the book and the
exercises check it numerically.

Shapes are batch-first: ``(batch, heads, seq, head_dim)`` for queries, keys and values,
``(heads, q_len, k_len)`` for additive biases. When ``q_len < k_len`` (decoding with a
key/value cache) the queries are the *last* ``q_len`` of the ``k_len`` positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ._validate import (
    describe,
    fail,
    require_float_tensor,
    require_ndim,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "causal_mask",
    "permutation_matrix",
    "permute_tokens",
    "scaled_dot_product_attention",
    "self_attention",
]


def _broadcastable(
    fn: str, name: str, x: torch.Tensor, target: tuple[int, ...]
) -> None:
    """Check that ``x`` broadcasts to the scores shape ``target`` without growing it."""
    try:
        shape = torch.broadcast_shapes(x.shape, target)
    except RuntimeError:
        shape = None
    if shape != torch.Size(target):
        fail(
            fn,
            f"{name} must broadcast to the attention scores of shape {target} "
            "(e.g. (heads, q_len, k_len) or (batch, heads, q_len, k_len)), "
            f"got {describe(x)}",
        )


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Reference attention: matmul, scale, add bias, mask, softmax, matmul.

    .. math::

        w_{ij} = \operatorname{softmax}_j\!\left(
            \frac{q_i \cdot k_j}{\sqrt{d}} + b_{ij}\right),
        \qquad o_i = \sum_j w_{ij} v_j

    Masked keys (``mask`` False) get weight exactly 0. **Fully masked rows**: a query
    that may attend to no key at all (every entry of its row masked, or every bias
    ``-inf``) has no defined softmax. Instead of silently returning NaN, such a row
    gets all-zero weights and therefore a zero output vector. This happens for padding
    queries in a batch and is harmless there; anywhere else it signals a wrong mask.
    (``torch.nn.functional.scaled_dot_product_attention`` returns NaN or zeros for
    such rows depending on version and backend.)

    Args:
        q: queries ``(..., q_len, d)``, typically ``(batch, heads, q_len, head_dim)``.
        k: keys ``(..., k_len, d)``.
        v: values ``(..., k_len, d_v)``.
        bias: optional float tensor broadcastable to ``(..., q_len, k_len)``, e.g.
            ``(heads, q_len, k_len)``; added after the ``1/sqrt(d)`` scaling and not
            itself scaled.
        mask: optional boolean tensor broadcastable to ``(..., q_len, k_len)``;
            ``True`` means *may attend*.

    Returns:
        ``(out, weights)``: ``out`` of shape ``(..., q_len, d_v)`` and the attention
        weights of shape ``(..., q_len, k_len)`` (each row sums to 1, or to 0 for a
        fully masked row).

    Paper: Vaswani et al., "Attention Is All You Need", 2017, eq. (1).

    Example:
        >>> q = k = torch.eye(2).reshape(1, 1, 2, 2)
        >>> v = torch.tensor([[[[1.0], [3.0]]]])
        >>> out, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(2, 2))
        >>> w[0, 0]
        tensor([[1.0000, 0.0000],
                [0.3302, 0.6698]])
    """
    fn = "scaled_dot_product_attention"
    q = require_float_tensor(fn, "q", q)
    k = require_float_tensor(fn, "k", k)
    v = require_float_tensor(fn, "v", v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            fail(
                fn,
                f"{name} must have at least 2 dimensions (..., seq, dim), "
                f"got {describe(t)}",
            )
    if q.shape[-1] != k.shape[-1]:
        fail(
            fn,
            f"q and k must have the same last dimension, got q of shape "
            f"{tuple(q.shape)} and k of shape {tuple(k.shape)}",
        )
    if k.shape[-2] != v.shape[-2]:
        fail(
            fn,
            f"k and v must have the same number of positions (dim -2), got k of "
            f"shape {tuple(k.shape)} and v of shape {tuple(v.shape)}",
        )
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        fail(
            fn,
            f"the leading (batch, heads) dimensions of q, k and v must broadcast, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}",
        )
    scores_shape = (*lead, q.shape[-2], k.shape[-2])

    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., q_len, k_len)
    if bias is not None:
        bias = require_float_tensor(fn, "bias", bias)
        _broadcastable(fn, "bias", bias, scores_shape)
        scores = scores + bias
    if mask is not None:
        mask = require_tensor(fn, "mask", mask)
        if mask.dtype != torch.bool:
            fail(
                fn,
                f"mask must be a boolean tensor (True = attend), got "
                f"{describe(mask)}; an additive float mask belongs in bias=",
                TypeError,
            )
        _broadcastable(fn, "mask", mask, scores_shape)
        scores = scores.masked_fill(~mask, float("-inf"))
    scores = scores.expand(scores_shape)

    # A row whose every score is -inf has no softmax: give it zero weights, not NaN.
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., q_len, 1)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)
    weights = weights.masked_fill(dead, 0.0)  # (..., q_len, k_len)
    out = weights @ v  # (..., q_len, d_v)
    return out, weights


def causal_mask(q_len: int, k_len: int | None = None) -> torch.Tensor:
    r"""Boolean causal mask, ``True`` where a query may attend to a key.

    The queries are the **last** ``q_len`` of the ``k_len`` positions (as when decoding
    with a key/value cache), so query ``i`` sits at absolute position
    ``i + k_len - q_len`` and may see key ``j`` iff

    .. math::

        j \le i + (k_\text{len} - q_\text{len}).

    Args:
        q_len: number of queries, at least 1.
        k_len: number of keys, at least ``q_len``; defaults to ``q_len``.

    Returns:
        Bool tensor of shape ``(q_len, k_len)``.

    Example:
        >>> causal_mask(2, 3)
        tensor([[ True,  True, False],
                [ True,  True,  True]])
    """
    fn = "causal_mask"
    q_len = require_positive_int(fn, "q_len", q_len)
    k_len = q_len if k_len is None else require_positive_int(fn, "k_len", k_len)
    if k_len < q_len:
        fail(
            fn,
            f"k_len must be at least q_len (queries are the last q_len of the "
            f"k_len positions), got q_len={q_len} and k_len={k_len}",
        )
    i = torch.arange(q_len).unsqueeze(1)  # (q_len, 1)
    j = torch.arange(k_len).unsqueeze(0)  # (1, k_len)
    return j <= i + (k_len - q_len)  # (q_len, k_len)


def self_attention(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    r"""Single-head self-attention *without* any positional information.

    .. math::

        \operatorname{SA}(X) = \operatorname{softmax}\!\left(
            \frac{(X W_Q)(X W_K)^\top}{\sqrt{d_k}}\right) X W_V

    For every permutation matrix :math:`P`,
    :math:`\operatorname{SA}(P X) = P\,\operatorname{SA}(X)`: the layer is
    permutation *equivariant*, so on its own it cannot tell word order.

    Args:
        x: token vectors ``(seq, d_model)`` or ``(batch, seq, d_model)``.
        w_q: query projection ``(d_model, d_k)`` (applied as ``x @ w_q``).
        w_k: key projection ``(d_model, d_k)``.
        w_v: value projection ``(d_model, d_v)``.

    Returns:
        Tensor ``(seq, d_v)`` or ``(batch, seq, d_v)``, like ``x``.

    Paper: Vaswani et al., "Attention Is All You Need", 2017, section 3.2.

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> w = torch.eye(2)
        >>> perm = [2, 0, 1]
        >>> torch.allclose(self_attention(permute_tokens(x, perm), w, w, w),
        ...                permute_tokens(self_attention(x, w, w, w), perm))
        True
    """
    fn = "self_attention"
    x = require_float_tensor(fn, "x", x)
    require_ndim(fn, "x", x, (2, 3), "(seq, d_model) or (batch, seq, d_model)")
    d_model = x.shape[-1]
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        require_float_tensor(fn, name, w)
        require_ndim(fn, name, w, 2, "(d_model, d_out)")
        if w.shape[0] != d_model:
            fail(
                fn,
                f"{name} must have d_model={d_model} rows to match x of shape "
                f"{tuple(x.shape)}, got {name} of shape {tuple(w.shape)}",
            )
    if w_q.shape[1] != w_k.shape[1]:
        fail(
            fn,
            f"w_q and w_k must have the same number of columns d_k, got w_q of "
            f"shape {tuple(w_q.shape)} and w_k of shape {tuple(w_k.shape)}",
        )
    q, k, v = (
        x @ w_q,
        x @ w_k,
        x @ w_v,
    )  # (..., seq, d_k), (..., seq, d_k), (..., seq, d_v)
    out, _ = scaled_dot_product_attention(q, k, v)
    return out  # (..., seq, d_v)


def _as_permutation(fn: str, perm: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Validate ``perm`` as a permutation of ``0..n-1``; return it as a LongTensor."""
    if not isinstance(perm, torch.Tensor):
        try:
            perm = torch.as_tensor(list(perm))
        except (TypeError, ValueError):
            fail(
                fn,
                f"perm must be a sequence of integers, got {describe(perm)}",
                TypeError,
            )
    if perm.numel() == 0:
        fail(fn, "perm must not be empty, got a permutation of length 0")
    if perm.is_floating_point() or perm.dtype == torch.bool or perm.is_complex():
        fail(fn, f"perm must hold integers, got {describe(perm)}", TypeError)
    require_ndim(fn, "perm", perm, 1, "(n,)")
    n = perm.numel()
    perm = perm.long()
    if not torch.equal(torch.sort(perm).values, torch.arange(n)):
        fail(fn, f"perm must be a permutation of 0..{n - 1}, got {perm.tolist()}")
    return perm


def permutation_matrix(perm: Sequence[int] | torch.Tensor) -> torch.Tensor:
    r"""The permutation matrix :math:`P` reordering rows: ``(P @ x)[i] = x[perm[i]]``.

    .. math::

        P_{i j} = [\, j = \pi(i) \,]

    Args:
        perm: a permutation of ``0..n-1`` (list or 1-D integer tensor).

    Returns:
        Float32 tensor of shape ``(n, n)``, orthogonal (:math:`P^\top P = I`).

    Example:
        >>> permutation_matrix([1, 2, 0])
        tensor([[0., 1., 0.],
                [0., 0., 1.],
                [1., 0., 0.]])
    """
    perm = _as_permutation("permutation_matrix", perm)
    return torch.eye(perm.numel())[perm]  # (n, n)


def permute_tokens(x: torch.Tensor, perm: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Reorder the tokens (dim -2) of ``x``: ``out[..., i, :] = x[..., perm[i], :]``.

    Equal to ``permutation_matrix(perm) @ x`` but without building the matrix.

    Args:
        x: tensor ``(..., seq, dim)``.
        perm: a permutation of ``0..seq-1``.

    Returns:
        Tensor of the same shape as ``x``.

    Example:
        >>> permute_tokens(torch.tensor([[1.0], [2.0], [3.0]]), [2, 0, 1]).flatten()
        tensor([3., 1., 2.])
    """
    fn = "permute_tokens"
    x = require_tensor(fn, "x", x)
    if x.ndim < 2:
        fail(
            fn, f"x must have at least 2 dimensions (..., seq, dim), got {describe(x)}"
        )
    perm = _as_permutation(fn, perm)
    if perm.numel() != x.shape[-2]:
        fail(
            fn,
            f"perm must have one entry per token, x has seq={x.shape[-2]} "
            f"(shape {tuple(x.shape)}), got perm of length {perm.numel()}",
        )
    return x.index_select(-2, perm.to(x.device))  # (..., seq, dim)
