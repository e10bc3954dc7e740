r"""Rotary position embedding (RoPE): rotate queries and keys by their positions.

Su et al. (2021) encode position :math:`m` by rotating each 2-D pair of a query or key
vector by the angle :math:`m\theta_i`, with the frequencies

.. math::

    \theta_i = \text{base}^{-2i/d}, \qquad i = 0, \dots, d/2 - 1 .

Because rotations compose, :math:`\langle R_m q, R_n k\rangle = \langle q,
R_{n-m} k\rangle`: the attention score depends on the positions only through their
difference, and no absolute position is added to the token stream.

Two conventions pair the dimensions differently, and mixing them silently breaks a
model:

* ``"interleaved"`` pairs ``(2i, 2i+1)``: the paper, RoFormer, Meta's original LLaMA
  code (complex multiplication), rotary-embedding-torch.
* ``"half"`` ("rotate half") pairs ``(i, i + d/2)``: GPT-NeoX and Hugging Face Llama.

Both use the same frequencies; they differ by a fixed permutation of the head
dimensions (:func:`interleaved_to_half_permutation`), which is why a checkpoint can be
converted by permuting the rows of :math:`W_Q` and :math:`W_K`
(:func:`course_lib.conventions.rope_interleaved_to_half_weights`).
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    describe,
    fail,
    require_base,
    require_float_tensor,
    require_positive_int,
    require_rotary_dim,
    require_tensor,
)
from .rope_scaling import rope_scaled_frequencies

__all__ = [
    "RotaryEmbedding",
    "apply_rope",
    "apply_rope_complex",
    "interleaved_to_half_permutation",
    "rope_angles",
    "rope_frequencies",
]

_CONVENTIONS = ("interleaved", "half")


def _check_convention(fn: str, convention: object) -> str:
    if convention not in _CONVENTIONS:
        fail(
            fn,
            f"convention must be 'interleaved' (pairs (2i, 2i+1): RoFormer, Meta "
            f"LLaMA) or 'half' (pairs (i, i+d/2): GPT-NeoX, HF Llama), "
            f"got {convention!r}",
        )
    return convention  # type: ignore[return-value]


def rope_frequencies(
    head_dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    r"""The RoPE rotation frequencies, one per pair of dimensions.

    .. math::

        \theta_i = \text{base}^{-2i/d}, \qquad i = 0, \dots, d/2 - 1

    Args:
        head_dim: the dimension :math:`d` of one head, even.
        base: 10000 in the paper (larger bases, e.g. 500000 in Llama 3, slow the
            rotations down).
        dtype: floating dtype of the result (computed in float64, rounded once).

    Returns:
        Tensor of shape ``(head_dim // 2,)``, decreasing from 1.

    Paper: Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding",
    2021, eq. (15).

    Example:
        >>> rope_frequencies(4)
        tensor([1.0000, 0.0100])
    """
    fn = "rope_frequencies"
    head_dim = require_rotary_dim(fn, head_dim)
    base = require_base(fn, base)
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return (base ** (-2.0 * i / head_dim)).to(dtype)  # (head_dim // 2,)


def _check_positions(fn: str, positions: object, x: torch.Tensor) -> torch.Tensor:
    """Integer positions with last dim ``seq`` that broadcast to ``x.shape[:-1]``."""
    positions = require_tensor(fn, "positions", positions)
    if (
        positions.is_floating_point()
        or positions.is_complex()
        or (positions.dtype == torch.bool)
    ):
        fail(
            fn,
            f"positions must be an integer tensor (seq,), got {describe(positions)}",
            TypeError,
        )
    lead = x.shape[:-1]
    ok = positions.ndim >= 1 and positions.shape[-1] == x.shape[-2]
    if ok:
        try:
            ok = torch.broadcast_shapes(positions.shape, lead) == lead
        except RuntimeError:
            ok = False
    if not ok:
        fail(
            fn,
            f"positions must have shape (seq,) = ({x.shape[-2]},) (or broadcast to "
            f"{tuple(lead)}) for x of shape {tuple(x.shape)}, "
            f"got {describe(positions)}",
        )
    return positions


def rope_angles(
    positions: torch.Tensor, head_dim: int, *, base: float = 10000.0
) -> torch.Tensor:
    r"""The rotation angles :math:`m\,\theta_i` for every position and pair.

    Computed in float64: for the pairs :math:`i \ge 1`, :math:`\theta_i` itself is
    rounded in float32 (a relative error up to :math:`2^{-24}`) and the product
    :math:`m\,\theta_i` rounds again, so at positions of tens of thousands the angle
    is off by a few thousandths of a radian. (Pair 0 is exact in float32 up to
    :math:`m = 2^{24}`: :math:`m \cdot 1` is an integer.)

    Args:
        positions: integer tensor ``(..., seq)``.
        head_dim: head dimension (even).
        base: frequency base.

    Returns:
        Float64 tensor ``(..., seq, head_dim // 2)``.

    Example:
        >>> rope_angles(torch.tensor([0, 2]), 4)
        tensor([[0.0000, 0.0000],
                [2.0000, 0.0200]], dtype=torch.float64)
    """
    fn = "rope_angles"
    positions = require_tensor(fn, "positions", positions)
    if positions.is_floating_point() or positions.is_complex():
        fail(
            fn,
            f"positions must be an integer tensor, got {describe(positions)}",
            TypeError,
        )
    head_dim = require_rotary_dim(fn, head_dim)
    theta = rope_frequencies(head_dim, base=base, dtype=torch.float64)
    theta = theta.to(positions.device)
    return positions.to(torch.float64)[..., None] * theta  # (..., seq, head_dim/2)


def _rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, convention: str
) -> torch.Tensor:
    """Rotate the pairs of ``x`` (..., seq, d); cos and sin are (..., seq, d/2)."""
    if convention == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., seq, d/2) each: pairs (2i, 2i+1)
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)  # (..., seq, d)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # (..., seq, d/2) each: pairs (i, i+d/2)
    return torch.cat(
        (x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1
    )  # (..., seq, d)


def _complex_viewable(x: torch.Tensor) -> bool:
    """Whether ``x`` (..., d) can be viewed as complex pairs without a copy."""
    return (
        x.stride(-1) == 1
        and x.storage_offset() % 2 == 0
        and all(s % 2 == 0 for s in x.stride()[:-1])
    )


def _complex_pairs(x: torch.Tensor) -> torch.Tensor:
    """View ``x`` (..., d) as the complex pairs ``x[2i] + i x[2i+1]`` (..., d/2).

    No copy, unless the strides of ``x`` forbid a complex view."""
    if not _complex_viewable(x):
        x = x.contiguous()
    return torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # (..., d/2) complex


def _rotate_cached(
    x: torch.Tensor,
    factors: tuple[torch.Tensor, ...],
    convention: str,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Fast form of :func:`_rotate` with factors precomputed per position.

    Interleaved: one complex multiply :math:`z_i e^{\mathrm{i} m\theta_i}` with the
    cached polar factors, reading ``x`` once and writing the output once. Half: the
    output is born as ``x * [cos | cos]`` and the two sine terms are added in place
    (``addcmul_``), instead of materialising ``rotate_half(x)`` and two products.

    Args:
        x: ``(..., seq, d)`` in the compute dtype.
        factors: ``(polar,)`` with ``polar`` complex ``(..., seq, d/2)`` for
            ``"interleaved"``; ``(cos2, sin)`` with ``cos2 = [cos | cos]``
            ``(..., seq, d)`` and ``sin`` ``(..., seq, d/2)`` for ``"half"``.
        convention: ``"interleaved"`` or ``"half"``.
        out: optional ``(..., seq, d)`` tensor to write into instead of allocating;
            for ``"interleaved"`` it must allow a complex view (even strides), for
            ``"half"`` it must not overlap ``x``.

    Returns:
        ``(..., seq, d)`` rotated tensor (``out`` when given), equal to
        :func:`_rotate` (tested).
    """
    if convention == "interleaved":
        (polar,) = factors
        if out is None:
            return torch.view_as_real(_complex_pairs(x) * polar).flatten(-2)  # (.., d)
        torch.mul(_complex_pairs(x), polar, out=_complex_pairs(out))
        return out
    cos2, sin = factors
    if out is None and torch.is_grad_enabled() and x.requires_grad:
        return _HalfRotation.apply(x, cos2, sin, 1.0)
    if out is None:
        out = torch.empty_like(x)
    _rotate_half_blocked(x, cos2, sin, 1.0, out)
    return out


BLOCK_BYTES_PER_THREAD = 512 << 10
"""Bytes of ``x`` per intra-op thread in one block of the rotate-half path: a block
and its output (1 MiB together) stay in the 1 MiB L2 cache of the core working on
them between the three passes. Measured with one thread on a 2-core AMD EPYC (1 MiB
of L2 per core, 32 MiB of L3 shared with other tenants): against 2 MiB, 512 KiB
blocks took 0.75 to 0.9 times as long at (4, 8, 1024, 64) (ad-hoc timings and
``benchmarks/RESULTS.md``) and as long, within the noise, at (1, 32, 4096, 128);
256 KiB was as fast at the small shape and slower at the large one, where a
block's 32 heads are then 32 runs of only 8 KiB each from main memory."""


MAX_BLOCKS = 4
"""With more than one intra-op thread, at most this many blocks, or none: every block
is three kernels, each ending with the threads waiting for one another, and on a
machine whose cores are busy with other work such a wait can last a scheduler time
slice. Measured with ``benchmarks/bench_rope.py`` at load 4 on 2 cores with 2
threads, 32 blocks of (1, 32, 4096, 128) took 3.9 times as long as one pass (184 ms
against 48 ms), while on a quiet machine they gain less than a tenth; a tensor that
needs more blocks than this goes in one pass. One thread never waits for another:
there the blocks are not limited."""


def _half_block(x: torch.Tensor) -> int:
    """Positions per block for ``x`` ``(..., seq, d)``: all heads and batch rows of
    a position stay together (they share its table row); at least one position, and
    all of them when more than ``MAX_BLOCKS`` blocks would be needed by more than one
    thread."""
    seq = x.shape[-2]
    threads = torch.get_num_threads()
    per_position = x.numel() // max(seq, 1) * x.element_size()  # bytes
    step = max(1, BLOCK_BYTES_PER_THREAD * threads // max(per_position, 1))
    if threads > 1 and -(-seq // step) > MAX_BLOCKS:
        return max(seq, 1)
    return step


def _rotate_half_blocked(
    x: torch.Tensor,
    cos2: torch.Tensor,
    sin: torch.Tensor,
    sign: float,
    out: torch.Tensor,
) -> None:
    r"""Write the rotate-half rotation of ``x`` into ``out`` (no shared memory).

    ``out = x * [cos | cos]``, then ``out[:h] -= sign x[h:] sin`` and ``out[h:] +=
    sign x[:h] sin`` (``sign=-1`` rotates backwards: the transpose, for the gradient).
    Three passes; when a few blocks of positions (:func:`_half_block`) cover ``x``,
    they run block by block, so the second and third pass read what the first has
    just written from the cache, and main memory sees about one read of ``x`` and one
    write of ``out``, as for the interleaved complex multiply. Every element gets the
    same operations as without blocks.

    Args:
        x: ``(..., seq, d)``.
        cos2: ``[cos | cos]``, ``(..., seq, d)`` broadcasting to ``x``.
        sin: ``(..., seq, d/2)`` broadcasting to ``x[..., :d/2]``.
        sign: ``1.0`` or ``-1.0``.
        out: ``(..., seq, d)`` like ``x``, not overlapping it.
    """
    half = x.shape[-1] // 2
    step = _half_block(x)
    # The halves are sliced once here and split into blocks with the rest: a slice
    # like ``ob[..., :half]`` costs about 1.5 us of Python, nearly what launching a
    # kernel costs, and the loop would otherwise take four of them per block.
    parts = (x, x[..., :half], x[..., half:], cos2, sin, out)
    parts += (out[..., :half], out[..., half:])
    if step >= x.shape[-2]:
        blocks = [parts]
    else:  # views, split once: the loop below only launches kernels
        blocks = zip(*(p.split(step, dim=-2) for p in parts), strict=True)
    for xb, x1, x2, cb, sb, ob, o1, o2 in blocks:
        torch.mul(xb, cb, out=ob)  # [x1 cos | x2 cos]
        o1.addcmul_(x2, sb, value=-sign)  # x1 cos - x2 sin
        o2.addcmul_(x1, sb, value=sign)  # x2 cos + x1 sin


class _HalfRotation(torch.autograd.Function):
    """Rotate-half RoPE with its gradient: the rotation is linear in ``x`` and its
    transpose is the rotation by the opposite angles (``sign`` flipped), computed by
    the same blocked kernel. Differentiable twice (the backward calls ``apply``)."""

    @staticmethod
    def forward(ctx, x, cos2, sin, sign):  # noqa: D102
        ctx.save_for_backward(cos2, sin)
        ctx.sign = sign
        out = torch.empty_like(x)
        _rotate_half_blocked(x, cos2, sin, sign, out)
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        cos2, sin = ctx.saved_tensors
        return _HalfRotation.apply(grad, cos2, sin, -ctx.sign), None, None, None


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    base: float = 10000.0,
    convention: str = "interleaved",
) -> torch.Tensor:
    r"""Rotate each pair of dimensions of ``x`` by its position times its frequency.

    For pair :math:`(a, b)` of a vector at position :math:`m` with frequency
    :math:`\theta_i`:

    .. math::

        \begin{pmatrix} a' \\ b' \end{pmatrix} =
        \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\
                         \sin m\theta_i & \cos m\theta_i \end{pmatrix}
        \begin{pmatrix} a \\ b \end{pmatrix}

    where the pair is ``(x[2i], x[2i+1])`` for ``convention="interleaved"`` and
    ``(x[i], x[i + d/2])`` for ``convention="half"``.

    The rotation is computed in float32 (float64 for float64 input) and the result has
    the dtype of ``x``.

    Args:
        x: queries or keys ``(..., seq, head_dim)``, e.g. ``(batch, heads, seq, d)``.
        positions: integer positions ``(seq,)``; default ``arange(seq)``. Use an offset
            (``arange(t, t + seq)``) when decoding with a key/value cache. Any integer
            shape whose last dimension is ``seq`` and which broadcasts to
            ``x.shape[:-1]`` (e.g. ``(batch, 1, seq)``) is accepted too.
        base: frequency base (10000 in the paper).
        convention: ``"interleaved"`` or ``"half"``.

    Returns:
        Tensor of the same shape and dtype as ``x``.

    Paper: Su et al., "RoFormer", 2021, eq. (34); rotate-half: Black et al.,
    GPT-NeoX-20B, 2022.

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # two positions, head_dim 2
        >>> apply_rope(x)  # position 1 is rotated by 1 radian
        tensor([[1.0000, 0.0000],
                [0.5403, 0.8415]])
    """
    fn = "apply_rope"
    x = require_float_tensor(fn, "x", x)
    if x.ndim < 2:
        fail(
            fn,
            f"x must have at least 2 dimensions (..., seq, head_dim), "
            f"got {describe(x)}",
        )
    if x.shape[-1] % 2 != 0:
        fail(
            fn,
            f"head_dim must be even (RoPE rotates pairs), got x of shape "
            f"{tuple(x.shape)}",
        )
    convention = _check_convention(fn, convention)
    base = require_base(fn, base)
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)  # (seq,)
    else:
        positions = _check_positions(fn, positions, x)

    angles = rope_angles(positions, x.shape[-1], base=base)  # (..., seq, d/2)
    dt = _compute_dtype(x)
    cos, sin = angles.cos().to(dt), angles.sin().to(dt)
    return _rotate(x.to(dt), cos, sin, convention).to(x.dtype)


def apply_rope_complex(
    x: torch.Tensor, positions: torch.Tensor | None = None, *, base: float = 10000.0
) -> torch.Tensor:
    r"""Interleaved RoPE as complex multiplication (Meta's LLaMA formulation).

    Read the pair ``(x[2i], x[2i+1])`` as the complex number
    :math:`z_i = x_{2i} + \mathrm{i}\, x_{2i+1}`; rotating by :math:`m\theta_i` is

    .. math::

        z_i' = z_i\, e^{\mathrm{i} m \theta_i}.

    Equal to ``apply_rope(x, positions, base=base, convention="interleaved")``.

    Args:
        x: ``(..., seq, head_dim)`` float32 or float64 (other float dtypes are computed
            in float32).
        positions: as in :func:`apply_rope`.
        base: frequency base.

    Returns:
        Tensor of the same shape and dtype as ``x``.

    Paper: Su et al., "RoFormer", 2021, section 3.4.2 (complex form).

    Example:
        >>> x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(0))
        >>> torch.allclose(apply_rope_complex(x), apply_rope(x), atol=1e-6)
        True
    """
    fn = "apply_rope_complex"
    x = require_float_tensor(fn, "x", x)
    if x.ndim < 2 or x.shape[-1] % 2 != 0:
        fail(
            fn,
            f"x must be (..., seq, head_dim) with an even head_dim, got {describe(x)}",
        )
    base = require_base(fn, base)
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)  # (seq,)
    else:
        positions = _check_positions(fn, positions, x)
    dt = _compute_dtype(x)
    angles = rope_angles(positions, x.shape[-1], base=base)  # (..., seq, d/2)
    rot = torch.polar(torch.ones_like(angles), angles).to(
        torch.complex128 if dt == torch.float64 else torch.complex64
    )  # (..., seq, d/2) complex
    z = torch.view_as_complex(
        x.to(dt).reshape(*x.shape[:-1], -1, 2).contiguous()
    )  # (..., seq, d/2) complex
    return torch.view_as_real(z * rot).flatten(-2).to(x.dtype)  # (..., seq, d)


def interleaved_to_half_permutation(head_dim: int) -> torch.Tensor:
    r"""The permutation that turns the interleaved pairing into the rotate-half pairing.

    ``P = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]`` (evens, then odds) moves pair
    ``(2i, 2i+1)`` to ``(i, i + d/2)``, so that

    .. math::

        \operatorname{rope}_\text{half}(x_P) = \operatorname{rope}_\text{int}(x)_P.

    Applied per head to the output rows of :math:`W_Q` and :math:`W_K` it converts an
    interleaved checkpoint into a rotate-half one (scores unchanged, because
    :math:`q_P \cdot k_P = q \cdot k`). Its inverse is ``torch.argsort(P)``.

    Args:
        head_dim: even head dimension.

    Returns:
        Long tensor of shape ``(head_dim,)``.

    Example:
        >>> interleaved_to_half_permutation(6)
        tensor([0, 2, 4, 1, 3, 5])
    """
    head_dim = require_rotary_dim("interleaved_to_half_permutation", head_dim)
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


def _check_out(fn: str, out: object, x: torch.Tensor) -> None:
    out = require_tensor(fn, "out", out)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        fail(
            fn,
            f"out must have the shape, dtype and device of x ({tuple(x.shape)}, "
            f"{x.dtype}, {x.device}), got {describe(out)} on {out.device}",
        )
    if torch.is_grad_enabled() and (x.requires_grad or out.requires_grad):
        fail(
            fn,
            "out is for inference and gradients do not flow through it; call "
            "without out (or under torch.no_grad()), got x or out requiring grad",
        )


def _writable_directly(out: torch.Tensor, x: torch.Tensor, convention: str) -> bool:
    """Whether :func:`_rotate_cached` may write into ``out`` while reading ``x``."""
    if convention == "interleaved":  # elementwise: exact aliasing (in place) is safe
        exact = out.data_ptr() == x.data_ptr() and out.stride() == x.stride()
        apart = out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        return _complex_viewable(out) and _complex_viewable(x) and (exact or apart)
    # half reads both halves of x after writing the output: no shared storage
    return out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


class RotaryEmbedding(nn.Module):
    r"""RoPE as a module: cached cos/sin tables, optional partial rotation.

    .. math::

        \operatorname{rope}(x)_{m} = R_{m\Theta}\, x_m \text{ on the first }
        \texttt{rotary\_dim} \text{ features; the rest pass through unchanged}

    The cos/sin tables for positions ``0 .. max_seq_len-1`` are computed once (float64,
    kept in float64) and grow, by doubling, when a larger
    position is requested. ``forward`` applies the same rotation as
    :func:`apply_rope` (tested equal) by its fast form: from the tables it derives, once
    per compute dtype and device, the factors it multiplies by (complex
    :math:`e^{\mathrm{i} m\theta_i}` for ``"interleaved"``, ``[cos | cos]`` and
    ``sin`` for ``"half"``), so a call is one slice of the cache and one pass over
    ``x``.

    Args:
        head_dim: dimension of one head.
        rotary_dim: number of leading features to rotate (even, at most ``head_dim``;
            default ``head_dim``). GPT-NeoX and GPT-J rotate only a fraction.
        base: frequency base.
        convention: ``"interleaved"`` or ``"half"`` (pairs within the rotated part).
        max_seq_len: positions cached at construction.
        scaling: optional context extension, a dict of the keyword arguments of
            :func:`course_lib.rope_scaling.rope_scaled_frequencies` (``method``,
            ``factor``, ``original_max_position`` and Hugging Face
            ``rope_parameters`` keys), e.g.
            ``{"method": "yarn", "factor": 4.0, "original_max_position": 2048}``.
            The tables become :math:`a\cos(m\theta_i')`, :math:`a\sin(m\theta_i')`
            with the scaled frequencies :math:`\theta'` and attention factor
            :math:`a`. For ``"dynamic"`` the frequencies follow the length in use
            (the largest position + 1, at least ``original_max_position``) and are
            recomputed whenever it changes; ``seq_len`` cannot be given here.
            Leave ``factor`` out for the YaRN paper's dynamic rule
            :math:`s = \max(1, \ell/L)`; a ``factor`` is Hugging Face's slope
            (see :func:`course_lib.rope_scaling.dynamic_ntk_factor`), not the
            target ratio.

    Shapes: ``forward(x, positions=None)``: ``x`` ``(..., seq, head_dim)``,
    ``positions`` integer ``(seq,)`` (default ``arange(seq)``); returns the shape and
    dtype of ``x``.

    Paper: Su et al., "RoFormer", 2021; partial rotary: Black et al., GPT-NeoX-20B,
    2022.

    Example:
        >>> rope = RotaryEmbedding(8)
        >>> x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(0))
        >>> torch.allclose(rope(x), apply_rope(x))
        True
    """

    cos_cached: torch.Tensor
    sin_cached: torch.Tensor

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        convention: str = "interleaved",
        max_seq_len: int = 2048,
        scaling: dict | None = None,
    ) -> None:
        super().__init__()
        fn = "RotaryEmbedding"
        self.head_dim = require_positive_int(fn, "head_dim", head_dim)
        rotary_dim = head_dim if rotary_dim is None else rotary_dim
        self.rotary_dim = require_rotary_dim(fn, rotary_dim, "rotary_dim")
        if self.rotary_dim > self.head_dim:
            fail(
                fn,
                f"rotary_dim must be at most head_dim={head_dim}, "
                f"got rotary_dim={rotary_dim}",
            )
        self.base = require_base(fn, base)
        self.convention = _check_convention(fn, convention)
        max_seq_len = require_positive_int(fn, "max_seq_len", max_seq_len)
        self.scaling = self._check_scaling(fn, scaling)
        self._dynamic_len: int | None = None  # length the dynamic tables are made for
        cos, sin = self._tables(max_seq_len, torch.device("cpu"))
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)
        self._factors: dict[tuple[torch.dtype, torch.device], tuple] = {}

    def _check_scaling(self, fn: str, scaling: object) -> dict | None:
        if scaling is None:
            return None
        if not isinstance(scaling, dict) or "method" not in scaling:
            fail(
                fn,
                "scaling must be a dict with at least 'method' and 'factor', e.g. "
                "{'method': 'linear', 'factor': 2.0}, got " + describe(scaling),
                TypeError,
            )
        if "seq_len" in scaling or "base" in scaling or "head_dim" in scaling:
            fail(
                fn,
                "scaling must not contain seq_len, base or head_dim (the module "
                "sets them), got keys " + ", ".join(map(str, scaling)),
            )
        scaling = dict(scaling)
        scaling.setdefault("factor", None)
        self._scaled(scaling, None)  # validate now: errors name the bad key
        return scaling

    def _scaled(self, scaling: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
        extra = {} if seq_len is None else {"seq_len": seq_len}
        return rope_scaled_frequencies(
            self.rotary_dim, base=self.base, dtype=torch.float64, **scaling, **extra
        )  # (rotary_dim/2,) float64, attention factor

    def _tables(
        self, n: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.scaling is None:
            angles = rope_angles(
                torch.arange(n, device=device), self.rotary_dim, base=self.base
            )  # (n, rotary_dim/2) float64
            return angles.cos(), angles.sin()
        seq_len = None
        if self.scaling["method"] in ("dynamic", "longrope"):
            seq_len = self._dynamic_len or self.scaling["original_max_position"]
        inv_freq, attention = self._scaled(self.scaling, seq_len)
        positions = torch.arange(n, device=device, dtype=torch.float64)
        angles = positions[:, None] * inv_freq.to(device)  # (n, rotary_dim/2)
        return attention * angles.cos(), attention * angles.sin()

    @property
    def cached_len(self) -> int:
        """Number of positions currently in the cos/sin cache."""
        return self.cos_cached.shape[0]

    def _grow(self, n: int) -> None:
        if self.scaling is not None and self.scaling["method"] in (
            "dynamic",
            "longrope",
        ):
            # the frequencies depend on the length in use: remake them when it changes
            length = max(n, self.scaling["original_max_position"])
            if length != self._dynamic_len:
                self._dynamic_len = length
                self.cos_cached, self.sin_cached = self._tables(
                    max(n, self.cached_len), self.cos_cached.device
                )
                self._factors.clear()
                return
        if n > self.cached_len:
            new_len = max(n, 2 * self.cached_len)
            self.cos_cached, self.sin_cached = self._tables(
                new_len, self.cos_cached.device
            )
            self._factors.clear()

    def _cached_factors(
        self, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, ...]:
        """Factors for all cached positions in ``dtype`` on ``device``, made once."""
        key = (dtype, device)
        if key not in self._factors:
            cos = self.cos_cached.to(device=device, dtype=dtype)  # (n, r/2)
            sin = self.sin_cached.to(device=device, dtype=dtype)  # (n, r/2)
            if self.convention == "interleaved":
                self._factors[key] = (torch.complex(cos, sin),)  # (n, r/2) complex
            else:
                self._factors[key] = (torch.cat((cos, cos), dim=-1), sin)  # (n, r)
        return self._factors[key]

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Rotate ``x`` ``(..., seq, head_dim)``; write into ``out`` when given.

        ``out`` (same shape, dtype and device as ``x``) receives the result without
        a new tensor being allocated, e.g. a slice of a preallocated key cache, or
        ``x`` itself to rotate in place. It is for inference: gradients do not flow
        through it.
        """
        fn = "RotaryEmbedding.forward"
        x = require_float_tensor(fn, "x", x)
        if x.ndim < 2 or x.shape[-1] != self.head_dim:
            fail(
                fn,
                f"x must be (..., seq, head_dim) with head_dim={self.head_dim}, "
                f"got {describe(x)}",
            )
        if out is not None:
            _check_out(fn, out, x)
        seq = x.shape[-2]
        if positions is None:
            self._grow(seq)
        else:
            positions = _check_positions(fn, positions, x)
            if positions.numel() and int(positions.min()) < 0:
                fail(
                    fn,
                    f"positions must be non-negative to index the cache, "
                    f"got minimum {int(positions.min())}",
                )
            if positions.numel():
                self._grow(int(positions.max()) + 1)
        dt = _compute_dtype(x)
        factors = self._cached_factors(dt, x.device)
        if positions is None:
            factors = tuple(f[:seq] for f in factors)  # (seq, ...): views, no copy
        else:
            idx = positions.long().to(x.device)
            factors = tuple(f[idx] for f in factors)  # (..., seq, ...)
        r = self.rotary_dim
        if out is None:
            rotated = _rotate_cached(x[..., :r].to(dt), factors, self.convention)
            if r < self.head_dim:
                rotated = torch.cat((rotated, x[..., r:].to(dt)), dim=-1)  # (.., D)
            return rotated.to(x.dtype)
        if r < self.head_dim:
            out[..., r:].copy_(x[..., r:])  # pass-through features (a no-op in place)
        target = out[..., :r]  # (..., seq, r)
        if dt == x.dtype and _writable_directly(target, x[..., :r], self.convention):
            _rotate_cached(x[..., :r], factors, self.convention, out=target)
        else:  # another dtype, odd strides or an overlap: compute, then copy
            target.copy_(_rotate_cached(x[..., :r].to(dt), factors, self.convention))
        return out

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
            f"base={self.base}, convention={self.convention!r}, "
            f"cached_len={self.cached_len}"
            + ("" if self.scaling is None else f", scaling={self.scaling!r}")
        )
