"""FlexAttention helpers shared by the biases that use it (ALiBi, DA-Transformer):
the compiled kernel, and the block mask of causal attention with queries last."""

from __future__ import annotations

import functools

import torch

__all__ = ["causal_block_mask", "compiled_flex_attention"]


@functools.cache
def compiled_flex_attention():
    """``flex_attention`` compiled once per process (static shapes)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=8)
def causal_block_mask(q_len: int, k_len: int, device: torch.device):
    from torch.nn.attention.flex_attention import create_block_mask

    offset = k_len - q_len

    def keys_up_to_query(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return create_block_mask(keys_up_to_query, None, None, q_len, k_len, device=device)
