"""Graders of exercise 11 (longer contexts for RoPE): YaRN's correction range, YaRN's
attention factor and Llama 3.1's frequency bands.

Expected answers come from :mod:`course_lib.rope_scaling`, captured at import; the
known wrong answers (the ends of the range rounded the wrong way or not clipped, the
turns counted in radians, the temperature's square or log10, the DeepSeek ratio
upside down, bands drawn on the frequency instead of the wavelength, no blend in the
medium band, ...) are computed here so that a message can name the mistake.

The exercise has no variants (:data:`VARIANTS` is empty). The hidden graders take the
term's ``variant`` (only ``"default"``) and ``seed`` (issue 34 item 3): with a seed,
their cases are drawn from it, with the properties the fixed cases were chosen for,
and off every setting chapter 11 shows: every drawn training length L is a whole
number that is not a power of two (the chapter's lengths, 512, 2048, 8192 and the
lab's, all are), and every drawn extension factor s other than 1 is not a whole
number (the chapter's are 2, 4, 8, 16 and the lab's).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import replace as _replace

import torch

from course_lib.rope_scaling import (
    llama3_scaled_frequencies as _ref_llama3_scaled_frequencies,
)
from course_lib.rope_scaling import yarn_attention_factor as _ref_yarn_attention_factor
from course_lib.rope_scaling import yarn_correction_range as _ref_yarn_correction_range

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    expect_scalar,
    hinted,
    passed,
    term_rng,
    variant_named,
)

__all__ = [
    "check_llama3_scaled_frequencies",
    "check_yarn_attention_factor",
    "check_yarn_correction_range",
    "grade_llama3_scaled_frequencies",
    "grade_yarn_attention_factor",
    "grade_yarn_correction_range",
]

EXERCISE = "ex11_long_context"
# No variants: the three functions are asked the same way every term.
VARIANTS: dict[str, Variant] = {}

_allclose = torch.allclose
_where = torch.where

# The ends of the range are whole pair indices (truncate=True) or fractional ones
# (truncate=False) of size up to ~60, from one logarithm ratio: float64 gives them to
# ~1e-14, float32 to ~1e-5. Every case below keeps each fractional index at least 0.01
# away from an integer, so a float32 computation rounds it the same way, and every
# known mistake moves an end by 0.05 or more: 1e-4 separates both.
_RANGE_ATOL = 1e-4
# The attention factor lies in [0.5, 2] and is one logarithm: float32 gives it to
# ~1e-7. Every known mistake that differs from it at all differs by 0.01 or more in
# the cases below (tests/test_checks_ex11.py computes the margins).
_ATTENTION_ATOL = 1e-6
# Frequencies span 1 down to ~1e-7 (base 500000, d = 128, divided by 32): compare
# relatively. A float32 computation carries a few float32 ulps (~5e-7 relative);
# in every case below each known mistake is either right (factor 1) or off by 14% or
# more on at least one pair.
_FREQ_RTOL = 1e-5
_FREQ_ATOL = 0.0


def _known(expected: torch.Tensor, candidates, atol: float, rtol: float):
    """The known wrong answers that differ from the expected one here (with factor 1
    every band rule is right, so none may be reported)."""
    return [
        m
        for m in candidates
        if not (
            m.answer.shape == expected.shape
            and _allclose(
                m.answer.double(), expected.double(), atol=atol, rtol=rtol,
                equal_nan=True,
            )
        )
    ]


# ---- yarn_correction_range ---------------------------------------------------------


def _index(turns: float, head_dim: int, base: float, original: int, *,
           two_pi: bool = True, half: bool = False, pairs: bool = False) -> float:
    """The fractional pair index that turns ``turns`` times in L, right or with one
    of the known slips (no 2 pi, no factor 2, the number of pairs for d)."""
    d = head_dim // 2 if pairs else head_dim
    inside = original / (turns * (2 * math.pi if two_pi else 1.0))
    return d * math.log(inside) / ((1.0 if half else 2.0) * math.log(base))


def _range_mistakes(beta_fast: float, beta_slow: float, head_dim: int, base: float,
                    original: int, truncate: bool) -> list[Mistake]:
    d = head_dim
    lo = _index(beta_fast, d, base, original)
    hi = _index(beta_slow, d, base, original)

    def clip(a: float, b: float) -> list:
        return [max(a, 0), min(b, d - 1)]

    def rounded(a: float, b: float) -> list:
        return clip(math.floor(a), math.ceil(b)) if truncate else clip(a, b)

    out = []
    if truncate:
        nearest = (round(lo), round(hi))
        ends = {
            (math.ceil(lo), math.ceil(hi)): (
                "low is rounded up: that pair turns fewer than beta_fast times, "
                "and low is the last pair that still turns at least beta_fast times",
                "low-rounded-up",
                "the turn count falls as i grows, so that pair is the whole index at "
                "or below i(beta_fast): floor",
            ),
            (math.floor(lo), math.floor(hi)): (
                "high is rounded down: that pair turns more than beta_slow times, "
                "and high is the first pair that turns at most beta_slow times",
                "high-rounded-down",
                "that pair is the whole index at or above i(beta_slow): ceil",
            ),
            (math.ceil(lo), math.floor(hi)): (
                "both ends are rounded inward: the ramp misses pairs that lie "
                "between the two turn counts",
                "rounded-inward",
                "round outward, low down (floor) and high up (ceil)",
            ),
        }
        for (a, b), (text, slug, hint) in ends.items():
            if (a, b) == nearest:
                text += " (rounding to the nearest pair, round(), gives this here)"
            out.append(hinted(Mistake(
                clip(a, b),
                text,
                slug), hint))
    else:
        out.append(
            Mistake(
                clip(math.floor(lo), math.ceil(hi)),
                "the ends are rounded although truncate=False: without truncation they "
                "stay fractional (only clipped)",
                "rounded-without-truncate",
            ))
    out += [
        Mistake(
            [math.floor(lo) if truncate else lo, min(math.ceil(hi) if truncate else hi,
                                              d - 1)],
            "low is not clipped at 0: when even pair 0 turns fewer than beta_fast "
            "times in L, the fractional index is negative, and the range starts at 0",
            "low-not-clipped",
        ),
        Mistake(
            [max(math.floor(lo) if truncate else lo, 0),
            min(math.ceil(hi) if truncate else hi, d // 2 - 1)],
            "high is clipped to the last pair, d/2 - 1; the reference code (and so "
            "every YaRN model) clips it to d - 1 = head_dim - 1, so the ramp may end "
            "beyond the last pair",
            "high-clipped-to-pairs",
        ),
        Mistake(
            [max(math.floor(lo) if truncate else lo, 0),
            math.ceil(hi) if truncate else hi],
            "high is not clipped: the reference code keeps it at most d - 1 = "
            "head_dim - 1",
            "high-not-clipped",
        ),
        hinted(Mistake(
            rounded(_index(beta_fast, d, base, original, two_pi=False),
             _index(beta_slow, d, base, original, two_pi=False)),
            "the turns are counted in radians: L theta_i is the angle pair i "
            "covers in L tokens, not the number of turns it makes",
            "radians"),
            "a turn is 2 pi radians (the wavelength is 2 pi / theta_i): solve "
            "L theta_i / (2 pi) = r for i"),
        hinted(Mistake(
            rounded(_index(beta_fast, d, base, original, half=True),
             _index(beta_slow, d, base, original, half=True)),
            "the index is twice too large: the exponent of theta_i = b^(-2i/d) "
            "has 2i, not i",
            "index-doubled"),
            "solving for i, the 2 of 2i/d divides: i(r) = d ln(L / (2 pi r)) / "
            "(2 ln b)"),
        hinted(Mistake(
            rounded(_index(beta_fast, d, base, original, pairs=True),
             _index(beta_slow, d, base, original, pairs=True)),
            "the index uses the number of pairs d/2 for d: the exponent 2i/d of "
            "theta_i has d = head_dim",
            "pairs-for-d"),
            "i(r) = d ln(L / (2 pi r)) / (2 ln b) with d = head_dim"),
        Mistake(
            rounded(_index(beta_slow, d, base, original),
             _index(beta_fast, d, base, original)),
            "beta_fast and beta_slow are swapped: low comes from beta_fast (the many "
            "turns of the fast pairs, small indices), high from beta_slow",
            "betas-swapped",
        ),
    ]
    return out


def _as_pair(got, call: str) -> torch.Tensor:
    """The student's (low, high) as a float64 tensor (2,)."""
    if isinstance(got, torch.Tensor) and got.numel() == 2:
        got = got.reshape(2).tolist()
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise CheckFailed(
            f"{call} should return the pair (low, high), got {type(got).__name__}"
            + (f" of length {len(got)}" if isinstance(got, tuple | list) else "")
        )
    values = []
    for name, v in zip(("low", "high"), got, strict=True):
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CheckFailed(
                f"{call}: {name} should be a number, got {type(v).__name__}")
        values.append(float(v))
    return torch.tensor(values, dtype=torch.float64)  # (2,)


def _check_range(yarn_correction_range: Callable, beta_fast: float, beta_slow: float,
                 head_dim: int, base: float, original: int, truncate: bool) -> None:
    expected = torch.tensor(
        _ref_yarn_correction_range(beta_fast, beta_slow, head_dim, base, original,
                                   truncate=truncate), dtype=torch.float64)  # (2,)
    candidates = [
        _replace(m, answer=torch.tensor(m.answer, dtype=torch.float64))
        for m in _range_mistakes(beta_fast, beta_slow, head_dim, base, original,
                                 truncate)
    ]
    mistakes = _known(expected, candidates, _RANGE_ATOL, 0.0)
    call = (f"yarn_correction_range({beta_fast!r}, {beta_slow!r}, {head_dim}, "
            f"{base!r}, {original}, truncate={truncate})")
    got = call_student(yarn_correction_range, beta_fast, beta_slow, head_dim, base,
                       original, truncate=truncate, call=call)
    expect_close(_as_pair(got, call), expected, what=f"{call} = (low, high)",
                 atol=_RANGE_ATOL, rtol=0.0, mistakes=mistakes)


# (beta_fast, beta_slow, head_dim, base, L, truncate)
_RANGE_PUBLIC = (
    (32.0, 1.0, 128, 10000.0, 4096, True),  # Llama 2 at 4k
    (32.0, 1.0, 64, 10000.0, 128, True),  # short training: i(32) < 0
    (32.0, 1.0, 16, 10000.0, 65536, True),  # i(1) past the last pair
    (16.0, 2.0, 64, 500000.0, 8192, False),  # fractional ends
    (32.0, 1.0, 8, 100.0, 1000000, True),  # i(1) past d - 1: low == high after clip
)
_RANGE_HIDDEN = (
    # Llama 3's base at a length no page shows (chapter 11's ratio figure draws
    # YaRN at Llama 3's 8192, in both editions)
    (32.0, 1.0, 128, 500000.0, 12000, True),
    (32.0, 1.0, 96, 10000.0, 4096, True),  # Phi-3's head
    (32.0, 1.0, 64, 1000000.0, 32768, True),
    (24.0, 1.5, 128, 10000.0, 16384, True),  # other betas, a long training
    (32.0, 1.0, 256, 10000.0, 4096, True),  # a wide head
    (32.0, 1.0, 64, 10000.0, 128, False),  # fractional, clipped at 0
    (16.0, 4.0, 128, 10000.0, 2048, True),  # other betas
)


def _public_yarn_correction_range(yarn_correction_range: Callable) -> None:
    """Public cases: Llama 2's setting, a short training length, a range ending past
    the last pair, fractional ends, and a range clipped at d - 1."""
    for case in _RANGE_PUBLIC:
        _check_range(yarn_correction_range, *case)


def check_yarn_correction_range(yarn_correction_range: Callable) -> None:
    """Public check: five settings, truncated and not."""
    _public_yarn_correction_range(yarn_correction_range)
    passed("yarn_correction_range", public=True)


def _drawn(rng: random.Random, draw: Callable, fits: Callable, what: str):
    """The first case ``draw(rng)`` makes that ``fits``; a handful of tries is the
    rule (each case below fits far more often than not), 1000 the limit."""
    for _ in range(1000):
        case = draw(rng)
        if fits(case):
            return case
    raise RuntimeError(f"no {what} case fits after 1000 draws")  # pragma: no cover


def _off_chapter_length(rng: random.Random, low: int, high: int) -> int:
    """A training length in [low, high] that is not a power of two (chapter 11's
    lengths all are)."""
    return _drawn(rng, lambda r: r.randint(low, high), lambda n: n & (n - 1) != 0,
                  "length")


def _off_chapter_factor(rng: random.Random, low: int, high: int) -> float:
    """An extension factor s = k + 0.5 with low <= k <= high: never a whole number,
    as every factor chapter 11 shows is."""
    return rng.randint(low, high) + 0.5


def _range_case_fits(case: tuple) -> bool:
    """What every correction-range case keeps (_RANGE_ATOL's comment): each
    fractional end i(beta) at least 0.01 from an integer, and every known mistake
    either right or at least 0.01 (100 tolerances) off."""
    fast, slow, d, base, original, truncate = case
    for r in (fast, slow):
        x = _index(r, d, base, original)
        if abs(x - round(x)) < 0.01:
            return False
    expected = _ref_yarn_correction_range(fast, slow, d, base, original,
                                          truncate=truncate)
    for m in _range_mistakes(*case):
        gap = max(abs(a - e) for a, e in zip(m.answer, expected, strict=True))
        if 0.0 < gap < 100 * _RANGE_ATOL:
            return False
    return True


def _hidden_range_cases(seed: int | None) -> tuple:
    """The hidden ``(beta_fast, beta_slow, head_dim, base, L, truncate)`` cases:
    :data:`_RANGE_HIDDEN` without a term seed; else seven drawn by the seed with its
    properties: a large base (500000 to 5000000) with LLaMA's betas 32 and 1; a head
    that is not a power of two (80, 96, 112, 160 or 192); a base of 1000000 at a long
    training length; other betas (beta_fast 12.5 to 47.5, beta_slow 1.25 to 3.5,
    never chapter 11's slider values) at a long training; a wide head (256, 320 or
    512); fractional ends (truncate=False) with low clipped at 0 (L from 40 to just
    below 2 pi beta_fast, head 32 or 64); and beta_slow 2 to 6 with beta_fast 8.5 to
    24. The long lengths are 3000 to 65000. No L is a power of two, so no case is a
    setting of chapter 11's figures or cells (its class-edition YaRN figure has
    L = 2048); each case passes :func:`_range_case_fits`."""
    if seed is None:
        return _RANGE_HIDDEN
    rng = term_rng(seed, "grade_yarn_correction_range")

    def betas(r: random.Random) -> tuple[float, float]:
        fast = r.choice([k / 2 for k in range(25, 96) if k not in (32, 64)])
        return fast, r.choice((1.25, 1.5, 1.75, 2.5, 3.0, 3.5))

    def long(r: random.Random) -> int:
        return _off_chapter_length(r, 3000, 65000)

    def clipped_at_zero(r: random.Random) -> tuple:
        # L below 2 pi beta_fast: even pair 0 turns fewer than beta_fast times
        fast = r.randint(48, 95) / 2
        below = _off_chapter_length(r, 40, math.floor(2 * math.pi * fast) - 1)
        return (fast, 1.0, r.choice((32, 64)), 10000.0, below, False)

    draws = (
        lambda r: (32.0, 1.0, 128, r.choice((500000.0, 1000000.0, 5000000.0)),
                   long(r), True),
        lambda r: (32.0, 1.0, r.choice((80, 96, 112, 160, 192)), 10000.0, long(r),
                   True),
        lambda r: (32.0, 1.0, 64, 1000000.0, long(r), True),
        lambda r: (*betas(r), 128, 10000.0, long(r), True),
        lambda r: (32.0, 1.0, r.choice((256, 320, 512)), 10000.0, long(r), True),
        clipped_at_zero,
        lambda r: (r.randint(17, 48) / 2, r.randint(4, 12) / 2, 128, 10000.0, long(r),
                   True),
    )
    return tuple(_drawn(rng, draw, _range_case_fits, "correction-range")
                 for draw in draws)


def grade_yarn_correction_range(yarn_correction_range: Callable,
                                variant: str | None = None,
                                seed: int | None = None) -> None:
    """Hidden grade: Llama 3's base and length, Phi-3's head size, a wide head,
    fractional ends clipped at 0, other betas (drawn by the term's ``seed`` when
    there is one)."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_yarn_correction_range(yarn_correction_range)
    cases = _hidden_range_cases(seed)
    for case in cases:
        _check_range(yarn_correction_range, *case)
    passed("yarn_correction_range", public=False, detail=f"{len(cases)} cases")


# ---- yarn_attention_factor -----------------------------------------------------------


def _attention_mistakes(factor: float, mscale: float | None,
                        mscale_all_dim: float | None) -> list[Mistake]:
    s = factor

    def get(m: float = 1.0, log=math.log) -> float:
        return 1.0 if s <= 1 else 0.1 * m * log(s) + 1.0

    plain = get()
    out = [
        Mistake(
            0.1 * math.log10(s) + 1 if s > 1 else 1.0,
            "the logarithm is log10; the paper's factor uses the natural logarithm, "
            "0.1 ln(s) + 1",
            "log10",
        ),
        hinted(Mistake(
            plain**2,
            "this is 1/t, the factor the logits need; but the function's factor "
            "multiplies the cos and sin tables, and so every rotated query and "
            "every rotated key",
            "squared"),
            "a score q . k picks up the factor once from q and once from k: a^2 = "
            "1/t, so a = sqrt(1/t) = 0.1 ln(s) + 1"),
        hinted(Mistake(
            1 / plain,
            "this is upside down: it is below 1 for s > 1, so it flattens the "
            "attention; dividing the logits by t < 1 makes them larger (sharper "
            "attention)",
            "inverted"),
            "the factor on the tables is sqrt(1/t), not sqrt(t)"),
        Mistake(
            0.1 * math.log(s) if s > 1 else 1.0,
            "the + 1 is missing: sqrt(1/t) = 0.1 ln(s) + 1",
            "no-plus-one",
        ),
    ]
    if s < 1:
        out.append(
            Mistake(
                0.1 * math.log(s) + 1,
                "for factor <= 1 the factor is 1: there is nothing to compensate when "
                "the context is not extended (0.1 ln(s) + 1 would fall below 1)",
                "below-one-not-clamped",
            )
        )
    if mscale and mscale_all_dim is None:
        out.append(
            Mistake(
                get(mscale),
                "with mscale alone (no mscale_all_dim) the factor is the plain "
                "0.1 ln(s) + 1: Hugging Face uses the scales only when both are given",
                "mscale-alone-used",
            )
        )
    if (mscale is not None and mscale_all_dim is not None
            and not (mscale and mscale_all_dim)):
        zero = "mscale" if not mscale else "mscale_all_dim"
        out.append(
            Mistake(
                get(mscale) / get(mscale_all_dim),
                f"{zero} = 0 was used as a scale; a scale of 0 counts as not given "
                "(DeepSeek's code defaults mscale_all_dim to 0): reread part 2 of "
                "the exercise on which scales Hugging Face's rule uses",
                "zero-scale-used",
            )
        )
    if mscale and mscale_all_dim:
        out += [
            Mistake(
                plain,
                "mscale and mscale_all_dim are ignored; with both given, the factor is "
                "(0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1)",
                "scales-ignored",
            ),
            Mistake(
                get(mscale_all_dim) / get(mscale),
                "the ratio is upside down: mscale goes in the numerator, "
                "(0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1)",
                "ratio-inverted",
            ),
            Mistake(
                get(mscale),
                "mscale_all_dim is ignored: divide by 0.1 mscale_all_dim ln s + 1",
                "mscale-all-dim-ignored",
            ),
            Mistake(
                get(mscale) * get(mscale_all_dim),
                "the two factors are multiplied; the factor is their ratio, "
                "(0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1)",
                "factors-multiplied",
            ),
        ]
    return out


def _check_attention(yarn_attention_factor: Callable, factor: float,
                     mscale: float | None, mscale_all_dim: float | None) -> None:
    expected = _ref_yarn_attention_factor(factor, mscale, mscale_all_dim)
    args: tuple = (factor,)
    call = f"yarn_attention_factor({factor!r}"
    if mscale is not None or mscale_all_dim is not None:
        args = (factor, mscale, mscale_all_dim)
        call += f", {mscale!r}, {mscale_all_dim!r}"
    call += ")"
    got = call_student(yarn_attention_factor, *args, call=call)
    expect_scalar(got, expected, what=call, atol=_ATTENTION_ATOL,
                  mistakes=_attention_mistakes(factor, mscale, mscale_all_dim))


# (factor, mscale, mscale_all_dim)
_ATTENTION_PUBLIC = (
    (4.0, None, None),
    (32.0, None, None),
    (0.5, None, None),  # a config that shortens the context
    (16.0, 1.2, 0.707),
    (40.0, 1.0, 1.0),  # DeepSeek-V3's config
    (4.0, 0.5, None),  # one scale alone is ignored, as in Hugging Face
    (4.0, 0.707, 0.0),  # a zero scale is not given (DeepSeek's default mscale_all_dim)
)
_ATTENTION_HIDDEN = (
    (1.0, None, None),
    (2.0, None, None),
    (128.0, None, None),
    (0.25, None, None),
    (8.0, 0.8, 1.2),
    (40.0, 0.707, 0.707),
    (8.0, None, 2.0),  # the other scale alone
)


def _public_yarn_attention_factor(yarn_attention_factor: Callable) -> None:
    """Public cases: s = 4 and 32, a factor below 1, a DeepSeek-style pair of scales,
    DeepSeek-V3's equal ones, one scale alone, and a zero scale."""
    for case in _ATTENTION_PUBLIC:
        _check_attention(yarn_attention_factor, *case)


def check_yarn_attention_factor(yarn_attention_factor: Callable) -> None:
    """Public check: seven factors and scale settings."""
    _public_yarn_attention_factor(yarn_attention_factor)
    passed("yarn_attention_factor", public=True)


def _attention_case_fits(case: tuple) -> bool:
    """What every attention-factor case keeps (_ATTENTION_ATOL's comment): each known
    mistake either right (within 1e-15) or at least 0.001 (1000 tolerances) off."""
    expected = _ref_yarn_attention_factor(*case)
    return all(
        not 1e-15 < abs(m.answer - expected) < 1000 * _ATTENTION_ATOL
        for m in _attention_mistakes(*case)
    )


def _hidden_attention_cases(seed: int | None) -> tuple:
    """The hidden ``(factor, mscale, mscale_all_dim)`` cases: :data:`_ATTENTION_HIDDEN`
    without a term seed; else drawn by the seed with its properties: s = 1 (the
    boundary, every term), s between 1 and 4 (1.01 to 3.99 in steps of 0.01), a
    large s (65.5 to 256.5), s below 1 (0.05 to 0.95, not the public 0.5), unequal
    scales (each 0.3 to 1.5, at least 0.2 apart; s 4.5 to 63.5), equal scales (0.5
    to 1.5; s 16.5 to 80.5) and mscale_all_dim alone (0.5 to 3; s 2.5 to 32.5).
    Every s other than 1 is not a whole number (chapter 11's factors all are); each
    case passes :func:`_attention_case_fits`."""
    if seed is None:
        return _ATTENTION_HIDDEN
    rng = term_rng(seed, "grade_yarn_attention_factor")

    def unequal(r: random.Random) -> tuple:
        m1, m2 = r.sample([k / 100 for k in range(30, 151)], 2)
        return (_off_chapter_factor(r, 4, 63), m1, m2)

    draws = (
        lambda r: (1.0, None, None),
        lambda r: (r.choice([k / 100 for k in range(101, 400) if k % 100]), None,
                   None),
        lambda r: (_off_chapter_factor(r, 65, 256), None, None),
        lambda r: (r.choice([k / 100 for k in range(5, 96) if k != 50]), None, None),
        unequal,
        lambda r: (_off_chapter_factor(r, 16, 80), *[r.randint(50, 150) / 100] * 2),
        lambda r: (_off_chapter_factor(r, 2, 32), None, r.randint(50, 300) / 100),
    )

    def fits(case: tuple) -> bool:
        _, m1, m2 = case
        apart = m1 is None or m2 is None or m1 == m2 or abs(m1 - m2) >= 0.2
        return apart and _attention_case_fits(case)

    return tuple(_drawn(rng, draw, fits, "attention-factor") for draw in draws)


def grade_yarn_attention_factor(yarn_attention_factor: Callable,
                                variant: str | None = None,
                                seed: int | None = None) -> None:
    """Hidden grade: s = 1, 2 and 128, another factor below 1, unequal and equal
    scales, and the other scale alone (drawn by the term's ``seed`` when there is
    one)."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_yarn_attention_factor(yarn_attention_factor)
    cases = _hidden_attention_cases(seed)
    for case in cases:
        _check_attention(yarn_attention_factor, *case)
    passed("yarn_attention_factor", public=False, detail=f"{len(cases)} cases")


# ---- llama3_scaled_frequencies -----------------------------------------------------


def _theta(head_dim: int, base: float, dtype: torch.dtype) -> torch.Tensor:
    """RoPE's trained frequencies b^(-2i/d), in float64, rounded once to dtype."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return (base ** (-2.0 * i / head_dim)).to(dtype)  # (head_dim // 2,)


def _band_mistakes(inv_freq: torch.Tensor, factor: float, original: int,
                   alpha: float, beta: float) -> list[Mistake]:
    theta = inv_freq.double()  # (n_pairs,)
    wl = 2 * math.pi / theta  # (n_pairs,)
    s, L = factor, original

    def bands(key, keep_high, interp_low, blend):
        return _where(key < L / beta, keep_high, _where(key > L / alpha, interp_low,
                                                          blend))

    mu = (L / wl - alpha) / (beta - alpha)
    blend = (1 - mu) * theta / s + mu * theta
    mu_no_2pi = (L * theta - alpha) / (beta - alpha)
    return [
        Mistake(
            bands(theta, theta, theta / s, blend),
            "the bands are drawn on the frequency theta; they are drawn on the "
            "wavelength lambda = 2 pi / theta: kept where lambda < L/beta, "
            "interpolated "
            "where lambda > L/alpha",
            "bands-on-frequency",
        ),
        Mistake(
            bands(1 / theta, theta, theta / s,
            (1 - mu_no_2pi) * theta / s + mu_no_2pi * theta),
            "the wavelength is 1/theta; a pair turns once every lambda = 2 pi / theta "
            "positions",
            "wavelength-one-over-theta",
        ),
        Mistake(
            bands(wl, theta / s, theta, (1 - mu) * theta + mu * theta / s),
            "the bands are swapped: short wavelengths (the fast pairs, many turns in "
            "L) "
            "are kept and long wavelengths are interpolated by s",
            "bands-swapped",
        ),
        Mistake(
            bands(wl, theta, theta / s, (1 - mu) * theta + mu * theta / s),
            "the blend in the medium band is reversed: mu = (L/lambda - alpha)/(beta - "
            "alpha) weighs the kept theta, (1 - mu) the interpolated theta/s",
            "blend-reversed",
        ),
        Mistake(
            bands(wl, theta, theta / s, theta),
            "the medium band is kept unchanged; between L/beta and L/alpha the "
            "frequencies are blended, (1 - mu) theta/s + mu theta",
            "medium-kept",
        ),
        Mistake(
            bands(wl, theta, theta / s, theta / s),
            "the medium band is interpolated by s; between L/beta and L/alpha the "
            "frequencies are blended, (1 - mu) theta/s + mu theta",
            "medium-interpolated",
        ),
        Mistake(
            bands(wl, theta, theta * s, (1 - mu) * theta * s + mu * theta),
            "the long wavelengths are multiplied by s; interpolation slows a pair "
            "down: "
            "theta / s",
            "multiplied-by-s",
        ),
        Mistake(
            theta / s,
            "every pair is divided by s: that is position interpolation; Llama 3.1 "
            "keeps "
            "the pairs with wavelength below L/beta",
            "all-divided",
        ),
    ]


def _check_bands(llama3_scaled_frequencies: Callable, inv_freq: torch.Tensor,
                 factor: float, original: int, alpha: float, beta: float,
                 label: str) -> None:
    expected = _ref_llama3_scaled_frequencies(inv_freq, factor, original, alpha, beta)
    mistakes = _known(expected, _band_mistakes(inv_freq, factor, original, alpha,
                                               beta), _FREQ_ATOL, _FREQ_RTOL)
    call = (f"llama3_scaled_frequencies({label}, {factor!r}, {original}, "
            f"{alpha!r}, {beta!r})")
    got = call_student(llama3_scaled_frequencies, inv_freq, factor, original, alpha,
                       beta, call=call)
    expect_close(got, expected, what=call, atol=_FREQ_ATOL, rtol=_FREQ_RTOL,
                 mistakes=mistakes, dtype="float")


def _band_public_cases() -> tuple:
    """The public cases: ``(inv_freq, factor, L, alpha, beta, label)``."""
    return (
        (_theta(128, 500000.0, torch.float64), 8.0, 8192, 1.0, 4.0,
         "theta (d=128, base 500000, float64)"),
        (_theta(16, 10000.0, torch.float32), 4.0, 64, 1.0, 4.0,
         "theta (d=16, base 10000, float32)"),
        (_theta(32, 10000.0, torch.float64), 4.0, 256, 2.0, 8.0,
         "theta (d=32, base 10000, float64)"),
    )


def _public_llama3_scaled_frequencies(llama3_scaled_frequencies: Callable) -> None:
    """Public cases: Llama 3.1 (d = 128, base 500000, L = 8192, s = 8) in float64,
    d = 16, base 10000, L = 64, s = 4 in float32, and other bands (alpha = 2,
    beta = 8)."""
    for inv_freq, factor, original, alpha, beta, label in _band_public_cases():
        _check_bands(llama3_scaled_frequencies, inv_freq, factor, original, alpha,
                     beta, label)


def check_llama3_scaled_frequencies(llama3_scaled_frequencies: Callable) -> None:
    """Public check: Llama 3.1's settings, a small head, other bands."""
    _public_llama3_scaled_frequencies(llama3_scaled_frequencies)
    passed("llama3_scaled_frequencies", public=True)


def _band_case_fits(case: tuple) -> bool:
    """What every band case keeps (_FREQ_RTOL's comment): with factor 1 every known
    mistake is right (within 1e-6, float32 rounding of the input); otherwise every
    one is off by at least 1000 tolerances (relatively, on some pair)."""
    inv_freq, factor, original, alpha, beta, _ = case
    expected = _ref_llama3_scaled_frequencies(inv_freq, factor, original, alpha,
                                              beta).double()
    for m in _band_mistakes(inv_freq, factor, original, alpha, beta):
        gap = ((m.answer.double() - expected).abs() / expected).max().item()
        if (gap > 1e-6) if factor == 1.0 else (gap < 1000 * _FREQ_RTOL):
            return False
    return True


def _band_hidden_cases(seed: int | None = None) -> tuple:
    """The hidden cases: ``(inv_freq, factor, L, alpha, beta, label)``. Fixed without
    a term seed; else drawn by the seed with their properties: a large factor (16.5
    to 64.5) on d = 64 to 128 at base 500000 or 1000000; factor 1 in float32 (every
    band rule is right); other bands (alpha 0.5, 1.5 or 2, beta = alpha + 1 to 6,
    s 1.5 to 7.5) in float64; and 40 random frequencies, log-uniform between 1e-5
    and 1 (wavelengths 6 to 6e5, not a geometric sequence) from a generator the seed
    seeds, in float32, s 4.5 to 31.5. L is 3000 to 65000 and not a power of two,
    every factor but 1 not a whole number (chapter 11's Llama 3.1 cell and ratio
    figure use L = 8192, s = 8); each case passes :func:`_band_case_fits`."""
    if seed is None:
        gen = torch.Generator().manual_seed(11)
        # log-uniform between 1e-5 and 1: wavelengths from 6 to 6e5 positions
        random_freq = 10.0 ** (-5.0 * torch.rand(40, generator=gen,
                                                 dtype=torch.float64))
        return (
            (_theta(64, 500000.0, torch.float64), 32.0, 8192, 1.0, 4.0,
             "theta (d=64, base 500000, float64)"),
            (_theta(32, 10000.0, torch.float32), 1.0, 256, 1.0, 4.0,
             "theta (d=32, base 10000, float32)"),
            (_theta(128, 10000.0, torch.float64), 2.5, 2048, 0.5, 1.5,
             "theta (d=128, base 10000, float64)"),
            (random_freq.float(), 16.0, 4096, 1.0, 4.0,
             "40 random frequencies (float32)"),
        )
    rng = term_rng(seed, "grade_llama3_scaled_frequencies")

    def geometric(d: int, base: float, dtype: torch.dtype) -> tuple:
        name = str(dtype).removeprefix("torch.")
        return _theta(d, base, dtype), f"theta (d={d}, base {base:.0f}, {name})"

    def long(r: random.Random) -> int:
        return _off_chapter_length(r, 3000, 65000)

    def large(r: random.Random) -> tuple:
        theta, label = geometric(r.choice((64, 96, 128)),
                                 r.choice((500000.0, 1000000.0)), torch.float64)
        return (theta, _off_chapter_factor(r, 16, 64), long(r), 1.0, 4.0, label)

    def one(r: random.Random) -> tuple:
        theta, label = geometric(r.choice((16, 32, 48)), 10000.0, torch.float32)
        return (theta, 1.0, long(r), 1.0, 4.0, label)

    def bands(r: random.Random) -> tuple:
        theta, label = geometric(r.choice((96, 128)), 10000.0, torch.float64)
        alpha = r.choice((0.5, 1.5, 2.0))
        return (theta, _off_chapter_factor(r, 1, 7), long(r), alpha,
                alpha + r.randint(1, 6), label)

    def scattered(r: random.Random) -> tuple:
        gen = torch.Generator().manual_seed(r.randrange(2**31))
        freq = 10.0 ** (-5.0 * torch.rand(40, generator=gen, dtype=torch.float64))
        return (freq.float(), _off_chapter_factor(r, 4, 31), long(r), 1.0, 4.0,
                "40 random frequencies (float32)")

    return tuple(_drawn(rng, draw, _band_case_fits, "band")
                 for draw in (large, one, bands, scattered))


def grade_llama3_scaled_frequencies(llama3_scaled_frequencies: Callable,
                                    variant: str | None = None,
                                    seed: int | None = None) -> None:
    """Hidden grade: Llama 3.2's factor 32, other alpha and beta, factor 1, and
    seeded random frequencies (not a geometric sequence) in float32 (drawn by the
    term's ``seed`` when there is one)."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_llama3_scaled_frequencies(llama3_scaled_frequencies)
    cases = _band_hidden_cases(seed)
    for inv_freq, factor, original, alpha, beta, label in cases:
        _check_bands(llama3_scaled_frequencies, inv_freq, factor, original, alpha,
                     beta, label)
    passed("llama3_scaled_frequencies", public=False,
           detail=f"{len(cases)} frequency sets")
