"""Graders for ex01_permutation: self-attention without positions, permutation matrices.

``check_*`` run in the students' notebooks (public cells); ``grade_*`` run at grading
(hidden cells). Expected answers come from :mod:`course_lib.attention`, captured at
import and computed before the student's function runs. The known wrong answers
(missing ``1/sqrt(d_k)``, softmax over the query axis, a transposed permutation
matrix, ...) are computed here so that a wrong answer is named.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course_lib.attention import permutation_matrix as _ref_permutation_matrix
from course_lib.attention import self_attention as _ref_self_attention

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    passed,
    term_rng,
    variant_named,
)

__all__ = [
    "check_permutation_matrix",
    "check_self_attention",
    "grade_permutation_matrix",
    "grade_self_attention",
]

# Tolerances, from the arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8.
# An entry of softmax(x W_q (x W_k)^T / sqrt(d)) x W_v at these sizes (n, d <= 16)
# is a few dozen float32 operations whatever their order or formula (matmul or
# einsum, softmax or exp / sum): its rounding error stays below ~50 u = 3e-6
# relative. rtol 1e-4 is 30x that; atol 1e-5 covers entries near 0, where a
# relative bound says nothing. Every known mistake is off by more than 1e-2.
_ATOL = 1e-5
_RTOL = 1e-4

# No variant changes an answer of this exercise: the term's seed draws the hidden
# cases (course_lib/grading/editions/term.py), and an unknown variant is refused.
EXERCISE = "ex01_permutation"
VARIANTS: dict[str, Variant] = {}


def _known(expected: torch.Tensor, candidates: list[Mistake]) -> list[Mistake]:
    """The known wrong answers that differ from the expected one (a transposed
    permutation matrix *is* right for a permutation that is its own inverse)."""
    out = []
    for m in candidates:
        same = m.answer.shape == expected.shape and torch.allclose(
            m.answer.double(), expected.double(), atol=_ATOL, rtol=_RTOL
        )
        if not same:
            out.append(m)
    return out


def _random_inputs(
    seed: int, batch: int | None, seq: int, d_model: int, d_k: int, d_v: int,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lead = (seq,) if batch is None else (batch, seq)
    x = torch.randn(*lead, d_model, generator=g, dtype=dtype)
    w_q = torch.randn(d_model, d_k, generator=g, dtype=dtype)
    w_k = torch.randn(d_model, d_k, generator=g, dtype=dtype)
    w_v = torch.randn(d_model, d_v, generator=g, dtype=dtype)
    return x, w_q, w_k, w_v


def _attention_mistakes(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> list[Mistake]:
    """Wrong self-attentions students write, with their outputs."""
    x, w_q, w_k, w_v = (t.double() for t in (x, w_q, w_k, w_v))
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., seq, d_k), twice, and (..., seq, d_v)
    d_k, d_model = w_q.shape[1], x.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (..., seq, seq)
    seq = x.shape[-2]
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # (seq, seq)

    def attend(s: torch.Tensor, dim: int = -1, values: torch.Tensor = v):
        return torch.softmax(s, dim=dim) @ values  # (..., seq, d)

    scaled = scores / math.sqrt(d_k)
    return [
        Mistake(
            attend(scores),
            "the scores are not divided by sqrt(d_k): "
            "softmax(Q K^T / sqrt(d_k)) V",
            "unscaled",
        ),
        Mistake(
            attend(scores / d_k),
            "the scores are divided by d_k; divide by sqrt(d_k)",
            "divided-by-d-k",
        ),
        Mistake(
            attend(scores / math.sqrt(d_model)),
            "the scores are divided by sqrt(d_model); divide by sqrt(d_k), the number "
            "of "
            "columns of w_q",
            "scaled-by-d-model",
        ),
        Mistake(
            attend(scaled, dim=-2),
            "the softmax runs over the wrong axis (the queries): each query's weights "
            "must sum to 1 over the keys, the last axis of Q K^T",
            "softmax-over-queries",
        ),
        Mistake(
            attend(scaled.transpose(-2, -1)),
            "the scores are K Q^T instead of Q K^T (queries and keys swapped)",
            "keys-queries-swapped",
        ),
        Mistake(
            attend(scaled.masked_fill(future, float("-inf"))),
            "a causal mask was applied; this exercise is about plain (unmasked) "
            "self-attention, which sees every token",
            "causal-mask",
        ),
        Mistake(
            attend(scaled, values=x),
            "the weights multiply x instead of the values V = x @ w_v",
            "weights-times-x",
        ),
        Mistake(
            torch.softmax(scaled, dim=-1),
            "this is the attention-weight matrix; return the weighted values "
            "softmax(Q K^T / sqrt(d_k)) V",
            "returns-weights",
        ),
    ]


def _check_attention_case(
    self_attention: Callable, seed: int, batch: int | None, seq: int, d_model: int,
    d_k: int, d_v: int, dtype: torch.dtype = torch.float32,
) -> None:
    x, w_q, w_k, w_v = _random_inputs(seed, batch, seq, d_model, d_k, d_v, dtype)
    expected = _ref_self_attention(x, w_q, w_k, w_v)  # (..., seq, d_v)
    mistakes = _known(expected, _attention_mistakes(x, w_q, w_k, w_v))
    call = (f"self_attention(x, w_q, w_k, w_v) with x {tuple(x.shape)}, "
            f"w_q/w_k {tuple(w_q.shape)}, w_v {tuple(w_v.shape)}")
    got = call_student(self_attention, x.clone(), w_q.clone(), w_k.clone(), w_v.clone(),
                       call=call)
    expect_close(got, expected, what=call, atol=_ATOL, rtol=_RTOL, mistakes=mistakes,
                 dtype="float")
    if got.dtype != x.dtype:
        raise CheckFailed(f"{call} should keep the dtype of x ({x.dtype}), "
                          f"got {got.dtype}")


def _check_equivariance(self_attention: Callable, seed: int, perm: list[int]) -> None:
    """SA(P x) = P SA(x), computed with the student's own function twice."""
    x, w_q, w_k, w_v = _random_inputs(seed, None, len(perm), 6, 4, 3)
    p = torch.tensor(perm)
    out = call_student(self_attention, x, w_q, w_k, w_v,
                       call="self_attention(x, w_q, w_k, w_v)")
    out_perm = call_student(self_attention, x[p], w_q, w_k, w_v,
                            call="self_attention(x[perm], w_q, w_k, w_v)")
    for got in (out, out_perm):
        if not isinstance(got, torch.Tensor) or got.shape != (len(perm), 3):
            raise CheckFailed("self_attention(x, w_q, w_k, w_v) with x of shape "
                              f"{tuple(x.shape)} and w_v of shape {tuple(w_v.shape)} "
                              f"should return a torch.Tensor of shape ({len(perm)}, 3)")
    expect_close(out_perm, out[p],
                 what=f"permutation equivariance: self_attention(x[perm]) with perm="
                      f"{perm} should equal self_attention(x)[perm]",
                 atol=_ATOL, rtol=_RTOL)


def _public_self_attention(self_attention: Callable) -> None:
    """Public cases: one sequence, one batch, a float64 input, and permutation
    equivariance."""
    _check_attention_case(self_attention, 0, None, 5, 4, 3, 2)
    _check_attention_case(self_attention, 1, 2, 5, 4, 3, 2)
    _check_attention_case(self_attention, 3, None, 4, 3, 2, 2, torch.float64)
    _check_equivariance(self_attention, 2, [3, 0, 4, 1, 2])


def check_self_attention(self_attention: Callable) -> None:
    """Public check: one sequence, one batch, a float64 input, and permutation
    equivariance."""
    _public_self_attention(self_attention)
    passed("self_attention", public=True)


# (torch seed, batch, seq, d_model, d_k, d_v, dtype) of the hidden cases
_AttentionCase = tuple[int, int | None, int, int, int, int, torch.dtype]


def _hidden_attention_cases(
    seed: int | None,
) -> tuple[list[_AttentionCase], list[tuple[int, list[int]]]]:
    """The hidden self-attention cases and the equivariance checks ``(torch seed,
    perm)``: fixed without a term seed; else drawn by the seed with the same
    properties: one sequence of 6 to 10 tokens, a batch of 3, a single token
    (seq = 1), a batch of 2 where d_model = d_k = d_v, a batched and an unbatched
    float64 case (the second with d_v = 1); outside the square case d_k differs from
    d_model, so that dividing by sqrt(d_model) is caught. Equivariance: one
    permutation of 6 to 9 tokens and one of 3, neither the identity. The tensors
    come from torch generators seeded with the drawn torch seeds."""
    if seed is None:
        cases: list[_AttentionCase] = [
            (10, None, 7, 8, 5, 3, torch.float32),
            (11, 3, 6, 5, 2, 4, torch.float32),
            (12, None, 1, 4, 3, 2, torch.float32),
            (13, 2, 9, 6, 6, 6, torch.float32),
            (14, 4, 3, 7, 2, 5, torch.float64),
            (15, None, 8, 3, 4, 1, torch.float64),
        ]
        return cases, [(16, [6, 2, 0, 7, 1, 5, 3, 4]), (17, [1, 0, 2])]
    rng = term_rng(seed, "grade_self_attention")

    def torch_seed() -> int:
        return rng.randrange(2**31)

    def d_k_not(d_model: int) -> int:
        return rng.choice([d for d in range(2, 9) if d != d_model])

    def case(batch: int | None, seq: int, d_model: int, d_v: int,
             dtype: torch.dtype = torch.float32) -> _AttentionCase:
        return (torch_seed(), batch, seq, d_model, d_k_not(d_model), d_v, dtype)

    square = rng.randint(4, 8)
    cases = [
        case(None, rng.randint(6, 10), rng.randint(5, 10), rng.randint(2, 6)),
        case(3, rng.randint(4, 8), rng.randint(3, 8), rng.randint(2, 6)),
        case(None, 1, rng.randint(3, 7), rng.randint(2, 5)),
        (torch_seed(), 2, rng.randint(6, 10), square, square, square, torch.float32),
        case(rng.randint(2, 4), rng.randint(2, 5), rng.randint(5, 9), rng.randint(2, 6),
             torch.float64),
        case(None, rng.randint(6, 10), rng.randint(3, 6), 1, torch.float64),
    ]
    perms = []
    for n in (rng.randint(6, 9), 3):
        perm = list(range(n))
        while perm == sorted(perm):
            rng.shuffle(perm)
        perms.append((torch_seed(), perm))
    return cases, perms


def grade_self_attention(
    self_attention: Callable, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grade: more sizes, one token, batches of 3, float64, equivariance (the
    sizes, inputs and permutations drawn by the term's ``seed`` when there is one).
    No variant changes the answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_self_attention(self_attention)
    cases, perms = _hidden_attention_cases(seed)
    for case_seed, batch, seq, d_model, d_k, d_v, dtype in cases:
        _check_attention_case(self_attention, case_seed, batch, seq, d_model, d_k, d_v,
                              dtype)
    for case_seed, perm in perms:
        _check_equivariance(self_attention, case_seed, perm)
    passed("self_attention", public=False,
           detail=f"{len(cases)} shapes and dtypes, equivariance")


def _perm_mistakes(perm: list[int]) -> list[Mistake]:
    n = len(perm)
    p = _ref_permutation_matrix(perm).double()  # (n, n)
    return [
        Mistake(
            p.T,
            "this is the transposed matrix (the inverse permutation): it moves row "
            "i of x to row perm[i]; the exercise asks for (P @ x)[i] = x[perm[i]], "
            "so row i of P has its 1 in column perm[i]",
            "transposed",
        ),
        Mistake(
            torch.eye(n, dtype=torch.float64),
            "this is the identity matrix: it ignores perm",
            "identity",
        ),
    ]


def _check_perm(permutation_matrix: Callable, perm: list[int], as_tensor: bool) -> None:
    expected = _ref_permutation_matrix(perm)  # (n, n)
    mistakes = _known(expected, _perm_mistakes(perm))
    arg = torch.tensor(perm) if as_tensor else list(perm)
    call = (f"permutation_matrix(torch.tensor({perm}))" if as_tensor
            else f"permutation_matrix({perm})")
    got = call_student(permutation_matrix, arg, call=call)
    if isinstance(got, torch.Tensor) and got.shape == (len(perm),):
        raise CheckFailed(f"{call} returned a vector of shape {tuple(got.shape)}; "
                          f"return the ({len(perm)}, {len(perm)}) matrix P with "
                          "(P @ x)[i] = x[perm[i]]")
    expect_close(got, expected, what=call, atol=0.0, rtol=0.0, mistakes=mistakes,
                 dtype=torch.get_default_dtype(), dtype_reason=_FLOAT32_REASON)


# The dtype asked for is PyTorch's default (float32 unless a notebook changed it
# with torch.set_default_dtype), the dtype of the x that P multiplies.
_FLOAT32_REASON = (
    "the task asks for float32 because P @ x fails for a float32 x unless P is "
    "float32 too (torch does not mix dtypes in a matrix product)"
)


def _check_perm_property(permutation_matrix: Callable, perm: list[int]) -> None:
    """(P @ x)[i] = x[perm[i]] and P^T P = I, with the student's P."""
    n = len(perm)
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
    expected = x[torch.tensor(perm)]  # (n, 3)
    call = f"permutation_matrix({perm})"
    got = call_student(permutation_matrix, list(perm), call=call)
    if not isinstance(got, torch.Tensor) or not got.is_floating_point():
        raise CheckFailed(f"{call} should be a floating-point torch.Tensor, so that "
                          "P @ x works for float x")
    if got.shape != (n, n):
        raise CheckFailed(f"{call} has the wrong shape: expected {(n, n)}, "
                          f"got {tuple(got.shape)}")
    try:
        moved = got @ x  # (n, 3), in the student's dtype: float32 P for float32 x
    except RuntimeError as exc:
        raise CheckFailed(f"P @ x with P = {call} and a float32 x raised: {exc}; "
                          f"{_FLOAT32_REASON}") from None
    p = got.double()  # (n, n)
    expect_close(moved, expected, what=f"P @ x with P = {call}", atol=1e-6,
                 rtol=1e-6)
    expect_close(p.T @ p, torch.eye(n), what=f"P^T P with P = {call}",
                 atol=1e-6, rtol=1e-6)


def _public_permutation_matrix(permutation_matrix: Callable) -> None:
    """Public cases: a 4-cycle given as a list and as a tensor."""
    _check_perm(permutation_matrix, [2, 0, 3, 1], as_tensor=False)
    _check_perm(permutation_matrix, [1, 2, 0], as_tensor=True)


def check_permutation_matrix(permutation_matrix: Callable) -> None:
    """Public check: a 4-cycle given as a list and as a tensor."""
    _public_permutation_matrix(permutation_matrix)
    passed("permutation_matrix", public=True)


def _hidden_permutations(seed: int | None) -> tuple[list[list[int]], list[int]]:
    """The hidden permutations and the one of the property check: fixed without a
    term seed; else drawn by the seed with the same properties: n = 1, an identity,
    a swap and a reversal (their own inverses: the transposed matrix is right
    there), a cyclic shift that is not its own inverse, three random permutations
    of 6 to 14 elements (from a torch generator seeded by the seed; none the
    identity), and a random one of 5 to 8 elements, not the identity, for
    ``(P @ x)[i] = x[perm[i]]`` and ``P^T P = I``."""
    if seed is None:
        g = torch.Generator().manual_seed(2024)
        randoms = [torch.randperm(n, generator=g).tolist() for n in (6, 9, 12)]
        perms = [[0], [0, 1, 2], [1, 0], [4, 3, 2, 1, 0], [1, 2, 3, 4, 0], *randoms]
        return perms, [3, 5, 0, 1, 4, 2]
    rng = term_rng(seed, "grade_permutation_matrix")
    g = torch.Generator().manual_seed(rng.randrange(2**31))

    def shuffled(n: int) -> list[int]:
        perm = list(range(n))
        while perm == sorted(perm):
            perm = torch.randperm(n, generator=g).tolist()
        return perm

    swap = list(range(rng.randint(2, 7)))
    a, b = rng.sample(range(len(swap)), 2)
    swap[a], swap[b] = swap[b], swap[a]
    n = rng.randint(5, 9)
    shift = rng.choice([k for k in range(1, n) if (2 * k) % n])  # not self-inverse
    sizes = sorted(rng.sample(range(6, 15), 3))
    perms = [
        [0],
        list(range(rng.randint(2, 6))),
        swap,
        list(range(rng.randint(4, 9)))[::-1],
        [(i + shift) % n for i in range(n)],
        *(shuffled(size) for size in sizes),
    ]
    return perms, shuffled(rng.randint(5, 8))


def grade_permutation_matrix(
    permutation_matrix: Callable, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grade: n = 1, identity, swaps, seeded random permutations, property
    (the permutations drawn by the term's ``seed`` when there is one). No variant
    changes the answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_permutation_matrix(permutation_matrix)
    perms, property_perm = _hidden_permutations(seed)
    for i, perm in enumerate(perms):
        _check_perm(permutation_matrix, perm, as_tensor=bool(i % 2))
    _check_perm_property(permutation_matrix, property_perm)
    passed("permutation_matrix", public=False, detail=f"{len(perms)} permutations")
