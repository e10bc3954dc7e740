"""Graders for ex05_alibi: ALiBi head slopes and the linear distance bias.

``check_*`` run in the students' notebooks (public cells); ``grade_*`` run at grading
(hidden cells). Expected answers come from :mod:`course_lib.alibi`, captured at import
and computed before the student's function runs; the known wrong answers (slopes that
are only right for powers of two, a positive bias, the Bloom ``+m*j`` form, ...) are
computed here so that a wrong answer is named, not just reported.

Variants (:data:`VARIANTS`, chosen for a term by ``c.CourseTerm.variants`` in
``nbgrader_config.py``): ``"causal"`` asks ``alibi_bias`` for the paper's own, causal
form (§3): ``-m_h (i - j)`` for the keys ``j <= i`` and ``-inf`` for the keys after
the query, the form every causal language model adds. The open edition's answer (the
symmetric ``-m_h |i - j|``) fails it, and is named as such. A term's ``seed``
(``c.CourseTerm.seed``) draws the hidden graders' head counts and lengths anew.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.alibi import alibi_bias as _ref_alibi_bias
from course_lib.alibi import alibi_slopes as _ref_alibi_slopes

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    answer_shown,
    call_student,
    expect_close,
    known_mistake,
    passed,
    term_rng,
    variant_named,
)

__all__ = [
    "check_alibi_bias",
    "check_alibi_slopes",
    "grade_alibi_bias",
    "grade_alibi_slopes",
]

# Tolerances, from the arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8.
# A bias entry is one product m_h * |i - j| (m_h a power of two, or its float32
# rounding for head counts that are not), within 1 ulp of the exact value:
# rtol 1e-4 is ~800 ulps, so a slope computed as 2^(-8h/H), exp(-ln 2 * 8h/H) or
# in float64 passes. atol 1e-6 is for the zeros on the diagonal.
_ATOL = 1e-6
_RTOL = 1e-4

EXERCISE = "ex05_alibi"
VARIANTS: dict[str, Variant] = {
    "causal": Variant(
        summary=(
            "alibi_bias returns the paper's causal form: -m_h (i - j) for keys "
            "j <= i, -inf for keys after the query (chapter 5, eq. alibi-score)"
        ),
        references={"alibi_bias": "_reference_causal_bias"},
    ),
}


def _known(expected: torch.Tensor, candidates: list[Mistake]) -> list[Mistake]:
    """The known wrong answers that differ from the expected one (a power-of-two
    formula *is* right for 8 heads, so it must not be reported there)."""
    out = []
    for m in candidates:
        same = m.answer.shape == expected.shape and torch.allclose(
            m.answer.double(), expected.double(), atol=_ATOL, rtol=_RTOL
        )
        if not same:
            out.append(m)
    return out


def _power_of_two_only_slopes(n: int) -> torch.Tensor:
    h = torch.arange(1, n + 1, dtype=torch.float64)
    return 2.0 ** (-8.0 * h / n)  # (n,)


def _slope_mistakes(n: int) -> list[Mistake]:
    """Wrong slope rules students write, with their slopes."""
    ref = _ref_alibi_slopes(n).double()
    h = torch.arange(n, dtype=torch.float64)
    closest = 1 << (n.bit_length() - 1)
    mistakes = [
        Mistake(
            _power_of_two_only_slopes(n),
            f"these slopes 2^(-8h/n) are the paper's text, which the course's rule "
            f"(the authors' code) matches only when the number of heads is a power "
            f"of two; for {n} heads take the {closest} slopes of {closest} "
            f"heads, then every other slope of the {2 * closest}-head sequence, "
            f"2^(-8(2j+1)/{2 * closest}) for j = 0, 1, ...",
            "power-of-two-only",
        ),
        Mistake(
            2.0 ** (-8.0 * h / n),
            "the slopes start at 2^0 = 1: the first slope is 2^(-8/n) "
            "(h counts from 1)",
            "starts-at-one",
        ),
        Mistake(
            ref.flip(0),
            "the right slopes in reversed order: head h takes the rule's h-th slope, "
            "in the order of the authors' code (largest first when the number of "
            "heads is a power of two)",
            "reversed-heads",
        ),
        Mistake(
            ref.sort(descending=True).values,
            "the right slopes, but sorted: keep the order of the rule (the authors' "
            "code), the slopes of the closest power of two first, then the extra ones",
            "sorted",
        ),
        Mistake(
            _power_of_two_only_slopes(2 * closest)[:n] if n != closest else ref,
            f"these are the first {n} slopes of {2 * closest} heads (rounding the head "
            "count up to a power of two); the rule (the authors' code) rounds down and "
            "fills in with "
            "every other slope of the doubled sequence",
            "rounded-up",
        ),
        Mistake(
            torch.cat([ref[:closest], _power_of_two_only_slopes(2 * closest)[1::2]])[
                :n
            ],
            "the extra slopes are every other slope of the doubled sequence starting "
            "with the SECOND one, which repeats slopes you already have; start "
            "with the first, 2^(-8(2j+1)/(2c)) where c is the largest power of two "
            "below the number of heads",
            "extra-from-second",
        ),
    ]
    return mistakes


def _check_slopes(alibi_slopes: Callable, n: int) -> None:
    expected = _ref_alibi_slopes(n)  # (n,)
    mistakes = _known(expected, _slope_mistakes(n))
    got = call_student(alibi_slopes, n, call=f"alibi_slopes({n})")
    expect_close(got, expected, what=f"alibi_slopes({n})", atol=_ATOL, rtol=_RTOL,
                 mistakes=mistakes, dtype="float")


def _public_alibi_slopes(alibi_slopes: Callable) -> None:
    """Public cases: slopes for 8 and 4 heads (powers of two) and 6 heads (not one)."""
    for n in (8, 4, 6):
        _check_slopes(alibi_slopes, n)


def check_alibi_slopes(alibi_slopes: Callable) -> None:
    """Public check: slopes for 8 and 4 heads (powers of two) and for 6 heads."""
    _public_alibi_slopes(alibi_slopes)
    passed("alibi_slopes", public=True)


def _hidden_slope_counts(seed: int | None) -> tuple[int, ...]:
    """The hidden head counts: fixed without a term seed; else 12 counts drawn from
    17 to 128 (above the 1 to 16 heads chapter 5 shows) by the seed, one of them a
    power of two and at least eight that are not."""
    # Head counts chapter 5 never shows (its interactive figure embeds the slopes of
    # 1 to 16 heads, its figures 8, 12 and 16): powers of two 32, 64, 128, and
    # counts with 1, 3, 4, 7, 8, 16 or 36 interleaved extra slopes.
    if seed is None:
        return (17, 19, 20, 23, 24, 28, 32, 40, 48, 64, 100, 128)
    rng = term_rng(seed, "grade_alibi_slopes")
    others = [n for n in range(17, 129) if n & (n - 1)]
    return tuple(sorted(rng.sample(others, 11) + [rng.choice((32, 64, 128))]))


def grade_alibi_slopes(
    alibi_slopes: Callable, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grade: powers of two and other head counts (17, 20, 24, ...; drawn by
    the term's ``seed`` when there is one). No variant changes the slopes."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_alibi_slopes(alibi_slopes)
    counts = _hidden_slope_counts(seed)
    for n in counts:
        _check_slopes(alibi_slopes, n)
    passed("alibi_slopes", public=False, detail=f"{len(counts)} head counts")


def _bias_from_slopes(slopes: torch.Tensor, seq_len: int) -> torch.Tensor:
    pos = torch.arange(seq_len, dtype=torch.float64)
    distance = (pos[:, None] - pos[None, :]).abs()  # (seq, seq)
    return -slopes.double()[:, None, None] * distance  # (heads, seq, seq)


def _bias_mistakes(n: int, seq_len: int) -> list[Mistake]:
    slopes = _ref_alibi_slopes(n).double()[:, None, None]  # (n, 1, 1)
    pos = torch.arange(seq_len, dtype=torch.float64)
    i, j = pos[:, None], pos[None, :]  # (seq, 1), (1, seq)
    expected = -slopes * (i - j).abs()
    causal = expected.masked_fill(j > i, float("-inf"))
    return [
        Mistake(
            -expected,
            "the bias is positive (+m|i-j|): distant keys must be penalised, "
            "so the bias is -m_h |i - j|",
            "positive-sign",
        ),
        Mistake(
            (slopes * j).expand(n, seq_len, seq_len),
            "this is the Bloom form +m_h * j; it equals -m_h (i - j) after the softmax "
            "only under a causal mask, and the exercise asks for -m_h |i - j|",
            "bloom-form",
        ),
        Mistake(
            (-slopes * (i - j)).expand(n, seq_len, seq_len),
            "-m_h (i - j) without the absolute value: keys after the query get a "
            "positive bias; use |i - j|",
            "signed-i-minus-j",
        ),
        Mistake(
            (-slopes * (j - i)).expand(n, seq_len, seq_len),
            "-m_h (j - i) without the absolute value; use |i - j|",
            "signed-j-minus-i",
        ),
        Mistake(
            causal,
            "a causal mask (-inf above the diagonal) was applied; the exercise "
            "asks for the symmetric bias -m_h |i - j| without -inf",
            "causal-mask",
        ),
        Mistake(
            _bias_from_slopes(_power_of_two_only_slopes(n), seq_len),
            "the bias uses the slopes 2^(-8h/n) of the paper's text, which the "
            "course's rule (the authors' code) matches only for a power-of-two "
            "number of heads: fix alibi_slopes first",
            "power-of-two-slopes",
        ),
        Mistake(
            _bias_from_slopes(_ref_alibi_slopes(n).flip(0), seq_len),
            "the slopes are assigned to the heads in reversed order: head h takes "
            "alibi_slopes(n_heads)[h], the rule's h-th slope (if your alibi_slopes "
            "reverses them, fix alibi_slopes first)",
            "reversed-heads",
        ),
        Mistake(
            (-(i - j).abs()).expand(n, seq_len, seq_len),
            "the distance is not multiplied by the head's slope m_h",
            "no-slope",
        ),
        Mistake(
            expected.permute(1, 2, 0),
            "the axes are (seq, seq, heads); the bias must be "
            "(n_heads, seq_len, seq_len)",
            "heads-last",
        ),
    ]


def _reference_causal_bias(n: int, seq_len: int) -> torch.Tensor:
    """The causal variant's answer: -m_h (i - j) for j <= i, -inf for j > i."""
    return _ref_alibi_bias(n, seq_len, causal=True)  # (n, seq, seq)


def _causal_bias_mistakes(n: int, seq_len: int) -> list[Mistake]:
    """Wrong answers to the causal variant, the open edition's answer first."""
    slopes = _ref_alibi_slopes(n).double()[:, None, None]  # (n, 1, 1)
    pos = torch.arange(seq_len, dtype=torch.float64)
    i, j = pos[:, None], pos[None, :]  # (seq, 1), (1, seq)
    symmetric = -slopes * (i - j).abs()  # (n, seq, seq)
    after = (j > i).expand(n, seq_len, seq_len)

    def causal(bias: torch.Tensor) -> torch.Tensor:
        return bias.expand(n, seq_len, seq_len).masked_fill(after, float("-inf"))

    return [
        Mistake(
            symmetric,
            "this is the symmetric bias -m_h |i - j| without a mask, the answer of "
            "the open edition's exercise 5; this term's exercise asks for the "
            "paper's causal form: -m_h (i - j) for the keys j <= i and -inf for "
            "the keys after the query (j > i)",
            "default-variant",
        ),
        Mistake(
            symmetric.masked_fill(after, 0.0),
            "the keys after the query (j > i) get 0, which leaves them visible; "
            "a causal bias puts -inf there, so that softmax gives them no weight",
            "zero-above-diagonal",
        ),
        Mistake(
            symmetric.masked_fill(j < i, float("-inf")),
            "the -inf is below the diagonal, on the keys BEFORE the query; mask "
            "the keys after it (j > i): a causal model sees only the past",
            "mask-below-diagonal",
        ),
        Mistake(
            causal(-symmetric),
            "the bias is positive (+m_h (i - j)): distant keys must be penalised, "
            "so the visible entries are -m_h (i - j) <= 0",
            "positive-sign",
        ),
        Mistake(
            causal(slopes * j),
            "this is the Bloom form +m_h j under the causal mask: it gives the same "
            "attention weights (softmax ignores a shift of a whole row), but the "
            "exercise asks for the bias itself, -m_h (i - j)",
            "bloom-form",
        ),
        Mistake(
            causal(_bias_from_slopes(_power_of_two_only_slopes(n), seq_len)),
            "the bias uses the slopes 2^(-8h/n) of the paper's text, which the "
            "course's rule (the authors' code) matches only for a power-of-two "
            "number of heads: fix alibi_slopes first",
            "power-of-two-slopes",
        ),
        Mistake(
            causal(_bias_from_slopes(_ref_alibi_slopes(n).flip(0), seq_len)),
            "the slopes are assigned to the heads in reversed order: head h takes "
            "alibi_slopes(n_heads)[h]",
            "reversed-heads",
        ),
        Mistake(
            causal(-(i - j).abs()),
            "the distance is not multiplied by the head's slope m_h",
            "no-slope",
        ),
    ]


def _raise_if_known(got: object, mistakes: list[Mistake], what: str) -> None:
    for m in mistakes:
        if (
            isinstance(got, torch.Tensor)
            and got.shape == m.answer.shape
            and torch.allclose(got.double(), m.answer.double(), atol=_ATOL, rtol=_RTOL,
                               equal_nan=True)
        ):
            raise known_mistake(what, m, got=got)


def _bias_properties(got: torch.Tensor, what: str) -> None:
    """The defining properties of -m_h |i - j|, with messages in their terms."""
    got = got.double()
    diag = got.diagonal(dim1=-2, dim2=-1)  # (heads, seq)
    if bool((diag != 0).any()):
        h, i = (int(v) for v in (diag != 0).nonzero()[0])
        raise CheckFailed(f"{what}[{h}, {i}, {i}] should be 0 (a token is at "
                          f"distance 0 from itself), got {diag[h, i].item():.6g}")
    if bool((got > 0).any()):
        h, i, j = (int(v) for v in (got > 0).nonzero()[0])
        raise CheckFailed(f"{what}[{h}, {i}, {j}] = {got[h, i, j].item():.6g} is "
                          "positive; an ALiBi bias only penalises (-m_h |i - j| <= 0)")
    asym = ~torch.isclose(got, got.transpose(-1, -2), atol=_ATOL, rtol=_RTOL)
    if bool(asym.any()):
        h, i, j = (int(v) for v in asym.nonzero()[0])
        raise CheckFailed(f"{what} should be symmetric in (i, j) because it depends "
                          f"on |i - j|: entry {(h, i, j)} is {got[h, i, j].item():.6g} "
                          f"but entry {(h, j, i)} is {got[h, j, i].item():.6g}")


def _causal_properties(got: torch.Tensor, what: str) -> None:
    """The defining properties of the causal form, with messages in their terms."""
    got = got.double()
    seq_len = got.shape[-1]
    above = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)  # j > i
    open_ = above & ~torch.isneginf(got)  # (heads, seq, seq)
    if bool(open_.any()):
        h, i, j = (int(v) for v in open_.nonzero()[0])
        raise CheckFailed(f"{what}[{h}, {i}, {j}] should be -inf (key {j} comes "
                          f"after query {i}), got {got[h, i, j].item():.6g}")
    seen = got.masked_fill(above, 0.0)
    diag = seen.diagonal(dim1=-2, dim2=-1)  # (heads, seq)
    if bool((diag != 0).any()):
        h, i = (int(v) for v in (diag != 0).nonzero()[0])
        raise CheckFailed(f"{what}[{h}, {i}, {i}] should be 0 (a token is at "
                          f"distance 0 from itself), got {diag[h, i].item():.6g}")
    bad = ~torch.isfinite(seen) | (seen > 0)
    if bool(bad.any()):
        h, i, j = (int(v) for v in bad.nonzero()[0])
        raise CheckFailed(f"{what}[{h}, {i}, {j}] = {got[h, i, j].item():.6g}; a "
                          "visible key (j <= i) gets -m_h (i - j), finite and <= 0")


def _check_bias(alibi_bias: Callable, n: int, seq_len: int, *,
                properties: bool = False, variant: str = "default") -> None:
    if variant == "causal":
        expected = _reference_causal_bias(n, seq_len)  # (n, seq, seq)
        mistakes = _known(expected, _causal_bias_mistakes(n, seq_len))
        explain = _causal_properties
    else:
        expected = _ref_alibi_bias(n, seq_len)  # (n, seq, seq)
        mistakes = _known(expected, _bias_mistakes(n, seq_len))
        explain = _bias_properties
    call = f"alibi_bias({n}, {seq_len})"
    got = call_student(alibi_bias, n, seq_len, call=call)
    # The properties explain a wrong float32/float64 answer (a right one, within the
    # tolerance, is never judged by them); any other dtype is explained by
    # expect_close below.
    if (properties and isinstance(got, torch.Tensor) and got.shape == expected.shape
            and got.dtype in (torch.float32, torch.float64)
            and not torch.allclose(got.double(), expected.double(), atol=_ATOL,
                                   rtol=_RTOL)):
        _raise_if_known(got, mistakes, call)
        with answer_shown(got):
            explain(got, call)
    expect_close(got, expected, what=call, atol=_ATOL, rtol=_RTOL,
                 mistakes=mistakes, dtype="float")


def _public_alibi_bias(alibi_bias: Callable, variant: str = "default") -> None:
    """Public cases: 4 and 8 heads on short sequences, 6 heads (not a power of two),
    and one head over 20 positions (distances beyond a short table)."""
    for n, seq_len in ((4, 5), (8, 6), (6, 4), (1, 20)):
        _check_bias(alibi_bias, n, seq_len, properties=True, variant=variant)


def check_alibi_bias(alibi_bias: Callable, variant: str | None = None) -> None:
    """Public check: 4, 8 and 6 heads on short sequences, one head over 20 positions
    (``variant="causal"``: the causal form)."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    _public_alibi_bias(alibi_bias, variant)
    passed("alibi_bias", public=True,
           detail="the causal form" if variant == "causal" else "")


def _hidden_bias_cases(seed: int | None) -> tuple[tuple[int, int], ...]:
    """The hidden (heads, length) cases: fixed without a term seed; else seven drawn
    by the seed (17 to 64 heads, lengths 1 to 12, one of length 1) and one head over
    150 to 200 positions."""
    # Head counts above the 16 whose causal bias chapter 5's interactive figure
    # embeds (10 positions), but for one head over 180 positions: distances up to
    # 179, where a bias clipped at some maximum distance or cached for a fixed
    # length goes wrong (ALiBi is meant to extrapolate).
    if seed is None:
        return ((20, 9), (24, 4), (17, 1), (19, 7), (20, 8), (32, 3), (23, 10),
                (1, 180))
    rng = term_rng(seed, "grade_alibi_bias")
    cases = [(rng.randint(17, 64), rng.randint(2, 12)) for _ in range(6)]
    cases.insert(rng.randrange(7), (rng.randint(17, 64), 1))
    return (*cases, (1, rng.randint(150, 200)))


def grade_alibi_bias(
    alibi_bias: Callable, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grade: 1 head, 17 to 32 heads, odd/even lengths, length 1, properties
    (the cases drawn by the term's ``seed`` when there is one; ``variant="causal"``:
    the causal form)."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    _public_alibi_bias(alibi_bias, variant)
    cases = _hidden_bias_cases(seed)
    for n, seq_len in cases:
        _check_bias(alibi_bias, n, seq_len, properties=True, variant=variant)
    form = "the causal form, " if variant == "causal" else ""
    passed("alibi_bias", public=False,
           detail=f"{form}{len(cases)} (heads, length) cases")
