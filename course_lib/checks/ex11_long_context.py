"""Graders of exercise 11 (longer contexts for RoPE): the NTK-aware base, YaRN's ramp
and Llama 3.1's frequency bands.

Expected answers come from :mod:`course_lib.rope_scaling`, captured at import; the
known wrong answers (the exponent d/(d-1) or (d-2)/d, a ramp that runs the wrong way
or is not clipped, bands drawn on the frequency instead of the wavelength, no blend in
the medium band, ...) are computed here so that a message can name the mistake.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course_lib.rope_scaling import (
    llama3_scaled_frequencies as _ref_llama3_scaled_frequencies,
)
from course_lib.rope_scaling import ntk_scaled_base as _ref_ntk_scaled_base
from course_lib.rope_scaling import yarn_ramp as _ref_yarn_ramp

from ._core import Mistake, call_student, expect_close, expect_scalar, passed

__all__ = [
    "check_llama3_scaled_frequencies",
    "check_ntk_scaled_base",
    "check_yarn_ramp",
    "grade_llama3_scaled_frequencies",
    "grade_ntk_scaled_base",
    "grade_yarn_ramp",
]

_allclose = torch.allclose
_where = torch.where

# The new base is one power times the base: float64 gives it to ~1e-15, a float32
# computation (a tensor to the power d/(d-2)) to a few float32 ulps, ~5e-7 relative.
# The known mistakes differ from it by 0.4% or more in every case below (the closest:
# the exponent 96/95 against 96/94 for s = 1.5), so 1e-5 relative separates both.
_BASE_RTOL = 1e-5
# Ramp values lie in [0, 1] and are one division: float32 rounding is ~1e-7.
_RAMP_ATOL = 1e-6
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
        Mistake(answer, text)
        for answer, text in candidates
        if not (
            answer.shape == expected.shape
            and _allclose(
                answer.double(), expected.double(), atol=atol, rtol=rtol,
                equal_nan=True,
            )
        )
    ]


# ---- ntk_scaled_base -------------------------------------------------------------


def _ntk_mistakes(base: float, factor: float, head_dim: int) -> list[tuple[float, str]]:
    d = head_dim
    out = [
        (base * factor ** (d / (d - 1)),
         "the exponent is d/(d-1); the slowest pair is i = d/2 - 1, whose frequency "
         "exponent is 2i/d = (d-2)/d, so slowing it by s needs b' = b s^(d/(d-2))"),
        (base * factor ** ((d - 2) / d),
         "the exponent is upside down: (d-2)/d instead of d/(d-2); solve "
         "b'^(-(d-2)/d) = b^(-(d-2)/d) / s for b'"),
        (base * factor,
         "the base is multiplied by s itself; that slows the slowest pair by only "
         "s^((d-2)/d): the base must grow by s^(d/(d-2))"),
        (base / factor ** (d / (d - 2)),
         "the base is divided by s^(d/(d-2)): a smaller base speeds the pairs up; "
         "NTK-aware scaling slows them down, b' = b s^(d/(d-2))"),
        (factor ** (d / (d - 2)),
         "this is s^(d/(d-2)) alone: the new base is the old base times it, "
         "b' = b s^(d/(d-2))"),
    ]
    if d // 2 > 2:
        n = d // 2
        out.append(
            (base * factor ** (n / (n - 2)),
             "the exponent uses the number of pairs d/2 for d; with head_dim d the "
             "exponent is d/(d-2)")
        )
    return out


def _check_ntk(ntk_scaled_base: Callable, base: float, factor: float,
               head_dim: int) -> None:
    expected = _ref_ntk_scaled_base(base, factor, head_dim)
    mistakes = _ntk_mistakes(base, factor, head_dim)
    call = f"ntk_scaled_base({base!r}, {factor!r}, {head_dim})"
    got = call_student(ntk_scaled_base, base, factor, head_dim, call=call)
    expect_scalar(got, expected, what=call, atol=_BASE_RTOL * abs(expected),
                  mistakes=mistakes)


_NTK_PUBLIC = ((10000.0, 4.0, 8), (10000.0, 8.0, 64))
_NTK_HIDDEN = (
    (10000.0, 2.0, 4),
    (10000.0, 1.0, 128),
    (500000.0, 8.0, 128),
    (10000.0, 1.5, 96),
    (1000000.0, 32.0, 256),
    (10000.0, 16.0, 6),
    (2.0, 3.0, 10),
)


def _public_ntk_scaled_base(ntk_scaled_base: Callable) -> None:
    """Public cases: head_dim 8 with s = 4 and head_dim 64 with s = 8 (base 10000)."""
    for base, factor, head_dim in _NTK_PUBLIC:
        _check_ntk(ntk_scaled_base, base, factor, head_dim)


def check_ntk_scaled_base(ntk_scaled_base: Callable) -> None:
    """Public check: head_dim 8 and 64, base 10000."""
    _public_ntk_scaled_base(ntk_scaled_base)
    passed("ntk_scaled_base", public=True)


def grade_ntk_scaled_base(ntk_scaled_base: Callable) -> None:
    """Hidden grade: the smallest head_dim (4), Llama's base 500000, factor 1 (the base
    is unchanged), fractional factors and large ones."""
    _public_ntk_scaled_base(ntk_scaled_base)
    for base, factor, head_dim in _NTK_HIDDEN:
        _check_ntk(ntk_scaled_base, base, factor, head_dim)
    passed("ntk_scaled_base", public=False, detail=f"{len(_NTK_HIDDEN)} cases")


# ---- yarn_ramp -------------------------------------------------------------------


def _ramp_mistakes(low: float, high: float,
                   n_pairs: int) -> list[tuple[torch.Tensor, str]]:
    i = torch.arange(n_pairs, dtype=torch.float64)  # (n_pairs,)
    width = high - low if high != low else 0.001
    right = ((i - low) / width).clamp(0.0, 1.0)
    out = [
        (1.0 - right,
         "the ramp runs the wrong way: gamma is 0 for the fast pairs i <= low (they "
         "keep their frequency) and 1 for the slow pairs i >= high (interpolated)"),
        ((i - low) / width,
         "the ramp is not clipped: outside [low, high] it must stay at 0 (below low) "
         "and 1 (above high), clip((i - low)/(high - low), 0, 1)"),
        ((i / width).clamp(0.0, 1.0),
         "the ramp starts at i = 0 instead of i = low: use (i - low)/(high - low)"),
        (((i + 1 - low) / width).clamp(0.0, 1.0),
         "the pair indices start at 1; they run 0, 1, ..., n_pairs - 1"),
    ]
    if high != 0:
        out.append(
            (((i - low) / high).clamp(0.0, 1.0),
             "the ramp is divided by high; divide by its width, high - low")
        )
    if high == low:
        step = (i - low) / 0.0  # what a division without the widening gives
        out.append(
            (step.clamp(0.0, 1.0),
             "when low == high the ramp divides 0 by 0 at i = low (nan): widen the "
             "ramp first, high = low + 0.001, as the reference code does")
        )
    return out


def _check_ramp(yarn_ramp: Callable, low: float, high: float, n_pairs: int) -> None:
    expected = _ref_yarn_ramp(low, high, n_pairs)  # (n_pairs,)
    mistakes = _known(expected, _ramp_mistakes(low, high, n_pairs), _RAMP_ATOL, 0.0)
    call = f"yarn_ramp({low!r}, {high!r}, {n_pairs})"
    got = call_student(yarn_ramp, low, high, n_pairs, call=call)
    expect_close(got, expected, what=call, atol=_RAMP_ATOL, rtol=0.0,
                 mistakes=mistakes, dtype="float")


_RAMP_PUBLIC = ((3, 10, 16), (2.5, 7.25, 12))
# (20, 46, 64) is YaRN's range for Llama 2 (d = 128, base 10000, L = 4096)
_RAMP_HIDDEN = (
    (4, 4, 8),
    (0, 5, 8),
    (6, 30, 16),
    (0, 1, 1),
    (20, 46, 64),
    (0.0, 63.0, 64),
    (1.75, 2.5, 6),
)


def _public_yarn_ramp(yarn_ramp: Callable) -> None:
    """Public cases: integer ends (the rounded range) and fractional ends."""
    for low, high, n_pairs in _RAMP_PUBLIC:
        _check_ramp(yarn_ramp, low, high, n_pairs)


def check_yarn_ramp(yarn_ramp: Callable) -> None:
    """Public check: integer and fractional ends, inside the pair range."""
    _public_yarn_ramp(yarn_ramp)
    passed("yarn_ramp", public=True)


def grade_yarn_ramp(yarn_ramp: Callable) -> None:
    """Hidden grade: low == high, a ramp from pair 0, ends past the last pair, one
    pair, the range YaRN computes for Llama 2 (d = 128, L = 4096)."""
    _public_yarn_ramp(yarn_ramp)
    for low, high, n_pairs in _RAMP_HIDDEN:
        _check_ramp(yarn_ramp, low, high, n_pairs)
    passed("yarn_ramp", public=False, detail=f"{len(_RAMP_HIDDEN)} cases")


# ---- llama3_scaled_frequencies -----------------------------------------------------


def _theta(head_dim: int, base: float, dtype: torch.dtype) -> torch.Tensor:
    """RoPE's trained frequencies b^(-2i/d), in float64, rounded once to dtype."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return (base ** (-2.0 * i / head_dim)).to(dtype)  # (head_dim // 2,)


def _band_mistakes(inv_freq: torch.Tensor, factor: float, original: int,
                   alpha: float, beta: float) -> list[tuple[torch.Tensor, str]]:
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
        (bands(theta, theta, theta / s, blend),
         "the bands are drawn on the frequency theta; they are drawn on the "
         "wavelength lambda = 2 pi / theta: kept where lambda < L/beta, interpolated "
         "where lambda > L/alpha"),
        (bands(1 / theta, theta, theta / s,
               (1 - mu_no_2pi) * theta / s + mu_no_2pi * theta),
         "the wavelength is 1/theta; a pair turns once every lambda = 2 pi / theta "
         "positions"),
        (bands(wl, theta / s, theta, (1 - mu) * theta + mu * theta / s),
         "the bands are swapped: short wavelengths (the fast pairs, many turns in L) "
         "are kept and long wavelengths are interpolated by s"),
        (bands(wl, theta, theta / s, (1 - mu) * theta + mu * theta / s),
         "the blend in the medium band is reversed: mu = (L/lambda - alpha)/(beta - "
         "alpha) weighs the kept theta, (1 - mu) the interpolated theta/s"),
        (bands(wl, theta, theta / s, theta),
         "the medium band is kept unchanged; between L/beta and L/alpha the "
         "frequencies are blended, (1 - mu) theta/s + mu theta"),
        (bands(wl, theta, theta / s, theta / s),
         "the medium band is interpolated by s; between L/beta and L/alpha the "
         "frequencies are blended, (1 - mu) theta/s + mu theta"),
        (bands(wl, theta, theta * s, (1 - mu) * theta * s + mu * theta),
         "the long wavelengths are multiplied by s; interpolation slows a pair down: "
         "theta / s"),
        (theta / s,
         "every pair is divided by s: that is position interpolation; Llama 3.1 keeps "
         "the pairs with wavelength below L/beta"),
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
    )


def _public_llama3_scaled_frequencies(llama3_scaled_frequencies: Callable) -> None:
    """Public cases: Llama 3.1 (d = 128, base 500000, L = 8192, s = 8) in float64,
    and d = 16, base 10000, L = 64, s = 4 in float32."""
    for inv_freq, factor, original, alpha, beta, label in _band_public_cases():
        _check_bands(llama3_scaled_frequencies, inv_freq, factor, original, alpha,
                     beta, label)


def check_llama3_scaled_frequencies(llama3_scaled_frequencies: Callable) -> None:
    """Public check: Llama 3.1's settings, and a small head."""
    _public_llama3_scaled_frequencies(llama3_scaled_frequencies)
    passed("llama3_scaled_frequencies", public=True)


def _band_hidden_cases() -> tuple:
    """The hidden cases: ``(inv_freq, factor, L, alpha, beta, label)``."""
    gen = torch.Generator().manual_seed(11)
    # log-uniform between 1e-5 and 1: wavelengths from 6 to 6e5 positions
    random = 10.0 ** (-5.0 * torch.rand(40, generator=gen, dtype=torch.float64))
    return (
        (_theta(64, 500000.0, torch.float64), 32.0, 8192, 1.0, 4.0,
         "theta (d=64, base 500000, float64)"),
        (_theta(32, 10000.0, torch.float64), 4.0, 256, 2.0, 8.0,
         "theta (d=32, base 10000, float64)"),
        (_theta(32, 10000.0, torch.float32), 1.0, 256, 1.0, 4.0,
         "theta (d=32, base 10000, float32)"),
        (_theta(128, 10000.0, torch.float64), 2.5, 2048, 0.5, 1.5,
         "theta (d=128, base 10000, float64)"),
        (random.float(), 16.0, 4096, 1.0, 4.0, "40 random frequencies (float32)"),
    )


def grade_llama3_scaled_frequencies(llama3_scaled_frequencies: Callable) -> None:
    """Hidden grade: Llama 3.2's factor 32, other alpha and beta, factor 1, and
    seeded random frequencies (not a geometric sequence) in float32."""
    _public_llama3_scaled_frequencies(llama3_scaled_frequencies)
    cases = _band_hidden_cases()
    for inv_freq, factor, original, alpha, beta, label in cases:
        _check_bands(llama3_scaled_frequencies, inv_freq, factor, original, alpha,
                     beta, label)
    passed("llama3_scaled_frequencies", public=False,
           detail=f"{len(cases)} frequency sets")
