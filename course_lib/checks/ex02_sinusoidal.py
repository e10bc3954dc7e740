"""Graders for ex02_sinusoidal: the sinusoidal table and position ids of padded batches.

``check_*`` run in the students' notebooks (public cells); ``grade_*`` run at grading
(hidden cells). Expected answers come from :mod:`course_lib.sinusoidal`, captured at
import and computed before the student's function runs. The known wrong answers (the
concatenated ``[sin | cos]`` layout, an exponent off by a factor of 2, sin and cos
swapped, padding counted from 1, ...) are computed here so that a wrong answer is named.

Variants (:data:`VARIANTS`, chosen for a term by ``c.CourseTerm.variants`` in
``nbgrader_config.py``): ``"concatenated"`` asks ``sinusoidal_encoding`` for the
concatenated ``[sin | cos]`` layout (chapter 2, eq. ``sin-pe-concat``, with the
paper's frequencies): the sines of every frequency, then their cosines. The
open edition's interleaved table fails it, and is named as such. A term's ``seed``
(``c.CourseTerm.seed``) draws the hidden table sizes and masks anew.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.sinusoidal import (
    position_ids_from_attention_mask as _ref_position_ids_from_attention_mask,
)
from course_lib.sinusoidal import sinusoidal_encoding as _ref_sinusoidal_encoding

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    answer_shown,
    call_student,
    expect_close,
    expect_equal,
    known_mistake,
    passed,
    term_rng,
    variant_named,
)

__all__ = [
    "check_position_ids_from_attention_mask",
    "check_sinusoidal_encoding",
    "grade_position_ids_from_attention_mask",
    "grade_sinusoidal_encoding",
]

# Students compute angles in float32: p * omega loses ~1e-5 at p ~ 100.
_ATOL = 1e-4
_RTOL = 1e-4

EXERCISE = "ex02_sinusoidal"
VARIANTS: dict[str, Variant] = {
    "concatenated": Variant(
        summary=(
            "sinusoidal_encoding returns the concatenated layout [sin | cos]: "
            "PE[p, i] = sin(p w_i), PE[p, d/2 + i] = cos(p w_i), w_i = "
            "10000^(-2i/d_model) (chapter 2, eq. sin-pe-concat)"
        ),
        references={"sinusoidal_encoding": "_reference_concatenated_encoding"},
    ),
}


def _known(expected: torch.Tensor, candidates: list[Mistake]) -> list[Mistake]:
    """The known wrong answers that differ from the expected one (for d_model = 2
    several wrong exponents coincide with the right one)."""
    out = []
    for m in candidates:
        same = m.answer.shape == expected.shape and torch.allclose(
            m.answer.double(), expected.double(), atol=_ATOL, rtol=_RTOL
        )
        if not same:
            out.append(m)
    return out


def _table(max_len: int, omega: torch.Tensor, *, first: int = 0,
           swap: bool = False, concat: bool = False) -> torch.Tensor:
    """A sinusoid table from arbitrary frequencies, for building wrong answers."""
    pos = torch.arange(first, first + max_len, dtype=torch.float64)
    angles = pos[:, None] * omega[None, :]  # (max_len, d/2)
    a, b = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if concat:
        return torch.cat((a, b), dim=-1)  # (max_len, d)
    return torch.stack((a, b), dim=-1).flatten(-2)  # (max_len, d)


def _encoding_mistakes(max_len: int, d_model: int) -> list[Mistake]:
    """Wrong answers to the open edition's interleaved table."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i
    omega = 10000.0 ** (-two_i / d_model)
    exponent_4i, exponent_i, exponent_sign = _wrong_frequency_tables(max_len, d_model,
                                                                 concat=False)
    return [
        Mistake(
            _table(max_len, omega, concat=True),
            "this is the concatenated [sin | cos] layout (all sines, then all "
            "cosines); "
            "the exercise asks for the interleaved layout: PE[p, 2i] = sin, "
            "PE[p, 2i+1] = cos",
            "concatenated-sin-cos",
        ),
        exponent_4i,
        exponent_i,
        Mistake(
            _table(max_len, omega, swap=True),
            "sin and cos are swapped: even columns hold sin, odd columns cos",
            "sin-cos-swapped",
        ),
        Mistake(
            _table(max_len, omega, swap=True, concat=True),
            "this is the [cos | sin] concatenation; the exercise asks for the "
            "interleaved "
            "layout with sin in even columns and cos in odd columns",
            "concatenated-cos-sin",
        ),
        exponent_sign,
        Mistake(
            _table(max_len, omega, first=1),
            "the positions start at 1; the first row is position 0 "
            "(sin 0 = 0, cos 0 = 1)",
            "positions-from-one",
        ),
    ]


def _wrong_frequency_tables(max_len: int, d_model: int, *, concat: bool) -> list[Mistake]:
    """Wrong frequency ladders, in the layout asked for."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i
    i = two_i / 2
    return [
        Mistake(
            _table(max_len, 10000.0 ** (-2 * two_i / d_model), concat=concat),
            "the exponent is off by a factor of 2: with the column index 2i already "
            "even, 10000^(2*(2i)/d) doubles it; the frequency of pair i is "
            "10000^(-2i/d_model)",
            "exponent-4i",
        ),
        Mistake(
            _table(max_len, 10000.0 ** (-i / d_model), concat=concat),
            "the exponent is off by a factor of 2: it uses i instead of 2i "
            "(10000^(i/d_model)); the frequency of pair i is 10000^(-2i/d_model)",
            "exponent-i-not-2i",
        ),
        Mistake(
            _table(max_len, 10000.0 ** (two_i / d_model), concat=concat),
            "the exponent has the wrong sign: p is multiplied by 10000^(2i/d) instead "
            "of divided by it, so the frequencies grow instead of shrinking",
            "exponent-sign",
        ),
    ]


def _reference_concatenated_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The concatenated variant's answer: [sin(p w_0), ... | cos(p w_0), ...]."""
    return _ref_sinusoidal_encoding(max_len, d_model, layout="concat")  # (L, d)


def _concatenated_mistakes(max_len: int, d_model: int) -> list[Mistake]:
    """Wrong answers to the concatenated variant, the open edition's answer first."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i
    omega = 10000.0 ** (-two_i / d_model)
    return [
        Mistake(
            _table(max_len, omega),
            "this is the interleaved layout (PE[p, 2i] = sin, PE[p, 2i+1] = cos), "
            "the answer of the open edition's exercise 2; this term's exercise asks "
            "for the concatenated layout: the d/2 sines first, then the d/2 cosines",
            "default-variant",
        ),
        Mistake(
            _table(max_len, omega, swap=True, concat=True),
            "this is the [cos | sin] concatenation: the sines come first, in "
            "columns 0 .. d/2 - 1, and the cosines after them",
            "concatenated-cos-sin",
        ),
        Mistake(
            _table(max_len, omega, swap=True),
            "this is an interleaved layout with cos in the even columns; this "
            "term's exercise asks for the concatenated layout [sin | cos]",
            "sin-cos-swapped",
        ),
        *_wrong_frequency_tables(max_len, d_model, concat=True),
        Mistake(
            _table(max_len, omega, first=1, concat=True),
            "the positions start at 1; the first row is position 0 "
            "(sin 0 = 0, cos 0 = 1)",
            "positions-from-one",
        ),
    ]


def _encoding_properties(got: torch.Tensor, what: str, *, concat: bool = False) -> None:
    """Bounded, starts with [0, 1, 0, 1, ...] ([0, ..., 0, 1, ..., 1] when
    concatenated), sin^2 + cos^2 = 1 per pair of columns."""
    got = got.double()
    half = got.shape[1] // 2
    if bool((got.abs() > 1 + 1e-6).any()):
        idx = tuple(int(v) for v in (got.abs() > 1 + 1e-6).nonzero()[0])
        raise CheckFailed(f"{what}[{idx[0]}, {idx[1]}] = {got[idx].item():.6g}: every "
                          "entry is a sine or cosine, so it lies in [-1, 1]")
    first = torch.zeros(got.shape[1], dtype=torch.float64)
    if concat:
        first[half:] = 1.0
        sines, cosines = got[:, :half], got[:, half:]  # (max_len, d/2) each
        row0, pair = "[0, ..., 0, 1, ..., 1]", "(i, d/2 + i)"
    else:
        first[1::2] = 1.0
        sines, cosines = got[:, 0::2], got[:, 1::2]  # (max_len, d/2) each
        row0, pair = "[0, 1, 0, 1, ...]", "(2i, 2i+1)"
    if not torch.allclose(got[0], first, atol=_ATOL):
        raise CheckFailed(f"{what}: row 0 (position 0) should be {row0} "
                          f"(sin 0 = 0, cos 0 = 1), got {got[0, :6].tolist()} ...")
    norms = sines ** 2 + cosines ** 2  # (max_len, d/2)
    if not torch.allclose(norms, torch.ones_like(norms), atol=1e-4):
        p, i = (int(v) for v in (~torch.isclose(norms, torch.ones_like(norms),
                                                 atol=1e-4)).nonzero()[0])
        raise CheckFailed(f"{what}: columns {pair} must be a (sin, cos) pair of "
                          "the same angle, so their squares add up to 1; "
                          f"for p={p}, i={i} it is {norms[p, i].item():.6g}")


def _check_encoding(sinusoidal_encoding: Callable, max_len: int, d_model: int, *,
                    properties: bool, variant: str = "default") -> torch.Tensor:
    concat = variant == "concatenated"
    if concat:
        expected = _reference_concatenated_encoding(max_len, d_model)  # (L, d)
        mistakes = _known(expected, _concatenated_mistakes(max_len, d_model))
    else:
        expected = _ref_sinusoidal_encoding(max_len, d_model)  # (max_len, d_model)
        mistakes = _known(expected, _encoding_mistakes(max_len, d_model))
    call = f"sinusoidal_encoding({max_len}, {d_model})"
    got = call_student(sinusoidal_encoding, max_len, d_model, call=call)
    # The properties explain a wrong float32/float64 answer (a right one, within the
    # tolerance, is never judged by them); any other dtype is explained by
    # expect_close below.
    if (properties and isinstance(got, torch.Tensor) and got.shape == expected.shape
            and got.dtype in (torch.float32, torch.float64)
            and not torch.allclose(got.double(), expected.double(), atol=_ATOL,
                                   rtol=_RTOL)):
        for m in mistakes:
            if torch.allclose(got.double(), m.answer.double(), atol=_ATOL, rtol=_RTOL):
                raise known_mistake(call, m, got=got)
        with answer_shown(got):
            _encoding_properties(got, call, concat=concat)
    expect_close(got, expected, what=call, atol=_ATOL, rtol=_RTOL,
                 mistakes=mistakes, dtype="float")
    return got


def _public_sinusoidal_encoding(sinusoidal_encoding: Callable,
                                variant: str = "default") -> None:
    """Public cases: two small tables and a long one (positions past 256, where
    bfloat16 positions or a short cached table go wrong), compared entry by entry."""
    for max_len, d_model in ((6, 4), (10, 8), (300, 4)):
        _check_encoding(sinusoidal_encoding, max_len, d_model, properties=True,
                        variant=variant)


def _layout(variant: str) -> str:
    return "the concatenated layout, " if variant == "concatenated" else ""


def check_sinusoidal_encoding(sinusoidal_encoding: Callable,
                              variant: str | None = None) -> None:
    """Public check: two small tables and a long one, compared entry by entry
    (``variant="concatenated"``: the ``[sin | cos]`` layout)."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    _public_sinusoidal_encoding(sinusoidal_encoding, variant)
    passed("sinusoidal_encoding", public=True, detail=_layout(variant).rstrip(", "))


def _hidden_encoding_cases(seed: int | None) -> tuple[tuple[int, int], ...]:
    """The hidden (max_len, d_model) cases: fixed without a term seed; else drawn by
    the seed with the same properties: one position, d_model = 2 and 6 (one pair, an
    odd number of pairs), a wide table (d_model 48 to 96) and a long one (1025 to 1400
    positions, past 256 and 1024)."""
    # (1100, 8): positions beyond 256 and 512, where a table cached for a fixed length
    # or positions rounded to a low precision (bfloat16 is exact only up to 256) fail.
    if seed is None:
        return ((1, 2), (1, 6), (7, 2), (12, 16), (50, 6), (128, 64), (1100, 8))
    rng = term_rng(seed, "grade_sinusoidal_encoding")
    return (
        (1, 2 * rng.randint(1, 5)),
        (rng.randint(2, 15), 2),
        (rng.randint(8, 20), 2 * rng.randint(5, 12)),
        (rng.randint(30, 80), 6),
        (rng.randint(100, 160), 2 * rng.randint(24, 48)),
        (rng.randint(1025, 1400), 2 * rng.randint(2, 6)),
    )


def grade_sinusoidal_encoding(sinusoidal_encoding: Callable, variant: str | None = None,
                              seed: int | None = None) -> None:
    """Hidden grade: one position, d_model = 2, wide and long tables, unique rows
    (the sizes drawn by the term's ``seed`` when there is one;
    ``variant="concatenated"``: the ``[sin | cos]`` layout)."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    _public_sinusoidal_encoding(sinusoidal_encoding, variant)
    cases = _hidden_encoding_cases(seed)
    for max_len, d_model in cases:
        _check_encoding(sinusoidal_encoding, max_len, d_model, properties=True,
                        variant=variant)
    got = _check_encoding(sinusoidal_encoding, 200, 32, properties=True,
                          variant=variant).double()
    distances = torch.cdist(got, got) + torch.eye(200, dtype=torch.float64)  # (L, L)
    if bool((distances < 1e-3).any()):
        p, q = (int(v) for v in (distances < 1e-3).nonzero()[0])
        raise CheckFailed(f"sinusoidal_encoding(200, 32): rows {p} and {q} are equal; "
                          "every position must get its own encoding")
    passed("sinusoidal_encoding", public=False,
           detail=f"{_layout(variant)}{len(cases) + 3} table sizes")


def _padding_mistakes(mask: torch.Tensor) -> list[Mistake]:
    m = mask.long()
    csum = m.cumsum(dim=-1)  # (batch, seq)
    arange = torch.arange(m.shape[-1]).expand_as(m)  # (batch, seq)
    return [
        Mistake(
            csum * m,
            "the positions are counted from 1; the first real token of each "
            "row is position 0",
            "counted-from-one",
        ),
        Mistake(
            csum,
            "the positions are counted from 1 and padding is not set to 0",
            "counted-from-one-unmasked",
        ),
        Mistake(
            csum - 1,
            "padding positions are not 0: (cumsum - 1) gives -1 on left "
            "padding; multiply by the mask (or clamp) so padding gets 0",
            "padding-minus-one",
        ),
        Mistake(
            (csum - 1).clamp(min=0),
            "padding positions are not 0: clamping cumsum - 1 fixes left padding but "
            "right padding keeps the last position; multiply by the mask",
            "clamped-not-masked",
        ),
        Mistake(
            (csum - 1).masked_fill(m == 0, 1),
            "padding gets position 1 (as older Hugging Face generation code did); "
            "here padding positions are 0",
            "padding-one",
        ),
        Mistake(
            arange * m,
            "this only works for right padding: counting from the start of the row "
            "ignores left padding; the first real token must get position 0 (use a "
            "cumulative sum of the mask)",
            "right-padding-only",
        ),
        Mistake(
            arange.clone(),
            "the mask is ignored: positions 0, 1, 2, ... for every slot",
            "mask-ignored",
        ),
        Mistake(
            (arange - m.argmax(dim=-1, keepdim=True)).clamp(min=0) * m,
            "the positions count the slots since the first real token, padding in "
            "between included; the position of a real token is the number of real "
            "tokens before it (a cumulative sum of the mask)",
            "slots-since-first",
        ),
    ]


_PUBLIC_MASKS = [
    [[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]],
    [[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1]],
    [[1, 0, 1, 1, 0], [0, 1, 0, 1, 1]],  # padding between real tokens
]
_PUBLIC_TYPED_MASKS = [
    torch.tensor([[False, False, True, True, True, True], [True, True, True, False,
                                                           False, False]]),
    torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.int32),
]


def _hidden_masks(seed: int | None = None) -> list[torch.Tensor]:
    """The hidden masks: the edge cases (no padding, all padding, one token, rows of
    either padding, bool and int32 masks, holes) and five random rows of left and
    right padding, drawn from a fixed generator without a term seed, else from the
    term's seed (their length too)."""
    if seed is None:
        g, seq = torch.Generator().manual_seed(7), 11
    else:
        rng = term_rng(seed, "grade_position_ids_from_attention_mask")
        g, seq = torch.Generator().manual_seed(rng.randrange(2**31)), rng.randint(8, 16)
    masks = [
        torch.ones(1, 6, dtype=torch.long),
        torch.tensor([[0, 0, 0, 0]]),
        torch.tensor([[1]]),
        torch.tensor([[0, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]]),
    ]
    left = torch.randint(0, seq, (5,), generator=g)
    right = torch.randint(0, seq, (5,), generator=g)
    pos = torch.arange(seq)
    real = (pos[None, :] >= left[:, None]) & (pos[None, :] < seq - right[:, None])
    masks.append(real.long())  # (5, seq) left and right padding, some rows empty
    masks.append(torch.tensor([[False, True, True], [True, True, False]]))
    masks.append(torch.tensor([[0, 0, 1, 1, 1, 1, 1]], dtype=torch.int32))
    # Holes of padding between real tokens (not packed sequences, whose ids restart at
    # 0 for every document): still "the real tokens of each row get 0, 1, 2, ... in
    # order", the rule of the task.
    masks.append(torch.tensor([[1, 0, 1, 1, 0], [0, 1, 0, 0, 1], [0, 1, 1, 0, 1]]))
    return masks


def _check_position_ids(position_ids_from_attention_mask: Callable,
                        mask: torch.Tensor) -> None:
    expected = _ref_position_ids_from_attention_mask(mask)  # (batch, seq)
    mistakes = [m for m in _padding_mistakes(mask)
                if not torch.equal(m.answer, expected)]
    rows = mask.long().tolist() if mask.dtype != torch.bool else mask.tolist()
    dtype = "" if mask.dtype in (torch.long, torch.bool) else f", dtype={mask.dtype}"
    call = f"position_ids_from_attention_mask(torch.tensor({rows}{dtype}))"
    got = call_student(position_ids_from_attention_mask, mask.clone(), call=call)
    expect_equal(got, expected, what=call, mistakes=mistakes)


def _public_position_ids_from_attention_mask(
    position_ids_from_attention_mask: Callable,
) -> None:
    """Public cases: a left- and right-padded batch, a batch of left padding,
    padding between real tokens, a bool and an int32 mask."""
    for rows in _PUBLIC_MASKS:
        _check_position_ids(position_ids_from_attention_mask, torch.tensor(rows))
    # Tokenizers and pipelines hand over bool and int32 masks too.
    for mask in _PUBLIC_TYPED_MASKS:
        _check_position_ids(position_ids_from_attention_mask, mask)


def check_position_ids_from_attention_mask(
    position_ids_from_attention_mask: Callable,
) -> None:
    """Public check: a left- and right-padded batch, a batch of left padding,
    padding between real tokens, a bool and an int32 mask."""
    _public_position_ids_from_attention_mask(position_ids_from_attention_mask)
    passed("position_ids_from_attention_mask", public=True)


def grade_position_ids_from_attention_mask(
    position_ids_from_attention_mask: Callable, variant: str | None = None,
    seed: int | None = None,
) -> None:
    """Hidden grade: no padding, all padding, length 1, both sides, bool and int32
    (the random rows drawn by the term's ``seed`` when there is one; no variant
    changes the position ids)."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_position_ids_from_attention_mask(position_ids_from_attention_mask)
    masks = _hidden_masks(seed)
    for mask in masks:
        _check_position_ids(position_ids_from_attention_mask, mask)
    passed("position_ids_from_attention_mask", public=False,
           detail=f"{len(masks)} masks")
