"""Bug zoo of exercise 3: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too. The hand computation is
graded from three numbers, so its zoo lists argument tuples instead of functions.
"""

from __future__ import annotations

import math

import numpy as np
import sympy
import torch

import course_lib
from course_lib import offset_matrix

# --- offset_matrix: correct


def _block(angle: float) -> list[list[float]]:
    """sin((p+k)w) = cos(kw) sin(pw) + sin(kw) cos(pw); cos((p+k)w) = ..."""
    return [[math.cos(angle), math.sin(angle)], [-math.sin(angle), math.cos(angle)]]


def offset_loops(k, d_model):
    m = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        block = _block(k / 10000 ** (2 * i / d_model))
        for r in range(2):
            for c in range(2):
                m[2 * i + r, 2 * i + c] = block[r][c]
    return m


def offset_block_diag_float64(k, d_model):
    blocks = [torch.tensor(_block(k / 10000 ** (2 * i / d_model)), dtype=torch.float64)
              for i in range(d_model // 2)]
    return torch.block_diag(*blocks)


def offset_block_diag(k, d_model):
    return offset_block_diag_float64(k, d_model).float()


def offset_from_sympy_like_expansion(k, d_model):
    """M(k) as the product of k one-step matrices (M(1)^k, or M(1)^T^|k| for k < 0)."""
    step = offset_block_diag_float64(1, d_model)
    if k < 0:
        step = step.T
    return torch.linalg.matrix_power(step, abs(k)).float()


# --- offset_matrix: wrong


def offset_transposed(k, d_model):
    return offset_loops(k, d_model).T


def offset_concat_layout(k, d_model):
    half = d_model // 2
    m = torch.zeros(d_model, d_model)
    for i in range(half):
        (c, s), (ms, c2) = _block(k / 10000 ** (2 * i / d_model))
        m[i, i], m[i, i + half], m[i + half, i], m[i + half, i + half] = c, s, ms, c2
    return m


def offset_exponent_doubled(k, d_model):
    blocks = [torch.tensor(_block(k / 10000 ** (2 * i / d_model)))
              for i in range(0, d_model, 2)]
    return torch.block_diag(*blocks)


def offset_i_not_2i(k, d_model):
    blocks = [torch.tensor(_block(k / 10000 ** (i / d_model)))
              for i in range(d_model // 2)]
    return torch.block_diag(*blocks)


def offset_same_angle(k, d_model):
    return torch.block_diag(*[torch.tensor(_block(float(k)))] * (d_model // 2))


def offset_identity(k, d_model):
    return torch.eye(d_model)


def offset_absolute_k(k, d_model):
    """Right for k >= 0; a negative shift rotates forwards."""
    return offset_loops(abs(k), d_model)


# --- calls the library


def offset_calls_library(k, d_model):
    return course_lib.offset_matrix(k, d_model)


def offset_imported_from_library(k, d_model):
    return offset_matrix(k, d_model)


CORRECT = {
    "offset_matrix": [offset_loops, offset_block_diag,
                      offset_from_sympy_like_expansion],
}

WRONG = {
    "offset_matrix": [
        (offset_transposed, "this is the transpose, the rotation by -k", True),
        (offset_concat_layout, "concatenated [sin | cos] layout", True),
        (offset_exponent_doubled, "off by a factor of 2: 10000^(2*(2i)/d)", True),
        (offset_i_not_2i, "it uses i instead of 2i", True),
        (offset_same_angle, "every block rotates by the same angle k", True),
        (offset_identity, "wrong entr", True),
        (offset_block_diag_float64,
         "instead of torch.float32; the task asks for float32", True),
        (offset_absolute_k, "this is the transpose, the rotation by -k", True),
    ],
}

CALLS_LIBRARY = {
    "offset_matrix": [offset_calls_library, offset_imported_from_library],
}

# --- the hand computation: (pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4)


def _dot(p: int, q: int, omegas=(1.0, 0.01)) -> float:
    """PE(p) . PE(q) for d_model = 4 from the vectors themselves."""
    def pe(x):
        return [f(x * w) for w in omegas for f in (math.sin, math.cos)]

    return sum(a * b for a, b in zip(pe(p), pe(q), strict=True))



def _sines(p: int, q: int) -> float:
    return sum(math.sin(p * w) * math.sin(q * w) for w in (1.0, 0.01))


def _cosines(p: int, q: int) -> float:
    return sum(math.cos(p * w) * math.cos(q * w) for w in (1.0, 0.01))


def _plus(p: int, q: int) -> float:
    """cos(a + b) where the identity has cos(a - b)."""
    return sum(math.cos((p + q) * w) for w in (1.0, 0.01))


HAND_CORRECT = [
    (_dot(1, 3), _dot(30, 32), _dot(1, 4)),
    (math.cos(2) + math.cos(0.02), math.cos(-2) + math.cos(-0.02),
     math.cos(3) + math.cos(0.03)),
    (0.583653, 0.583653, 0.009558),  # six decimals
    (torch.tensor(_dot(1, 3)), np.float64(_dot(30, 32)), torch.tensor([_dot(1, 4)])),
    # exact expressions in sympy, and a NumPy 0-d array
    (sympy.cos(2) + sympy.cos(sympy.Rational(2, 100)),
     sympy.cos(-2) + sympy.cos(sympy.Rational(-2, 100)), np.array(_dot(1, 4))),
]

HAND_WRONG = [
    # The seed's exponent bug: the second frequency is 10000^(-4/4) = 1e-4.
    ((_dot(1, 3, (1.0, 1e-4)), _dot(30, 32, (1.0, 1e-4)), _dot(1, 4, (1.0, 1e-4))),
     "off by a factor of 2", True),
    ((_dot(1, 3, (1.0, 0.1)), _dot(30, 32, (1.0, 0.1)), _dot(1, 4, (1.0, 0.1))),
     "uses i instead of 2i", True),
    ((_dot(1, 3, (math.pi / 180, math.pi / 18000)),
      _dot(30, 32, (math.pi / 180, math.pi / 18000)),
      _dot(1, 4, (math.pi / 180, math.pi / 18000))), "degrees", True),
    ((2.0, 2.0, 2.0), "dot product of a vector with itself", True),
    ((_sines(1, 3), _sines(30, 32), _sines(1, 4)), "only the sine products", True),
    ((_cosines(1, 3), _cosines(30, 32), _cosines(1, 4)), "only the cosine products",
     True),
    ((_plus(1, 3), _plus(30, 32), _plus(1, 4)), "cos((p + q) w)", True),
    ((0.5837, 0.5837, 0.0096), "give at least 6 decimals", True),  # 4 decimals
    # right first value, the second off: the public check says so and hints at the
    # formula, without the number (the hidden grader gives it)
    ((_dot(1, 3), _dot(1, 3) + 0.3, _dot(1, 4)), "sum over the two pairs of", True),
    # right for the first two, the seed's exponent bug in the last one only
    ((_dot(1, 3), _dot(30, 32), _dot(1, 4, (1.0, 1e-4))), "off by a factor of 2",
     True),
    ((_dot(1, 3), _dot(30, 32), "0.0096"), "pe1_dot_pe4 should be a number", True),
    ((sympy.Symbol("x"), _dot(30, 32), _dot(1, 4)), "pe1_dot_pe3 should be a number",
     True),
]
