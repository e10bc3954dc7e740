"""Graders for ex03_rotation: shifting a sinusoidal encoding is a rotation.

``check_*`` run in the students' notebooks (public cells); ``grade_*`` run at grading
(hidden cells). Expected answers come from :mod:`course_lib.rotation` and
:mod:`course_lib.sinusoidal`, captured at import and computed before the student's
code runs. Known wrong answers (the transposed block that rotates backwards, the block
layout of the interleaved encoding, exponents off by a factor of 2, degrees instead of
radians, ...) are computed here so that a wrong answer is named.

Chapter 3 derives M(k) for the interleaved layout (blocks on (2i, 2i+1)); the exercise
asks for the concatenated [sin | cos] layout (pair i on rows and columns i and
i + d/2), which the chapter does not work out (issue 33). Its expected matrix is the
library's interleaved M(k) with rows and columns permuted to that layout
(:func:`_reference_offset_concat`).

The hand computation is graded from three numbers, passed in this order::

    check_hand_computation(pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4)

(``PE(p) . PE(q)`` for the interleaved encoding with ``d_model = 6``, base 10000:
three frequencies, 1, 10000^(-1/3) and 10000^(-2/3)). The chapter works
``d_model = 4`` by hand; the exercise asks for a width it does not work out.
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
    Variant,
    call_student,
    expect_close,
    hinted,
    known_mistake,
    passed,
    term_rng,
    variant_named,
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

# No variant changes an answer of this exercise: the term's seed draws the hidden
# cases of offset_matrix (course_lib/grading/editions/term.py), and an unknown
# variant is refused.
EXERCISE = "ex03_rotation"
VARIANTS: dict[str, Variant] = {}


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


def _reference_offset_concat(k: int, d_model: int) -> torch.Tensor:
    """M(k) for the concatenated layout: PE_concat = P PE_interleaved with P the
    permutation that lists the sine columns 0, 2, 4, ... then the cosine columns
    1, 3, 5, ..., so M_concat = P M_interleaved P^T (rows and columns permuted)."""
    order = torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))
    return _ref_offset_matrix(k, d_model)[order][:, order]  # (d_model, d_model)


def _offset_mistakes(k: int, d_model: int) -> list[Mistake]:
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i
    omega = 10000.0 ** (-two_i / d_model)
    right = _blocks(k, omega, concat=True)
    return [
        hinted(Mistake(
            right.T,
            "this is the transpose, the rotation by -k: it maps PE[p] to PE[p-k]",
            "transposed"),
            "expand sin((p+k)w) with the angle-addition formula and read which "
            "coefficient multiplies cos(pw), the entry in column i + d/2 of row i"),
        Mistake(
            _blocks(k, omega),
            "this matrix acts on the interleaved layout of chapter 3 (pair i on rows "
            "2i and 2i+1); the exercise asks for the concatenated [sin | cos] layout, "
            "where the sine of pair i is entry i and its cosine entry i + d/2",
            "interleaved-layout",
        ),
        Mistake(
            _blocks(k, 10000.0 ** (-2 * two_i / d_model), concat=True),
            "the exponent is off by a factor of 2: 10000^(2*(2i)/d) doubles the "
            "column index; pair i rotates by k * 10000^(-2i/d_model)",
            "exponent-4i",
        ),
        Mistake(
            _blocks(k, 10000.0 ** (-(two_i / 2) / d_model), concat=True),
            "the exponent is off by a factor of 2: it uses i instead of 2i; pair i "
            "rotates by k * 10000^(-2i/d_model)",
            "exponent-i-not-2i",
        ),
        Mistake(
            _blocks(k, torch.ones_like(omega), concat=True),
            "every pair rotates by the same angle k; pair i rotates by k * w_i with "
            "w_i = 10000^(-2i/d_model)",
            "same-angle",
        ),
        Mistake(
            _blocks(-k, omega),
            "this is the transposed matrix for the interleaved layout of chapter 3; "
            "the exercise asks for the concatenated [sin | cos] layout",
            "interleaved-transposed",
        ),
    ]


def _check_offset(offset_matrix: Callable, k: int, d_model: int) -> torch.Tensor:
    expected = _reference_offset_concat(k, d_model)  # (d_model, d_model)
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
    """PE[p + k] = M(k) @ PE[p] for every p of a concatenated [sin | cos] table, with
    the student's M(k)."""
    pe = _ref_sinusoidal_encoding(40, d_model, layout="concat").double()  # (40, d)
    call = f"offset_matrix({k}, {d_model})"
    got = call_student(offset_matrix, k, d_model, call=call)
    if not isinstance(got, torch.Tensor) or got.shape != (d_model, d_model):
        raise CheckFailed(f"{call} should be a tensor of shape ({d_model}, {d_model})")
    start = max(0, -k)
    src = pe[start : start + 40 - abs(k)]  # (n, d)
    dst = pe[start + k : start + k + 40 - abs(k)]  # (n, d)
    expect_close(src @ got.double().T, dst,
                 what=f"{call} @ PE[p] for p = {start}..{start + 39 - abs(k)} "
                      f"(row p - {start}) should be PE[p + {k}] ([sin | cos] "
                      "layout)",
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


def _hidden_offset_cases(
    seed: int | None,
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...],
           tuple[int, int, int]]:
    """The hidden ``(k, d_model)`` cases, the ``(k, d_model)`` of the shift property
    and the composition ``(k1, k2, d_model)``: fixed without a term seed; else drawn
    by the seed with the same properties: k = 0 (where every wrong rotation is the
    identity), two negative offsets, d_model = 2 (a single pair), a large offset
    (20 to 40) and a wide table (d_model 48 to 80), every |k| <= 64 (the bound the
    tolerance is derived for); the shift property once forward and once backward
    (|k| <= 10: the 40-row table leaves 30 rows or more); two positive offsets for
    the composition M(k1) M(k2) = M(k1 + k2). Every d_model is even."""
    if seed is None:
        return (((0, 4), (-2, 6), (5, 2), (7, 16), (30, 10), (-11, 8), (1, 64)),
                ((4, 12), (-3, 8)), (2, 5, 8))
    rng = term_rng(seed, "grade_offset_matrix")

    def even(low: int, high: int) -> int:
        return 2 * rng.randint(low // 2, high // 2)

    cases = (
        (0, even(2, 16)),
        (-rng.randint(1, 8), even(4, 12)),
        (rng.randint(2, 9), 2),
        (rng.randint(5, 12), even(12, 24)),
        (rng.randint(20, 40), even(8, 14)),
        (-rng.randint(9, 15), even(6, 10)),
        (rng.randint(1, 3), even(48, 80)),
    )
    shifts = ((rng.randint(2, 10), even(8, 16)), (-rng.randint(2, 10), even(4, 12)))
    return cases, shifts, (rng.randint(1, 8), rng.randint(1, 8), even(4, 12))


def grade_offset_matrix(
    offset_matrix: Callable, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grade: k = 0, negative k, d_model = 2, large k, shift and composition
    (the offsets and widths drawn by the term's ``seed`` when there is one). No
    variant changes the answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_offset_matrix(offset_matrix)
    cases, shifts, (k1, k2, width) = _hidden_offset_cases(seed)
    for k, d_model in cases:
        _check_offset(offset_matrix, k, d_model)
    for k, d_model in shifts:
        _check_shift_property(offset_matrix, k, d_model)
    a = _check_offset(offset_matrix, k1, width).double()
    b = _check_offset(offset_matrix, k2, width).double()
    expect_close(a @ b, _reference_offset_concat(k1 + k2, width).double(),
                 what=f"offset_matrix({k1}, {width}) @ offset_matrix({k2}, {width}) "
                      f"(should be offset_matrix({k1 + k2}, {width}): shifts "
                      "compose)", atol=1e-5, rtol=1e-4)
    passed("offset_matrix", public=False, detail=f"{len(cases)} offsets, properties")


# ---- the hand computation --------------------------------------------------------

# Six decimals: the closest known mistake (the factor-2 exponent) is 4.3e-3 away
# from a right answer here (tests/test_checks_ex01_05.py computes the margins).
_DOT_ATOL = 5e-6
_HAND_D_MODEL = 6
# the frequencies 10000^(-2i/6) of the three pairs: 1, 10000^(-1/3), 10000^(-2/3)
_OMEGA = [10000.0 ** (-2 * i / _HAND_D_MODEL) for i in range(_HAND_D_MODEL // 2)]
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
    pe = _ref_sinusoidal_encoding(33, _HAND_D_MODEL).double()  # (33, 6): 0..32
    return {name: float(pe[p] @ pe[q]) for name, (p, q) in _PAIRS.items()}


def _dot_mistakes(p: int, q: int) -> list[Mistake]:
    d = _HAND_D_MODEL
    pairs = range(d // 2)
    return [
        Mistake(
            _dot_with([10000.0 ** (-4 * i / d) for i in pairs], p, q),
            "the exponent is off by a factor of 2: pair i (columns 2i and 2i+1) has "
            "frequency 10000^(-2i/6), not 10000^(-4i/6)",
            "exponent-4i",
        ),
        Mistake(
            _dot_with([10000.0 ** (-i / d) for i in pairs], p, q),
            "the exponent is off by a factor of 2: it uses i instead of 2i; pair i "
            "has frequency 10000^(-2i/6)",
            "exponent-i-not-2i",
        ),
        Mistake(
            _dot_with(_OMEGA, p, q, degrees=True),
            "the angles were taken in degrees; p / 10000^(2i/d) is in radians",
            "degrees",
        ),
        Mistake(
            float(d // 2),
            "3 = d_model / 2 is PE(p) . PE(p), the dot product of a vector with "
            "itself; here the positions differ",
            "self-dot",
        ),
        Mistake(
            sum(math.sin(p * w) * math.sin(q * w) for w in _OMEGA),
            "only the sine products were summed; add cos(p w) cos(q w) for each pair",
            "sines-only",
        ),
        Mistake(
            sum(math.cos(p * w) * math.cos(q * w) for w in _OMEGA),
            "only the cosine products were summed; add sin(p w) sin(q w) for each pair",
            "cosines-only",
        ),
        Mistake(
            sum(math.cos((p + q) * w) for w in _OMEGA),
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
    what = f"{name} (PE({p}) . PE({q}) for d_model = {_HAND_D_MODEL})"
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
    hint = ("Hint: PE(p) . PE(q) = sum over the three pairs of sin(p w_i) sin(q w_i) "
            "+ cos(p w_i) cos(q w_i), with w_i = 10000^(-2i/6), angles in radians")
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
                           pe1_dot_pe4: object, variant: str | None = None,
                           seed: int | None = None) -> None:
    """Hidden grade: all three values, with the expected value in the message.

    It takes the term's ``variant`` and ``seed`` like every hidden grader, but has
    nothing to draw: the three dot products the student computed by hand are fixed
    by the task (positions 1, 3, 4, 30, 32; d_model = 6), each with one right
    answer. No variant changes them."""
    variant_named(VARIANTS, variant, EXERCISE)
    values = _numbers(pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4)
    expected = _expected_dots()
    for name, value in values.items():
        _check_dot(name, value, expected[name], public=False)
    passed("hand_computation", public=False, detail="3 dot products")
