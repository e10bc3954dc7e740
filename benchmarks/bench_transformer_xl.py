"""Transformer-XL relative scores: rel_shift (pad and reshape) against an index
gather and a naive form that materialises one relative embedding per (i, j) pair."""

from __future__ import annotations

import math

import torch

from course_lib import rel_attention_scores
from course_lib.transformer_xl import rel_attention_scores_gather

SIZES = [{"q_len": 512, "k_len": 1024}, {"q_len": 1024, "k_len": 2048}]
QUICK_SIZES = [{"q_len": 8, "k_len": 16}]
BASELINE = "course_lib rel_attention_scores (rel_shift)"
B, H, D = 1, 8, 64


def _inputs(q_len: int, k_len: int):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, q_len, D, generator=g)
    k = torch.randn(B, H, k_len, D, generator=g)
    r = torch.randn(H, k_len, D, generator=g)
    u = torch.randn(H, D, generator=g)
    v = torch.randn(H, D, generator=g)
    return q, k, r, u, v


def _shift(q_len, k_len):
    args = _inputs(q_len, k_len)
    return lambda: rel_attention_scores(*args)


def _gather(q_len, k_len):
    args = _inputs(q_len, k_len)
    return lambda: rel_attention_scores_gather(*args)


def _naive(q_len, k_len):
    q, k, r, u, v = _inputs(q_len, k_len)
    offset = k_len - q_len
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    # r's row c holds distance k_len-1-c; pair (i, j) needs distance (i+offset) - j.
    row = (k_len - 1 - (i + offset - j)).clamp(0, k_len - 1)  # (Lq, Lk)
    mask = j > i + offset

    def run():
        r_ij = r[:, row]  # (H, Lq, Lk, D): one embedding per pair
        ac = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
        bd = torch.einsum("bhid,hijd->bhij", q + v[:, None], r_ij)
        return ((ac + bd) / math.sqrt(D)).masked_fill(mask, float("-inf"))

    return run


CASES = {
    "course_lib rel_attention_scores (rel_shift)": _shift,
    "explicit index gather": _gather,
    "naive (materialise (H, Lq, Lk, D) embeddings)": _naive,
}
