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
    return ((1 + torch.exp(v)) / (1 + torch.exp(v - w * distance))).clamp(min=1.0)


def rescale_calls_library(distance, w, v):
    return course_lib.da_rescale(distance, w, v)


# --- da_attention: correct


def _distance(q_len):
    pos = torch.arange(q_len)
    return (pos[:, None] - pos[None, :]).abs().float()  # (L, L)


def attention_plain(q, k, v, w, v_bias):
    r_hat = rescale_ratio(
        _distance(q.shape[2]), w[:, None, None], v_bias[:, None, None]
    )
    scores = torch.relu(q @ k.transpose(-1, -2)) * r_hat / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def attention_scaled_first(q, k, v, w, v_bias):
    """Scale before the ReLU (the same, since sqrt(d) > 0), einsum, a list result."""
    scores = F.relu(torch.einsum("bhqd,bhkd->bhqk", q, k) / q.shape[-1] ** 0.5)
    r_hat = rescale_sigmoid(
        _distance(q.shape[2]), w.view(-1, 1, 1), v_bias.view(-1, 1, 1)
    )
    weights = (scores * r_hat).softmax(-1)
    return [torch.einsum("bhqk,bhkd->bhqd", weights, v), weights]


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


def attention_scaled_by_value_width(q, k, v, w, v_bias):
    """Divides by sqrt of the VALUE width: right only when it equals head_dim."""
    raw = torch.relu(q @ k.transpose(-1, -2))
    r_hat = rescale_ratio(
        _distance(q.shape[2]), w[:, None, None], v_bias[:, None, None]
    )
    weights = (raw * r_hat / math.sqrt(v.shape[-1])).softmax(-1)
    return weights @ v, weights


def attention_calls_library(q, k, v, w, v_bias):
    return course_lib.da_attention(q, k, v, w, v_bias)


# --- found by the red team: correct styles and bugs the first graders missed


def rescale_float64(distance, w, v):
    """In float64 (the answer keeps that dtype)."""
    return rescale_ratio(distance.double(), w.double(), v.double())


def rescale_distance_clipped(distance, w, v):
    """Distances clipped at 100: only a small |w| shows it."""
    return rescale_ratio(distance.clamp(max=100), w, v)


def rescale_scales_distance_in_place(distance, w, v):
    """Right for a 0-d w, but the caller's distances are multiplied by w."""
    if w.ndim:
        return rescale_ratio(distance, w, v)
    return (1 + torch.exp(v)) / (1 + torch.exp(v - distance.mul_(w)))


def attention_causal(q, k, v, w, v_bias):
    q_len = q.shape[2]
    r_hat = rescale_ratio(_distance(q_len), w[:, None, None], v_bias[:, None, None])
    scores = torch.relu(q @ k.transpose(-1, -2)) * r_hat / math.sqrt(q.shape[-1])
    future = torch.ones(q_len, q_len, dtype=torch.bool).triu(1)
    weights = scores.masked_fill(future, float("-inf")).softmax(-1)
    return weights @ v, weights


CORRECT = {
    "da_rescale": [rescale_ratio, rescale_sigmoid, rescale_softplus,
                   rescale_float64],
    "da_attention": [attention_plain, attention_scaled_first],
}

WRONG = {
    "da_rescale": [
        (rescale_sign_flipped, "sign inside the exponential is flipped", True),
        (rescale_no_numerator, "numerator 1 + e^v is missing", True),
        (rescale_w_v_swapped, "w and v are swapped", True),
        (rescale_math_exp, "raised", True),
        (rescale_exponent_reversed, "exponent is w*distance - v", True),
        (rescale_clamped_at_one, "wrong entr", False),
        (rescale_distance_clipped, "tensor(0.004), tensor(0.5)) has", False),
        (rescale_scales_distance_in_place, "changed its input distance in place",
         True),
    ],
    "da_attention": [
        (attention_no_rescale, "R_hat is not applied", True),
        (attention_no_relu, "ReLU is missing", True),
        (attention_sign_flipped, "sign inside R_hat's exponential", True),
        (attention_not_scaled, "not scaled", True),
        (attention_rescale_after_softmax, "after the softmax", True),
        (attention_signed_distance, "the distance is signed", True),
        (attention_output_only, "should return a pair (out, weights)", True),
        (attention_scaled_by_value_width, "wrong entr", False),
        (attention_causal, "a causal mask was applied", True),
    ],
}

CALLS_LIBRARY = {
    "da_rescale": rescale_calls_library,
    "da_attention": attention_calls_library,
}
