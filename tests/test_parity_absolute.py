"""Parity of the absolute-position and RoPE code with independent implementations.

Each test compares ``course_lib`` with a peer library that was written by other people
for other purposes: PyTorch's fused attention, Hugging Face ``transformers`` (XLM,
RoFormer, Llama, GPT-NeoX, Bloom) and ``rotary-embedding-torch``. Agreement with them
is what pins the conventions (which dimensions pair up, where sin and cos go, the sign
of the rotation, where the bias is added).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib import (
    RotaryEmbedding,
    alibi_bias_bloom_style,
    apply_rope,
    causal_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)

transformers = pytest.importorskip("transformers")


def _randn(gen: torch.Generator, *shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


# --- attention ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b", "h", "lq", "lk", "d"), [(2, 3, 5, 5, 8), (1, 4, 3, 7, 16), (2, 1, 1, 6, 4)]
)
def test_sdpa_matches_torch_with_float_bias_and_bool_mask(gen, b, h, lq, lk, d):
    q, k, v = (
        _randn(gen, b, h, lq, d),
        _randn(gen, b, h, lk, d),
        _randn(gen, b, h, lk, d),
    )
    bias = _randn(gen, h, lq, lk)
    mask = causal_mask(lq, lk)

    ours, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)

    ours, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)

    # Both at once: torch takes a single float mask, -inf where not allowed.
    ours, _ = scaled_dot_product_attention(q, k, v, bias=bias, mask=mask)
    combined = bias.masked_fill(~mask, float("-inf"))[None]  # (1, H, lq, lk)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=combined)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_sdpa_causal_matches_torch_is_causal(gen):
    q, k, v = (_randn(gen, 2, 2, 6, 8) for _ in range(3))
    ours, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(6))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


# --- sinusoidal -----------------------------------------------------------------------


@pytest.mark.parametrize(("n_pos", "dim"), [(128, 64), (50, 6), (7, 2), (300, 512)])
def test_sinusoidal_matches_xlm(n_pos, dim):
    # XLM writes sin into the even columns and cos into the odd ones: the paper's
    # interleaved layout, so no conversion is needed.
    from transformers.models.xlm.modeling_xlm import create_sinusoidal_embeddings

    theirs = create_sinusoidal_embeddings(n_pos, dim, torch.empty(n_pos, dim))
    ours = sinusoidal_encoding(n_pos, dim)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("n_pos", "dim"), [(64, 32), (20, 8)])
def test_sinusoidal_concat_matches_roformer_table(n_pos, dim):
    # RoFormer's (Marian's) table is "identical to XLM except features are not
    # interleaved": [sin | cos], our layout="concat".
    from transformers.models.roformer.modeling_roformer import (
        RoFormerSinusoidalPositionalEmbedding,
    )

    theirs = RoFormerSinusoidalPositionalEmbedding(n_pos, dim).create_weight()
    ours = sinusoidal_encoding(n_pos, dim, layout="concat")
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    assert (sinusoidal_encoding(n_pos, dim) - theirs).abs().max() > 0.5


# --- RoPE: rotate-half ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "head_dim", "seq", "offset", "base"),
    [(4, 16, 9, 0, 10000.0), (2, 64, 33, 5, 10000.0), (3, 8, 4, 100, 500000.0)],
)
def test_half_matches_hf_llama(gen, heads, head_dim, seq, offset, base):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = LlamaConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    q, k = _randn(gen, 2, heads, seq, head_dim), _randn(gen, 2, heads, seq, head_dim)
    positions = torch.arange(offset, offset + seq)  # (seq,)
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None].expand(2, -1))
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)

    # HF computes the angles in float32; positions up to ~130 cost a few ulps.
    tol = dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        apply_rope(q, positions, base=base, convention="half"), q_hf, **tol
    )
    torch.testing.assert_close(
        apply_rope(k, positions, base=base, convention="half"), k_hf, **tol
    )
    module = RotaryEmbedding(head_dim, base=base, convention="half", max_seq_len=4)
    torch.testing.assert_close(module(q, positions), q_hf, **tol)
    # The interleaved convention is a different function: parity is not an accident.
    assert (apply_rope(q, positions, base=base) - q_hf).abs().max() > 1e-2


def test_partial_rotary_half_matches_hf_gpt_neox(gen):
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import (
        GPTNeoXRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    heads, head_dim, seq = 4, 32, 12
    config = GPTNeoXConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
        },
    )
    q, k = _randn(gen, 2, heads, seq, head_dim), _randn(gen, 2, heads, seq, head_dim)
    positions = torch.arange(7, 7 + seq)
    cos, sin = GPTNeoXRotaryEmbedding(config)(q, positions[None].expand(2, -1))
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)

    rope = RotaryEmbedding(head_dim, rotary_dim=8, convention="half")
    torch.testing.assert_close(rope(q, positions), q_hf, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rope(k, positions), k_hf, atol=1e-5, rtol=1e-5)


# --- RoPE: interleaved ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("head_dim", "seq", "offset", "base"),
    [(16, 10, 0, 10000.0), (64, 40, 3, 10000.0), (8, 5, 0, 100.0)],
)
def test_interleaved_matches_rotary_embedding_torch(gen, head_dim, seq, offset, base):
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    theirs = rotary_embedding_torch.RotaryEmbedding(dim=head_dim, theta=base)
    x = _randn(gen, 2, 3, seq, head_dim)  # (batch, heads, seq, head_dim); seq_dim=-2
    expected = theirs.rotate_queries_or_keys(x, offset=offset)
    positions = torch.arange(offset, offset + seq)
    torch.testing.assert_close(
        apply_rope(x, positions, base=base), expected, atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        RotaryEmbedding(head_dim, base=base)(x, positions),
        expected,
        atol=1e-5,
        rtol=1e-5,
    )


def test_partial_interleaved_matches_rotary_embedding_torch(gen):
    # rotary-embedding-torch with dim < head_dim rotates the first `dim` features.
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    theirs = rotary_embedding_torch.RotaryEmbedding(dim=8)
    x = _randn(gen, 2, 3, 11, 32)
    expected = theirs.rotate_queries_or_keys(x)
    ours = RotaryEmbedding(32, rotary_dim=8)(x)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("head_dim", "seq", "offset"), [(16, 10, 0), (64, 24, 6)])
def test_interleaved_matches_hf_roformer(gen, head_dim, seq, offset):
    from transformers.models.roformer.modeling_roformer import (
        RoFormerSelfAttention,
        RoFormerSinusoidalPositionalEmbedding,
    )

    table = RoFormerSinusoidalPositionalEmbedding(offset + seq, head_dim)
    with torch.no_grad():
        table.weight.copy_(table.create_weight())
    sinusoidal_pos = table(torch.Size((1, seq)), past_key_values_length=offset)
    sinusoidal_pos = sinusoidal_pos[None, None]  # (1, 1, seq, head_dim) = [sin | cos]
    q, k = _randn(gen, 2, 3, seq, head_dim), _randn(gen, 2, 3, seq, head_dim)
    q_rf, k_rf = RoFormerSelfAttention.apply_rotary_position_embeddings(
        sinusoidal_pos, q, k
    )
    positions = torch.arange(offset, offset + seq)
    torch.testing.assert_close(apply_rope(q, positions), q_rf, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(apply_rope(k, positions), k_rf, atol=1e-5, rtol=1e-5)


# --- ALiBi, Bloom form ----------------------------------------------------------------


@pytest.mark.parametrize("n_heads", [1, 4, 12, 16])
def test_alibi_bloom_style_matches_hf_bloom(n_heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    seq = 9
    theirs = build_alibi_tensor(
        torch.ones(1, seq, dtype=torch.long), n_heads, torch.float32
    )  # (H, 1, seq)
    ours = alibi_bias_bloom_style(n_heads, seq)  # (H, seq, seq)
    # Bloom rounds its slopes through float32 powers: equal to about one ulp.
    torch.testing.assert_close(
        ours, theirs.expand(n_heads, seq, seq), atol=1e-6, rtol=1e-6
    )


# --- converting an interleaved (Meta-style) checkpoint to HF Llama ----------------


def test_converted_interleaved_attention_matches_hf_llama_attention(gen):
    """A Meta-style attention (interleaved RoPE) equals HF ``LlamaAttention`` (rotate
    half) once W_q and W_k are converted with ``rope_interleaved_to_half_weights``."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaAttention,
        LlamaRotaryEmbedding,
    )

    from course_lib import rope_interleaved_to_half_weights

    heads, head_dim, seq, batch = 4, 8, 7, 2
    d_model = heads * head_dim
    config = LlamaConfig(
        hidden_size=d_model,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    config._attn_implementation = "eager"
    w_q, w_k, w_v, w_o = (_randn(gen, d_model, d_model) / d_model**0.5 for _ in "qkvo")
    x = _randn(gen, batch, seq, d_model)

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(batch, seq, heads, head_dim).transpose(1, 2)  # (B, H, S, D)

    q, k, v = split(x @ w_q.T), split(x @ w_k.T), split(x @ w_v.T)
    out, _ = scaled_dot_product_attention(
        apply_rope(q), apply_rope(k), v, mask=causal_mask(seq)
    )
    ours = out.transpose(1, 2).reshape(batch, seq, d_model) @ w_o.T  # (B, S, d_model)

    attention = LlamaAttention(config, layer_idx=0)
    with torch.no_grad():
        attention.q_proj.weight.copy_(
            rope_interleaved_to_half_weights(w_q, heads, head_dim)
        )
        attention.k_proj.weight.copy_(
            rope_interleaved_to_half_weights(w_k, heads, head_dim)
        )
        attention.v_proj.weight.copy_(w_v)
        attention.o_proj.weight.copy_(w_o)
    cos, sin = LlamaRotaryEmbedding(config)(
        x, torch.arange(seq)[None].expand(batch, -1)
    )
    float_mask = torch.zeros(1, 1, seq, seq).masked_fill(
        ~causal_mask(seq), float("-inf")
    )  # (1, 1, S, S)
    with torch.no_grad():
        theirs, _ = attention(
            x, position_embeddings=(cos, sin), attention_mask=float_mask
        )
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)

    # Loading the unconverted weights into HF Llama silently changes the outputs.
    with torch.no_grad():
        attention.q_proj.weight.copy_(w_q)
        attention.k_proj.weight.copy_(w_k)
        unconverted, _ = attention(
            x, position_embeddings=(cos, sin), attention_mask=float_mask
        )
    assert (unconverted - ours).abs().max() > 1e-3
