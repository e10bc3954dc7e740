"""Bug zoo of exercise 7: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import course_lib

# --- rel_shift: correct


def shift_pad_reshape(x):
    *lead, q_len, k_len = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, k_len + 1, q_len)
    return padded[..., 1:, :].reshape(*lead, q_len, k_len)


def shift_gather(x):
    """An explicit gather; the unspecified entries are clamped to the last column."""
    q_len, k_len = x.shape[-2:]
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    col = (j + q_len - 1 - i).clamp(max=k_len - 1)
    return x.gather(-1, col.expand(x.shape))


def shift_loop_zeros(x):
    """A loop over rows that leaves zeros in the unspecified entries."""
    q_len, k_len = x.shape[-2:]
    out = torch.zeros_like(x)
    for i in range(q_len):
        width = i + k_len - q_len + 1
        out[..., i, :width] = x[..., i, q_len - 1 - i : q_len - 1 - i + width]
    return out


# --- rel_shift: wrong


def shift_identity(x):
    return x.clone()


def shift_pad_right(x):
    *lead, q_len, k_len = x.shape
    padded = F.pad(x, (0, 1)).reshape(*lead, k_len + 1, q_len)
    return padded[..., 1:, :].reshape(*lead, q_len, k_len)


def shift_drop_last_row(x):
    *lead, q_len, k_len = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, k_len + 1, q_len)
    return padded[..., :-1, :].reshape(*lead, q_len, k_len)


def shift_wrong_direction(x):
    q_len, k_len = x.shape[-2:]
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    return x.gather(-1, ((j - (q_len - 1 - i)) % k_len).expand(x.shape))


def shift_ascending(x):
    q_len, k_len = x.shape[-2:]
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    return x.gather(-1, ((i + k_len - q_len - j) % k_len).expand(x.shape))


def shift_only_2d(x):
    q_len, k_len = x.shape
    padded = F.pad(x, (1, 0)).reshape(k_len + 1, q_len)
    return padded[1:].reshape(q_len, k_len)


def shift_only_4d(x):
    batch, heads, q_len, k_len = x.shape
    padded = F.pad(x, (1, 0)).view(batch, heads, k_len + 1, q_len)
    return padded[:, :, 1:].reshape(batch, heads, q_len, k_len)


def shift_calls_library(x):
    return course_lib.rel_shift(x)


# --- rel_attention_scores: correct


def _future(q_len, k_len):
    return torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)


def scores_shift(q, k, r, u, v):
    dim = q.shape[-1]
    content = (q + u[:, None, :]) @ k.transpose(-1, -2)  # (B, H, Lq, Lk)
    position = shift_pad_reshape((q + v[:, None, :]) @ r.transpose(-1, -2))
    scores = (content + position) / math.sqrt(dim)
    return scores.masked_fill(_future(q.shape[2], k.shape[2]), float("-inf"))


def scores_four_terms(q, k, r, u, v):
    """Eq. (3) term by term: (a) q.k, (b) q.r, (c) u.k, (d) v.r, with a gather."""
    q_len, k_len, dim = q.shape[2], k.shape[2], q.shape[3]
    a = q @ k.transpose(-1, -2)
    c = torch.einsum("hd,bhkd->bhk", u, k)[:, :, None, :]
    b = torch.einsum("bhqd,hkd->bhqk", q, r)
    d = torch.einsum("hd,hkd->hk", v, r)[None, :, None, :]
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    col = (j + q_len - 1 - i).clamp(max=k_len - 1).expand(*b.shape)
    position = (b + d).gather(-1, col)
    scores = (a + c + position) / dim**0.5
    return torch.where(_future(q_len, k_len), -math.inf, scores)


# --- rel_attention_scores: wrong


def scores_unmasked(q, k, r, u, v):
    content = (q + u[:, None, :]) @ k.transpose(-1, -2)
    position = shift_pad_reshape((q + v[:, None, :]) @ r.transpose(-1, -2))
    return (content + position) / math.sqrt(q.shape[-1])


def scores_u_v_swapped(q, k, r, u, v):
    return scores_shift(q, k, r, v, u)


def scores_not_scaled(q, k, r, u, v):
    return scores_shift(q, k, r, u, v) * math.sqrt(q.shape[-1])


def scores_mask_queries_first(q, k, r, u, v):
    scores = scores_unmasked(q, k, r, u, v)
    q_len, k_len = q.shape[2], k.shape[2]
    upper = torch.ones(q_len, k_len, dtype=torch.bool).triu(1)
    return scores.masked_fill(upper, float("-inf"))


def scores_not_shifted(q, k, r, u, v):
    content = (q + u[:, None, :]) @ k.transpose(-1, -2)
    position = (q + v[:, None, :]) @ r.transpose(-1, -2)
    scores = (content + position) / math.sqrt(q.shape[-1])
    return scores.masked_fill(_future(q.shape[2], k.shape[2]), float("-inf"))


def scores_r_ascending(q, k, r, u, v):
    return scores_shift(q, k, r.flip(1), u, v)


def scores_masked_with_zero(q, k, r, u, v):
    scores = scores_unmasked(q, k, r, u, v)
    return scores.masked_fill(_future(q.shape[2], k.shape[2]), 0.0)


def scores_calls_library(q, k, r, u, v):
    return course_lib.rel_attention_scores(q, k, r, u, v)


# --- found by the red team: correct styles and bugs the first graders missed


def shift_roll_rows(x):
    """Row by row with torch.roll (other garbage entries: they are not compared)."""
    q_len = x.shape[-2]
    out = torch.empty_like(x)
    for i in range(q_len):
        out[..., i, :] = torch.roll(x[..., i, :], -(q_len - 1 - i), dims=-1)
    return out


def shift_into_x(x):
    """Right shift, written back into the caller's x."""
    return x.copy_(shift_pad_reshape(x.clone()))


def scores_einsum_where(q, k, r, u, v):
    """einsum for both products, torch.where for the mask."""
    q_len, k_len, dim = q.shape[2], k.shape[2], q.shape[3]
    content = torch.einsum("bhid,bhjd->bhij", q + u[None, :, None], k)
    position = shift_pad_reshape(
        torch.einsum("bhid,hjd->bhij", q + v[None, :, None], r)
    )
    scores = (content + position) / math.sqrt(dim)
    return torch.where(_future(q_len, k_len), float("-inf"), scores)


def scores_bias_added_to_q_in_place(q, k, r, u, v):
    """Right scores, but q += u changes the caller's queries."""
    q_len, k_len, dim = q.shape[2], k.shape[2], q.shape[3]
    q += u[:, None, :]
    content = q @ k.transpose(-2, -1)
    q += (v - u)[:, None, :]
    position = shift_pad_reshape(q @ r.transpose(-2, -1))
    scores = (content + position) / math.sqrt(dim)
    return scores.masked_fill(_future(q_len, k_len), float("-inf"))


# --- rel_shift_bidirectional: correct


def bishift_pad_reshape(x):
    """The causal recipe on the wider input, then the first k_len columns."""
    *lead, q_len, width = x.shape
    k_len = width - q_len + 1
    padded = F.pad(x, (1, 0)).reshape(*lead, width + 1, q_len)
    return padded[..., 1:, :].reshape(*lead, q_len, width)[..., :k_len]


def bishift_gather(x):
    """out[i, j] = x[i, j + q_len - 1 - i] as one gather."""
    q_len, width = x.shape[-2:]
    k_len = width - q_len + 1
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    return x.gather(-1, (j + q_len - 1 - i).expand(*x.shape[:-1], k_len))


def bishift_loop(x):
    """A loop over rows: row i is the slice starting at column q_len - 1 - i."""
    q_len, width = x.shape[-2:]
    k_len = width - q_len + 1
    rows = [x[..., i, q_len - 1 - i : q_len - 1 - i + k_len] for i in range(q_len)]
    return torch.stack(rows, dim=-2)


def bishift_unfold(x):
    """Sliding windows of length k_len over each row, window q_len - 1 - i for row i."""
    q_len, width = x.shape[-2:]
    k_len = width - q_len + 1
    windows = x.unfold(-1, k_len, 1)  # (..., Lq, Lq, Lk): window w starts at column w
    i = torch.arange(q_len)
    return windows[..., i, q_len - 1 - i, :]


# --- rel_shift_bidirectional: wrong (each one seen in ports of XLNet / Transformer-XL)


def bishift_xlnet_without_pad(x):
    """XLNet's rel_shift (reshape, drop the first row, reshape, slice) copied without
    its extra distance column: every row reads one column too far right."""
    *lead, q_len, width = x.shape
    k_len = width - q_len + 1
    y = x.reshape(*lead, width, q_len)[..., 1:, :]
    return y.reshape(*lead, q_len, width - 1)[..., :k_len]


def bishift_last_columns(x):
    *lead, q_len, width = x.shape
    k_len = width - q_len + 1
    padded = F.pad(x, (1, 0)).reshape(*lead, width + 1, q_len)
    return padded[..., 1:, :].reshape(*lead, q_len, width)[..., -k_len:]


def bishift_masked_like_causal(x):
    """Zeroes the keys after the query, as after the causal shift."""
    out = bishift_gather(x)
    q_len, k_len = out.shape[-2:]
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)
    return out.masked_fill(future, 0.0)


def bishift_k_len_off_by_one(x):
    """Takes k_len = width - q_len."""
    *lead, q_len, width = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, width + 1, q_len)
    return padded[..., 1:, :].reshape(*lead, q_len, width)[..., : width - q_len]


def bishift_all_columns(x):
    """Returns the shifted rows with all k_len + q_len - 1 columns."""
    *lead, q_len, width = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, width + 1, q_len)
    return padded[..., 1:, :].reshape(*lead, q_len, width)


def bishift_calls_library(x):
    return course_lib.rel_shift_bidirectional(x)


def bishift_imported_from_library(x):
    from course_lib.transformer_xl import rel_shift_bidirectional

    return rel_shift_bidirectional(x)


CORRECT = {
    "rel_shift": [shift_pad_reshape, shift_gather, shift_loop_zeros, shift_roll_rows],
    "rel_attention_scores": [scores_shift, scores_four_terms, scores_einsum_where],
    "rel_shift_bidirectional": [
        bishift_pad_reshape, bishift_gather, bishift_loop, bishift_unfold,
    ],
}

WRONG = {
    "rel_shift": [
        (shift_identity, "nothing is shifted", True),
        (shift_pad_right, "padded on the right", True),
        (shift_drop_last_row, "off by one row", True),
        (shift_wrong_direction, "shifted the wrong way", True),
        (shift_ascending, "reads column c as distance c", True),
        (shift_only_2d, "raised ValueError", True),
        (shift_only_4d, "raised ValueError", True),
        (shift_into_x, "changed its input x in place", True),
    ],
    "rel_attention_scores": [
        (scores_unmasked, "should be -inf", True),
        (scores_u_v_swapped, "u and v are swapped", True),
        (scores_not_scaled, "not scaled", True),
        (scores_mask_queries_first, "queries are the LAST q_len", True),
        (scores_not_shifted, "position term is not realigned", True),
        (scores_r_ascending, "reads row c as distance c", True),
        (scores_masked_with_zero, "they must be -inf", True),
        (scores_bias_added_to_q_in_place, "changed its input q in place", True),
    ],
    "rel_shift_bidirectional": [
        (bishift_xlnet_without_pad, "XLNet's shift", True),
        (bishift_last_columns, "LAST k_len columns", True),
        (bishift_masked_like_causal, "zeroed as in the causal shift", True),
        (bishift_k_len_off_by_one, "not width - q_len", True),
        (bishift_all_columns, "as many as x has", True),
    ],
}

CALLS_LIBRARY = {
    "rel_shift": shift_calls_library,
    "rel_attention_scores": scores_calls_library,
    "rel_shift_bidirectional": [bishift_calls_library, bishift_imported_from_library],
}
