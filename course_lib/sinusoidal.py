r"""Absolute positional encodings: fixed sinusoids and learned tables.

Vaswani et al. (2017) add to the embedding of the token at position :math:`p` the
vector

.. math::

    PE_{p, 2i} = \sin\!\left(\frac{p}{b^{2i/d}}\right), \qquad
    PE_{p, 2i+1} = \cos\!\left(\frac{p}{b^{2i/d}}\right), \qquad
    i = 0, \dots, d/2 - 1,

with base :math:`b = 10000`: pair :math:`i` turns at angular frequency
:math:`\omega_i = b^{-2i/d}`, from one radian per position (:math:`i = 0`) down to
almost :math:`1/b`. This *interleaved* layout is the paper's. Many implementations
(tensor2tensor, fairseq) instead concatenate all sines, then all cosines; that is
``layout="concat"`` here, and :mod:`course_lib.conventions` converts between the two.

The learned alternative (BERT, GPT-2) is a trainable table with one row per position,
which cannot represent positions beyond its ``max_len``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import (
    describe,
    fail,
    require_base,
    require_float_tensor,
    require_ndim,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "LearnedPositionalEncoding",
    "SinusoidalPositionalEncoding",
    "position_ids_from_attention_mask",
    "sinusoidal_encoding",
]

_LAYOUTS = ("interleaved", "concat")


def _check_layout(fn: str, layout: object) -> str:
    if layout not in _LAYOUTS:
        fail(
            fn,
            f"layout must be 'interleaved' (Vaswani et al.: sin, cos, sin, cos, "
            f"...) or 'concat' ([all sines | all cosines]), got {layout!r}",
        )
    return layout  # type: ignore[return-value]


def sinusoidal_encoding(
    max_len: int,
    d_model: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
) -> torch.Tensor:
    r"""The sinusoidal position table of Vaswani et al. (2017), one row per position.

    .. math::

        PE_{p, 2i} = \sin(p\, \omega_i), \quad
        PE_{p, 2i+1} = \cos(p\, \omega_i), \quad
        \omega_i = \text{base}^{-2i/d_\text{model}}

    The angles are computed in float64 and rounded once, so large positions stay
    accurate.

    Args:
        max_len: number of positions ``0 .. max_len-1``, at least 1.
        d_model: encoding width, even and at least 2.
        base: the base :math:`b` of the geometric frequency ladder (10000 in the paper).
        layout: ``"interleaved"`` (the paper: sin in even columns, cos in odd columns)
            or ``"concat"`` (``[sin(p w_0), ..., sin(p w_{d/2-1}) | cos(p w_0), ...]``).

    Returns:
        Float32 tensor of shape ``(max_len, d_model)`` with entries in ``[-1, 1]``.

    Paper: Vaswani et al., "Attention Is All You Need", 2017, section 3.5.

    Example:
        >>> sinusoidal_encoding(3, 4)
        tensor([[ 0.0000,  1.0000,  0.0000,  1.0000],
                [ 0.8415,  0.5403,  0.0100,  0.9999],
                [ 0.9093, -0.4161,  0.0200,  0.9998]])
    """
    fn = "sinusoidal_encoding"
    max_len = require_positive_int(fn, "max_len", max_len)
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model % 2 != 0:
        fail(
            fn,
            f"d_model must be even (sines and cosines come in pairs), "
            f"got d_model={d_model}",
        )
    base = require_base(fn, base)
    layout = _check_layout(fn, layout)

    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * omega  # (L, d/2)
    if layout == "interleaved":
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (L, d/2, 2)
        pe = pe.flatten(-2)  # (L, d)
    else:
        pe = torch.cat((angles.sin(), angles.cos()), dim=-1)  # (L, d)
    return pe.float()


def _check_positions(
    fn: str, position_ids: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """Validate integer positions ``(seq,)`` or ``(batch, seq)`` for tokens ``x``."""
    position_ids = require_tensor(fn, "position_ids", position_ids)
    if position_ids.is_floating_point() or position_ids.dtype == torch.bool:
        fail(
            fn,
            f"position_ids must be an integer tensor, got {describe(position_ids)}",
            TypeError,
        )
    require_ndim(fn, "position_ids", position_ids, (1, 2), "(seq,) or (batch, seq)")
    if position_ids.shape[-1] != x.shape[-2] or (
        position_ids.ndim == 2 and position_ids.shape[0] not in (1, x.shape[0])
    ):
        fail(
            fn,
            f"position_ids of shape {tuple(position_ids.shape)} do not match x of "
            f"shape {tuple(x.shape)}; expected (seq,) or (batch, seq) = "
            f"({x.shape[0]}, {x.shape[-2]})",
        )
    if position_ids.numel() and int(position_ids.min()) < 0:
        fail(
            fn,
            f"position_ids must be non-negative, got minimum {int(position_ids.min())}",
        )
    return position_ids.long()


def _check_tokens(fn: str, x: torch.Tensor, d_model: int) -> torch.Tensor:
    x = require_float_tensor(fn, "x", x)
    require_ndim(fn, "x", x, 3, "(batch, seq, d_model)")
    if x.shape[-1] != d_model:
        fail(
            fn,
            f"x must have d_model={d_model} features in its last dimension, "
            f"got {describe(x)}",
        )
    return x


class SinusoidalPositionalEncoding(nn.Module):
    r"""Add the fixed sinusoidal encoding to token embeddings.

    .. math::

        h_p = s \cdot x_p + PE_p, \qquad s = \sqrt{d_\text{model}}
        \text{ if } \texttt{scale\_embeddings} \text{ else } 1

    Vaswani et al. multiply the embedding weights by :math:`\sqrt{d_\text{model}}`
    (section 3.4): embeddings initialised with standard deviation
    :math:`1/\sqrt{d_\text{model}}` would otherwise be drowned by the encoding, whose
    entries are of size 1. ``scale_embeddings=True`` does that scaling here. The table
    is recomputed (not learned) and grows when a position beyond it is requested.

    Args:
        d_model: embedding width (even).
        max_len: positions precomputed at construction (the table grows on demand).
        base: frequency base, 10000 in the paper.
        layout: ``"interleaved"`` or ``"concat"``, see :func:`sinusoidal_encoding`.
        scale_embeddings: multiply ``x`` by ``sqrt(d_model)`` before adding.
        dropout: dropout probability applied to the sum (0 disables it).

    Shapes: ``forward(x, position_ids=None)`` takes ``x`` ``(batch, seq, d_model)`` and
    optional integer ``position_ids`` ``(seq,)`` or ``(batch, seq)`` (default
    ``0..seq-1``), and returns ``(batch, seq, d_model)``.

    Paper: Vaswani et al., "Attention Is All You Need", 2017, sections 3.4-3.5.

    Example:
        >>> enc = SinusoidalPositionalEncoding(4)
        >>> enc(torch.zeros(1, 2, 4))[0, 1]
        tensor([0.8415, 0.5403, 0.0100, 0.9999])
    """

    pe: torch.Tensor

    def __init__(
        self,
        d_model: int,
        max_len: int = 512,
        *,
        base: float = 10000.0,
        layout: str = "interleaved",
        scale_embeddings: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        fn = "SinusoidalPositionalEncoding"
        self.d_model = require_positive_int(fn, "d_model", d_model)
        if d_model % 2 != 0:
            fail(
                fn,
                f"d_model must be even (sines and cosines come in pairs), "
                f"got d_model={d_model}",
            )
        self.base = require_base(fn, base)
        self.layout = _check_layout(fn, layout)
        self.scale = math.sqrt(d_model) if scale_embeddings else 1.0
        self.dropout = nn.Dropout(dropout)
        pe = sinusoidal_encoding(
            require_positive_int(fn, "max_len", max_len),
            d_model,
            base=base,
            layout=layout,
        )
        self.register_buffer("pe", pe, persistent=False)

    def _grow(self, n: int) -> None:
        """Extend the table to at least ``n`` positions (doubling, to grow rarely)."""
        if n > self.pe.shape[0]:
            new_len = max(n, 2 * self.pe.shape[0])
            pe = sinusoidal_encoding(
                new_len, self.d_model, base=self.base, layout=self.layout
            )
            self.pe = pe.to(self.pe.device)

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        fn = "SinusoidalPositionalEncoding.forward"
        x = _check_tokens(fn, x, self.d_model)
        if position_ids is None:
            position_ids = torch.arange(x.shape[1], device=x.device)  # (seq,)
        else:
            position_ids = _check_positions(fn, position_ids, x)
        if position_ids.numel():
            self._grow(int(position_ids.max()) + 1)
        pe = self.pe[position_ids].to(x.dtype)  # (seq, d) or (batch, seq, d)
        return self.dropout(x * self.scale + pe)  # (batch, seq, d_model)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, base={self.base}, layout={self.layout!r}, "
            f"scale={self.scale:.4g}"
        )


class LearnedPositionalEncoding(nn.Module):
    r"""Add a trainable position table to token embeddings (BERT, GPT-2 style).

    .. math::

        h_p = s \cdot x_p + E_p, \qquad E \in \mathbb{R}^{\text{max\_len}
        \times d_\text{model}}

    Unlike the sinusoids, the table has no row for a position ``>= max_len``: such a
    position raises a ``ValueError`` that names ``max_len``, because a model with a
    learned table cannot process longer sequences without new parameters.

    Args:
        max_len: number of learnable positions.
        d_model: embedding width.
        scale_embeddings: multiply ``x`` by ``sqrt(d_model)`` before adding.
        dropout: dropout probability applied to the sum.
        init_std: standard deviation of the normal initialisation (0.02, the
            ``initializer_range`` of BERT and of Hugging Face's GPT-2; OpenAI's GPT-2
            code draws its position table ``wpe`` with 0.01).
        generator: optional ``torch.Generator`` for a reproducible initialisation.

    Shapes: ``forward(x, position_ids=None)`` as in
    :class:`SinusoidalPositionalEncoding`; returns ``(batch, seq, d_model)``.

    Paper: Devlin et al., BERT, 2019; compared with sinusoids in Vaswani et al. (2017,
    section 3.5, "nearly identical results").

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> enc = LearnedPositionalEncoding(4, 8, generator=g)
        >>> enc(torch.zeros(1, 4, 8)).shape
        torch.Size([1, 4, 8])
    """

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        scale_embeddings: bool = False,
        dropout: float = 0.0,
        init_std: float = 0.02,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        fn = "LearnedPositionalEncoding"
        self.max_len = require_positive_int(fn, "max_len", max_len)
        self.d_model = require_positive_int(fn, "d_model", d_model)
        self.scale = math.sqrt(d_model) if scale_embeddings else 1.0
        self.dropout = nn.Dropout(dropout)
        self.weight = nn.Parameter(
            torch.randn(max_len, d_model, generator=generator) * init_std
        )

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        fn = "LearnedPositionalEncoding.forward"
        x = _check_tokens(fn, x, self.d_model)
        if position_ids is None:
            if x.shape[1] > self.max_len:
                fail(
                    fn,
                    f"sequence length {x.shape[1]} exceeds max_len={self.max_len}"
                    f": the learned table has no row for positions >= {self.max_len}",
                )
            position_ids = torch.arange(x.shape[1], device=x.device)  # (seq,)
        else:
            position_ids = _check_positions(fn, position_ids, x)
            if position_ids.numel() and int(position_ids.max()) >= self.max_len:
                fail(
                    fn,
                    f"position {int(position_ids.max())} exceeds the table: "
                    f"max_len={self.max_len}, so positions must be < {self.max_len}",
                )
        e = self.weight[position_ids].to(x.dtype)  # (seq, d) or (batch, seq, d)
        return self.dropout(x * self.scale + e)  # (batch, seq, d_model)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}, scale={self.scale:.4g}"


def position_ids_from_attention_mask(mask: torch.Tensor) -> torch.Tensor:
    r"""Position ids for a padded batch: real tokens 0, 1, 2, ... in order, padding 0.

    The cumulative-sum trick: the position of a real token is the number of real
    tokens before it,

    .. math::

        \text{pos}_{b,t} = m_{b,t}\,\Bigl(\sum_{s \le t} m_{b,s} - 1\Bigr),

    which works for left padding, right padding and any mix (padding gets 0; it is
    masked out of attention anyway). With these ids a left-padded sequence sees the
    same positional encodings as the unpadded one.

    Args:
        mask: ``(batch, seq)`` boolean or 0/1 integer tensor, 1/True for real tokens.

    Returns:
        Long tensor of shape ``(batch, seq)``.

    Example:
        >>> position_ids_from_attention_mask(torch.tensor([[0, 0, 1, 1, 1],
        ...                                                [1, 1, 1, 0, 0]]))
        tensor([[0, 0, 0, 1, 2],
                [0, 1, 2, 0, 0]])
    """
    fn = "position_ids_from_attention_mask"
    mask = require_tensor(fn, "mask", mask)
    require_ndim(fn, "mask", mask, 2, "(batch, seq)")
    if mask.is_floating_point() or mask.is_complex():
        fail(
            fn,
            f"mask must be a boolean or 0/1 integer tensor, got {describe(mask)}",
            TypeError,
        )
    m = mask.long()
    if m.numel() and not bool(((m == 0) | (m == 1)).all()):
        fail(
            fn, f"mask must contain only 0 and 1, got values {torch.unique(m).tolist()}"
        )
    return (m.cumsum(dim=-1) - 1).clamp(min=0) * m  # (batch, seq)
