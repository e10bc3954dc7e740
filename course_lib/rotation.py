r"""Relative offsets of sinusoidal encodings are rotations.

Vaswani et al. (2017) chose sinusoids because "for any fixed offset :math:`k`,
:math:`PE_{p+k}` can be represented as a linear function of :math:`PE_p`". In the
interleaved layout each pair of columns :math:`(\sin p\omega_i, \cos p\omega_i)` is
moved by the angle-addition formulas

.. math::

    \begin{pmatrix} \sin (p+k)\omega \\ \cos (p+k)\omega \end{pmatrix}
    =
    \begin{pmatrix} \cos k\omega & \sin k\omega \\
                     -\sin k\omega & \cos k\omega \end{pmatrix}
    \begin{pmatrix} \sin p\omega \\ \cos p\omega \end{pmatrix},

a matrix that depends on :math:`k` but not on :math:`p`. (Note the sign: because
the sine comes first, the minus sits *below* the diagonal, the transpose of the usual
counter-clockwise rotation acting on :math:`(\cos, \sin)`.) Stacking one such block per
frequency gives :func:`offset_matrix`. The sympy helpers below derive the block and
prove its properties; the book shows them and the tests check them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from ._validate import fail, require_base, require_int, require_positive_int

if TYPE_CHECKING:  # sympy is imported where it is used: it costs ~0.4 s at start-up
    import sympy as sp

__all__ = [
    "OffsetBlockDerivation",
    "derive_offset_block",
    "offset_matrix",
    "symbolic_dot_product_depends_on_difference",
    "symbolic_pe_pair",
    "symbolic_rope_score",
]


def offset_matrix(
    k: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    r"""The linear map that shifts a sinusoidal encoding by ``k`` positions.

    .. math::

        PE_{p+k} = M(k)\, PE_p, \qquad
        M(k) = \operatorname{diag}_i \begin{pmatrix} \cos k\omega_i & \sin k\omega_i
        \\ -\sin k\omega_i & \cos k\omega_i \end{pmatrix},
        \quad \omega_i = \text{base}^{-2i/d_\text{model}}

    for every position :math:`p` (interleaved layout of
    :func:`~course_lib.sinusoidal.sinusoidal_encoding`). :math:`M(k)` is orthogonal
    with determinant 1, :math:`M(a) M(b) = M(a+b)` and :math:`M(-k) = M(k)^\top`.

    Args:
        k: the offset, any integer (negative shifts backwards).
        d_model: encoding width, even.
        base: frequency base (10000 in the paper).
        dtype: floating dtype of the result (computed in float64, rounded once).

    Returns:
        Tensor of shape ``(d_model, d_model)``, block diagonal with 2x2 blocks.

    Paper: Vaswani et al., "Attention Is All You Need", 2017, section 3.5.

    Example:
        >>> from course_lib.sinusoidal import sinusoidal_encoding
        >>> pe = sinusoidal_encoding(10, 4)
        >>> torch.allclose(offset_matrix(3, 4) @ pe[5], pe[8], atol=1e-6)
        True
    """
    fn = "offset_matrix"
    k = require_int(fn, "k", k)
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model % 2 != 0:
        fail(
            fn,
            f"d_model must be even (the encoding is made of (sin, cos) pairs), "
            f"got d_model={d_model}",
        )
    base = require_base(fn, base)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        fail(fn, f"dtype must be a floating torch.dtype, got {dtype!r}", TypeError)

    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    c, s = torch.cos(k * omega), torch.sin(k * omega)  # (d/2,), (d/2,)
    blocks = torch.stack((torch.stack((c, s), -1), torch.stack((-s, c), -1)), -2)
    # blocks: (d/2, 2, 2); block i acts on columns (2i, 2i+1) = (sin, cos)
    return torch.block_diag(*blocks.unbind(0)).to(dtype)  # (d_model, d_model)


def symbolic_pe_pair(p: sp.Expr, omega: sp.Expr) -> sp.Matrix:
    r"""One frequency of the interleaved encoding as a sympy column vector.

    .. math::

        \begin{pmatrix} \sin p\omega \\ \cos p\omega \end{pmatrix}

    Args:
        p: position (a sympy symbol or expression).
        omega: angular frequency :math:`\omega_i`.

    Returns:
        A 2x1 ``sympy.Matrix``.

    Example:
        >>> import sympy as sp
        >>> p, w = sp.symbols("p omega", real=True)
        >>> symbolic_pe_pair(p, w)
        Matrix([
        [sin(omega*p)],
        [cos(omega*p)]])
    """
    import sympy as sp

    return sp.Matrix([sp.sin(p * omega), sp.cos(p * omega)])


class OffsetBlockDerivation(NamedTuple):
    r"""The result of :func:`derive_offset_block`: the block and the proofs.

    Attributes:
        block: the 2x2 matrix :math:`M(k)` with :math:`M\,PE(p) = PE(p+k)`.
        p: the sympy symbol of the position.
        k: the sympy symbol of the offset.
        omega: the sympy symbol of the pair's frequency.
        residual: ``simplify(block * PE(p) - PE(p + k))``, the zero vector.
        d_block_d_p: ``diff(block, p)``, the zero matrix (no dependence on ``p``).
        gram_minus_identity: ``simplify(block.T * block - I)``, the zero matrix.
        determinant: ``simplify(block.det())``, equal to 1.
    """

    block: sp.Matrix
    p: sp.Symbol
    k: sp.Symbol
    omega: sp.Symbol
    residual: sp.Matrix
    d_block_d_p: sp.Matrix
    gram_minus_identity: sp.Matrix
    determinant: sp.Expr


def derive_offset_block() -> OffsetBlockDerivation:
    r"""Derive, with sympy, the 2x2 matrix that shifts one (sin, cos) pair by ``k``.

    Expand :math:`\sin(p+k)\omega` and :math:`\cos(p+k)\omega` with the
    angle-addition formulas, then read off the coefficients of
    :math:`\sin p\omega` and :math:`\cos p\omega`: they form the rows of the block.
    The returned record carries the simplifications that prove the block (a) maps
    :math:`PE(p)` to :math:`PE(p+k)`, (b) does not depend on :math:`p`, (c) is
    orthogonal and (d) has determinant 1, i.e. is a rotation.

    Returns:
        :class:`OffsetBlockDerivation`; ``block`` equals
        ``Matrix([[cos(k*omega), sin(k*omega)], [-sin(k*omega), cos(k*omega)]])``.

    Raises:
        AssertionError: if any of the four proofs does not simplify to zero / one
            (it cannot, unless sympy changes; the tests pin it).

    Example:
        >>> d = derive_offset_block()
        >>> d.block
        Matrix([
        [ cos(k*omega), sin(k*omega)],
        [-sin(k*omega), cos(k*omega)]])
        >>> d.residual.is_zero_matrix, d.determinant
        (True, 1)
    """
    import sympy as sp

    p, k, omega = sp.symbols("p k omega", real=True)
    s, c = sp.symbols("s c")  # stand-ins for sin(p*omega) and cos(p*omega)
    shifted = symbolic_pe_pair(p + k, omega)
    to_sc = {sp.sin(p * omega): s, sp.cos(p * omega): c}
    rows = []
    for entry in shifted:
        expanded = sp.expand(sp.expand_trig(sp.expand(entry))).subs(to_sc)
        poly = sp.Poly(expanded, s, c)
        rows.append([poly.coeff_monomial(s), poly.coeff_monomial(c)])
    block = sp.Matrix(rows)

    residual = sp.simplify(block * symbolic_pe_pair(p, omega) - shifted)
    d_block_d_p = block.diff(p)
    gram_minus_identity = sp.simplify(block.T * block - sp.eye(2))
    determinant = sp.simplify(block.det())
    assert residual.is_zero_matrix, residual
    assert d_block_d_p.is_zero_matrix, d_block_d_p
    assert gram_minus_identity.is_zero_matrix, gram_minus_identity
    assert determinant == 1, determinant
    return OffsetBlockDerivation(
        block, p, k, omega, residual, d_block_d_p, gram_minus_identity, determinant
    )


def symbolic_dot_product_depends_on_difference(n_pairs: int = 2) -> sp.Expr:
    r"""Simplify :math:`PE_p \cdot PE_q` with sympy: it depends on :math:`p - q` only.

    .. math::

        PE_p \cdot PE_q = \sum_i \sin p\omega_i \sin q\omega_i
        + \cos p\omega_i \cos q\omega_i = \sum_i \cos\bigl((p - q)\omega_i\bigr)

    Args:
        n_pairs: number of frequencies :math:`\omega_0, \dots` (symbols), at least 1.

    Returns:
        The simplified sympy expression in the symbols ``p``, ``q``, ``omega_i``; it is
        unchanged by ``p -> p + t, q -> q + t`` and symmetric in ``p - q``.

    Example:
        >>> symbolic_dot_product_depends_on_difference(1)
        cos(omega_0*(p - q))
    """
    import sympy as sp

    n_pairs = require_positive_int(
        "symbolic_dot_product_depends_on_difference", "n_pairs", n_pairs
    )
    p, q = sp.symbols("p q", real=True)
    omegas = sp.symbols(f"omega_0:{n_pairs}", real=True)
    dot = sum((symbolic_pe_pair(p, w).T * symbolic_pe_pair(q, w))[0, 0] for w in omegas)
    return sp.simplify(sp.trigsimp(dot))


def symbolic_rope_score(
    m: sp.Expr | None = None, n: sp.Expr | None = None
) -> tuple[sp.Expr, sp.Expr]:
    r"""RoPE on one 2-D pair: the score :math:`(R(m\theta) q)^\top (R(n\theta) k)`.

    .. math::

        (R_{m\theta} q)^\top R_{n\theta} k = q^\top R_{(n-m)\theta} k

    with :math:`R_\alpha = \begin{pmatrix}\cos\alpha & -\sin\alpha \\
    \sin\alpha & \cos\alpha\end{pmatrix}` (the rotation RoPE applies to each pair).

    Args:
        m: query position (default: the symbol ``m``).
        n: key position (default: the symbol ``n``).

    Returns:
        ``(score, difference)``: the simplified score, and
        ``score - q^T R((n-m)theta) k`` simplified (which is 0, proving the score
        depends on ``n - m`` only).

    Paper: Su et al., "RoFormer", 2021, eq. (16).

    Example:
        >>> score, difference = symbolic_rope_score()
        >>> difference
        0
    """
    import sympy as sp

    m = sp.Symbol("m", real=True) if m is None else m
    n = sp.Symbol("n", real=True) if n is None else n
    theta = sp.Symbol("theta", real=True)
    q0, q1, k0, k1 = sp.symbols("q_0 q_1 k_0 k_1", real=True)
    q, k = sp.Matrix([q0, q1]), sp.Matrix([k0, k1])

    def rot(a: sp.Expr) -> sp.Matrix:
        return sp.Matrix([[sp.cos(a), -sp.sin(a)], [sp.sin(a), sp.cos(a)]])

    score = sp.simplify(((rot(m * theta) * q).T * (rot(n * theta) * k))[0, 0])
    relative = (q.T * rot((n - m) * theta) * k)[0, 0]
    difference = sp.simplify(sp.expand_trig(sp.expand(score - relative)))
    return score, difference
