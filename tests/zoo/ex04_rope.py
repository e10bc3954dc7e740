"""Bug zoo of exercise 4: correct variants the graders must accept and wrong
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
from course_lib import apply_rope, rope_frequencies, rope_interleaved_to_half_weights

# --- rope_frequencies: correct


def freq_inverse_power(head_dim):
    return 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))


def freq_exp_log(head_dim):
    i = torch.arange(head_dim // 2, dtype=torch.float32)
    return torch.exp(-2 * i / head_dim * math.log(10000.0))


def freq_list_float64(head_dim):
    return torch.tensor([10000 ** (-2 * i / head_dim) for i in range(head_dim // 2)],
                        dtype=torch.float64)


# --- rope_frequencies: wrong


def freq_doubled_exponent(head_dim):
    return 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() * 2 / head_dim))


def freq_i_not_2i(head_dim):
    return 1.0 / (10000 ** (torch.arange(head_dim // 2).float() / head_dim))


def freq_positive_exponent(head_dim):
    return 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)


def freq_one_per_dimension(head_dim):
    return 1.0 / (10000 ** (torch.arange(head_dim).float() / head_dim))


def freq_from_one(head_dim):
    return 1.0 / (10000 ** (torch.arange(2, head_dim + 2, 2).float() / head_dim))


# --- apply_rope: correct


def _angles(positions, head_dim, dtype=torch.float64):
    theta = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return (positions.double()[:, None] * theta).to(dtype)  # (seq, d/2)


def rope_stack(x, positions):
    a = _angles(positions, x.shape[-1], x.dtype)
    cos, sin = a.cos(), a.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_complex(x, positions):
    """Meta's LLaMA formulation: pairs as complex numbers times e^(i m theta)."""
    a = _angles(positions, x.shape[-1])
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(a), a)).flatten(-2).to(
        x.dtype
    )


def rope_loops(x, positions):
    """The RoFormer equation pair by pair, token by token (slow, but right)."""
    flat = x.reshape(-1, x.shape[-2], x.shape[-1]).double()
    out = torch.empty_like(flat)
    d = x.shape[-1]
    for b in range(flat.shape[0]):
        for t, m in enumerate(positions.tolist()):
            for i in range(d // 2):
                angle = m * 10000 ** (-2 * i / d)
                c, s = math.cos(angle), math.sin(angle)
                a, bb = flat[b, t, 2 * i].item(), flat[b, t, 2 * i + 1].item()
                out[b, t, 2 * i] = a * c - bb * s
                out[b, t, 2 * i + 1] = a * s + bb * c
    return out.reshape(x.shape).to(x.dtype)


def rope_rotation_matrices_float32(x, positions):
    a = _angles(positions, x.shape[-1]).float()  # (seq, d/2)
    c, s = a.cos(), a.sin()
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)  # (..., seq, d/2, 2)
    return torch.einsum("tprc,...tpc->...tpr", rot, pairs).flatten(-2).to(x.dtype)


# --- apply_rope: wrong


def rope_rotate_half(x, positions):
    d = x.shape[-1]
    a = _angles(positions, d, x.dtype)
    cos, sin = torch.cat([a.cos(), a.cos()], -1), torch.cat([a.sin(), a.sin()], -1)
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def rope_seed_simplified(x, positions):
    """The seed text's 'simplified' RoPE: reads (2i, 2i+1), writes [evens | odds]."""
    a = _angles(positions, x.shape[-1], x.dtype)
    cos, sin = a.cos(), a.sin()
    return torch.cat([x[..., ::2] * cos - x[..., 1::2] * sin,
                      x[..., ::2] * sin + x[..., 1::2] * cos], dim=-1)


def rope_negative_angle(x, positions):
    return rope_stack(x, -positions)


def rope_positions_reversed(x, positions):
    return rope_stack(x, positions.flip(0))


def rope_ignores_positions(x, positions):
    return rope_stack(x, torch.arange(x.shape[-2]))


def rope_doubled_exponent(x, positions):
    d = x.shape[-1]
    theta = 1.0 / (10000 ** (torch.arange(0, d, 2).float() * 2 / d))
    a = positions.float()[:, None] * theta
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()],
                       -1).flatten(-2)


def rope_in_place(x, positions):
    x.copy_(rope_stack(x, positions))
    return x


def rope_sin_times_x(x, positions):
    a = _angles(positions, x.shape[-1], x.dtype)
    return x * a.cos().repeat_interleave(2, -1) + x * a.sin().repeat_interleave(2, -1)


# --- interleaved_to_half_weights: correct


def weights_view_transpose(w, n_heads):
    """One reshape, as conversion scripts do: (heads, pairs, 2, in) -> (heads, 2,
    pairs, in), so that each head lists its first members, then its second ones."""
    head_dim = w.shape[0] // n_heads
    flat = w.reshape(w.shape[0], -1)  # a bias becomes one column
    out = flat.reshape(n_heads, head_dim // 2, 2, -1).transpose(1, 2)
    return out.reshape(w.shape)


def weights_index_rows(w, n_heads):
    head_dim = w.shape[0] // n_heads
    within = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    rows = (torch.arange(n_heads)[:, None] * head_dim + within).flatten()
    return w[rows]


def weights_loop_over_heads(w, n_heads):
    head_dim = w.shape[0] // n_heads
    parts = []
    for h in range(n_heads):
        block = w[h * head_dim:(h + 1) * head_dim]
        parts += [block[0::2], block[1::2]]
    return torch.cat(parts)


# --- interleaved_to_half_weights: wrong


def weights_whole_matrix(w, n_heads):
    """Evens then odds over all rows: the heads get mixed."""
    return torch.cat([w[0::2], w[1::2]])


def weights_reverse_direction(w, n_heads):
    """The rotate-half -> interleaved conversion (a reverse_permute)."""
    head_dim = w.shape[0] // n_heads
    flat = w.reshape(w.shape[0], -1)
    out = flat.reshape(n_heads, 2, head_dim // 2, -1).transpose(1, 2)
    return out.reshape(w.shape)


def weights_columns(w, n_heads):
    """Q = X W thinking: permutes the columns of the stored (out, in) weight."""
    if w.dim() == 1:
        return weights_index_rows(w, n_heads)
    return weights_index_rows(w.T, n_heads).T


def weights_bias_left_alone(w, n_heads):
    """Converts weight matrices, returns biases unchanged."""
    if w.dim() == 1:
        return w.clone()
    return weights_index_rows(w, n_heads)


def weights_head_dim_from_width(w, n_heads):
    """head_dim = d_model // n_heads, right for a square query projection only."""
    if w.dim() == 1:
        return weights_index_rows(w, n_heads)
    head_dim = w.shape[1] // n_heads
    out = w.reshape(n_heads, head_dim // 2, 2, -1).transpose(1, 2)
    return out.reshape(w.shape)


def weights_in_place(w, n_heads):
    w.copy_(weights_index_rows(w, n_heads))
    return w


def weights_float32(w, n_heads):
    """Right rows, but through float32: a bfloat16 checkpoint changes dtype."""
    return weights_index_rows(w.float(), n_heads)


def weights_through_numpy(w, n_heads):
    """Right rows, through NumPy: NumPy has no bfloat16, so a bfloat16 checkpoint
    raises (issue 33: once caught by the hidden grader only)."""
    head_dim = w.shape[0] // n_heads
    within = np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])
    rows = (np.arange(n_heads)[:, None] * head_dim + within).reshape(-1)
    return torch.from_numpy(w.numpy()[rows].copy())


# --- calls the library


def freq_calls_library(head_dim):
    return course_lib.rope_frequencies(head_dim)


def freq_imported_from_library(head_dim):
    return rope_frequencies(head_dim)


def rope_calls_library(x, positions):
    return course_lib.apply_rope(x, positions)


def rope_imported_from_library(x, positions):
    return apply_rope(x, positions)


def weights_calls_library(w, n_heads):
    head_dim = w.shape[0] // n_heads
    return course_lib.rope_interleaved_to_half_weights(w, n_heads, head_dim)


def weights_imported_from_library(w, n_heads):
    return rope_interleaved_to_half_weights(w, n_heads, w.shape[0] // n_heads)


# --- found by the red team: correct styles and bugs the first graders missed


def rope_float32_recipe(x, positions):
    """The common float32 recipe (inverse frequencies, angles in float32)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    angles = positions[:, None].float() * inv_freq  # (seq, d/2)
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def rope_float64_output(x, positions):
    """Right values, but float64 angles promote a float32 x to float64."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * theta  # (seq, d/2), float64
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angles.cos() - b * angles.sin(),
                        a * angles.sin() + b * angles.cos()), -1).flatten(-2)


def rope_bfloat16_positions(x, positions):
    """Positions rounded through bfloat16: exact up to 256 only (the public and the
    short hidden cases pass, a long KV cache does not)."""
    return rope_float32_recipe(x, positions.to(torch.bfloat16).long())


def rope_float32_always(x, positions):
    """Right values, but x.float() first: a float64 x comes back float32 (issue 33:
    once caught by the hidden grader only)."""
    return rope_float32_recipe(x.float(), positions)


def rope_cache_of_2048(x, positions):
    """Angles cached for 2048 positions and looked up (wraps around beyond)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    table = torch.arange(2048).float()[:, None] * inv_freq  # (2048, d/2)
    angles = table[positions % 2048]  # (seq, d/2)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angles.cos() - b * angles.sin(),
                        a * angles.sin() + b * angles.cos()), -1).flatten(-2)


def rope_shifts_positions(x, positions):
    """Right values, but the caller's positions are advanced in place."""
    out = rope_float32_recipe(x, positions)
    positions += 1
    return out


CORRECT = {
    "rope_frequencies": [freq_inverse_power, freq_exp_log, freq_list_float64],
    "apply_rope": [rope_stack, rope_complex, rope_loops,
                   rope_rotation_matrices_float32, rope_float32_recipe],
    "interleaved_to_half_weights": [weights_view_transpose, weights_index_rows,
                                    weights_loop_over_heads],
}

WRONG = {
    "rope_frequencies": [
        (freq_doubled_exponent, "off by a factor of 2: 2 * (2i) / d", True),
        (freq_i_not_2i, "it uses i instead of 2i", True),
        (freq_positive_exponent, "the exponent has the wrong sign", True),
        (freq_one_per_dimension, "one frequency per PAIR", True),
        (freq_from_one, "the frequencies start at i = 1", True),
    ],
    "apply_rope": [
        (rope_rotate_half, "rotate-half pairing", True),
        (rope_seed_simplified, "written back as [all first | all second]", True),
        (rope_negative_angle, "the rotation goes the wrong way", True),
        (rope_positions_reversed, "the positions are reversed", True),
        (rope_ignores_positions, "the positions argument is ignored", True),
        (rope_doubled_exponent, "off by a factor of 2 (2 * 2i)", True),
        (rope_in_place, "changed its input x in place", True),
        (rope_sin_times_x, "the sine term must multiply the rotated partner", True),
        (rope_float64_output, "instead of torch.float32; the task asks for the dtype "
                              "of x", True),
        (rope_bfloat16_positions, "4095, 4096, 5000] has", True),
        (rope_cache_of_2048, "4095, 4096, 5000] has", True),
        (rope_shifts_positions, "changed its input positions in place", True),
        (rope_float32_always, "instead of torch.float64; the task asks for the dtype "
                              "of x", True),
    ],
    "interleaved_to_half_weights": [
        (weights_whole_matrix, "instead of inside each head", True),
        (weights_reverse_direction, "the conversion the other way", True),
        (weights_columns, "the columns were reordered instead of the rows", True),
        (weights_bias_left_alone, "a bias is part of the query", True),
        (weights_head_dim_from_width, "head_dim was taken from the input width",
         True),
        (weights_in_place, "changed its input w in place", True),
        (weights_float32, "a converted checkpoint keeps the dtype", True),
        (weights_through_numpy, "rows, bfloat16) raised TypeError", True),
    ],
}

CALLS_LIBRARY = {
    "rope_frequencies": [freq_calls_library, freq_imported_from_library],
    "apply_rope": [rope_calls_library, rope_imported_from_library],
    "interleaved_to_half_weights": [weights_calls_library,
                                    weights_imported_from_library],
}
