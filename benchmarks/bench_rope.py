"""RoPE: course_lib against Hugging Face Llama, rotary-embedding-torch and the naive
complex form, plus the cost of merely producing an output of the same size (a clone)
and of writing into memory that already exists (a copy)."""

from __future__ import annotations

import torch

from course_lib import RotaryEmbedding, apply_rope

SIZES = [{"shape": [4, 8, 1024, 64]}, {"shape": [1, 32, 4096, 128]}]
QUICK_SIZES = [{"shape": [1, 2, 16, 8]}]
BASELINE = "clone() of the same tensor"
COPY = "copy_() into a preallocated tensor"
HF = "HF Llama apply_rotary_pos_emb (per tensor: q+k call / 2)"


def _x(shape: list[int]) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _course_reference(convention: str):
    def build(shape):
        x = _x(shape)
        return lambda: apply_rope(x, convention=convention)

    return build


def _course_module(convention: str):
    def build(shape):
        x = _x(shape)
        rope = RotaryEmbedding(shape[-1], convention=convention, max_seq_len=shape[-2])
        return lambda: rope(x)

    return build


def _hf_llama(shape):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = _x(shape)
    d, n = shape[-1], shape[-2]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.outer(torch.arange(n).float(), inv_freq)  # (n, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)[None]  # (1, n, d), as LlamaRotaryEmbedding
    cos, sin = emb.cos(), emb.sin()
    # HF rotates q and k together; we pass one tensor as both, and PER_CALL halves
    # the time so the table is per rotated tensor like every other row.
    return lambda: apply_rotary_pos_emb(x, x, cos, sin)


def _rotary_embedding_torch(shape):
    from rotary_embedding_torch import RotaryEmbedding as RET

    x = _x(shape)
    rope = RET(dim=shape[-1], cache_if_possible=True)
    rope.rotate_queries_or_keys(x)  # fill its frequency cache
    return lambda: rope.rotate_queries_or_keys(x)


def _naive_complex(shape):
    x = _x(shape)
    d, n = shape[-1], shape[-2]

    def run():
        theta = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
        angles = torch.outer(torch.arange(n).float(), theta)  # (n, d/2)
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2))
        return torch.view_as_real(
            z * torch.polar(torch.ones_like(angles), angles)
        ).flatten(-2)

    return run


def _course_module_out(convention: str):
    def build(shape):
        x = _x(shape)
        rope = RotaryEmbedding(shape[-1], convention=convention, max_seq_len=shape[-2])
        out = torch.empty_like(x)  # e.g. the key cache a model writes into
        return lambda: rope(x, out=out)

    return build


def _course_module_offset(shape):
    x = _x(shape)
    rope = RotaryEmbedding(shape[-1], max_seq_len=shape[-2] + 1000)
    positions = torch.arange(1000, 1000 + shape[-2])  # decoding after 1000 tokens
    return lambda: rope(x, positions)


def _clone(shape):
    x = _x(shape)
    return lambda: x.clone()


def _copy(shape):
    x = _x(shape)
    out = torch.empty_like(x)
    return lambda: out.copy_(x)


CASES = {
    "course_lib apply_rope interleaved (reference form)": _course_reference(
        "interleaved"
    ),
    "course_lib apply_rope half (reference form)": _course_reference("half"),
    "course_lib RotaryEmbedding interleaved (cached)": _course_module("interleaved"),
    "course_lib RotaryEmbedding half (cached)": _course_module("half"),
    "course_lib RotaryEmbedding interleaved, positions 1000+": _course_module_offset,
    "course_lib RotaryEmbedding interleaved, out= preallocated": _course_module_out(
        "interleaved"
    ),
    "course_lib RotaryEmbedding half, out= preallocated": _course_module_out("half"),
    HF: _hf_llama,
    "rotary-embedding-torch rotate_queries_or_keys": _rotary_embedding_torch,
    "naive complex form (factors recomputed)": _naive_complex,
    "clone() of the same tensor": _clone,
    COPY: _copy,
}
PER_CALL = {HF: 2}


def _numel(kw: dict) -> int:
    n = 1
    for s in kw["shape"]:
        n *= s
    return n


def gbps(name: str, kw: dict, timings: dict) -> str:
    """Bytes read + written per second and per tensor (one input, one output)."""
    return f"{2 * 4 * _numel(kw) / timings[name].median_s / 1e9:.1f}"


def vs_copy(name: str, kw: dict, timings: dict) -> str:
    """Time against a copy into a preallocated tensor (no allocation, no compute)."""
    return f"{timings[name].median_s / timings[COPY].median_s:.2f}"


EXTRAS = [("× copy_()", vs_copy), ("GB/s (read + write)", gbps)]
