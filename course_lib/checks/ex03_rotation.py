"""Graders for ex03_rotation: shifting a sinusoidal encoding is a rotation.

``check_*`` run in the students' notebooks (public cells); ``grade_*`` run at grading
(hidden cells). Expected answers come from :mod:`course_lib.rotation` and
:mod:`course_lib.sinusoidal`, captured at import and computed before the student's
code runs. Known wrong answers (the transposed block that rotates backwards, the block
layout of the concatenated encoding, exponents off by a factor of 2, degrees instead of
radians, ...) are computed here so that a wrong answer is named.

The hand computation is graded from three numbers, passed in this order::

    check_hand_computation(pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4)

(``PE(p) . PE(q)`` for the interleaved encoding with ``d_model = 4``, base 10000). The
chapter works the offsets 1, 5 and 6 by hand; the exercise asks for offsets 2 and 3.
No public message states the expected numbers or the property the exercise asks the
student to find (that equal offsets give equal dot products).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course_lib.rotation import offset_matrix as _ref_offset_matrix
from course_lib.sinusoidal import sinusoidal_encoding as _ref_sinusoidal_encoding

from ._core import (
    CheckFailed,
    Mistake,
    call_student,
    expect_close,
    known_mistake,
    passed,
)

__all__ = [
    "check_hand_computation",
    "check_offset_matrix",
    "grade_hand_computation",
    "grade_offset_matrix",
]

# Tolerances, from the arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8.
# Each entry of M(k) is one cos or sin of k * omega_i (|k| <= 64, omega_i <= 1),
# whose float32 argument is off by at most ~|k| u = 4e-6 rad, so the entry by as
# much: atol 1e-5 covers it (entries near 0), rtol 1e-4 the rest. The known
# mistakes (a transposed block, a doubled exponent) are off by O(0.1).
_ATOL = 1e-5
_RTOL = 1e-4


def _known(expected: torch.Tensor, candidates: list[Mistake]) -> list[Mistake]:
    """The known wrong answers that differ from the expected one (for ``k = 0`` every
    wrong rotation is the identity, which is right)."""
    out = []
    for m in candidates:
        same = m.answer.shape == expected.shape and torch.allclose(
            m.answer.double(), expected.double(), atol=_ATOL, rtol=_RTOL
        )
        if not same:
            out.append(m)
    return out


def _blocks(k: int, omega: torch.Tensor, *, concat: bool = False) -> torch.Tensor:
    """Block-diagonal [[c, s], [-s, c]] for angles k*omega, for building wrong answers;
    ``concat`` places block i on rows/columns (i, i + d/2) instead of (2i, 2i+1)."""
    half = omega.numel()
    c, s = torch.cos(k * omega), torch.sin(k * omega)  # (d/2,), (d/2,)
    m = torch.zeros(2 * half, 2 * half, dtype=torch.float64)
    idx = torch.arange(half)
    a, b = (idx, idx + half) if concat else (2 * idx, 2 * idx + 1)
    m[a, a], m[a, b], m[b, a], m[b, b] = c, s, -s, c
    return m  # (d, d)


def _offset_mistakes(k: int, d_model: int) -> list[Mistake]:
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i
    omega = 10000.0 ** (-two_i / d_model)
    right = _blocks(k, omega)
    return [
        Mistake(
            right.T,
            "this is the transpose, the rotation by -k: it maps PE[p] to PE[p-k]. "
            "With sin first, sin((p+k)w) = cos(kw) sin(pw) + sin(kw) cos(pw), so the "
            "block is [[cos kw, sin kw], [-sin kw, cos kw]]",
            "transposed",
        ),
        Mistake(
            _blocks(k, omega, concat=True),
            "this matrix acts on the concatenated [sin | cos] layout (pair i on rows "
            "i and i + d/2); the exercise uses the interleaved layout, pair i on rows "
            "(2i, 2i+1)",
            "concatenated-layout",
        ),
        Mistake(
            _blocks(k, 10000.0 ** (-2 * two_i / d_model)),
            "the exponent is off by a factor of 2: 10000^(2*(2i)/d) doubles the "
            "column index; block i rotates by k * 10000^(-2i/d_model)",
            "exponent-4i",
        ),
        Mistake(
            _blocks(k, 10000.0 ** (-(two_i / 2) / d_model)),
            "the exponent is off by a factor of 2: it uses i instead of 2i; block i "
            "rotates by k * 10000^(-2i/d_model)",
            "exponent-i-not-2i",
        ),
        Mistake(
            _blocks(k, torch.ones_like(omega)),
            "every block rotates by the same angle k; block i rotates by k * w_i with "
            "w_i = 10000^(-2i/d_model)",
            "same-angle",
        ),
        Mistake(
            _blocks(-k, omega, concat=True),
            "this is the transposed matrix for the concatenated [sin | cos] layout",
            "concatenated-transposed",
        ),
    ]


def _check_offset(offset_matrix: Callable, k: int, d_model: int) -> torch.Tensor:
    expected = _ref_offset_matrix(k, d_model)  # (d_model, d_model)
    mistakes = _known(expected, _offset_mistakes(k, d_model))
    call = f"offset_matrix({k}, {d_model})"
    got = call_student(offset_matrix, k, d_model, call=call)
    expect_close(got, expected, what=call, atol=_ATOL, rtol=_RTOL, mistakes=mistakes,
                 dtype=torch.get_default_dtype(),  # float32 unless changed
                 dtype_reason="the task asks for float32 because M @ pe[p] fails "
                              "for the float32 rows of a sinusoidal table unless M "
                              "is float32 too (torch does not mix dtypes in a "
                              "matrix product)")
    return got


def _check_shift_property(offset_matrix: Callable, k: int, d_model: int) -> None:
    """PE[p + k] = M(k) @ PE[p] for every p of a table, with the student's M(k)."""
    pe = _ref_sinusoidal_encoding(40, d_model).double()  # (40, d)
    call = f"offset_matrix({k}, {d_model})"
    got = call_student(offset_matrix, k, d_model, call=call)
    if not isinstance(got, torch.Tensor) or got.shape != (d_model, d_model):
        raise CheckFailed(f"{call} should be a tensor of shape ({d_model}, {d_model})")
    start = max(0, -k)
    src = pe[start : start + 40 - abs(k)]  # (n, d)
    dst = pe[start + k : start + k + 40 - abs(k)]  # (n, d)
    expect_close(src @ got.double().T, dst,
                 what=f"{call} @ PE[p] for p = {start}..{start + 39 - abs(k)} "
                      f"(row p - {start}) should be PE[p + {k}]",
                 atol=1e-4, rtol=1e-4)


def _public_offset_matrix(offset_matrix: Callable) -> None:
    """Public cases: three offsets (one negative) for d_model 4, 8 and 6, and the
    shift property."""
    _check_offset(offset_matrix, 1, 4)
    _check_offset(offset_matrix, 3, 8)
    _check_offset(offset_matrix, -2, 6)
    _check_shift_property(offset_matrix, 2, 6)


def check_offset_matrix(offset_matrix: Callable) -> None:
    """Public check: three offsets (one negative) for d_model 4, 8 and 6, and the
    shift property."""
    _public_offset_matrix(offset_matrix)
    passed("offset_matrix", public=True)


def grade_offset_matrix(offset_matrix: Callable) -> None:
    """Hidden grade: k = 0, negative k, d_model = 2, large k, shift and composition."""
    _public_offset_matrix(offset_matrix)
    cases = ((0, 4), (-2, 6), (5, 2), (7, 16), (30, 10), (-11, 8), (1, 64))
    for k, d_model in cases:
        _check_offset(offset_matrix, k, d_model)
    for k, d_model in ((4, 12), (-3, 8)):
        _check_shift_property(offset_matrix, k, d_model)
    a = _check_offset(offset_matrix, 2, 8).double()
    b = _check_offset(offset_matrix, 5, 8).double()
    expect_close(a @ b, _ref_offset_matrix(7, 8).double(),
                 what="offset_matrix(2, 8) @ offset_matrix(5, 8) (should be "
                      "offset_matrix(7, 8): shifts compose)", atol=1e-5, rtol=1e-4)
    passed("offset_matrix", public=False, detail=f"{len(cases)} offsets, properties")


# ---- the hand computation --------------------------------------------------------

# The factor-2 exponent mistake changes PE(0) . PE(1) only by 5e-5: six decimals.
_DOT_ATOL = 5e-6
_PAIRS = {"pe1_dot_pe3": (1, 3), "pe30_dot_pe32": (30, 32), "pe1_dot_pe4": (1, 4)}


def _dot_with(omega: list[float], p: int, q: int, *, degrees: bool = False) -> float:
    """PE(p) . PE(q) of an interleaved table with frequencies ``omega``."""
    to_rad = math.pi / 180 if degrees else 1.0
    total = 0.0
    for w in omega:
        a, b = p * w * to_rad, q * w * to_rad
        total += math.sin(a) * math.sin(b) + math.cos(a) * math.cos(b)
    return total


def _expected_dots() -> dict[str, float]:
    pe = _ref_sinusoidal_encoding(33, 4).double()  # (33, 4): positions 0..32
    return {name: float(pe[p] @ pe[q]) for name, (p, q) in _PAIRS.items()}


def _dot_mistakes(p: int, q: int) -> list[Mistake]:
    return [
        Mistake(
            _dot_with([1.0, 1e-4], p, q),
            "the exponent is off by a factor of 2: the second pair (i = 1, columns 2 "
            "and 3) has frequency 10000^(-2/4) = 1/100, not 10000^(-4/4)",
            "exponent-4i",
        ),
        Mistake(
            _dot_with([1.0, 10000 ** -0.25], p, q),
            "the exponent is off by a factor of 2: it uses i instead of 2i; the second "
            "pair has frequency 10000^(-2*1/4) = 1/100",
            "exponent-i-not-2i",
        ),
        Mistake(
            _dot_with([1.0, 0.01], p, q, degrees=True),
            "the angles were taken in degrees; p / 10000^(2i/d) is in radians",
            "degrees",
        ),
        Mistake(
            2.0,
            "2 = d_model / 2 is PE(p) . PE(p), the dot product of a vector with "
            "itself; here the positions differ",
            "self-dot",
        ),
        Mistake(
            sum(math.sin(p * w) * math.sin(q * w) for w in (1.0, 0.01)),
            "only the sine products were summed; add cos(p w) cos(q w) for each pair",
            "sines-only",
        ),
        Mistake(
            sum(math.cos(p * w) * math.cos(q * w) for w in (1.0, 0.01)),
            "only the cosine products were summed; add sin(p w) sin(q w) for each pair",
            "cosines-only",
        ),
        Mistake(
            sum(math.cos((p + q) * w) for w in (1.0, 0.01)),
            "this is a sum of cos((p + q) w): the identity is sin a sin b + cos a cos "
            "b "
            "= cos(a - b), with a minus",
            "cos-of-sum",
        ),
    ]


def _as_number(name: str, value: object) -> float:
    """A Python number from an int, float, one-element tensor, NumPy scalar, or any
    other real number (a sympy expression, a Fraction)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    elif hasattr(value, "item") and not isinstance(value, torch.Tensor | str):
        value = value.item()  # NumPy scalar
    if isinstance(value, bool | str | bytes | torch.Tensor) or not hasattr(
        value, "__float__"
    ):
        raise CheckFailed(f"{name} should be a number, got {type(value).__name__}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:  # e.g. a sympy expression with a symbol
        raise CheckFailed(f"{name} should be a number, got {value!r}") from exc
    if math.isnan(number) or math.isinf(number):
        raise CheckFailed(f"{name} should be a finite number, got {number}")
    return number


def _check_dot(name: str, value: float, expected: float, *, public: bool) -> None:
    p, q = _PAIRS[name]
    what = f"{name} (PE({p}) . PE({q}) for d_model = 4)"
    # computed whatever the answer, so that the student edition stores them
    mistakes = _dot_mistakes(p, q)
    if abs(value - expected) <= _DOT_ATOL:
        return
    for m in mistakes:
        if abs(m.answer - expected) > _DOT_ATOL and abs(value - m.answer) <= 1e-6:
            raise known_mistake(f"{what} = {value:.6f}", m, got=value)
    if abs(value - expected) <= 1e-3:
        raise CheckFailed(f"{what} = {value} is close to the right value but not "
                          f"within {_DOT_ATOL:g}: give at least 6 decimals, or an "
                          "exact expression with math.cos / math.sin")
    hint = ("Hint: PE(p) . PE(q) = sum over the two pairs of sin(p w_i) sin(q w_i) + "
            "cos(p w_i) cos(q w_i), with w_0 = 1 and w_1 = 10000^(-2/4), angles in "
            "radians")
    if public:  # the public check does not give the number away
        raise CheckFailed(f"{what} = {value:.6f} is not right. {hint}")
    raise CheckFailed(f"{what}: expected {expected:.6f}, got {value:.6f}. {hint}")


def _numbers(pe1_dot_pe3: object, pe30_dot_pe32: object,
             pe1_dot_pe4: object) -> dict[str, float]:
    given = {"pe1_dot_pe3": pe1_dot_pe3, "pe30_dot_pe32": pe30_dot_pe32,
             "pe1_dot_pe4": pe1_dot_pe4}
    return {name: _as_number(name, value) for name, value in given.items()}


def check_hand_computation(pe1_dot_pe3: object, pe30_dot_pe32: object,
                           pe1_dot_pe4: object) -> None:
    """Public check: each of the three numbers, with the known mistakes named.

    Call it with the three numbers in this order:
    ``check_hand_computation(pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4)``.
    """
    values = _numbers(pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4)
    expected = _expected_dots()
    for name, value in values.items():
        _check_dot(name, value, expected[name], public=True)
    passed("hand_computation", public=True)


def grade_hand_computation(pe1_dot_pe3: object, pe30_dot_pe32: object,
                           pe1_dot_pe4: object) -> None:
    """Hidden grade: all three values, with the expected value in the message."""
    values = _numbers(pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4)
    expected = _expected_dots()
    for name, value in values.items():
        _check_dot(name, value, expected[name], public=False)
    passed("hand_computation", public=False, detail="3 dot products")
