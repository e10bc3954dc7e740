"""ALiBi causal attention: course_lib against SDPA variants, flex_attention,
x-transformers and a naive matmul-softmax-matmul, at (2, 8, L, 64)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib import (
    ALiBi,
    alibi_attention,
    alibi_bias,
    alibi_flex_attention,
    scaled_dot_product_attention,
)

SIZES = [{"seq": 1024}, {"seq": 2048}]
QUICK_SIZES = [{"seq": 16}]
BASELINE = "SDPA is_causal=True, no bias (floor)"
B, H, D = 2, 8, 64
XT_FLASH = "x-transformers Attend (flash=True: SDPA path)"
XT_MATH = "x-transformers Attend (flash=False)"


def _qkv(seq: int):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, seq, D, generator=g) for _ in range(3))


def _floor(seq):
    q, k, v = _qkv(seq)
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _course(seq):
    q, k, v = _qkv(seq)
    return lambda: alibi_attention(q, k, v, causal=True)


def _cached_4d(seq):
    q, k, v = _qkv(seq)
    alibi = ALiBi(H, causal=True)
    alibi(seq)  # build the cache once, as a model does

    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=alibi(seq))


def _mask_3d(seq):
    q, k, v = _qkv(seq)
    bias = alibi_bias(H, seq, causal=True)  # (H, S, S): SDPA falls back to math
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def _naive(seq):
    q, k, v = _qkv(seq)
    bias = alibi_bias(H, seq, causal=True)
    return lambda: scaled_dot_product_attention(q, k, v, bias=bias)[0]


def _flex(seq):
    q, k, v = _qkv(seq)
    return lambda: alibi_flex_attention(q, k, v, causal=True)  # compiled


def _x_transformers(seq, flash: bool):
    from x_transformers.attend import Attend
    from x_transformers.x_transformers import AlibiPositionalBias

    q, k, v = _qkv(seq)
    rel = AlibiPositionalBias(heads=H)
    attend = Attend(causal=True, flash=flash)

    def run():
        return attend(q, k, v, attn_bias=rel(seq, seq))[0]

    return run


CASES = {
    "SDPA is_causal=True, no bias (floor)": _floor,
    "course_lib alibi_attention (SDPA, cached 4-D mask)": _course,
    "SDPA + cached 4-D ALiBi mask (course_lib ALiBi module)": _cached_4d,
    "SDPA + 3-D (H, S, S) mask": _mask_3d,
    "course_lib alibi_flex_attention (compiled, score_mod)": _flex,
    XT_FLASH: lambda seq: _x_transformers(seq, True),
    XT_MATH: lambda seq: _x_transformers(seq, False),
    "naive matmul-softmax-matmul (course_lib reference)": _naive,
}


def speedup_vs_x_transformers(name: str, kw: dict, timings: dict) -> str:
    """How many times faster than the faster x-transformers path in the same run."""
    best = min(timings[XT_FLASH].median_s, timings[XT_MATH].median_s)
    return f"{best / timings[name].median_s:.2f}"


EXTRAS = [("speed-up over x-transformers (faster path)", speedup_vs_x_transformers)]
