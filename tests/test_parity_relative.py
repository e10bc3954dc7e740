"""Parity of ALiBi and T5 buckets with independent implementations.

Peers (pinned test dependencies): Hugging Face ``transformers`` (Bloom
``build_alibi_tensor`` and ``_get_alibi_slopes``; T5 ``T5Attention``) and
``x-transformers`` (``AlibiPositionalBias``, ``RelativePositionBias``).

Conventions, checked here rather than assumed:

* Bloom adds ``+m_h * j`` (key position only). It differs from our ``-m_h |i - j|`` by
  ``m_h * i``, a constant per query row, so the two agree after softmax under a causal
  mask and disagree without one.
* x-transformers ``AlibiPositionalBias(i, j)`` is ``-m_h |i' - j|`` with queries the
  last ``i`` of ``j`` positions: identical to ``alibi_bias``.
* HF T5 passes ``memory_position - context_position`` = key - query, like us.
* x-transformers ``RelativePositionBias._relative_position_bucket`` is also called with
  key - query (``k_pos - q_pos``) and negates it internally
  (``n = -relative_position``); its ``causal`` flag is our ``not bidirectional``.
"""

from __future__ import annotations

import pytest
import torch
from transformers import T5Config
from transformers.models.bloom.modeling_bloom import (
    _get_alibi_slopes,
    build_alibi_tensor,
)
from transformers.models.t5.modeling_t5 import T5Attention
from x_transformers.x_transformers import AlibiPositionalBias, RelativePositionBias

from course_lib import (
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    t5_relative_position_bucket,
)

# ------------------------------------------------------------------ ALiBi vs Bloom


@pytest.mark.parametrize("n_heads", range(1, 129))
def test_slopes_match_bloom(n_heads: int) -> None:
    bloom = _get_alibi_slopes(n_heads, torch.device("cpu"))
    torch.testing.assert_close(alibi_slopes(n_heads), bloom, rtol=1e-6, atol=0)


@pytest.mark.parametrize("n_heads", [1, 5, 8, 12, 16, 30])
def test_bloom_alibi_tensor_is_plus_slope_times_key(n_heads: int) -> None:
    seq = 9
    alibi = build_alibi_tensor(torch.ones(2, seq), n_heads, torch.float32)
    alibi = alibi.view(2, n_heads, 1, seq)
    slopes = alibi_slopes(n_heads)
    torch.testing.assert_close(alibi[:, :, 0, 1], slopes.expand(2, -1))
    want = slopes[:, None] * torch.arange(seq)  # +m_h * j
    torch.testing.assert_close(alibi[:, :, 0], want.expand(2, -1, -1))


def _softmax(scores: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return (scores + bias).softmax(-1)


@pytest.mark.parametrize("n_heads,seq", [(4, 6), (12, 16), (7, 11)])
def test_softmax_equals_bloom_under_causal_mask(gen, n_heads: int, seq: int) -> None:
    scores = torch.randn(2, n_heads, seq, seq, generator=gen)
    bloom = build_alibi_tensor(torch.ones(2, seq), n_heads, torch.float32)
    bloom = bloom.view(2, n_heads, 1, seq)  # broadcast over queries
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    neg = torch.zeros(seq, seq).masked_fill(~causal, float("-inf"))
    theirs = _softmax(scores, bloom + neg)
    ours = _softmax(scores, alibi_bias(n_heads, seq, causal=True))
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    # without the causal mask the +m*j form rewards late keys: different attention
    assert (
        _softmax(scores, bloom) - _softmax(scores, alibi_bias(n_heads, seq))
    ).abs().max() > 1e-2


def test_softmax_equals_bloom_with_left_padding(gen) -> None:
    """Bloom numbers real tokens 0, 1, ... after left padding (cumsum of the mask);
    on the real tokens its attention equals ours on the unpadded sequence."""
    n_heads, pad, real = 6, 3, 7
    seq = pad + real
    mask = torch.cat([torch.zeros(pad), torch.ones(real)])[None]  # (1, seq)
    scores = torch.randn(1, n_heads, seq, seq, generator=gen)
    bloom = build_alibi_tensor(mask, n_heads, torch.float32).view(1, n_heads, 1, seq)
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril() & mask.bool()[:, None, :]
    neg = torch.zeros(seq, seq).masked_fill(~allowed[0], float("-inf"))
    theirs = _softmax(scores, bloom + neg)[:, :, pad:, pad:]
    ours = _softmax(scores[:, :, pad:, pad:], alibi_bias(n_heads, real, causal=True))
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------ ALiBi vs x-transformers


@pytest.mark.parametrize("n_heads", [1, 2, 3, 6, 8, 12, 20, 32, 48])
def test_alibi_matches_x_transformers(n_heads: int) -> None:
    peer = AlibiPositionalBias(heads=n_heads)
    torch.testing.assert_close(alibi_slopes(n_heads), peer.slopes.flatten())
    for q_len, k_len in [(5, 5), (1, 9), (4, 11)]:
        fresh = AlibiPositionalBias(heads=n_heads)  # its cache keys on lengths
        theirs = fresh(q_len, k_len)  # (heads, q_len, k_len)
        assert theirs.shape == (n_heads, q_len, k_len)
        torch.testing.assert_close(alibi_bias(n_heads, q_len, k_len), theirs)


# ------------------------------------------------------------------- T5 vs HF


T5_SETTINGS = [
    (True, 32, 128),
    (False, 32, 128),
    (True, 8, 16),
    (False, 8, 16),
    (True, 64, 256),
    (False, 16, 50),
    (True, 10, 33),
    (False, 6, 7),
    # settings where a float64 logarithm would move a bucket edge (e.g. -64 with
    # 18 buckets): only the float32 order of Mesh TensorFlow / HF matches here
    (True, 18, 128),
    (True, 38, 16),
    (True, 72, 32),
]


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", T5_SETTINGS)
def test_t5_buckets_match_hf(bidirectional, num_buckets, max_distance) -> None:
    rel = torch.arange(-4 * max_distance, 4 * max_distance + 1)
    ours = t5_relative_position_bucket(
        rel,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    theirs = T5Attention._relative_position_bucket(
        rel,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("q_len,k_len", [(7, 7), (1, 12), (3, 40)])
def test_t5_bias_module_matches_hf_compute_bias(is_decoder, q_len, k_len) -> None:
    config = T5Config(
        d_model=16,
        d_kv=4,
        num_heads=4,
        relative_attention_num_buckets=10,
        relative_attention_max_distance=24,
        is_decoder=is_decoder,
    )
    torch.manual_seed(0)
    hf = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    ours = T5RelativeBias(4, 10, 24, bidirectional=not is_decoder)
    with torch.no_grad():
        ours.embedding.weight.copy_(hf.relative_attention_bias.weight)
    # HF: queries start at past_seen_tokens; ours: queries are the last q_len keys
    theirs = hf.compute_bias(q_len, k_len, past_seen_tokens=k_len - q_len)[0]
    torch.testing.assert_close(ours(q_len, k_len), theirs, rtol=0, atol=0)


# --------------------------------------------------------- T5 vs x-transformers


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", T5_SETTINGS)
def test_t5_buckets_match_x_transformers(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-4 * max_distance, 4 * max_distance + 1)  # key - query
    ours = t5_relative_position_bucket(
        rel,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    theirs = RelativePositionBias._relative_position_bucket(
        rel,
        causal=not bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("causal", [False, True])
def test_t5_bias_module_matches_x_transformers_module(causal: bool) -> None:
    torch.manual_seed(0)
    peer = RelativePositionBias(
        scale=1.0, causal=causal, num_buckets=12, max_distance=40, heads=3
    )
    ours = T5RelativeBias(3, 12, 40, bidirectional=not causal)
    with torch.no_grad():
        ours.embedding.weight.copy_(peer.relative_attention_bias.weight)
    for q_len, k_len in [(6, 6), (1, 50), (5, 9)]:
        torch.testing.assert_close(
            ours(q_len, k_len), peer(q_len, k_len), rtol=0, atol=0
        )
