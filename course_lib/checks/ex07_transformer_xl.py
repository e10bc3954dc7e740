"""Graders of exercise 7 (Transformer-XL): the pad-and-reshape ``rel_shift`` and the
relative attention scores of Dai et al. eq. (3).

``rel_shift`` is only specified where ``j <= i + k_len - q_len`` (keys at or before the
query); the other entries are garbage that the causal mask removes, so they are not
compared. ``rel_attention_scores`` must put ``-inf`` there.

Expected answers come from :mod:`course_lib.transformer_xl`, captured at import; the
known wrong answers (no shift, zero column on the wrong side, off by one row, shift in
the wrong direction or by the wrong amount, ascending distances, ``u`` and ``v``
swapped, no ``1/sqrt(D)``, the position term not shifted, no mask after the shift,
queries placed first) are computed here so that a message can name the mistake.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.transformer_xl import rel_attention_scores as _ref_scores
from course_lib.transformer_xl import rel_shift as _ref_shift
from course_lib.transformer_xl import (
    rel_shift_bidirectional as _ref_rel_shift_bidirectional,
)

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    hinted,
    passed,
    require_plain,
    term_rng,
    variant_named,
)

__all__ = [
    "check_rel_attention_scores",
    "check_rel_shift",
    "check_rel_shift_bidirectional",
    "grade_rel_attention_scores",
    "grade_rel_shift",
    "grade_rel_shift_bidirectional",
]

_arange = torch.arange
_allclose = torch.allclose
_isinf = torch.isinf
_einsum = torch.einsum
_pad = F.pad
_ones = torch.ones
_sqrt = math.sqrt
_inf = float("inf")

# Tolerances, from the arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8.
# A score is a sum of four dot products of width d <= 32 of O(1) values: summed
# in any order it is within ~4 d u |terms| ~ 1e-5 of the exact sum, and the terms
# are O(d), so scores near 0 need an absolute bound: atol = rtol = 1e-4. A shift
# by one position or a dropped term moves scores by O(1).
_ATOL = 1e-4
_RTOL = 1e-4

# No variant changes an answer of this exercise: the term's seed draws the hidden
# cases (course_lib/grading/editions/term.py), and an unknown variant is refused.
EXERCISE = "ex07_transformer_xl"
VARIANTS: dict[str, Variant] = {}


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


def _valid(q_len: int, k_len: int) -> torch.Tensor:
    """True where key j is at or before query i: ``j <= i + k_len - q_len``."""
    return _ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)


def _on_valid(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``x`` with the unspecified entries (key after the query) set to 0."""
    return x.masked_fill(~valid, 0.0)


def _known(expected: torch.Tensor, valid: torch.Tensor, candidates):
    """Candidate wrong answers restricted to the compared entries, dropping those that
    coincide there with the right answer."""
    found = []
    for m in candidates:
        answer = _on_valid(m.answer, valid)
        if answer.shape == expected.shape and _allclose(
            answer.double(), expected.double(), atol=_ATOL, rtol=_RTOL, equal_nan=True
        ):
            continue
        found.append(hinted(Mistake(answer, m.explanation, m.slug), m.hint))
    return found


def _gather_cols(x: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """``out[..., i, j] = x[..., i, col[i, j] mod k_len]``."""
    k_len = x.shape[-1]
    return x.gather(-1, (col % k_len).expand(*x.shape[:-2], *col.shape))


def _require_shape(got, shape: torch.Size, what: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(
            f"{what} should return a torch.Tensor of shape {tuple(shape)}, "
            f"got {type(got).__name__}"
        )
    require_plain(got, what)
    if got.shape != shape:
        raise CheckFailed(
            f"{what} has the wrong shape: expected {tuple(shape)}, "
            f"got {tuple(got.shape)}"
        )
    if not got.is_floating_point():
        raise CheckFailed(f"{what} should be a floating-point tensor, got {got.dtype}")
    return got


# --- rel_shift


def _shift_mistakes(x: torch.Tensor):
    *lead, q_len, k_len = x.shape
    i = _arange(q_len)[:, None]
    j = _arange(k_len)[None, :]
    m = k_len - q_len
    padded_right = _pad(x, (0, 1)).reshape(*lead, k_len + 1, q_len)
    padded_left = _pad(x, (1, 0)).reshape(*lead, k_len + 1, q_len)
    return [
        Mistake(
            x,
            "nothing is shifted: row i must move left by q_len - 1 - i (the last row "
            "stays, the first moves most).",
            "not-shifted",
        ),
        Mistake(
            padded_right[..., 1:, :].reshape(x.shape),
            "the zero column is padded on the right. Pad it on the LEFT "
            "(F.pad(x, (1, 0))) before viewing the numbers as (k_len + 1, q_len).",
            "padded-right",
        ),
        Mistake(
            padded_right[..., :-1, :].reshape(x.shape),
            "the zero column is padded on the right and the last row dropped. Pad on "
            "the LEFT, view as (k_len + 1, q_len) and drop the FIRST row.",
            "padded-right-last-row-dropped",
        ),
        Mistake(
            padded_left[..., :-1, :].reshape(x.shape),
            "off by one row: after padding and viewing as (k_len + 1, q_len), drop the "
            "FIRST row (the leading q_len numbers), not the last.",
            "last-row-dropped",
        ),
        hinted(Mistake(
            _gather_cols(x, j - (q_len - 1 - i)),
            "the rows are shifted the wrong way: row i must move LEFT, by "
            "q_len - 1 - i columns.",
            "shifted-wrong-way"),
            "out[i, j] = x[i, j + q_len - 1 - i]"),
        Mistake(
            _gather_cols(x, j + i),
            "row i is shifted by i; it must move left by q_len - 1 - i (the last query "
            "row is the one that stays in place).",
            "shifted-by-i",
        ),
        Mistake(
            _gather_cols(x, i + m - j),
            "column c of x holds distance k_len - 1 - c (descending distances), so "
            "out[i, j] = x[i, j + q_len - 1 - i]; this answer reads column c as "
            "distance c.",
            "ascending-distances",
        ),
    ]


def _check_shift_case(fn, x: torch.Tensor, label: str) -> None:
    *_, q_len, k_len = x.shape
    valid = _valid(q_len, k_len)
    expected = _on_valid(_ref_shift(x.clone()), valid)
    mistakes = _known(expected, valid, _shift_mistakes(x))
    call = f"rel_shift({label})"
    got = call_student(fn, x.clone(), call=call)
    got = _require_shape(got, x.shape, call)
    expect_close(
        _on_valid(got, valid),
        expected,
        what=f"{call} (compared where j <= i + k_len - q_len)",
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=mistakes,
    )


def _distance_labelled(q_len: int, k_len: int) -> torch.Tensor:
    """x[i, c] = k_len - 1 - c: every entry holds the distance it stands for."""
    return (k_len - 1 - _arange(k_len)).float().expand(q_len, k_len).clone()


def _check_distance_labels(fn, q_len: int, k_len: int) -> None:
    """After the shift, entry (i, j) must hold its distance i + k_len - q_len - j."""
    x = _distance_labelled(q_len, k_len)
    valid = _valid(q_len, k_len)
    i = _arange(q_len)[:, None]
    j = _arange(k_len)[None, :]
    distance = _on_valid((i + k_len - q_len - j).float(), valid)
    call = f"rel_shift(x) with x[i, c] = k_len - 1 - c (q_len={q_len}, k_len={k_len})"
    got = _require_shape(call_student(fn, x.clone(), call=call), x.shape, call)
    expect_close(
        _on_valid(got, valid),
        distance,
        what=f"{call}, where entry (i, j) must hold the distance i + k_len - q_len - j",
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=_known(distance, valid, _shift_mistakes(x)),
    )


def check_rel_shift(fn) -> None:
    """Public check of ``rel_shift(x)``."""
    gen = torch.Generator().manual_seed(70)
    _check_shift_case(fn, _randn(gen, 2, 3, 5, 5), "x of shape (2, 3, 5, 5)")
    _check_shift_case(fn, _randn(gen, 1, 2, 3, 7), "x of shape (1, 2, 3, 7)")
    _check_distance_labels(fn, 4, 4)
    _check_distance_labels(fn, 3, 6)
    passed("rel_shift", public=True)


def _term_generator(rng) -> torch.Generator:
    """A torch generator for a term's tensors, seeded from the term's ``rng``."""
    return torch.Generator().manual_seed(rng.randrange(2**31))


def _memory(rng, q_low: int, q_high: int, extra_low: int = 0,
            extra_high: int = 9) -> tuple[int, int]:
    """A random ``(q_len, k_len)``, ``q_len`` from ``q_low`` to ``q_high``, with
    ``q_len + extra_low <= k_len <= q_len + extra_high``."""
    q_len = rng.randint(q_low, q_high)
    return q_len, q_len + rng.randint(extra_low, extra_high)


def _hidden_shift_cases(
    seed: int | None,
) -> tuple[torch.Generator, list[tuple[int, ...]], list[tuple[int, int]]]:
    """The generator of the hidden ``rel_shift`` inputs, their shapes and the
    ``(q_len, k_len)`` of the distance-label checks: fixed without a term seed; else
    drawn by the seed with the same properties: a square 4-d input, a single
    query with a single key, a single query with memory, 2-d square and memory
    inputs, a 3-d and a 5-d input (any number of leading dimensions), a long memory
    (k_len at least twice q_len), four random (q_len, k_len) with q_len <= k_len;
    distance labels for q_len = k_len, one query, and memory."""
    if seed is None:
        gen = torch.Generator().manual_seed(71)
        shapes = [(2, 3, 5, 5), (1, 1), (1, 6), (6, 6), (4, 9), (3, 4, 9),
                  (2, 2, 2, 8, 8)]
        shapes.append((2, 3, 7, 16))
        for _ in range(4):
            q_len = int(torch.randint(1, 10, (1,), generator=gen))
            k_len = q_len + int(torch.randint(0, 10, (1,), generator=gen))
            shapes.append((2, 2, q_len, k_len))
        return gen, shapes, [(4, 4), (1, 5), (5, 13)]
    rng = term_rng(seed, "grade_rel_shift")
    square, square_2d, square_5d = (rng.randint(3, 8) for _ in range(3))
    q_2d, q_3d, q_long = rng.randint(2, 6), rng.randint(2, 5), rng.randint(5, 9)
    shapes = [
        (2, 3, square, square),
        (1, 1),
        (1, rng.randint(2, 9)),
        (square_2d, square_2d),
        (q_2d, q_2d + rng.randint(3, 8)),
        (3, q_3d, q_3d + rng.randint(3, 8)),
        (2, 2, 2, square_5d, square_5d),
        (2, 3, q_long, 2 * q_long + rng.randint(0, 4)),
    ]
    shapes += [(2, 2, *_memory(rng, 1, 9)) for _ in range(4)]
    labels = [(rng.randint(3, 7),) * 2, (1, rng.randint(3, 8)),
              _memory(rng, 3, 7, 5, 10)]
    return _term_generator(rng), shapes, labels


def grade_rel_shift(fn, variant: str | None = None, seed: int | None = None) -> None:
    """Hidden grader: distance labels, memory (q_len < k_len), single queries, any
    number of leading dimensions; compared on the entries the mask keeps (the shapes
    and inputs drawn by the term's ``seed`` when there is one). No variant changes
    the answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    gen, shapes, labels = _hidden_shift_cases(seed)
    for shape in shapes:
        _check_shift_case(fn, _randn(gen, *shape), f"x of shape {shape}")
    for q_len, k_len in labels:
        _check_distance_labels(fn, q_len, k_len)
    passed("rel_shift", public=False, detail=f"{len(shapes) + len(labels)} cases")


# --- rel_attention_scores


def _scores_parts(q, k, r, u, v):
    """Terms of eq. (3) by an explicit gather: ((q+u) k^T, (q+v) . r_{i'-j}) on the
    entries the mask keeps."""
    q_len, k_len = q.shape[2], k.shape[2]
    i = _arange(q_len)[:, None]
    j = _arange(k_len)[None, :]
    content_u = (q + u[None, :, None, :]) @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    by_distance = _einsum(
        "bhqd,hkd->bhqk", q + v[None, :, None, :], r
    )  # (B, H, Lq, Lk)
    position = _gather_cols(by_distance, j + q_len - 1 - i)  # (B, H, Lq, Lk)
    return content_u, by_distance, position, i, j


def _scores_mistakes(q, k, r, u, v):
    q_len, k_len, dim = q.shape[2], k.shape[2], q.shape[3]
    content, by_distance, position, i, j = _scores_parts(q, k, r, u, v)
    c_swap, _, p_swap, _, _ = _scores_parts(q, k, r, v, u)
    zero = torch.zeros_like(u)
    c_none, _, p_none, _, _ = _scores_parts(q, k, r, zero, zero)
    ascending = _gather_cols(by_distance, i + k_len - q_len - j)
    s = _sqrt(dim)
    return [
        Mistake(
            (c_swap + p_swap) / s,
            "u and v are swapped: u is the global CONTENT bias, added to the "
            "query before the dot product with the keys; v is the global POSITION "
            "bias, added before the dot product with the relative embeddings r.",
            "u-v-swapped",
        ),
        Mistake(
            content + position,
            "the scores are not scaled: divide the sum of the terms by sqrt(head_dim).",
            "unscaled",
        ),
        Mistake(
            (content + position) / dim,
            "the scores are divided by head_dim; divide by sqrt(head_dim).",
            "divided-by-head-dim",
        ),
        Mistake(
            (c_none + p_none) / s,
            "the global biases are missing: add u to the query for the content term "
            "and v for the position term.",
            "no-global-biases",
        ),
        Mistake(
            (content + by_distance) / s,
            "the position term is not realigned: (q + v) r^T has one column per "
            "DISTANCE; rel_shift turns it into one column per key.",
            "not-realigned",
        ),
        Mistake(
            (content + ascending) / s,
            "row c of r holds distance k_len - 1 - c (descending), so the distance "
            "i' - j with i' = i + k_len - q_len is row j + q_len - 1 - i; this answer "
            "reads row c as distance c.",
            "ascending-distances",
        ),
    ]


def _check_scores_case(
    fn,
    name: str,
    q: torch.Tensor,
    k: torch.Tensor,
    r: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    *,
    unmasked: str,
    extra_mistakes=(),
) -> None:
    """Compare ``fn(q, k, r, u, v)`` with the reference: first the -inf pattern of the
    mask (``unmasked`` explains a missing mask), then the kept entries."""
    q_len, k_len = q.shape[2], k.shape[2]
    valid = _valid(q_len, k_len)
    reference = _ref_scores(q.clone(), k.clone(), r.clone(), u.clone(), v.clone())
    expected = _on_valid(reference, valid)
    candidates = [*_scores_mistakes(q, k, r, u, v), *extra_mistakes]
    mistakes = _known(expected, valid, candidates)
    call = (
        f"{name}(q, k, r, u, v) with q {tuple(q.shape)}, k {tuple(k.shape)}, "
        f"r {tuple(r.shape)}"
    )
    got = call_student(
        fn, q.clone(), k.clone(), r.clone(), u.clone(), v.clone(), call=call
    )
    got = _require_shape(got, reference.shape, call)
    got_inf = _isinf(got) & (got < 0)
    missing = (~valid) & ~got_inf  # (B, H, Lq, Lk) by broadcasting
    if bool(missing.any()):
        idx = tuple(int(t) for t in missing.nonzero()[0])
        b, h, i, j = idx
        masked = got[..., ~valid]  # (B, H, n_future)
        if bool((masked == masked.flatten()[0]).all()):
            raise CheckFailed(
                f"{call}: the entries for keys after the query are all "
                f"{masked.flatten()[0].item():.6g}; they must be -inf "
                f"(float('-inf')), so that the softmax gives them weight exactly 0."
            )
        raise CheckFailed(
            f"{call}: entry {idx} should be -inf (key {j} comes after query {i}, "
            f"which sits at position {i + k_len - q_len}), got {got[idx].item():.6g}. "
            f"{unmasked}"
        )
    extra = got_inf & valid
    if bool(extra.any()):
        idx = tuple(int(t) for t in extra.nonzero()[0])
        b, h, i, j = idx
        i_abs = i + k_len - q_len
        if j > i and j <= i_abs:
            raise CheckFailed(
                f"{call}: entry {idx} is -inf but key {j} is not after query {i}: "
                f"queries are the LAST q_len of the k_len positions, so query i sits "
                f"at position i + k_len - q_len = {i_abs} and may attend to keys "
                f"0..{i_abs} (mask j > i + k_len - q_len, not j > i)."
            )
        raise CheckFailed(
            f"{call}: entry {idx} is -inf but key {j} is at or before query {i} "
            f"(position {i_abs}); only keys after the query are masked."
        )
    expect_close(
        _on_valid(got, valid),
        expected,
        what=f"{call} (entries with j <= i + k_len - q_len)",
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=mistakes,
    )


_UNMASKED = (
    "After rel_shift the entries for keys after the query hold leftovers of the "
    "neighbouring row: mask them with -inf (j > i + k_len - q_len)."
)


def _random_inputs(gen, batch, heads, q_len, k_len, dim):
    return (
        _randn(gen, batch, heads, q_len, dim),
        _randn(gen, batch, heads, k_len, dim),
        _randn(gen, heads, k_len, dim),
        _randn(gen, heads, dim),
        _randn(gen, heads, dim),
    )


_SCORES_PUBLIC = [(2, 2, 4, 4, 8), (1, 2, 3, 7, 4)]


def check_rel_attention_scores(fn) -> None:
    """Public check of ``rel_attention_scores(q, k, r, u, v)``."""
    gen = torch.Generator().manual_seed(72)
    for sizes in _SCORES_PUBLIC:
        _check_scores_case(
            fn, "rel_attention_scores", *_random_inputs(gen, *sizes), unmasked=_UNMASKED
        )
    passed("rel_attention_scores", public=True)


def _hidden_scores_cases(
    seed: int | None,
) -> tuple[torch.Generator, list[tuple[int, int, int, int, int]]]:
    """The generator of the hidden ``rel_attention_scores`` inputs and their sizes
    ``(batch, heads, q_len, k_len, head_dim)``: fixed without a term seed; else
    drawn by the seed with the same properties: a square case and a memory case
    (the public sizes, with new inputs, without a seed), a single position, a single
    query with a long memory, several heads (3 or 4) with memory, head_dim = 2, a
    long memory (k_len at least q_len + 10), three random (q_len <= k_len) cases;
    every head_dim even."""
    if seed is None:
        gen = torch.Generator().manual_seed(73)
        sizes = [
            *_SCORES_PUBLIC,
            (1, 1, 1, 1, 2),
            (1, 1, 1, 10, 4),
            (3, 3, 5, 12, 16),
            (2, 4, 6, 6, 2),
            (1, 2, 8, 20, 8),
        ]
        for _ in range(3):
            q_len = int(torch.randint(1, 9, (1,), generator=gen))
            k_len = q_len + int(torch.randint(0, 9, (1,), generator=gen))
            sizes.append(
                (2, 2, q_len, k_len, 2 * int(torch.randint(1, 6, (1,), generator=gen)))
            )
        return gen, sizes
    rng = term_rng(seed, "grade_rel_attention_scores")

    def even(low: int, high: int) -> int:
        return 2 * rng.randint(low // 2, high // 2)

    square, several, long = rng.randint(3, 6), rng.randint(3, 6), rng.randint(6, 10)
    sizes = [
        (rng.randint(1, 3), rng.randint(1, 3), square, square, even(4, 10)),
        (1, 2, *_memory(rng, 2, 4, 2, 5), even(2, 6)),
        (1, 1, 1, 1, even(2, 4)),
        (1, 1, 1, rng.randint(8, 16), even(2, 6)),
        (rng.randint(2, 3), rng.randint(3, 4), several,
         2 * several + rng.randint(0, 6), even(12, 20)),
        (2, rng.randint(3, 5), *(rng.randint(4, 8),) * 2, 2),
        (1, 2, long, long + rng.randint(10, 16), 8),
    ]
    sizes += [(2, 2, *_memory(rng, 1, 8, 0, 8), even(2, 10)) for _ in range(3)]
    return _term_generator(rng), sizes


def grade_rel_attention_scores(
    fn, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grader: single positions, long memories, several heads and sizes (the
    sizes and inputs drawn by the term's ``seed`` when there is one). No variant
    changes the answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    gen, sizes = _hidden_scores_cases(seed)
    for s in sizes:
        _check_scores_case(
            fn, "rel_attention_scores", *_random_inputs(gen, *s), unmasked=_UNMASKED
        )
    passed("rel_attention_scores", public=False, detail=f"{len(sizes)} cases")


# --- rel_shift_bidirectional


def _bidirectional_mistakes(x: torch.Tensor):
    """Known wrong answers for ``x`` of shape ``(..., q_len, k_len + q_len - 1)``."""
    *lead, q_len, width = x.shape
    k_len = width - q_len + 1
    i = _arange(q_len)[:, None]
    j = _arange(k_len)[None, :]

    def cols(c):
        return x.gather(-1, (c % width).expand(*lead, q_len, k_len))

    right = j + q_len - 1 - i
    future = j > i + k_len - q_len
    rows = _pad(x, (1, 0)).reshape(*lead, width + 1, q_len)[..., 1:, :]
    rows = rows.reshape(*lead, q_len, width)  # (..., Lq, W), the shifted rows
    no_pad = x.reshape(*lead, width, q_len)[..., 1:, :]  # XLNet's recipe, no pad
    no_pad = no_pad.reshape(*lead, q_len, width - 1)[..., :k_len]
    return [
        hinted(Mistake(
            no_pad,
            "each row reads one column too far right (column j + q_len - i): that is "
            "XLNet's shift, which has no zero pad because its input carries one more "
            "distance (k_len down to -q_len + 1). The input here has k_len + q_len "
            "- 1 columns, one fewer.",
            "xlnet-shift"),
            "pad one zero column on the left first"),
        hinted(Mistake(
            rows[..., width - k_len :],
            "these are the LAST k_len columns of the shifted rows; the answer is "
            "the FIRST k_len.",
            "last-columns"),
            "out[i, j] = x[i, j + q_len - 1 - i]"),
        Mistake(
            cols(right).masked_fill(future, 0.0),
            "the keys after their query are zeroed as in the causal shift; in the "
            "bidirectional shift every entry is a real (negative) distance: keep it.",
            "future-zeroed",
        ),
        Mistake(
            cols(right).masked_fill(future, -_inf),
            "the keys after their query are masked as in the causal shift; in the "
            "bidirectional shift every entry is a real (negative) distance: keep it.",
            "future-masked",
        ),
        Mistake(
            cols(width - 1 - right),
            "column c of x holds distance k_len - 1 - c (descending, from k_len - 1 "
            "down to -(q_len - 1)); this answer reads the columns in ascending order.",
            "ascending-columns",
        ),
        hinted(Mistake(
            cols(j - (q_len - 1 - i)),
            "the rows are shifted the wrong way: row i must move LEFT, by "
            "q_len - 1 - i columns.",
            "shifted-wrong-way"),
            "out[i, j] = x[i, j + q_len - 1 - i]"),
    ]


def _bidirectional_case(fn, x: torch.Tensor, label: str, expected=None) -> None:
    *_, q_len, width = x.shape
    k_len = width - q_len + 1
    shape = (*x.shape[:-1], k_len)
    if expected is None:
        expected = _ref_rel_shift_bidirectional(x.clone())
    call = f"rel_shift_bidirectional({label})"
    got = call_student(fn, x.clone(), call=call)
    if (
        isinstance(got, torch.Tensor)
        and got.shape[:-1] == shape[:-1]
        and got.shape[-1] != k_len
    ):
        if got.shape[-1] == width:
            raise CheckFailed(
                f"{call} returned {width} columns, as many as x has. The output has "
                f"one column per key: k_len = width - q_len + 1 = {k_len}."
            )
        if got.shape[-1] == k_len - 1:
            raise CheckFailed(
                f"{call} returned {k_len - 1} columns: k_len is width - q_len + 1 = "
                f"{k_len} (the distances run from k_len - 1 down to -(q_len - 1)), "
                "not width - q_len."
            )
    got = _require_shape(got, torch.Size(shape), call)
    mistakes = [
        m for m in _bidirectional_mistakes(x) if not torch.equal(m.answer, expected)
    ]
    expect_close(got, expected, what=call, atol=_ATOL, rtol=_RTOL, mistakes=mistakes)


def _signed_labels(q_len: int, k_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x[i, c] = k_len - 1 - c, and the answer: (i, j) holds i + k_len - q_len - j."""
    width = k_len + q_len - 1
    x = (k_len - 1 - _arange(width)).float().expand(q_len, width).clone()
    i = _arange(q_len)[:, None]
    j = _arange(k_len)[None, :]
    return x, (i + k_len - q_len - j).float()


def check_rel_shift_bidirectional(fn) -> None:
    """Public check of ``rel_shift_bidirectional(x)``."""
    gen = torch.Generator().manual_seed(72)
    for q_len, k_len in ((3, 5), (4, 4)):
        x, want = _signed_labels(q_len, k_len)
        _bidirectional_case(
            fn,
            x,
            f"x with x[i, c] = k_len - 1 - c, q_len={q_len}, k_len={k_len}; entry "
            "(i, j) must hold the signed distance i + k_len - q_len - j",
            expected=want,
        )
    _bidirectional_case(fn, _randn(gen, 2, 3, 4, 9), "x of shape (2, 3, 4, 9)")
    passed("rel_shift_bidirectional", public=True)


def _hidden_bidirectional_cases(
    seed: int | None,
) -> tuple[torch.Generator, list[tuple[int, ...]], list[tuple[int, int]]]:
    """The generator of the hidden ``rel_shift_bidirectional`` inputs, their shapes
    (the last axis k_len + q_len - 1) and the ``(q_len, k_len)`` of the labelled
    checks: fixed without a term seed; else drawn by the seed with the same
    properties: q_len = k_len in 2-d, a single query with a single key, a single
    query with memory, a 3-d input with q_len = k_len, a 5-d input with memory, a
    long memory (k_len at least twice q_len), four random 3-d (q_len <= k_len);
    labels for one query, q_len = k_len, and a long memory."""
    if seed is None:
        gen = torch.Generator().manual_seed(73)
        shapes = [(5, 9), (1, 1), (1, 6), (2, 6, 11), (2, 2, 2, 3, 7), (2, 3, 7, 22)]
        for _ in range(4):
            q_len = int(torch.randint(1, 9, (1,), generator=gen))
            k_len = q_len + int(torch.randint(0, 9, (1,), generator=gen))
            shapes.append((2, q_len, k_len + q_len - 1))
        return gen, shapes, [(1, 4), (6, 6), (2, 10)]
    rng = term_rng(seed, "grade_rel_shift_bidirectional")

    def width(q_len: int, k_len: int) -> tuple[int, int]:
        return q_len, k_len + q_len - 1

    square, square_3d, long = rng.randint(3, 8), rng.randint(3, 7), rng.randint(5, 9)
    shapes = [
        width(square, square),
        (1, 1),
        width(1, rng.randint(3, 9)),
        (2, *width(square_3d, square_3d)),
        (2, 2, 2, *width(*_memory(rng, 2, 4, 2, 5))),
        (2, 3, *width(long, 2 * long + rng.randint(0, 4))),
    ]
    shapes += [(2, *width(*_memory(rng, 1, 8, 0, 8))) for _ in range(4)]
    labels = [(1, rng.randint(3, 8)), (rng.randint(4, 8),) * 2,
              _memory(rng, 2, 4, 6, 10)]
    return _term_generator(rng), shapes, labels


def grade_rel_shift_bidirectional(
    fn, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grader: single queries, q_len = k_len, long memories, any number of
    leading dimensions, distance labels (the shapes and inputs drawn by the term's
    ``seed`` when there is one). No variant changes the answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    gen, shapes, labels = _hidden_bidirectional_cases(seed)
    for shape in shapes:
        _bidirectional_case(fn, _randn(gen, *shape), f"x of shape {shape}")
    for q_len, k_len in labels:
        x, want = _signed_labels(q_len, k_len)
        _bidirectional_case(
            fn, x, f"labelled x, q_len={q_len}, k_len={k_len}", expected=want
        )
    passed("rel_shift_bidirectional", public=False,
           detail=f"{len(shapes) + len(labels)} cases")
