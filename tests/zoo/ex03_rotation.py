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

# --- offset_matrix: correct (the concatenated [sin | cos] layout: pair i on rows and
# columns i and i + d/2)


def _block(angle: float) -> list[list[float]]:
    """sin((p+k)w) = cos(kw) sin(pw) + sin(kw) cos(pw); cos((p+k)w) = ..."""
    return [[math.cos(angle), math.sin(angle)], [-math.sin(angle), math.cos(angle)]]


def _concat_from_blocks(blocks: list[list[list[float]]], dtype=torch.float32):
    """Place 2x2 block i on rows/columns (i, i + d/2)."""
    half = len(blocks)
    m = torch.zeros(2 * half, 2 * half, dtype=dtype)
    for i, block in enumerate(blocks):
        for r in range(2):
            for c in range(2):
                m[i + r * half, i + c * half] = block[r][c]
    return m


def _interleaved_from_blocks(blocks, dtype=torch.float32):
    return torch.block_diag(*[torch.tensor(b, dtype=dtype) for b in blocks])


def _angles(k, d_model, exponent=lambda i, d: 2 * i / d):
    return [k / 10000 ** exponent(i, d_model) for i in range(d_model // 2)]


def offset_loops(k, d_model):
    return _concat_from_blocks([_block(a) for a in _angles(k, d_model)])


def offset_permuted_block_diag_float64(k, d_model):
    """The interleaved block-diagonal matrix, rows and columns permuted to
    [sin | cos]."""
    m = _interleaved_from_blocks([_block(a) for a in _angles(k, d_model)],
                                 torch.float64)
    order = torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))
    return m[order][:, order]


def offset_permuted_block_diag(k, d_model):
    return offset_permuted_block_diag_float64(k, d_model).float()


def offset_four_diagonals(k, d_model):
    """Four diagonals: cos on the main one, sin at +d/2, -sin at -d/2."""
    half = d_model // 2
    omega = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d_model)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    top = torch.cat((torch.diag(c), torch.diag(s)), dim=1)  # (d/2, d)
    bottom = torch.cat((torch.diag(-s), torch.diag(c)), dim=1)  # (d/2, d)
    return torch.cat((top, bottom)).float()


def offset_from_sympy_like_expansion(k, d_model):
    """M(k) as the product of k one-step matrices (M(1)^k, or M(1)^T^|k| for k < 0)."""
    step = offset_permuted_block_diag_float64(1, d_model)
    if k < 0:
        step = step.T
    return torch.linalg.matrix_power(step, abs(k)).float()


# --- offset_matrix: wrong


def offset_transposed(k, d_model):
    return offset_loops(k, d_model).T


def offset_interleaved_layout(k, d_model):
    """Chapter 3's interleaved answer (the library's): blocks on (2i, 2i+1)."""
    return _interleaved_from_blocks([_block(a) for a in _angles(k, d_model)])


def offset_exponent_doubled(k, d_model):
    return _concat_from_blocks(
        [_block(a) for a in _angles(k, d_model, lambda i, d: 4 * i / d)])


def offset_i_not_2i(k, d_model):
    return _concat_from_blocks(
        [_block(a) for a in _angles(k, d_model, lambda i, d: i / d)])


def offset_same_angle(k, d_model):
    return _concat_from_blocks([_block(float(k))] * (d_model // 2))


def offset_identity(k, d_model):
    return torch.eye(d_model)


def offset_absolute_k(k, d_model):
    """Right for k >= 0; a negative shift rotates forwards."""
    return offset_loops(abs(k), d_model)


def offset_interleaved_transposed(k, d_model):
    return offset_interleaved_layout(k, d_model).T


# --- calls the library


def offset_calls_library(k, d_model):
    return course_lib.offset_matrix(k, d_model)


def offset_imported_from_library(k, d_model):
    return offset_matrix(k, d_model)


CORRECT = {
    "offset_matrix": [offset_loops, offset_permuted_block_diag, offset_four_diagonals,
                      offset_from_sympy_like_expansion],
}

WRONG = {
    "offset_matrix": [
        (offset_transposed, "this is the transpose, the rotation by -k", True),
        (offset_interleaved_layout, "acts on the interleaved layout of chapter 3",
         True),
        (offset_exponent_doubled, "off by a factor of 2: 10000^(2*(2i)/d)", True),
        (offset_i_not_2i, "it uses i instead of 2i", True),
        (offset_same_angle, "every pair rotates by the same angle k", True),
        (offset_identity, "wrong entr", True),
        (offset_permuted_block_diag_float64,
         "instead of torch.float32; the task asks for float32", True),
        (offset_absolute_k, "this is the transpose, the rotation by -k", True),
        (offset_interleaved_transposed,
         "transposed matrix for the interleaved layout", True),
    ],
}

CALLS_LIBRARY = {
    "offset_matrix": [offset_calls_library, offset_imported_from_library],
}

# --- the hand computation: (pe1_dot_pe3, pe30_dot_pe32, pe1_dot_pe4), d_model = 6

OMEGA6 = tuple(10000.0 ** (-2 * i / 6) for i in range(3))  # 1, 10000^-1/3, ^-2/3


def _dot(p: int, q: int, omegas=OMEGA6) -> float:
    """PE(p) . PE(q) for d_model = 6 from the vectors themselves."""
    def pe(x):
        return [f(x * w) for w in omegas for f in (math.sin, math.cos)]

    return sum(a * b for a, b in zip(pe(p), pe(q), strict=True))


def _sines(p: int, q: int) -> float:
    return sum(math.sin(p * w) * math.sin(q * w) for w in OMEGA6)


def _cosines(p: int, q: int) -> float:
    return sum(math.cos(p * w) * math.cos(q * w) for w in OMEGA6)


def _plus(p: int, q: int) -> float:
    """cos(a + b) where the identity has cos(a - b)."""
    return sum(math.cos((p + q) * w) for w in OMEGA6)


_FOUR_I = tuple(10000.0 ** (-4 * i / 6) for i in range(3))  # the seed's exponent bug
_I = tuple(10000.0 ** (-i / 6) for i in range(3))  # i instead of 2i
_DEG = tuple(w * math.pi / 180 for w in OMEGA6)  # degrees taken as radians

HAND_CORRECT = [
    (_dot(1, 3), _dot(30, 32), _dot(1, 4)),
    (math.cos(2) + math.cos(2 * 10000 ** (-1 / 3)) + math.cos(2 * 10000 ** (-2 / 3)),
     sum(math.cos(-2 * w) for w in OMEGA6), sum(math.cos(3 * w) for w in OMEGA6)),
    (round(_dot(1, 3), 6), round(_dot(30, 32), 6), round(_dot(1, 4), 6)),  # 6 decimals
    (torch.tensor(_dot(1, 3)), np.float64(_dot(30, 32)), torch.tensor([_dot(1, 4)])),
    # exact expressions in sympy, and a NumPy 0-d array
    (sum(sympy.cos(2 * sympy.Integer(10000) ** sympy.Rational(-i, 3))
         for i in range(3)),
     sum(sympy.cos(-2 * sympy.Integer(10000) ** sympy.Rational(-i, 3))
         for i in range(3)), np.array(_dot(1, 4))),
]

HAND_WRONG = [
    # The seed's exponent bug: pair i has 10000^(-4i/6).
    ((_dot(1, 3, _FOUR_I), _dot(30, 32, _FOUR_I), _dot(1, 4, _FOUR_I)),
     "off by a factor of 2", True),
    ((_dot(1, 3, _I), _dot(30, 32, _I), _dot(1, 4, _I)), "uses i instead of 2i", True),
    ((_dot(1, 3, _DEG), _dot(30, 32, _DEG), _dot(1, 4, _DEG)), "degrees", True),
    ((3.0, 3.0, 3.0), "dot product of a vector with itself", True),
    ((_sines(1, 3), _sines(30, 32), _sines(1, 4)), "only the sine products", True),
    ((_cosines(1, 3), _cosines(30, 32), _cosines(1, 4)), "only the cosine products",
     True),
    ((_plus(1, 3), _plus(30, 32), _plus(1, 4)), "cos((p + q) w)", True),
    ((round(_dot(1, 3), 4), round(_dot(30, 32), 4), round(_dot(1, 4), 4)),
     "give at least 6 decimals", True),  # 4 decimals
    # chapter 3's width: d_model = 4 (two pairs) instead of 6
    ((_dot(1, 3, (1.0, 0.01)), _dot(30, 32, (1.0, 0.01)), _dot(1, 4, (1.0, 0.01))),
     "sum over the three pairs of", True),
    # right first value, the second off: the public check says so and hints at the
    # formula, without the number (the hidden grader gives it)
    ((_dot(1, 3), _dot(1, 3) + 0.3, _dot(1, 4)), "sum over the three pairs of", True),
    # right for the first two, the seed's exponent bug in the last one only
    ((_dot(1, 3), _dot(30, 32), _dot(1, 4, _FOUR_I)), "off by a factor of 2", True),
    ((_dot(1, 3), _dot(30, 32), "1.0003"), "pe1_dot_pe4 should be a number", True),
    ((sympy.Symbol("x"), _dot(30, 32), _dot(1, 4)), "pe1_dot_pe3 should be a number",
     True),
]
