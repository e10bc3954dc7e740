r"""Converters between the layouts people confuse, and checks that they agree.

Three pairs of conventions describe *the same* encoding with different bookkeeping:

1. **Sinusoidal layout.** Vaswani et al. interleave ``sin, cos, sin, cos, ...``;
   tensor2tensor and fairseq concatenate ``[all sines | all cosines]``. The two tables
   differ by a fixed column permutation (evens, then odds).
2. **RoPE pairing.** The paper (and Meta's LLaMA) rotates pairs ``(2i, 2i+1)``; GPT-NeoX
   and Hugging Face Llama rotate ``(i, i + d/2)``. Permuting, per head, the output rows
   of :math:`W_Q` and :math:`W_K` by the same evens-then-odds permutation turns one
   checkpoint into the other with identical attention scores.
3. **ALiBi bias.** The paper writes :math:`-m\,(i - j)`; the authors' code and Bloom
   add :math:`+m\,j`. The two differ by :math:`-m\,i`, a constant along each query
   row, which softmax ignores. So they agree *after softmax under a causal mask*;
   without the mask the symmetric :math:`-m|i-j|` and :math:`+m\,j` differ.
"""

from __future__ import annotations

import torch

from ._validate import (
    describe,
    fail,
    require_float_tensor,
    require_positive_int,
    require_tensor,
)
from .alibi import alibi_bias, alibi_slopes
from .attention import causal_mask
from .rope import interleaved_to_half_permutation

__all__ = [
    "alibi_bias_bloom_style",
    "alibi_forms_softmax_gap",
    "concat_to_interleaved_permutation",
    "interleaved_to_concat_permutation",
    "rope_half_to_interleaved_weights",
    "rope_interleaved_to_half_weights",
    "sincos_concat_to_interleaved",
    "sincos_interleaved_to_concat",
]


def _even_width(fn: str, name: str, x: torch.Tensor) -> int:
    if x.ndim < 1 or x.shape[-1] < 2 or x.shape[-1] % 2 != 0:
        fail(
            fn,
            f"{name} must have an even last dimension d_model (sin/cos pairs), "
            f"got {describe(x)}",
        )
    return x.shape[-1]


def interleaved_to_concat_permutation(d_model: int) -> torch.Tensor:
    """Column permutation from ``[sin, cos, sin, cos, ...]`` to ``[sin ... | cos ...]``.

    ``concat = interleaved[..., P]`` with ``P = [0, 2, ..., d-2, 1, 3, ..., d-1]``.

    Args:
        d_model: even width.

    Returns:
        Long tensor ``(d_model,)``.

    Example:
        >>> interleaved_to_concat_permutation(4)
        tensor([0, 2, 1, 3])
    """
    fn = "interleaved_to_concat_permutation"
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model % 2 != 0:
        fail(fn, f"d_model must be even, got d_model={d_model}")
    return interleaved_to_half_permutation(d_model)


def concat_to_interleaved_permutation(d_model: int) -> torch.Tensor:
    """Column permutation from ``[sin ... | cos ...]`` back to interleaved.

    The inverse of :func:`interleaved_to_concat_permutation`:
    ``Q[2i] = i``, ``Q[2i+1] = i + d/2``.

    Args:
        d_model: even width.

    Returns:
        Long tensor ``(d_model,)``.

    Example:
        >>> concat_to_interleaved_permutation(6)
        tensor([0, 3, 1, 4, 2, 5])
    """
    fn = "concat_to_interleaved_permutation"
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model % 2 != 0:
        fail(fn, f"d_model must be even, got d_model={d_model}")
    return torch.argsort(interleaved_to_half_permutation(d_model))


def sincos_interleaved_to_concat(pe: torch.Tensor) -> torch.Tensor:
    r"""Reorder a sinusoidal table from interleaved to concatenated columns.

    .. math::

        [\sin p\omega_0, \cos p\omega_0, \sin p\omega_1, \dots] \mapsto
        [\sin p\omega_0, \sin p\omega_1, \dots \mid \cos p\omega_0, \dots]

    Args:
        pe: ``(..., d_model)`` in the interleaved layout (Vaswani et al.).

    Returns:
        Tensor of the same shape in the concatenated layout.

    Example:
        >>> from course_lib.sinusoidal import sinusoidal_encoding
        >>> torch.equal(sincos_interleaved_to_concat(sinusoidal_encoding(5, 8)),
        ...             sinusoidal_encoding(5, 8, layout="concat"))
        True
    """
    fn = "sincos_interleaved_to_concat"
    pe = require_tensor(fn, "pe", pe)
    d = _even_width(fn, "pe", pe)
    return pe[..., interleaved_to_concat_permutation(d).to(pe.device)]


def sincos_concat_to_interleaved(pe: torch.Tensor) -> torch.Tensor:
    """Reorder a sinusoidal table from concatenated to interleaved columns.

    The inverse of :func:`sincos_interleaved_to_concat`.

    Args:
        pe: ``(..., d_model)`` in the ``[sin | cos]`` layout.

    Returns:
        Tensor of the same shape in the interleaved layout.

    Example:
        >>> from course_lib.sinusoidal import sinusoidal_encoding
        >>> torch.equal(sincos_concat_to_interleaved(
        ...     sinusoidal_encoding(5, 8, layout="concat")), sinusoidal_encoding(5, 8))
        True
    """
    fn = "sincos_concat_to_interleaved"
    pe = require_tensor(fn, "pe", pe)
    d = _even_width(fn, "pe", pe)
    return pe[..., concat_to_interleaved_permutation(d).to(pe.device)]


def _permute_head_rows(
    fn: str, w: torch.Tensor, n_heads: int, head_dim: int, *, inverse: bool
) -> torch.Tensor:
    """Permute the rows of every head of ``w`` by P (or P^-1 when ``inverse``)."""
    w = require_tensor(fn, "w", w)
    n_heads = require_positive_int(fn, "n_heads", n_heads)
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    if head_dim % 2 != 0:
        fail(fn, f"head_dim must be even (RoPE rotates pairs), got head_dim={head_dim}")
    if w.ndim not in (1, 2) or w.shape[0] != n_heads * head_dim:
        fail(
            fn,
            f"w must be a weight (n_heads*head_dim, d_model) or bias "
            f"(n_heads*head_dim,) with n_heads*head_dim = {n_heads}*{head_dim} = "
            f"{n_heads * head_dim} rows, got {describe(w)}",
        )
    perm = interleaved_to_half_permutation(head_dim)  # (head_dim,)
    if inverse:
        perm = torch.argsort(perm)
    per_head = w.reshape(n_heads, head_dim, *w.shape[1:])  # (H, head_dim, [d_model])
    return per_head[:, perm.to(w.device)].reshape(w.shape)  # (H*head_dim, [d_model])


def rope_interleaved_to_half_weights(
    w: torch.Tensor, n_heads: int, head_dim: int
) -> torch.Tensor:
    r"""Convert a query/key projection from interleaved RoPE to rotate-half RoPE.

    With :math:`P` = :func:`~course_lib.rope.interleaved_to_half_permutation`, the
    projection :math:`W` (``nn.Linear`` layout, output rows first) is permuted per head:
    :math:`W'_{h} = W_{h}[P]`. Then :math:`q' = q_P` and

    .. math::

        \operatorname{rope}_\text{half}(q_P) \cdot \operatorname{rope}_\text{half}(k_P)
        = \operatorname{rope}_\text{int}(q)_P \cdot \operatorname{rope}_\text{int}(k)_P
        = \operatorname{rope}_\text{int}(q) \cdot \operatorname{rope}_\text{int}(k),

    so the converted model computes exactly the same attention scores. (This is the
    permutation Hugging Face applies when converting Meta's LLaMA checkpoints.)

    Args:
        w: weight ``(n_heads * head_dim, d_model)`` or bias ``(n_heads * head_dim,)``.
        n_heads: number of heads.
        head_dim: dimension per head, even.

    Returns:
        Tensor of the shape of ``w`` with rows permuted inside each head.

    Example:
        >>> w = torch.arange(8.0)[:, None]  # 2 heads of dim 4, d_model 1
        >>> rope_interleaved_to_half_weights(w, 2, 4).flatten()
        tensor([0., 2., 1., 3., 4., 6., 5., 7.])
    """
    fn = "rope_interleaved_to_half_weights"
    return _permute_head_rows(fn, w, n_heads, head_dim, inverse=False)


def rope_half_to_interleaved_weights(
    w: torch.Tensor, n_heads: int, head_dim: int
) -> torch.Tensor:
    """Convert a query/key projection from rotate-half RoPE to interleaved RoPE.

    The inverse of :func:`rope_interleaved_to_half_weights`: rows of each head are
    permuted by :math:`P^{-1}` (``argsort`` of the evens-then-odds permutation).

    Args:
        w: weight ``(n_heads * head_dim, d_model)`` or bias ``(n_heads * head_dim,)``.
        n_heads: number of heads.
        head_dim: dimension per head, even.

    Returns:
        Tensor of the shape of ``w``.

    Example:
        >>> w = torch.arange(8.0)[:, None]
        >>> back = rope_half_to_interleaved_weights(
        ...     rope_interleaved_to_half_weights(w, 2, 4), 2, 4)
        >>> torch.equal(back, w)
        True
    """
    fn = "rope_half_to_interleaved_weights"
    return _permute_head_rows(fn, w, n_heads, head_dim, inverse=True)


def alibi_bias_bloom_style(
    n_heads: int, q_len: int, k_len: int | None = None
) -> torch.Tensor:
    r"""ALiBi as the authors' code and Bloom add it: :math:`+m_h\, j` (key index only).

    .. math::

        B^\text{Bloom}_{h, i, j} = m_h\, j

    It differs from the paper's :math:`-m_h (i' - j)` (with :math:`i'` the absolute
    position of query :math:`i`) by :math:`-m_h i'`, the same for every key of a query
    row; softmax is invariant to such a shift, so the two agree *after softmax when the
    keys after the query are masked* (causal attention). Use it only with a causal mask.

    Args:
        n_heads: number of heads (slopes from :func:`~course_lib.alibi.alibi_slopes`).
        q_len: number of queries.
        k_len: number of keys (default ``q_len``), at least ``q_len``.

    Returns:
        Float32 tensor ``(n_heads, q_len, k_len)``.

    Paper: Press et al., "Train Short, Test Long" (ALiBi), 2022; Bloom
    (``build_alibi_tensor`` in Hugging Face transformers).

    Example:
        >>> alibi_bias_bloom_style(1, 2, 3)
        tensor([[[0.0000, 0.0039, 0.0078],
                 [0.0000, 0.0039, 0.0078]]])
    """
    fn = "alibi_bias_bloom_style"
    n_heads = require_positive_int(fn, "n_heads", n_heads)
    q_len = require_positive_int(fn, "q_len", q_len)
    k_len = q_len if k_len is None else require_positive_int(fn, "k_len", k_len)
    if k_len < q_len:
        fail(
            fn,
            f"k_len must be at least q_len (queries are the last q_len of the "
            f"k_len positions), got q_len={q_len} and k_len={k_len}",
        )
    slopes = alibi_slopes(n_heads)  # (H,)
    j = torch.arange(k_len, dtype=torch.float32)  # (k_len,)
    bias = slopes[:, None, None] * j[None, None, :]  # (H, 1, k_len)
    return bias.expand(n_heads, q_len, k_len).contiguous()  # (H, q_len, k_len)


def alibi_forms_softmax_gap(scores: torch.Tensor, *, causal: bool = True) -> float:
    r"""Largest difference between the attention weights of the two ALiBi forms.

    .. math::

        \max_{h,i,j} \bigl|\operatorname{softmax}_j(s_{hij} - m_h|i'-j|)
        - \operatorname{softmax}_j(s_{hij} + m_h j)\bigr|

    where the softmax runs over the keys a query may attend to: all keys, or with
    ``causal`` only keys :math:`j \le i'` (:math:`i'` the absolute position of query
    :math:`i`; queries are the last ``q_len`` positions). The gap is at rounding level
    (about 1e-7) when ``causal`` is True and large when it is False, because only for
    :math:`j \le i'` does :math:`-m|i'-j| = m j - m i'` differ from :math:`m j` by a
    per-row constant.

    Args:
        scores: pre-softmax logits ``(heads, q_len, k_len)`` (already scaled by
            ``1/sqrt(d)``), with ``k_len >= q_len``.
        causal: mask the keys after each query.

    Returns:
        ``max |w_paper - w_bloom|`` as a Python float.

    Example:
        >>> s = torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(0))
        >>> alibi_forms_softmax_gap(s, causal=True) < 1e-6
        True
        >>> alibi_forms_softmax_gap(s, causal=False) > 1e-2
        True
    """
    fn = "alibi_forms_softmax_gap"
    scores = require_float_tensor(fn, "scores", scores)
    if scores.ndim != 3 or scores.shape[-1] < scores.shape[-2]:
        fail(
            fn,
            f"scores must have shape (heads, q_len, k_len) with k_len >= q_len, "
            f"got {describe(scores)}",
        )
    h, q_len, k_len = scores.shape
    paper = scores + alibi_bias(h, q_len, k_len).to(scores.dtype)  # (H, q_len, k_len)
    bloom = scores + alibi_bias_bloom_style(h, q_len, k_len).to(scores.dtype)
    if causal:
        future = ~causal_mask(q_len, k_len).to(scores.device)  # (q_len, k_len)
        paper = paper.masked_fill(future, float("-inf"))
        bloom = bloom.masked_fill(future, float("-inf"))
    gap = torch.softmax(paper, dim=-1) - torch.softmax(bloom, dim=-1)
    return float(gap.abs().max())
