"""Bug zoo of exercise 2: correct variants the graders must accept and wrong
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
from course_lib import position_ids_from_attention_mask, sinusoidal_encoding

# --- sinusoidal_encoding: correct


def pe_exp_log(max_len, d_model):
    """The common float32 recipe: frequencies through exp(-log(10000) 2i / d)."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    two_i = torch.arange(0, d_model, 2).float()
    div = torch.exp(two_i * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe


def pe_loops_float64(max_len, d_model):
    """The paper's two equations entry by entry (float64 output is fine)."""
    pe = [[0.0] * d_model for _ in range(max_len)]
    for p in range(max_len):
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            pe[p][2 * i] = math.sin(angle)
            pe[p][2 * i + 1] = math.cos(angle)
    return torch.tensor(pe, dtype=torch.float64)


def pe_stack(max_len, d_model):
    omega = 1.0 / 10000.0 ** (torch.arange(d_model // 2) * 2 / d_model)
    angles = torch.outer(torch.arange(max_len).float(), omega)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(max_len, d_model)


# --- sinusoidal_encoding: wrong


def pe_seed_exponent(max_len, d_model):
    """The loop of the seed text: i already steps by 2 and is doubled again."""
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            denominator = np.power(10000, 2 * i / d_model)
            pe[pos, i] = np.sin(pos / denominator)
            pe[pos, i + 1] = np.cos(pos / denominator)
    return torch.from_numpy(pe).float()


def pe_concatenated(max_len, d_model):
    x = pe_exp_log(max_len, d_model)
    return torch.cat([x[:, 0::2], x[:, 1::2]], dim=-1)


def pe_i_not_2i(max_len, d_model):
    omega = 10000.0 ** (-torch.arange(d_model // 2) / d_model)
    angles = torch.arange(max_len)[:, None] * omega
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)


def pe_sin_cos_swapped(max_len, d_model):
    x = pe_exp_log(max_len, d_model)
    return x.view(max_len, -1, 2).flip(-1).reshape(max_len, d_model)


def pe_positive_exponent(max_len, d_model):
    omega = 10000.0 ** (torch.arange(0, d_model, 2) / d_model)
    angles = torch.arange(max_len)[:, None] * omega
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)


def pe_positions_from_one(max_len, d_model):
    return pe_exp_log(max_len + 1, d_model)[1:]


def pe_base_1000(max_len, d_model):
    omega = 1000.0 ** (-torch.arange(0, d_model, 2) / d_model)
    angles = torch.arange(max_len)[:, None] * omega
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)


def pe_numpy(max_len, d_model):
    return pe_exp_log(max_len, d_model).numpy()


# --- position_ids_from_attention_mask: correct


def ids_cumsum(mask):
    m = mask.long()
    return (m.cumsum(-1) - 1) * m


def ids_loops(mask):
    out = torch.zeros(mask.shape, dtype=torch.long)
    for b in range(mask.shape[0]):
        count = 0
        for t in range(mask.shape[1]):
            if bool(mask[b, t]):
                out[b, t] = count
                count += 1
    return out


def ids_where_int32(mask):
    real = mask.bool()
    ids = torch.cumsum(real.int(), dim=1, dtype=torch.int32) - 1
    return torch.where(real, ids, torch.zeros_like(ids))


# --- position_ids_from_attention_mask: wrong


def ids_arange_times_mask(mask):
    return torch.arange(mask.shape[1]) * mask.long()


def ids_from_one(mask):
    m = mask.long()
    return m.cumsum(-1) * m


def ids_cumsum_only(mask):
    return mask.long().cumsum(-1)


def ids_minus_one_on_padding(mask):
    return mask.long().cumsum(-1) - 1


def ids_clamped(mask):
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def ids_hugging_face(mask):
    m = mask.long()
    return (m.cumsum(-1) - 1).masked_fill(m == 0, 1)


def ids_ignore_mask(mask):
    return torch.arange(mask.shape[1]).expand(mask.shape[0], -1)


def ids_float(mask):
    return ids_cumsum(mask).float()


# --- calls the library


def pe_calls_library(max_len, d_model):
    return course_lib.sinusoidal_encoding(max_len, d_model)


def pe_imported_from_library(max_len, d_model):
    return sinusoidal_encoding(max_len, d_model)


def ids_calls_library(mask):
    return course_lib.position_ids_from_attention_mask(mask)


def ids_imported_from_library(mask):
    return position_ids_from_attention_mask(mask)


# --- found by the red team: correct styles and bugs the first graders missed


def pe_numpy_float64(max_len, d_model):
    """NumPy inside, handed back as a float64 tensor (accepted: float64 is allowed)."""
    pos = np.arange(max_len)[:, None]
    angles = pos / 10000 ** (np.arange(0, d_model, 2)[None, :] / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
    return torch.tensor(pe)


def pe_bfloat16_positions(max_len, d_model):
    """Positions rounded through bfloat16: exact only up to 256, so the short tables
    pass and a table longer than 257 rows does not."""
    omega = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(1e4) / d_model))
    pos = torch.arange(max_len, dtype=torch.bfloat16).float()[:, None]
    return torch.stack((torch.sin(pos * omega), torch.cos(pos * omega)), -1).flatten(-2)


def pe_half(max_len, d_model):
    return pe_exp_log(max_len, d_model).half()


def ids_since_first_real_token(mask):
    """Slots counted from the first real token: right for left and right padding,
    wrong as soon as padding sits between real tokens."""
    m = mask.long()
    first = m.argmax(dim=-1, keepdim=True)  # (batch, 1)
    return (torch.arange(m.shape[-1]) - first).clamp(min=0) * m


def ids_into_the_mask(mask):
    """Right ids, written into the caller's (integer) mask."""
    if mask.dtype == torch.bool:
        return ids_cumsum(mask)
    ids = (mask.cumsum(dim=-1) - 1) * mask
    return mask.copy_(ids)


def ids_one_minus_mask(mask):
    """1 - mask marks the padding: torch refuses to subtract a bool tensor, so a bool
    mask raises (issue 33: once caught by the hidden grader only)."""
    return (mask.cumsum(-1) - 1).masked_fill((1 - mask).bool(), 0)


def ids_int8(mask):
    """Right ids for short rows, but int8 wraps around beyond 127 tokens."""
    return ids_cumsum(mask).to(torch.int8)


CORRECT = {
    "sinusoidal_encoding": [pe_exp_log, pe_loops_float64, pe_stack, pe_numpy_float64],
    "position_ids_from_attention_mask": [ids_cumsum, ids_loops, ids_where_int32],
}

WRONG = {
    "sinusoidal_encoding": [
        (pe_seed_exponent, "off by a factor of 2: with the column index 2i", True),
        (pe_concatenated, "concatenated [sin | cos] layout", True),
        (pe_i_not_2i, "uses i instead of 2i", True),
        (pe_sin_cos_swapped, "sin and cos are swapped", True),
        (pe_positive_exponent, "the exponent has the wrong sign", True),
        (pe_positions_from_one, "the positions start at 1", True),
        (pe_base_1000, "wrong entr", True),
        (pe_numpy, "should return a torch.Tensor", True),
        (pe_bfloat16_positions, "sinusoidal_encoding(300, 4) has", True),
        (pe_half, "too coarse for these numbers", True),
    ],
    "position_ids_from_attention_mask": [
        (ids_arange_times_mask, "only works for right padding", True),
        (ids_from_one, "counted from 1", True),
        (ids_cumsum_only, "counted from 1", True),
        (ids_minus_one_on_padding, "gives -1 on left padding", True),
        (ids_clamped, "right padding keeps the last position", True),
        (ids_hugging_face, "padding gets position 1", True),
        (ids_ignore_mask, "the mask is ignored", True),
        (ids_float, "should hold integers", True),
        (ids_since_first_real_token, "padding in between included", True),
        (ids_into_the_mask, "changed its input mask in place", True),
        (ids_int8, "should be a torch.long tensor, got torch.int8", True),
        (ids_one_minus_mask, "True, False, False, False]])) raised RuntimeError",
         True),
    ],
}

CALLS_LIBRARY = {
    "sinusoidal_encoding": [pe_calls_library, pe_imported_from_library],
    "position_ids_from_attention_mask": [ids_calls_library,
                                         ids_imported_from_library],
}
