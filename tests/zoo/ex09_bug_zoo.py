"""Bug zoo of exercise 9: the notebook's buggy functions (which the graders must
reject as "still the buggy version"), the other wrong fixes reported in the same
repositories, and correct fixes written in several styles.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too.
"""

from __future__ import annotations

import math

import torch

import course_lib

# --- fixed_rope_cos_sin


def cos_sin_buggy(positions, head_dim, dtype):
    """The notebook's buggy tables (EleutherAI/gpt-neox#1003): all in ``dtype``."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    inv_freq = inv_freq.to(dtype)
    t = positions.to(dtype)
    freqs = t[:, None] * inv_freq[None, :]
    return freqs.cos(), freqs.sin()


def cos_sin_float32(positions, head_dim, dtype):
    """Hugging Face's fix: float32 frequencies and positions, cast at the end."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def cos_sin_float64_loop(positions, head_dim, dtype):
    cos = torch.empty(len(positions), head_dim // 2, dtype=torch.float64)
    sin = torch.empty_like(cos)
    for s, p in enumerate(positions.tolist()):
        for i in range(head_dim // 2):
            angle = p * 10000.0 ** (-2 * i / head_dim)
            cos[s, i], sin[s, i] = math.cos(angle), math.sin(angle)
    return cos.to(dtype), sin.to(dtype)


def cos_sin_polar(positions, head_dim, dtype):
    theta = torch.exp(
        -math.log(10000.0) * torch.arange(0, head_dim, 2, dtype=torch.float64)
        / head_dim
    )
    z = torch.polar(torch.ones(len(positions), head_dim // 2, dtype=torch.float64),
                    positions.double()[:, None] * theta)
    return z.real.to(dtype), z.imag.to(dtype)


def cos_sin_frequencies_cast(positions, head_dim, dtype):
    """inv_freq rounded to dtype (transformers#25681, sglang-jax#1472), product in
    float32."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq.to(dtype).float()
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def cos_sin_positions_cast(positions, head_dim, dtype):
    """positions made with type_as of a low-precision tensor."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = positions.to(dtype).float()[:, None] * inv_freq
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def cos_sin_float32_output(positions, head_dim, dtype):
    """Right values, but float32 tables (transformers#24261)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    return freqs.cos(), freqs.sin()


def cos_sin_swapped(positions, head_dim, dtype):
    cos, sin = cos_sin_float32(positions, head_dim, dtype)
    return sin, cos


def cos_sin_calls_library(positions, head_dim, dtype):
    angles = course_lib.rope_angles(positions, head_dim)
    return angles.cos().to(dtype), angles.sin().to(dtype)


# --- fixed_decode_position_ids


def decode_ids_buggy(attention_mask, n_new):
    """The notebook's buggy ids (unslothai/unsloth#3699): one cache_position."""
    batch, total = attention_mask.shape
    cache_position = torch.arange(total - n_new, total)
    return cache_position.expand(batch, n_new)


def decode_ids_hf(attention_mask, n_new):
    """Hugging Face's prepare_inputs_for_generation, with padding set to 0."""
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids = position_ids.masked_fill(attention_mask == 0, 0)
    return position_ids[:, -n_new:]


def decode_ids_loop(attention_mask, n_new):
    batch, total = attention_mask.shape
    out = torch.zeros(batch, n_new, dtype=torch.long)
    for b in range(batch):
        count = 0
        for t in range(total):
            real = bool(attention_mask[b, t])
            if t >= total - n_new:
                out[b, t - (total - n_new)] = count if real else 0
            count += int(real)
    return out


def decode_ids_padding_count(attention_mask, n_new):
    """Column index minus the padding before it (left padding only)."""
    mask = attention_mask.long()
    total = mask.shape[1]
    padding_before = (1 - mask).cumsum(dim=1)  # (batch, total)
    ids = (torch.arange(total) - padding_before) * mask
    return ids[:, total - n_new:]


def decode_ids_restart(attention_mask, n_new):
    new = attention_mask[:, -n_new:].long()
    return (new.cumsum(-1) - 1) * new


def decode_ids_one_based(attention_mask, n_new):
    mask = attention_mask.long()
    return (mask.cumsum(-1) * mask)[:, -n_new:]


def decode_ids_minus_one(attention_mask, n_new):
    return (attention_mask.long().cumsum(-1) - 1)[:, -n_new:]


def decode_ids_whole_row(attention_mask, n_new):
    mask = attention_mask.long()
    return (mask.cumsum(-1) - 1) * mask


def decode_ids_calls_library(attention_mask, n_new):
    return course_lib.position_ids_from_attention_mask(attention_mask)[:, -n_new:]


# --- fixed_sliding_window_mask


def window_buggy(q_len, k_len, window):
    """The notebook's buggy mask (transformers#41228 before the fix)."""
    offset = k_len - q_len
    blocked = torch.ones(q_len, k_len, dtype=torch.bool).triu(offset + 1)
    blocked = blocked.tril(offset + window)
    return ~blocked


def window_triangles(q_len, k_len, window):
    """Transformers#41228 after the fix: block the future and the far past."""
    offset = k_len - q_len
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(offset + 1)
    far = torch.ones(q_len, k_len, dtype=torch.bool).tril(offset - window)
    return ~(future | far)


def window_loop(q_len, k_len, window):
    out = torch.zeros(q_len, k_len, dtype=torch.bool)
    for i in range(q_len):
        pos = i + k_len - q_len
        for j in range(max(0, pos - window + 1), pos + 1):
            out[i, j] = True
    return out


def window_one_too_many(q_len, k_len, window):
    """window + 1 keys (transformers#29623, mlx-lm#390)."""
    offset = k_len - q_len
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(offset + 1)
    far = torch.ones(q_len, k_len, dtype=torch.bool).tril(offset - window - 1)
    return ~(future | far)


def window_queries_first(q_len, k_len, window):
    back = torch.arange(q_len)[:, None] - torch.arange(k_len)[None, :]
    return (back >= 0) & (back < window)


def window_two_sided(q_len, k_len, window):
    """flash-attention window_size=(w - 1, w - 1) (transformers#39408)."""
    back = (torch.arange(q_len)[:, None] + k_len - q_len) - torch.arange(k_len)[None, :]
    return back.abs() < window


def window_float(q_len, k_len, window):
    return window_loop(q_len, k_len, window).float()


def window_calls_library(q_len, k_len, window):
    causal = course_lib.causal_mask(q_len, k_len)
    far = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len - window)
    return causal & ~far


CORRECT = {
    "fixed_rope_cos_sin": [cos_sin_float32, cos_sin_float64_loop, cos_sin_polar],
    "fixed_decode_position_ids": [decode_ids_hf, decode_ids_loop,
                                  decode_ids_padding_count],
    "fixed_sliding_window_mask": [window_triangles, window_loop],
}

WRONG = {
    "fixed_rope_cos_sin": [
        (cos_sin_buggy, "still the buggy version: the angles p * theta_i are "
                        "computed in float16", True),
        (cos_sin_frequencies_cast, "frequencies theta_i are rounded", True),
        (cos_sin_positions_cast, "the positions are rounded to", True),
        (cos_sin_float32_output, "the task asks for the model's dtype", True),
        (cos_sin_swapped, "cos and sin are swapped", True),
    ],
    "fixed_decode_position_ids": [
        (decode_ids_buggy, "still the buggy version: every row gets the same "
                           "positions", True),
        (decode_ids_restart, "restart at 0 with every call", True),
        (decode_ids_one_based, "start at 1", True),
        (decode_ids_minus_one, "padding columns get -1", True),
        (decode_ids_whole_row, "has the wrong shape", True),
    ],
    "fixed_sliding_window_mask": [
        (window_buggy, "still the buggy version: the window's diagonal is ADDED",
         True),
        (window_one_too_many, "each query sees window + 1 keys", True),
        (window_queries_first, "the LAST q_len", True),
        (window_two_sided, "the window is two-sided", True),
        (window_float, "should be a boolean tensor", True),
    ],
}

CALLS_LIBRARY = {
    "fixed_rope_cos_sin": cos_sin_calls_library,
    "fixed_decode_position_ids": decode_ids_calls_library,
    "fixed_sliding_window_mask": window_calls_library,
}
