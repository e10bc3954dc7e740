"""Graders of exercise 6 (relative positions): Shaw et al.'s clipped relative index
and T5's bucketed relative positions.

Expected answers come from :mod:`course_lib.relative`, captured at import; the known
wrong answers (``i - j`` instead of ``j - i``, no clipping, no offset, queries first,
query - key in T5, the bidirectional halving forgotten, no clamp to the last bucket,
future keys not sent to bucket 0) are computed here, so a message can name the mistake.
"""

from __future__ import annotations

import math

import torch

from course_lib.relative import relative_position_index as _ref_index
from course_lib.relative import t5_relative_position_bucket as _ref_bucket

from ._core import CheckFailed, Mistake, call_student, expect_equal, passed

__all__ = [
    "check_relative_position_index",
    "check_t5_relative_position_bucket",
    "grade_relative_position_index",
    "grade_t5_relative_position_bucket",
]

_arange = torch.arange
_equal = torch.equal
_where = torch.where
_log = torch.log


def _known(expected: torch.Tensor, candidates: list[tuple[torch.Tensor, str]]):
    """The candidate wrong answers that differ from the expected one (a candidate
    that coincides with the right answer for this input must not reject it)."""
    return [
        Mistake(answer, text)
        for answer, text in candidates
        if not (answer.shape == expected.shape and _equal(answer, expected))
    ]


# --- relative_position_index


def _index_mistakes(q_len: int, k_len: int, max_distance: int, expected: torch.Tensor):
    m = max_distance
    key = _arange(k_len)[None, :]  # (1, Lk)
    query = _arange(q_len)[:, None] + (k_len - q_len)  # (Lq, 1), queries last
    query_first = _arange(q_len)[:, None]  # (Lq, 1)
    rel = key - query  # (Lq, Lk)
    return _known(
        expected,
        [
            (
                (query - key).clamp(-m, m) + m,
                "this is clip(i - j) + max_distance (query minus key). The convention "
                "is j - i, key minus query: keys after the query get indices above "
                "max_distance.",
            ),
            (
                rel + m,
                "the distances are not clipped: clip j - i to [-max_distance, "
                "max_distance] before adding max_distance, so that every index is in "
                "[0, 2*max_distance].",
            ),
            (
                rel.clamp(-m, m),
                "the offset is missing: add max_distance after clipping, so that the "
                "indices run from 0 to 2*max_distance (they are rows of an embedding "
                "table and cannot be negative).",
            ),
            (
                (key - query_first).clamp(-m, m) + m,
                "the queries are placed at positions 0..q_len-1. Queries are the LAST "
                "q_len of the k_len positions: query i sits at position "
                "i + k_len - q_len.",
            ),
            (
                (query_first - key).clamp(-m, m) + m,
                "this uses i - j (query minus key) with the queries at positions "
                "0..q_len-1. Use j - i, with query i at position i + k_len - q_len.",
            ),
        ],
    )


def _check_index_case(fn, q_len: int, k_len: int, max_distance: int) -> None:
    expected = _ref_index(q_len, k_len, max_distance)
    mistakes = _index_mistakes(q_len, k_len, max_distance, expected)
    call = f"relative_position_index({q_len}, {k_len}, {max_distance})"
    got = call_student(fn, q_len, k_len, max_distance, call=call)
    expect_equal(got, expected, what=call, mistakes=mistakes)


_INDEX_PUBLIC = [(4, 4, 2), (3, 6, 2), (5, 5, 9)]


def check_relative_position_index(fn) -> None:
    """Public check of ``relative_position_index(q_len, k_len, max_distance)``."""
    for q_len, k_len, max_distance in _INDEX_PUBLIC:
        _check_index_case(fn, q_len, k_len, max_distance)
    passed("relative_position_index", public=True)


def grade_relative_position_index(fn) -> None:
    """Hidden grader: the public cases, edge cases and seeded random sizes."""
    cases = [
        *_INDEX_PUBLIC,
        (1, 1, 1),
        (1, 9, 3),
        (6, 9, 1),
        (8, 8, 1),
        (2, 40, 100),
        (16, 16, 4),
        (7, 20, 6),
    ]
    gen = torch.Generator().manual_seed(606)
    for _ in range(6):
        q_len = int(torch.randint(1, 13, (1,), generator=gen))
        k_len = q_len + int(torch.randint(0, 12, (1,), generator=gen))
        max_distance = int(torch.randint(1, 14, (1,), generator=gen))
        cases.append((q_len, k_len, max_distance))
    for q_len, k_len, max_distance in cases:
        _check_index_case(fn, q_len, k_len, max_distance)
    passed("relative_position_index", public=False, detail=f"{len(cases)} cases")


# --- t5_relative_position_bucket


def _t5_variant(
    relative_position: torch.Tensor,
    bidirectional: bool,
    num_buckets: int,
    max_distance: int,
    *,
    halve: bool = True,
    clamp: bool = True,
    causal_abs: bool = False,
    shift: float = 0.0,
) -> torch.Tensor:
    """T5 buckets with switchable mistakes; ``shift`` nudges the log bucket value
    (used to find the bucket edges where float rounding may go either way)."""
    rel = relative_position.long()
    buckets = num_buckets
    if bidirectional:
        if halve:
            buckets //= 2
        offset = (rel > 0).long() * buckets
        n = rel.abs()
    else:
        offset = torch.zeros_like(rel)
        n = rel.abs() if causal_abs else (-rel).clamp(min=0)
    max_exact = buckets // 2
    n_large = n.clamp(min=max_exact).double()
    scaled = (
        _log(n_large / max_exact)
        / math.log(max_distance / max_exact)
        * (buckets - max_exact)
    )
    large = max_exact + torch.floor(scaled + shift).long()
    if clamp:
        large = large.clamp(max=buckets - 1)
    return offset + _where(n < max_exact, n, large)


def _t5_expected(relative_position, bidirectional, num_buckets, max_distance):
    """The reference buckets and, at bucket edges where ``log(n/E)/log(D/E)*(B-E)`` is
    within 1e-4 of an integer (float32 and float64 round it differently), the other
    acceptable value."""
    expected = _ref_bucket(
        relative_position.clone(),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    args = (relative_position, bidirectional, num_buckets, max_distance)
    low = _t5_variant(*args, shift=-1e-4)
    high = _t5_variant(*args, shift=1e-4)
    other = _where(expected == low, high, low)
    return expected, other


def _t5_mistakes(relative_position, bidirectional, num_buckets, max_distance, expected):
    args = (relative_position, bidirectional, num_buckets, max_distance)
    candidates = [
        (
            _t5_variant(-relative_position, bidirectional, num_buckets, max_distance),
            "these are the buckets of query - key. relative_position is key - query "
            "(memory_position - context_position in T5): in causal mode keys before "
            "the query (negative relative_position) use the buckets, keys after it go "
            "to bucket 0.",
        ),
        (
            _t5_variant(*args, clamp=False),
            "bucket ids reach num_buckets or more: distances at or beyond "
            "max_distance must all share the last bucket (clamp the logarithmic "
            "bucket to num_buckets - 1 of its half).",
        ),
    ]
    if bidirectional:
        candidates.append(
            (
                _t5_variant(*args, halve=False),
                "in bidirectional mode each direction gets half of the buckets: use "
                "num_buckets // 2 per side, keys after the query offset by "
                "num_buckets // 2 (your buckets run up to 2 * num_buckets - 1).",
            )
        )
        candidates.append(
            (
                _t5_variant(*args, halve=False, clamp=False),
                "in bidirectional mode each direction gets half of the buckets "
                "(num_buckets // 2 per side), and the logarithmic bucket must be "
                "clamped to the last bucket of its half.",
            )
        )
    else:
        candidates.append(
            (
                _t5_variant(*args, causal_abs=True),
                "in causal mode (bidirectional=False) every key after the query "
                "(relative_position > 0) belongs to bucket 0: use "
                "n = max(-relative_position, 0), not |relative_position|.",
            )
        )
    return _known(expected, candidates)


def _call_bucket(fn, relative_position, bidirectional, num_buckets, max_distance, call):
    return call_student(
        fn,
        relative_position.clone(),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
        call=call,
    )


def _describe_input(relative_position: torch.Tensor) -> str:
    flat = relative_position.flatten()
    if relative_position.ndim == 1 and _equal(
        flat, _arange(int(flat[0]), int(flat[0]) + flat.numel())
    ):
        return f"arange({int(flat[0])}, {int(flat[-1]) + 1})"
    return f"<tensor of shape {tuple(relative_position.shape)}>"


def _check_bucket_case(fn, relative_position, bidirectional, num_buckets, max_distance):
    args = (relative_position, bidirectional, num_buckets, max_distance)
    expected, other = _t5_expected(*args)
    mistakes = _t5_mistakes(*args, expected)
    call = (
        f"t5_relative_position_bucket({_describe_input(relative_position)}, "
        f"bidirectional={bidirectional}, num_buckets={num_buckets}, "
        f"max_distance={max_distance})"
    )
    got = _call_bucket(fn, *args, call)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape:
        # At a bucket edge either rounding of the logarithm is accepted.
        expected = _where(got == other, other, expected)
    expect_equal(got, expected, what=call, mistakes=mistakes)


def _check_bucket_defaults(fn) -> None:
    """``fn(relative_position)`` alone must use T5's defaults: bidirectional, 32
    buckets, max_distance 128 (the signature of the task)."""
    relative_position = _arange(-300, 301)
    expected, other = _t5_expected(relative_position, True, 32, 128)
    call = "t5_relative_position_bucket(arange(-300, 301)) (the default arguments)"
    got = call_student(fn, relative_position.clone(), call=call)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape:
        expected = _where(got == other, other, expected)
        if not _equal(got.long(), expected):
            raise CheckFailed(
                f"{call} gives other buckets than with bidirectional=True, "
                "num_buckets=32, max_distance=128: the defaults of the signature "
                "must be T5's, t5_relative_position_bucket(relative_position, "
                "bidirectional=True, num_buckets=32, max_distance=128)"
            )
    expect_equal(got, expected, what=call)


def _grid(q_len: int, k_len: int) -> torch.Tensor:
    """``key - query`` for queries at the last ``q_len`` of ``k_len`` positions."""
    query = _arange(q_len)[:, None] + (k_len - q_len)
    return _arange(k_len)[None, :] - query  # (Lq, Lk)


_BUCKET_PUBLIC = [
    (_arange(-200, 201), True, 32, 128),
    (_arange(-200, 201), False, 32, 128),
    (_grid(6, 10), True, 8, 16),
]


def check_t5_relative_position_bucket(fn) -> None:
    """Public check of ``t5_relative_position_bucket``: three settings and a call
    with the default arguments (T5's, as the signature of the task says)."""
    for case in _BUCKET_PUBLIC:
        _check_bucket_case(fn, *case)
    _check_bucket_defaults(fn)
    passed("t5_relative_position_bucket", public=True)


def _check_monotone(fn, bidirectional: bool, num_buckets: int, max_distance: int):
    distance = _arange(0, 4 * max_distance)  # (n,)
    call = (
        f"t5_relative_position_bucket(±arange(0, {4 * max_distance}), "
        f"bidirectional={bidirectional}, num_buckets={num_buckets}, "
        f"max_distance={max_distance})"
    )
    for sign, side in ((-1, "before"), (1, "after")):
        if sign == 1 and not bidirectional:
            continue
        got = _call_bucket(
            fn, sign * distance, bidirectional, num_buckets, max_distance, call
        )
        if not isinstance(got, torch.Tensor) or got.shape != distance.shape:
            raise CheckFailed(
                f"{call} should return a tensor of shape {tuple(distance.shape)}, "
                f"got {got.shape if isinstance(got, torch.Tensor) else type(got)}"
            )
        got = got.long()
        if bool((got < 0).any()) or bool((got >= num_buckets).any()):
            bad = int(((got < 0) | (got >= num_buckets)).nonzero()[0, 0])
            raise CheckFailed(
                f"{call}: bucket ids must lie in [0, num_buckets) = "
                f"[0, {num_buckets}), "
                f"got {int(got[bad])} for relative_position {sign * bad}"
            )
        drop = (got[1:] < got[:-1]).nonzero()
        if drop.numel():
            d = int(drop[0, 0]) + 1
            raise CheckFailed(
                f"{call}: buckets must not decrease as the distance grows (keys "
                f"{side} the query): distance {d - 1} is in bucket {int(got[d - 1])} "
                f"but distance {d} in bucket {int(got[d])}"
            )


def _check_causal_future(fn, num_buckets: int, max_distance: int) -> None:
    future = _arange(1, 3 * max_distance)
    call = (
        f"t5_relative_position_bucket(arange(1, {3 * max_distance}), "
        f"bidirectional=False, num_buckets={num_buckets}, max_distance={max_distance})"
    )
    got = _call_bucket(fn, future, False, num_buckets, max_distance, call)
    if isinstance(got, torch.Tensor) and got.shape == future.shape:
        nonzero = (got != 0).nonzero()
        if nonzero.numel():
            i = int(nonzero[0, 0])
            raise CheckFailed(
                f"{call}: in causal mode every key after the query belongs to bucket "
                f"0, but relative_position {int(future[i])} got bucket {int(got[i])}"
            )
    expect_equal(got, torch.zeros_like(future), what=call)


def grade_t5_relative_position_bucket(fn) -> None:
    """Hidden grader: properties (range, monotone in distance, causal future keys in
    bucket 0) and values for several settings, shapes and large distances."""
    for case in _BUCKET_PUBLIC:
        _check_bucket_case(fn, *case)
    _check_bucket_defaults(fn)
    _check_causal_future(fn, 32, 128)
    for bidirectional, num_buckets, max_distance in [
        (True, 32, 128),
        (False, 32, 128),
        (True, 8, 20),
        (False, 12, 40),
    ]:
        _check_monotone(fn, bidirectional, num_buckets, max_distance)
    gen = torch.Generator().manual_seed(607)
    cases = [
        (_arange(-300, 301), True, 64, 256),
        (_arange(-50, 51), True, 4, 10),
        (_arange(-50, 51), False, 4, 10),
        (_arange(-100, 101), False, 10, 60),
        (_grid(1, 40), False, 32, 128),
        (_grid(12, 12), True, 16, 32),
        (
            torch.tensor([-100000, -5000, -129, -128, -127, 127, 128, 129, 100000]),
            True,
            32,
            128,
        ),
        (torch.randint(-1000, 1000, (3, 4, 5), generator=gen), True, 32, 128),
        (torch.randint(-1000, 1000, (7, 9), generator=gen), False, 32, 128),
        (torch.randint(-60, 60, (50,), generator=gen), True, 16, 50),
    ]
    for case in cases:
        _check_bucket_case(fn, *case)
    n_cases = len(cases) + len(_BUCKET_PUBLIC)
    passed("t5_relative_position_bucket", public=False, detail=f"{n_cases} cases")
