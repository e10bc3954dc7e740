"""Bug zoo of exercise 11: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too. ``CALLS_LIBRARY[name]``
lists functions that only call the reference, through ``course_lib.<name>`` and
through a module-level ``from course_lib import <name>``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import course_lib
from course_lib import llama3_scaled_frequencies, ntk_scaled_base, yarn_ramp

# --- ntk_scaled_base: correct


def ntk_formula(base, factor, head_dim):
    return base * factor ** (head_dim / (head_dim - 2))


def ntk_solved_for_the_slowest_pair(base, factor, head_dim):
    """Solve b'^(-e) = b^(-e) / s with e = 2i/d for the slowest pair i = d/2 - 1."""
    e = 2 * (head_dim // 2 - 1) / head_dim
    return (base ** (-e) / factor) ** (-1 / e)


def ntk_float32_tensor(base, factor, head_dim):
    """A 0-d float32 tensor, computed through logarithms."""
    t = torch.tensor([base, factor], dtype=torch.float32)
    return torch.exp(t[0].log() + head_dim / (head_dim - 2) * t[1].log())


# --- ntk_scaled_base: wrong


def ntk_exponent_d_over_d_minus_1(base, factor, head_dim):
    return base * factor ** (head_dim / (head_dim - 1))


def ntk_exponent_upside_down(base, factor, head_dim):
    return base * factor ** ((head_dim - 2) / head_dim)


def ntk_base_times_factor(base, factor, head_dim):
    return base * factor


def ntk_divided(base, factor, head_dim):
    return base / factor ** (head_dim / (head_dim - 2))


def ntk_pairs_for_d(base, factor, head_dim):
    n = head_dim // 2  # the number of pairs taken for d
    return base * factor ** (n / (n - 2)) if n > 2 else base * factor ** 2


# --- yarn_ramp: correct


def ramp_clamp(low, high, n_pairs):
    if high == low:
        high += 0.001
    i = torch.arange(n_pairs, dtype=torch.float64)
    return ((i - low) / (high - low)).clamp(0, 1)


def ramp_min_max_float32(low, high, n_pairs):
    width = max(high - low, 0.001)
    i = torch.arange(n_pairs, dtype=torch.float32)
    return torch.minimum(torch.maximum((i - low) / width, torch.tensor(0.0)),
                         torch.tensor(1.0))


def ramp_numpy_loop(low, high, n_pairs):
    high = high + 0.001 if high == low else high
    values = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(n_pairs)]
    return torch.from_numpy(np.array(values, dtype=np.float64))


# --- yarn_ramp: wrong


def ramp_reversed(low, high, n_pairs):
    return 1 - ramp_clamp(low, high, n_pairs)


def ramp_not_clipped(low, high, n_pairs):
    if high == low:
        high += 0.001
    i = torch.arange(n_pairs, dtype=torch.float64)
    return (i - low) / (high - low)


def ramp_from_zero(low, high, n_pairs):
    if high == low:
        high += 0.001
    i = torch.arange(n_pairs, dtype=torch.float64)
    return (i / (high - low)).clamp(0, 1)


def ramp_pairs_from_one(low, high, n_pairs):
    if high == low:
        high += 0.001
    i = torch.arange(1, n_pairs + 1, dtype=torch.float64)
    return ((i - low) / (high - low)).clamp(0, 1)


def ramp_divided_by_high(low, high, n_pairs):
    i = torch.arange(n_pairs, dtype=torch.float64)
    return ((i - low) / high).clamp(0, 1)


def ramp_not_widened(low, high, n_pairs):
    """Right except when low == high (0/0 at i = low): only the hidden cases have it."""
    i = torch.arange(n_pairs, dtype=torch.float64)
    return ((i - low) / (high - low)).clamp(0, 1)


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
    """Llama 3.1's alpha = 1 and beta = 4 hard-coded: right only for those (the
    hidden cases use others)."""
    return bands_where(inv_freq, factor, original_max_position, 1.0, 4.0)


# --- calls the library


def ntk_calls_library(base, factor, head_dim):
    return course_lib.ntk_scaled_base(base, factor, head_dim)


def ntk_imported_from_library(base, factor, head_dim):
    return ntk_scaled_base(base, factor, head_dim)


def ramp_calls_library(low, high, n_pairs):
    return course_lib.yarn_ramp(low, high, n_pairs)


def ramp_imported_from_library(low, high, n_pairs):
    return yarn_ramp(low, high, n_pairs)


def bands_calls_library(inv_freq, factor, original_max_position, low_freq_factor=1.0,
                        high_freq_factor=4.0):
    return course_lib.llama3_scaled_frequencies(
        inv_freq, factor, original_max_position, low_freq_factor, high_freq_factor)


def bands_imported_from_library(inv_freq, factor, original_max_position,
                                low_freq_factor=1.0, high_freq_factor=4.0):
    return llama3_scaled_frequencies(inv_freq, factor, original_max_position,
                                     low_freq_factor, high_freq_factor)


CORRECT = {
    "ntk_scaled_base": [ntk_formula, ntk_solved_for_the_slowest_pair,
                        ntk_float32_tensor],
    "yarn_ramp": [ramp_clamp, ramp_min_max_float32, ramp_numpy_loop],
    "llama3_scaled_frequencies": [bands_where, bands_hugging_face,
                                  bands_loop_interpolating_the_slow_down],
}

WRONG = {
    "ntk_scaled_base": [
        (ntk_exponent_d_over_d_minus_1, "the exponent is d/(d-1)", True),
        (ntk_exponent_upside_down, "the exponent is upside down", True),
        (ntk_base_times_factor, "the base is multiplied by s itself", True),
        (ntk_divided, "a smaller base speeds the pairs up", True),
        (ntk_pairs_for_d, "uses the number of pairs d/2 for d", True),
    ],
    "yarn_ramp": [
        (ramp_reversed, "the ramp runs the wrong way", True),
        (ramp_not_clipped, "the ramp is not clipped", True),
        (ramp_from_zero, "the ramp starts at i = 0 instead of i = low", True),
        (ramp_pairs_from_one, "the pair indices start at 1", True),
        (ramp_divided_by_high, "divide by its width, high - low", True),
        (ramp_not_widened, "when low == high the ramp divides 0 by 0", False),
    ],
    "llama3_scaled_frequencies": [
        (bands_on_frequency, "the bands are drawn on the frequency theta", True),
        (bands_wavelength_without_2pi, "the wavelength is 1/theta", True),
        (bands_swapped, "the bands are swapped", True),
        (bands_blend_reversed, "the blend in the medium band is reversed", True),
        (bands_no_blend, "the medium band is kept unchanged", True),
        (bands_times_factor, "the long wavelengths are multiplied by s", True),
        (bands_default_alpha_beta, "wrong entr", False),
    ],
}

CALLS_LIBRARY = {
    "ntk_scaled_base": [ntk_calls_library, ntk_imported_from_library],
    "yarn_ramp": [ramp_calls_library, ramp_imported_from_library],
    "llama3_scaled_frequencies": [bands_calls_library, bands_imported_from_library],
}
