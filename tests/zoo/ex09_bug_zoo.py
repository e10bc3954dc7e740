"""Bug zoo of exercise 9: the notebook's buggy functions (which the graders must
reject as "still the buggy version"), other wrong fixes, and correct fixes written
in several styles.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import course_lib

# --- fixed_sinusoidal_encoding


def sinusoid_buggy(max_len, d_model):
    """The notebook's buggy loop: i already steps by 2, and 2 * i doubles it."""
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            denominator = 10000 ** (2 * i / d_model)
            pe[pos, i] = math.sin(pos / denominator)
            pe[pos, i + 1] = math.cos(pos / denominator)
    return pe


def sinusoid_loop_fixed(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            denominator = 10000 ** (i / d_model)
            pe[pos, i] = math.sin(pos / denominator)
            pe[pos, i + 1] = math.cos(pos / denominator)
    return pe


def sinusoid_exp_log(max_len, d_model):
    """The PyTorch tutorial's form: float32 exp(-log(10000) * 2i / d)."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    div_term = torch.exp(
        torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def sinusoid_concat(max_len, d_model):
    angles = sinusoid_angles(max_len, d_model)
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


def sinusoid_angles(max_len, d_model):
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.arange(max_len, dtype=torch.float64)[:, None] * omega  # (L, d/2)


def sinusoid_swapped(max_len, d_model):
    angles = sinusoid_angles(max_len, d_model)
    return torch.stack((angles.cos(), angles.sin()), dim=-1).flatten(-2).float()


def sinusoid_positive_exponent(max_len, d_model):
    omega = 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * omega
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).float()


def sinusoid_calls_library(max_len, d_model):
    return course_lib.sinusoidal_encoding(max_len, d_model)


# --- fixed_alibi_slopes


def slopes_buggy(n_heads):
    """The notebook's buggy rule: right for powers of two only."""
    return torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])


def slopes_authors(n_heads):
    """The authors' recursive get_slopes."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_2(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = slopes_authors(2 * closest).tolist()[0::2][: n_heads - closest]
    return torch.tensor(power_of_2(closest) + extra)


def slopes_vectorised(n_heads):
    closest = 1 << (n_heads.bit_length() - 1)
    first = 2.0 ** (-8.0 * torch.arange(1, closest + 1) / closest)
    odd = torch.arange(n_heads - closest) * 2 + 1
    return torch.cat([first, 2.0 ** (-8.0 * odd / (2 * closest))]).float()


def slopes_round_up(n_heads):
    up = 1 << (n_heads - 1).bit_length()
    return torch.tensor([2 ** (-8 * (h + 1) / up) for h in range(n_heads)])


def slopes_reversed(n_heads):
    return slopes_authors(n_heads).flip(0)


def slopes_extra_from_second(n_heads):
    closest = 1 << (n_heads.bit_length() - 1)
    first = [2 ** (-8 * (h + 1) / closest) for h in range(closest)]
    doubled = [2 ** (-8 * (h + 1) / (2 * closest)) for h in range(2 * closest)]
    return torch.tensor(first + doubled[1::2][: n_heads - closest])


def slopes_calls_library(n_heads):
    return course_lib.alibi_slopes(n_heads)


# --- fixed_apply_rope


def _cos_sin(x, positions):
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    angles = positions[:, None].float() * inv_freq[None, :]  # (seq, d/2)
    return torch.cos(angles), torch.sin(angles)


def rope_buggy(x, positions):
    """The notebook's buggy RoPE: reads pairs (2i, 2i+1), writes [firsts | seconds]."""
    cos, sin = _cos_sin(x, positions)
    return torch.cat(
        [
            x[..., ::2] * cos - x[..., 1::2] * sin,
            x[..., ::2] * sin + x[..., 1::2] * cos,
        ],
        dim=-1,
    )


def rope_stack(x, positions):
    cos, sin = _cos_sin(x, positions)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def rope_complex(x, positions):
    """Meta LLaMA's formulation: pairs as complex numbers times e^(i m theta)."""
    cos, sin = _cos_sin(x, positions)
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    rotated = pairs * torch.complex(cos, sin)
    return torch.view_as_real(rotated).flatten(-2)


def rope_assign(x, positions):
    cos, sin = _cos_sin(x, positions)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def rope_half(x, positions):
    cos, sin = _cos_sin(x, positions)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def rope_clockwise(x, positions):
    return rope_stack(x, -positions)


def rope_ignores_positions(x, positions):
    return rope_stack(x, torch.arange(x.shape[-2]))


def rope_calls_library(x, positions):
    return course_lib.apply_rope(x, positions)


# --- fixed_rel_attention_scores


def _rel_shift(x):
    *lead, q_len, k_len = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, k_len + 1, q_len)
    return padded[..., 1:, :].reshape(*lead, q_len, k_len)


def scores_buggy(q, k, r, u, v):
    """The notebook's buggy version: no mask after rel_shift."""
    content = (q + u[:, None, :]) @ k.transpose(-1, -2)
    position = _rel_shift((q + v[:, None, :]) @ r.transpose(-1, -2))
    return (content + position) / math.sqrt(q.shape[-1])


def scores_fixed(q, k, r, u, v):
    q_len, k_len = q.shape[2], k.shape[2]
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)
    return scores_buggy(q, k, r, u, v).masked_fill(future, float("-inf"))


def scores_fixed_where(q, k, r, u, v):
    q_len, k_len = q.shape[2], k.shape[2]
    query = torch.arange(q_len)[:, None] + k_len - q_len
    keep = torch.arange(k_len)[None, :] <= query
    return torch.where(keep, scores_buggy(q, k, r, u, v), -torch.inf)


def scores_mask_queries_first(q, k, r, u, v):
    q_len, k_len = q.shape[2], k.shape[2]
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(1)
    return scores_buggy(q, k, r, u, v).masked_fill(future, float("-inf"))


def scores_mask_diagonal_too(q, k, r, u, v):
    q_len, k_len = q.shape[2], k.shape[2]
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len)
    return scores_buggy(q, k, r, u, v).masked_fill(future, float("-inf"))


def scores_large_negative(q, k, r, u, v):
    q_len, k_len = q.shape[2], k.shape[2]
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)
    return scores_buggy(q, k, r, u, v).masked_fill(future, -1e9)


def scores_calls_library(q, k, r, u, v):
    return course_lib.rel_attention_scores(q, k, r, u, v)


# --- fixed_position_ids


def ids_buggy(mask):
    """The notebook's buggy version: padding gets -1."""
    return torch.cumsum(mask, dim=1) * mask - 1


def ids_fixed(mask):
    mask = mask.long()
    return (mask.cumsum(dim=1) - 1) * mask


def ids_fixed_clamp(mask):
    return ((mask.long().cumsum(-1) - 1).clamp(min=0) * mask).long()


def ids_no_mask(mask):
    return mask.long().cumsum(dim=1) - 1


def ids_arange(mask):
    return torch.arange(mask.shape[1]).expand(mask.shape[0], -1).clone()


def ids_one_based(mask):
    mask = mask.long()
    return mask.cumsum(dim=1) * mask


def ids_float(mask):
    return ids_fixed(mask).float()


def ids_calls_library(mask):
    return course_lib.position_ids_from_attention_mask(mask)


# --- found by the red team: bugs the first graders missed


def rope_float64_output(x, positions):
    """Right values, but float64 angles promote a float32 x to float64."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * theta  # (seq, d/2)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angles.cos() - b * angles.sin(),
                        a * angles.sin() + b * angles.cos()), -1).flatten(-2)


def rope_into_x(x, positions):
    """Right rotation, written back into the caller's x."""
    return x.copy_(rope_stack(x, positions))


def rope_cache_of_2048(x, positions):
    """Angles cached for 2048 positions (wraps around beyond)."""
    return rope_stack(x, positions % 2048)


def ids_int16(mask):
    """Right ids for short rows; int16 wraps around beyond 32767 tokens."""
    return ids_fixed(mask).to(torch.int16)


def ids_into_the_mask(mask):
    """Right ids, written into the caller's integer mask."""
    if mask.dtype == torch.bool:
        return ids_fixed(mask)
    return mask.copy_((mask.cumsum(dim=1) - 1) * mask)


CORRECT = {
    "fixed_sinusoidal_encoding": [sinusoid_loop_fixed, sinusoid_exp_log],
    "fixed_alibi_slopes": [slopes_authors, slopes_vectorised],
    "fixed_apply_rope": [rope_stack, rope_complex, rope_assign],
    "fixed_rel_attention_scores": [scores_fixed, scores_fixed_where],
    "fixed_position_ids": [ids_fixed, ids_fixed_clamp],
}

WRONG = {
    "fixed_sinusoidal_encoding": [
        (
            sinusoid_buggy,
            "still the buggy version: the exponent is off by a factor of 2",
            True,
        ),
        (sinusoid_concat, "concatenated [sin | cos] layout", True),
        (sinusoid_swapped, "sin and cos are swapped", True),
        (sinusoid_positive_exponent, "the exponent has the wrong sign", True),
    ],
    "fixed_alibi_slopes": [
        (slopes_buggy, "still the buggy version: 2^(-8h/n) is only right", True),
        (slopes_round_up, "rounds DOWN", True),
        (slopes_reversed, "reversed order", True),
        (slopes_extra_from_second, "wrong entr", True),
    ],
    "fixed_apply_rope": [
        (rope_buggy, "still the buggy version", True),
        (rope_half, "rotate-half pairing", True),
        (rope_clockwise, "clockwise", True),
        (rope_ignores_positions, "positions argument is ignored", True),
        (rope_float64_output, "instead of torch.float32; the task asks for the dtype "
                              "of x", True),
        (rope_into_x, "changed its input x in place", True),
        (rope_cache_of_2048, "4096, 5000])) has", False),
    ],
    "fixed_rel_attention_scores": [
        (
            scores_buggy,
            "still the buggy version: the entries for keys after the "
            "query are not masked",
            True,
        ),
        (scores_mask_queries_first, "queries are the LAST q_len", True),
        (scores_mask_diagonal_too, "only keys after the query are masked", True),
        (scores_large_negative, "they must be -inf", True),
    ],
    "fixed_position_ids": [
        (ids_buggy, "still the buggy version: padding positions get -1", True),
        (ids_no_mask, "multiply by the mask AFTER subtracting 1", True),
        (ids_arange, "ignore the padding", True),
        (ids_one_based, "start at 1", True),
        (ids_float, "should hold integers", True),
        (ids_int16, "should be a torch.long tensor, got torch.int16", True),
        (ids_into_the_mask, "changed its input mask in place", True),
    ],
}

CALLS_LIBRARY = {
    "fixed_sinusoidal_encoding": sinusoid_calls_library,
    "fixed_alibi_slopes": slopes_calls_library,
    "fixed_apply_rope": rope_calls_library,
    "fixed_rel_attention_scores": scores_calls_library,
    "fixed_position_ids": ids_calls_library,
}
