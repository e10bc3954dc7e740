"""Bug zoo of exercise 8: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import course_lib

# --- da_rescale: correct


def rescale_ratio(distance, w, v):
    return (1 + torch.exp(v)) / (1 + torch.exp(v - w * distance))


def rescale_sigmoid(distance, w, v):
    return (1 + torch.exp(v)) * torch.sigmoid(w * distance - v)


def rescale_softplus(distance, w, v):
    return torch.exp(F.softplus(v) - F.softplus(v - w * distance))


def rescale_logsigmoid(distance, w, v):
    """log R_hat = softplus(v) + log sigmoid(w R - v)."""
    return torch.exp(F.softplus(v) + F.logsigmoid(w * distance - v))


def _stable(distance, w, v):
    def softplus(x):
        return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))

    return torch.exp(softplus(v) - softplus(v - w * distance))


# --- da_rescale: wrong


def rescale_sign_flipped(distance, w, v):
    return (1 + torch.exp(v)) / (1 + torch.exp(v + w * distance))


def rescale_no_numerator(distance, w, v):
    return 1 / (1 + torch.exp(v - w * distance))


def rescale_w_v_swapped(distance, w, v):
    return (1 + torch.exp(w)) / (1 + torch.exp(w - v * distance))


def rescale_math_exp(distance, w, v):
    """Python's math.exp: fails for tensors with more than one element."""
    return (1 + math.exp(v)) / (1 + torch.exp(v - w * distance))


def rescale_exponent_reversed(distance, w, v):
    return (1 + torch.exp(v)) / (1 + torch.exp(w * distance - v))


def rescale_clamped_at_one(distance, w, v):
    """Reads "R_hat lies between 1 and 1 + e^v" as a clamp: wrong for w < 0."""
    return _stable(distance, w, v).clamp(min=1.0)


def rescale_calls_library(distance, w, v):
    return course_lib.da_rescale(distance, w, v)


# --- da_attention: correct


def _distance(q_len, k_len=None):
    k_len = k_len or q_len
    pos = torch.arange(q_len) + k_len - q_len  # queries last
    return (pos[:, None] - torch.arange(k_len)[None, :]).abs().float()  # (Lq, Lk)


def _future(q_len, k_len):
    pos = torch.arange(q_len) + k_len - q_len
    return torch.arange(k_len)[None, :] > pos[:, None]  # (Lq, Lk)


def attention_plain(q, k, v, w, v_bias, causal=False):
    q_len, k_len = q.shape[2], k.shape[2]
    r_hat = _stable(
        _distance(q_len, k_len), w[:, None, None], v_bias[:, None, None]
    )
    scores = torch.relu(q @ k.transpose(-1, -2)) * r_hat / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(_future(q_len, k_len), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def attention_scaled_first(q, k, v, w, v_bias, *, causal=False):
    """Scale before the ReLU (the same, since sqrt(d) > 0), einsum, a list result,
    the mask as a large negative number."""
    scores = F.relu(torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5)
    r_hat = rescale_softplus(
        _distance(q.shape[2], k.shape[2]), w.view(-1, 1, 1), v_bias.view(-1, 1, 1)
    )
    logits = scores * r_hat
    if causal:
        logits = logits - 1e9 * _future(q.shape[2], k.shape[2])
    weights = logits.softmax(-1)
    return [torch.einsum("bhqk,bhkd->bhqd", weights, v), weights]


def attention_loop(q, k, v, w, v_bias, causal=False):
    """Loops over queries and keys, written from the equation, in float64."""
    b, h, lq, d = q.shape
    lk = k.shape[2]
    logits = torch.full((b, h, lq, lk), float("-inf"), dtype=torch.float64)
    for i in range(lq):
        pos = i + lk - lq
        for j in range(lk):
            if causal and j > pos:
                continue
            r_hat = _stable(torch.tensor(float(abs(pos - j)), dtype=torch.float64),
                            w.double(), v_bias.double())  # (H,)
            s = (q[:, :, i].double() * k[:, :, j].double()).sum(-1)  # (B, H)
            logits[:, :, i, j] = torch.relu(s) * r_hat / math.sqrt(d)
    weights = logits.softmax(-1)
    return (weights @ v.double()).float(), weights.float()


# --- da_attention: wrong


def _weights(
    q, k, w, v_bias, *, relu=True, rescale=rescale_ratio, scale=True, distance=None
):
    raw = q @ k.transpose(-1, -2)
    if relu:
        raw = torch.relu(raw)
    d = _distance(q.shape[2]) if distance is None else distance
    r_hat = rescale(d, w[:, None, None], v_bias[:, None, None])
    scores = raw * r_hat
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    return scores.softmax(-1)


def attention_no_rescale(q, k, v, w, v_bias):
    weights = torch.softmax(
        torch.relu(q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5, -1
    )
    return weights @ v, weights


def attention_no_relu(q, k, v, w, v_bias):
    weights = _weights(q, k, w, v_bias, relu=False)
    return weights @ v, weights


def attention_sign_flipped(q, k, v, w, v_bias):
    weights = _weights(q, k, w, v_bias, rescale=rescale_sign_flipped)
    return weights @ v, weights


def attention_not_scaled(q, k, v, w, v_bias):
    weights = _weights(q, k, w, v_bias, scale=False)
    return weights @ v, weights


def attention_rescale_after_softmax(q, k, v, w, v_bias):
    plain = torch.softmax(torch.relu(q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5, -1)
    r_hat = rescale_ratio(
        _distance(q.shape[2]), w[:, None, None], v_bias[:, None, None]
    )
    weights = plain * r_hat
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v, weights


def attention_signed_distance(q, k, v, w, v_bias):
    pos = torch.arange(q.shape[2]).float()
    weights = _weights(q, k, w, v_bias, distance=pos[:, None] - pos[None, :])
    return weights @ v, weights


def attention_output_only(q, k, v, w, v_bias):
    return attention_plain(q, k, v, w, v_bias)[0]


def attention_rescale_clamped(q, k, v, w, v_bias, causal=False):
    """R_hat clamped at 1 ("between 1 and 1 + e^v"): right only for w >= 0 (issue 33:
    once caught by the hidden grader only)."""
    q_len, k_len = q.shape[2], k.shape[2]
    r_hat = _stable(_distance(q_len, k_len), w[:, None, None], v_bias[:, None, None])
    scores = torch.relu(q @ k.transpose(-1, -2)) * r_hat.clamp(min=1.0)
    scores = scores / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(_future(q_len, k_len), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def attention_scaled_by_value_width(q, k, v, w, v_bias, causal=False):
    """Divides by sqrt of the VALUE width: right only when it equals head_dim."""
    q_len, k_len = q.shape[2], k.shape[2]
    raw = torch.relu(q @ k.transpose(-1, -2))
    r_hat = _stable(_distance(q_len, k_len), w[:, None, None], v_bias[:, None, None])
    scores = raw * r_hat / math.sqrt(v.shape[-1])
    if causal:
        scores = scores.masked_fill(_future(q_len, k_len), float("-inf"))
    weights = scores.softmax(-1)
    return weights @ v, weights


def attention_queries_first(q, k, v, w, v_bias, causal=False):
    """Distances and mask as if the queries were the FIRST positions: right only
    when q_len == k_len (no cache)."""
    q_len, k_len = q.shape[2], k.shape[2]
    pos = torch.arange(q_len)
    distance = (pos[:, None] - torch.arange(k_len)[None, :]).abs().float()
    r_hat = _stable(distance, w[:, None, None], v_bias[:, None, None])
    scores = torch.relu(q @ k.transpose(-1, -2)) * r_hat / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(
            torch.arange(k_len)[None, :] > pos[:, None], float("-inf")
        )
    weights = scores.softmax(-1)
    return weights @ v, weights


def attention_mask_ignores_cache(q, k, v, w, v_bias, causal=False):
    """Right distances, but the causal mask is triu(1) of (q_len, k_len)."""
    q_len, k_len = q.shape[2], k.shape[2]
    r_hat = _stable(_distance(q_len, k_len), w[:, None, None], v_bias[:, None, None])
    scores = torch.relu(q @ k.transpose(-1, -2)) * r_hat / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(q_len, k_len, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ v, weights


def attention_mask_before_relu(q, k, v, w, v_bias, causal=False):
    """Masks the raw scores with -inf, then the ReLU turns them into 0."""
    q_len, k_len = q.shape[2], k.shape[2]
    raw = q @ k.transpose(-1, -2)
    if causal:
        raw = raw.masked_fill(_future(q_len, k_len), float("-inf"))
    r_hat = _stable(_distance(q_len, k_len), w[:, None, None], v_bias[:, None, None])
    weights = (torch.relu(raw) * r_hat / math.sqrt(q.shape[-1])).softmax(-1)
    return weights @ v, weights


def attention_ignores_causal(q, k, v, w, v_bias, causal=False):
    """Accepts causal but never masks."""
    return attention_plain(q, k, v, w, v_bias)


def attention_calls_library(q, k, v, w, v_bias):
    return course_lib.da_attention(q, k, v, w, v_bias)


# --- found by the red team: correct styles and bugs the first graders missed


def rescale_float64(distance, w, v):
    """In float64 (the answer keeps that dtype)."""
    return _stable(distance.double(), w.double(), v.double())


def rescale_literal_float64(distance, w, v):
    """The literal ratio in float64: fine up to v ~ 709, then inf / inf."""
    return rescale_ratio(distance.double(), w.double(), v.double())


def rescale_distance_clipped(distance, w, v):
    """Distances clipped at 100: only a small |w| shows it."""
    return _stable(distance.clamp(max=100), w, v)


def rescale_scales_distance_in_place(distance, w, v):
    """Right for a 0-d w, but the caller's distances are multiplied by w."""
    if w.ndim:
        return rescale_ratio(distance, w, v)
    return (1 + torch.exp(v)) / (1 + torch.exp(v - distance.mul_(w)))


def attention_causal(q, k, v, w, v_bias, causal=False):
    """Always masks, whatever causal says."""
    return attention_plain(q, k, v, w, v_bias, causal=True)


CORRECT = {
    "da_rescale": [rescale_softplus, rescale_logsigmoid, rescale_float64],
    "da_attention": [attention_plain, attention_scaled_first, attention_loop],
}

WRONG = {
    "da_rescale": [
        (rescale_sign_flipped, "sign inside the exponential is flipped", True),
        (rescale_no_numerator, "numerator 1 + e^v is missing", True),
        (rescale_w_v_swapped, "w and v are swapped", True),
        (rescale_math_exp, "raised", True),
        (rescale_exponent_reversed, "exponent is w*distance - v", True),
        (rescale_clamped_at_one, "wrong entr", True),
        (rescale_distance_clipped, "tensor(0.004), tensor(0.5)) has", True),
        (rescale_scales_distance_in_place, "changed its input distance in place",
         True),
        # issue 19: the literal formula, in float32 and float64, overflows for large v
        (rescale_ratio, "e^v overflows for large v", True),
        (rescale_sigmoid, "e^v overflows for large v", True),
        (rescale_literal_float64, "e^v overflows for large v", True),
    ],
    "da_attention": [
        (attention_no_rescale, "R_hat is not applied", True),
        (attention_no_relu, "ReLU is missing", True),
        (attention_sign_flipped, "sign inside R_hat's exponential", True),
        (attention_not_scaled, "not scaled", True),
        (attention_rescale_after_softmax, "after the softmax", True),
        (attention_signed_distance, "the distance is signed", True),
        (attention_output_only, "should return a pair (out, weights)", True),
        (attention_scaled_by_value_width, "wrong entr", True),
        (attention_causal, "a causal mask was applied", True),
        # issue 19: the cache (queries last) and the causal mask
        (attention_queries_first, "taken as the FIRST q_len positions", True),
        (attention_mask_ignores_cache, "the causal mask ignores the cache", True),
        (attention_mask_before_relu, "the mask is applied before the ReLU", True),
        (attention_ignores_causal, "keys after their query are not masked", True),
        (attention_rescale_clamped, "R_hat is not applied", True),
    ],
}

CALLS_LIBRARY = {
    "da_rescale": rescale_calls_library,
    "da_attention": attention_calls_library,
}
