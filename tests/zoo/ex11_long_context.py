"""Bug zoo of exercise 11: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too. ``CALLS_LIBRARY[name]``
lists functions that only call the reference, through ``course_lib.<name>`` and
through a module-level ``from course_lib import <name>``.

The correction-range and attention-factor mistakes are the ones people make with
YaRN's reference code (jquesnelle/yarn, Hugging Face's ``_compute_yarn_parameters``):
rounding the ends of the range to the nearest pair or inward, clipping ``high`` to
the last pair instead of ``d - 1``, counting turns in radians, and for the attention
factor the square (1/t) instead of its root, log10, or DeepSeek's ratio upside down.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import course_lib
from course_lib import (
    llama3_scaled_frequencies,
    yarn_attention_factor,
    yarn_correction_range,
)

# --- yarn_correction_range: correct


def range_reference_style(beta_fast, beta_slow, head_dim, base, original_max_position,
                          truncate=True):
    def dim(r):
        return head_dim * math.log(original_max_position / (r * 2 * math.pi)) / (
            2 * math.log(base))

    low, high = dim(beta_fast), dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def range_float32_torch(beta_fast, beta_slow, head_dim, base, original_max_position,
                        truncate=True):
    """In float32 tensors, returning 0-d tensors."""
    r = torch.tensor([beta_fast, beta_slow], dtype=torch.float32)
    i = head_dim * torch.log(original_max_position / (2 * math.pi * r)) / (
        2 * math.log(base))
    if truncate:
        i = torch.stack((i[0].floor(), i[1].ceil()))
    return i[0].clamp(min=0), i[1].clamp(max=head_dim - 1)


def range_from_turns(beta_fast, beta_slow, head_dim, base, original_max_position,
                     truncate=True):
    """From the turn count of each pair: low is the last pair turning at least
    beta_fast times, high the first turning at most beta_slow times (in numpy)."""
    log_turns = lambda i: (np.log(original_max_position / (2 * np.pi))  # noqa: E731
                           - 2 * i / head_dim * np.log(base))
    # log_turns is linear in i: solve log_turns(i) = log(r) exactly
    slope = 2 / head_dim * np.log(base)
    low = float((log_turns(0) - np.log(beta_fast)) / slope)
    high = float((log_turns(0) - np.log(beta_slow)) / slope)
    if truncate:
        low, high = int(np.floor(low)), int(np.ceil(high))
    return [max(low, 0), min(high, head_dim - 1)]


# --- yarn_correction_range: wrong


def _dim(r, d, base, L, *, two_pi=True, two=True):
    return d * math.log(L / (r * (2 * math.pi if two_pi else 1))) / (
        (2 if two else 1) * math.log(base))


def range_rounded_to_nearest(beta_fast, beta_slow, head_dim, base,
                             original_max_position, truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position)
    high = _dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = round(low), round(high)
    return max(low, 0), min(high, head_dim - 1)


def range_int_both(beta_fast, beta_slow, head_dim, base, original_max_position,
                   truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position)
    high = _dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.floor(high)
    return max(low, 0), min(high, head_dim - 1)


def range_ceil_both(beta_fast, beta_slow, head_dim, base, original_max_position,
                    truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position)
    high = _dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = math.ceil(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def range_inward(beta_fast, beta_slow, head_dim, base, original_max_position,
                 truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position)
    high = _dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = math.ceil(low), math.floor(high)
    return max(low, 0), min(high, head_dim - 1)


def range_not_clipped_at_zero(beta_fast, beta_slow, head_dim, base,
                              original_max_position, truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position)
    high = _dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return low, min(high, head_dim - 1)


def range_clipped_to_last_pair(beta_fast, beta_slow, head_dim, base,
                               original_max_position, truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position)
    high = _dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim // 2 - 1)


def range_high_not_clipped(beta_fast, beta_slow, head_dim, base,
                           original_max_position, truncate=True):
    """Right unless high passes d - 1 (a small base and a long training)."""
    low = _dim(beta_fast, head_dim, base, original_max_position)
    high = _dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), high


def range_turns_in_radians(beta_fast, beta_slow, head_dim, base,
                           original_max_position, truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position, two_pi=False)
    high = _dim(beta_slow, head_dim, base, original_max_position, two_pi=False)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def range_without_the_two(beta_fast, beta_slow, head_dim, base,
                          original_max_position, truncate=True):
    low = _dim(beta_fast, head_dim, base, original_max_position, two=False)
    high = _dim(beta_slow, head_dim, base, original_max_position, two=False)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def range_pairs_for_d(beta_fast, beta_slow, head_dim, base, original_max_position,
                      truncate=True):
    n = head_dim // 2
    low = _dim(beta_fast, n, base, original_max_position)
    high = _dim(beta_slow, n, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def range_betas_swapped(beta_fast, beta_slow, head_dim, base, original_max_position,
                        truncate=True):
    return range_reference_style(beta_slow, beta_fast, head_dim, base,
                                 original_max_position, truncate)


def range_always_rounded(beta_fast, beta_slow, head_dim, base, original_max_position,
                         truncate=True):
    return range_reference_style(beta_fast, beta_slow, head_dim, base,
                                 original_max_position, True)


# --- yarn_attention_factor: correct


def attention_formula(factor, mscale=None, mscale_all_dim=None):
    def get(m=1.0):
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if mscale and mscale_all_dim:
        return get(mscale) / get(mscale_all_dim)
    return get()


def attention_torch_float32(factor, mscale=None, mscale_all_dim=None):
    s = torch.tensor(max(factor, 1.0), dtype=torch.float32)
    if not (mscale and mscale_all_dim):
        return 0.1 * torch.log(s) + 1  # 0-d
    m = torch.tensor([mscale, mscale_all_dim], dtype=torch.float32)
    values = 0.1 * m * torch.log(s) + 1  # (2,) numerator, denominator
    return values[0] / values[1]


def attention_from_temperature(factor, mscale=None, mscale_all_dim=None):
    """Through the temperature: 1/t = (0.1 ln s + 1)^2, then its square root."""
    def inv_t(m):
        return (0.1 * m * np.log(factor) + 1) ** 2 if factor > 1 else 1.0

    if mscale and mscale_all_dim:
        return float(np.sqrt(inv_t(mscale) / inv_t(mscale_all_dim)))
    return float(np.sqrt(inv_t(1.0)))


# --- yarn_attention_factor: wrong


def attention_log10(factor, mscale=None, mscale_all_dim=None):
    return 0.1 * math.log10(factor) + 1 if factor > 1 else 1.0


def attention_squared(factor, mscale=None, mscale_all_dim=None):
    return attention_formula(factor, mscale, mscale_all_dim) ** 2


def attention_reciprocal(factor, mscale=None, mscale_all_dim=None):
    return 1 / attention_formula(factor, mscale, mscale_all_dim)


def attention_no_guard(factor, mscale=None, mscale_all_dim=None):
    if mscale and mscale_all_dim:
        return attention_formula(factor, mscale, mscale_all_dim)
    return 0.1 * math.log(factor) + 1


def attention_no_plus_one(factor, mscale=None, mscale_all_dim=None):
    return 0.1 * math.log(factor) if factor > 1 else 1.0


def attention_ignores_scales(factor, mscale=None, mscale_all_dim=None):
    return attention_formula(factor)


def attention_ratio_upside_down(factor, mscale=None, mscale_all_dim=None):
    if mscale and mscale_all_dim:
        return attention_formula(factor, mscale_all_dim, mscale)
    return attention_formula(factor)


def attention_numerator_only(factor, mscale=None, mscale_all_dim=None):
    if mscale and mscale_all_dim:
        return 0.1 * mscale * math.log(factor) + 1 if factor > 1 else 1.0
    return attention_formula(factor)


def attention_product(factor, mscale=None, mscale_all_dim=None):
    if mscale and mscale_all_dim:
        def get(m):
            return 0.1 * m * math.log(factor) + 1 if factor > 1 else 1.0

        return get(mscale) * get(mscale_all_dim)
    return attention_formula(factor)


def attention_mscale_alone(factor, mscale=None, mscale_all_dim=None):
    """Uses mscale even without mscale_all_dim."""
    if mscale and not mscale_all_dim:
        return 0.1 * mscale * math.log(factor) + 1 if factor > 1 else 1.0
    return attention_formula(factor, mscale, mscale_all_dim)


def attention_is_not_none(factor, mscale=None, mscale_all_dim=None):
    """Tests the scales with `is not None`: a zero mscale_all_dim (DeepSeek's default)
    is used as a scale (issue 33: once caught by the hidden grader only, and there
    only by chance)."""
    if mscale is not None and mscale_all_dim is not None:
        def get(m):
            return 0.1 * m * math.log(factor) + 1 if factor > 1 else 1.0

        return get(mscale) / get(mscale_all_dim)
    return attention_formula(factor)


# --- llama3_scaled_frequencies: correct


def bands_where(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                high_freq_factor=4.0):
    theta = inv_freq.double()
    wl = 2 * math.pi / theta
    L, s, a, b = original_max_position, factor, low_freq_factor, high_freq_factor
    mu = (L / wl - a) / (b - a)
    return torch.where(wl < L / b, theta, torch.where(
        wl > L / a, theta / s, (1 - mu) * theta / s + mu * theta)).to(inv_freq.dtype)


def bands_hugging_face(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                       high_freq_factor=4.0):
    """Hugging Face's _compute_llama3_parameters, in the input's own dtype."""
    low_freq_wavelen = original_max_position / low_freq_factor
    high_freq_wavelen = original_max_position / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor,
                                 inv_freq)
    smooth = (original_max_position / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def bands_loop_interpolating_the_slow_down(inv_freq, factor, original_max_position,
                                           low_freq_factor=1.0,
                                           high_freq_factor=4.0):
    """Per pair, in Python floats: the slow-down factor goes from 1 to s; the blend
    (1 - mu) theta/s + mu theta equals theta / (s / ((1 - mu) + mu s))."""
    out = []
    for theta in inv_freq.tolist():
        turns = original_max_position * theta / (2 * math.pi)  # L / wavelength
        mu = (turns - low_freq_factor) / (high_freq_factor - low_freq_factor)
        mu = min(max(mu, 0.0), 1.0)
        out.append(theta / (factor / ((1 - mu) + mu * factor)))
    return torch.tensor(out, dtype=inv_freq.dtype)


# --- llama3_scaled_frequencies: wrong


def _bands(inv_freq, key, kept, interpolated, blend, original, alpha, beta):
    return torch.where(key < original / beta, kept, torch.where(
        key > original / alpha, interpolated, blend)).to(inv_freq.dtype)


def bands_on_frequency(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                       high_freq_factor=4.0):
    theta = inv_freq.double()
    wl = 2 * math.pi / theta
    mu = (original_max_position / wl - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    return _bands(inv_freq, theta, theta, theta / factor,
                  (1 - mu) * theta / factor + mu * theta, original_max_position,
                  low_freq_factor, high_freq_factor)


def bands_wavelength_without_2pi(inv_freq, factor, original_max_position,
                                 low_freq_factor=1.0, high_freq_factor=4.0):
    theta = inv_freq.double()
    wl = 1 / theta
    mu = (original_max_position / wl - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    return _bands(inv_freq, wl, theta, theta / factor,
                  (1 - mu) * theta / factor + mu * theta, original_max_position,
                  low_freq_factor, high_freq_factor)


def bands_swapped(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                  high_freq_factor=4.0):
    theta = inv_freq.double()
    wl = 2 * math.pi / theta
    mu = (original_max_position / wl - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    return _bands(inv_freq, wl, theta / factor, theta,
                  (1 - mu) * theta + mu * theta / factor, original_max_position,
                  low_freq_factor, high_freq_factor)


def bands_blend_reversed(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                         high_freq_factor=4.0):
    theta = inv_freq.double()
    wl = 2 * math.pi / theta
    mu = (original_max_position / wl - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    return _bands(inv_freq, wl, theta, theta / factor,
                  (1 - mu) * theta + mu * theta / factor, original_max_position,
                  low_freq_factor, high_freq_factor)


def bands_no_blend(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                   high_freq_factor=4.0):
    """Two bands, cut at L/alpha: the medium band is kept as it is."""
    theta = inv_freq.double()
    wl = 2 * math.pi / theta
    return torch.where(wl > original_max_position / low_freq_factor, theta / factor,
                       theta).to(inv_freq.dtype)


def bands_times_factor(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                       high_freq_factor=4.0):
    theta = inv_freq.double()
    wl = 2 * math.pi / theta
    mu = (original_max_position / wl - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    return _bands(inv_freq, wl, theta, theta * factor,
                  (1 - mu) * theta * factor + mu * theta, original_max_position,
                  low_freq_factor, high_freq_factor)


def bands_default_alpha_beta(inv_freq, factor, original_max_position,
                             low_freq_factor=1.0, high_freq_factor=4.0):
    """Llama 3.1's alpha = 1 and beta = 4 hard-coded: right only for those (a
    public case and hidden cases use others)."""
    return bands_where(inv_freq, factor, original_max_position, 1.0, 4.0)


# --- calls the library


def range_calls_library(beta_fast, beta_slow, head_dim, base, original_max_position,
                        truncate=True):
    return course_lib.yarn_correction_range(beta_fast, beta_slow, head_dim, base,
                                            original_max_position, truncate=truncate)


def range_imported_from_library(beta_fast, beta_slow, head_dim, base,
                                original_max_position, truncate=True):
    return yarn_correction_range(beta_fast, beta_slow, head_dim, base,
                                 original_max_position, truncate=truncate)


def attention_calls_library(factor, mscale=None, mscale_all_dim=None):
    return course_lib.yarn_attention_factor(factor, mscale, mscale_all_dim)


def attention_imported_from_library(factor, mscale=None, mscale_all_dim=None):
    return yarn_attention_factor(factor, mscale, mscale_all_dim)


def bands_calls_library(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                        high_freq_factor=4.0):
    return course_lib.llama3_scaled_frequencies(
        inv_freq, factor, original_max_position, low_freq_factor, high_freq_factor)


def bands_imported_from_library(inv_freq, factor, original_max_position,
                                low_freq_factor=1.0, high_freq_factor=4.0):
    return llama3_scaled_frequencies(inv_freq, factor, original_max_position,
                                     low_freq_factor, high_freq_factor)


CORRECT = {
    "yarn_correction_range": [range_reference_style, range_float32_torch,
                              range_from_turns],
    "yarn_attention_factor": [attention_formula, attention_torch_float32,
                              attention_from_temperature],
    "llama3_scaled_frequencies": [bands_where, bands_hugging_face,
                                  bands_loop_interpolating_the_slow_down],
}

WRONG = {
    "yarn_correction_range": [
        (range_rounded_to_nearest, "round(), gives this here", True),
        (range_int_both, "high is rounded down", True),
        (range_ceil_both, "low is rounded up", True),
        (range_inward, "both ends are rounded inward", True),
        (range_not_clipped_at_zero, "low is not clipped at 0", True),
        (range_clipped_to_last_pair, "clipped to the last pair", True),
        (range_high_not_clipped, "high is not clipped", True),
        (range_turns_in_radians, "the turns are counted in radians", True),
        (range_without_the_two, "the index is twice too large", True),
        (range_pairs_for_d, "uses the number of pairs d/2 for d", True),
        (range_betas_swapped, "beta_fast and beta_slow are swapped", True),
        (range_always_rounded, "rounded although truncate=False", True),
    ],
    "yarn_attention_factor": [
        (attention_log10, "the logarithm is log10", True),
        (attention_squared, "this is 1/t", True),
        (attention_reciprocal, "this is upside down", True),
        (attention_no_guard, "for factor <= 1 the factor is 1", True),
        (attention_no_plus_one, "the + 1 is missing", True),
        (attention_ignores_scales, "mscale and mscale_all_dim are ignored", True),
        (attention_ratio_upside_down, "the ratio is upside down", True),
        (attention_numerator_only, "mscale_all_dim is ignored", True),
        (attention_product, "the two factors are multiplied", True),
        (attention_mscale_alone, "with mscale alone", True),
        (attention_is_not_none, "a scale of 0 counts as not given", True),
    ],
    "llama3_scaled_frequencies": [
        (bands_on_frequency, "the bands are drawn on the frequency theta", True),
        (bands_wavelength_without_2pi, "the wavelength is 1/theta", True),
        (bands_swapped, "the bands are swapped", True),
        (bands_blend_reversed, "the blend in the medium band is reversed", True),
        (bands_no_blend, "the medium band is kept unchanged", True),
        (bands_times_factor, "the long wavelengths are multiplied by s", True),
        (bands_default_alpha_beta, "wrong entr", True),
    ],
}

CALLS_LIBRARY = {
    "yarn_correction_range": [range_calls_library, range_imported_from_library],
    "yarn_attention_factor": [attention_calls_library,
                              attention_imported_from_library],
    "llama3_scaled_frequencies": [bands_calls_library, bands_imported_from_library],
}
