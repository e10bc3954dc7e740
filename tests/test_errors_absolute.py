"""Bad input to the absolute-position and RoPE code fails with a message that teaches.

Every case checks the exception type and that the message names the function, the
argument and the value or shape that was received.
"""

from __future__ import annotations

import re

import pytest
import torch

from course_lib import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias_bloom_style,
    alibi_forms_softmax_gap,
    apply_rope,
    apply_rope_complex,
    causal_mask,
    interleaved_to_half_permutation,
    offset_matrix,
    permutation_matrix,
    permute_tokens,
    position_ids_from_attention_mask,
    rope_angles,
    rope_frequencies,
    rope_half_to_interleaved_weights,
    rope_interleaved_to_half_weights,
    scaled_dot_product_attention,
    self_attention,
    sincos_concat_to_interleaved,
    sincos_interleaved_to_concat,
    sinusoidal_encoding,
    symbolic_dot_product_depends_on_difference,
)

z = torch.zeros
CASES = [
    # attention.py
    (
        lambda: scaled_dot_product_attention(
            z(1, 2, 3, 4, dtype=torch.long), z(1, 2, 3, 4), z(1, 2, 3, 4)
        ),
        TypeError,
        ["scaled_dot_product_attention", "q", "torch.int64", "(1, 2, 3, 4)"],
    ),
    (
        lambda: scaled_dot_product_attention(
            z(1, 2, 3, 4), z(1, 2, 3, 5), z(1, 2, 3, 4)
        ),
        ValueError,
        ["scaled_dot_product_attention", "(1, 2, 3, 4)", "(1, 2, 3, 5)"],
    ),
    (
        lambda: scaled_dot_product_attention(z(2, 3, 4), z(2, 5, 4), z(2, 6, 4)),
        ValueError,
        ["scaled_dot_product_attention", "k and v", "(2, 5, 4)", "(2, 6, 4)"],
    ),
    (
        lambda: scaled_dot_product_attention(z(4), z(4), z(4)),
        ValueError,
        ["scaled_dot_product_attention", "q", "(4,)"],
    ),
    (
        lambda: scaled_dot_product_attention(
            z(1, 3, 4, 8), z(1, 3, 4, 8), z(1, 3, 4, 8), bias=z(2, 4, 4)
        ),
        ValueError,
        ["scaled_dot_product_attention", "bias", "(2, 4, 4)", "(1, 3, 4, 4)"],
    ),
    (
        lambda: scaled_dot_product_attention(
            z(3, 4, 8), z(3, 4, 8), z(3, 4, 8), mask=z(4, 4)
        ),
        TypeError,
        ["scaled_dot_product_attention", "mask", "torch.float32"],
    ),
    (
        lambda: scaled_dot_product_attention(
            z(3, 4, 8), z(3, 4, 8), z(3, 4, 8), bias=z(4, 4, dtype=torch.long)
        ),
        TypeError,
        ["scaled_dot_product_attention", "bias", "torch.int64"],
    ),
    (lambda: causal_mask(0), ValueError, ["causal_mask", "q_len", "0"]),
    (lambda: causal_mask(-2, 3), ValueError, ["causal_mask", "q_len", "-2"]),
    (lambda: causal_mask(3, 2), ValueError, ["causal_mask", "q_len=3", "k_len=2"]),
    (lambda: causal_mask(2.5), TypeError, ["causal_mask", "q_len", "2.5"]),
    (
        lambda: self_attention(z(3, 4, dtype=torch.long), z(4, 2), z(4, 2), z(4, 2)),
        TypeError,
        ["self_attention", "x", "torch.int64"],
    ),
    (
        lambda: self_attention(z(4), z(4, 2), z(4, 2), z(4, 2)),
        ValueError,
        ["self_attention", "x", "(4,)"],
    ),
    (
        lambda: self_attention(z(3, 4), z(5, 2), z(4, 2), z(4, 2)),
        ValueError,
        ["self_attention", "w_q", "(5, 2)", "d_model=4"],
    ),
    (
        lambda: self_attention(z(3, 4), z(4, 2), z(4, 3), z(4, 2)),
        ValueError,
        ["self_attention", "w_k", "(4, 2)", "(4, 3)"],
    ),
    (
        lambda: permutation_matrix([0, 0, 1]),
        ValueError,
        ["permutation_matrix", "perm", "[0, 0, 1]"],
    ),
    (lambda: permutation_matrix([]), ValueError, ["permutation_matrix", "perm", "0"]),
    (
        lambda: permutation_matrix(torch.tensor([0.0, 1.0])),
        TypeError,
        ["permutation_matrix", "perm", "torch.float32"],
    ),
    (
        lambda: permute_tokens(z(4, 2), [1, 0, 2]),
        ValueError,
        ["permute_tokens", "perm", "seq=4", "length 3"],
    ),
    # sinusoidal.py
    (
        lambda: sinusoidal_encoding(10, 7),
        ValueError,
        ["sinusoidal_encoding", "d_model=7"],
    ),
    (
        lambda: sinusoidal_encoding(0, 8),
        ValueError,
        ["sinusoidal_encoding", "max_len", "0"],
    ),
    (
        lambda: sinusoidal_encoding(-3, 8),
        ValueError,
        ["sinusoidal_encoding", "max_len", "-3"],
    ),
    (
        lambda: sinusoidal_encoding(10.0, 8),
        TypeError,
        ["sinusoidal_encoding", "max_len", "10.0"],
    ),
    (
        lambda: sinusoidal_encoding(10, 8, layout="sincos"),
        ValueError,
        ["sinusoidal_encoding", "layout", "'sincos'"],
    ),
    (
        lambda: sinusoidal_encoding(10, 8, base=1.0),
        ValueError,
        ["sinusoidal_encoding", "base", "1.0"],
    ),
    (
        lambda: sinusoidal_encoding(10, 8, base="10000"),
        TypeError,
        ["sinusoidal_encoding", "base", "'10000'"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(7),
        ValueError,
        ["SinusoidalPositionalEncoding", "d_model=7"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(8, layout="half"),
        ValueError,
        ["SinusoidalPositionalEncoding", "layout", "'half'"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(8)(z(1, 3, 6)),
        ValueError,
        ["SinusoidalPositionalEncoding.forward", "d_model=8", "(1, 3, 6)"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(8)(z(3, 8)),
        ValueError,
        ["SinusoidalPositionalEncoding.forward", "x", "(3, 8)"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(8)(z(1, 3, 8, dtype=torch.long)),
        TypeError,
        ["SinusoidalPositionalEncoding.forward", "x", "torch.int64"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(8)(z(1, 3, 8), z(3)),
        TypeError,
        ["SinusoidalPositionalEncoding.forward", "position_ids", "float32"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(8)(z(2, 3, 8), z(2, 4, dtype=torch.long)),
        ValueError,
        ["SinusoidalPositionalEncoding.forward", "(2, 4)", "(2, 3, 8)"],
    ),
    (
        lambda: SinusoidalPositionalEncoding(8)(z(1, 2, 8), torch.tensor([0, -1])),
        ValueError,
        ["SinusoidalPositionalEncoding.forward", "position_ids", "-1"],
    ),
    (
        lambda: LearnedPositionalEncoding(0, 4),
        ValueError,
        ["LearnedPositionalEncoding", "max_len", "0"],
    ),
    (
        lambda: LearnedPositionalEncoding(4, 4)(z(1, 5, 4)),
        ValueError,
        ["LearnedPositionalEncoding.forward", "max_len=4", "5"],
    ),
    (
        lambda: LearnedPositionalEncoding(4, 4)(z(1, 2, 4), torch.tensor([1, 7])),
        ValueError,
        ["LearnedPositionalEncoding.forward", "max_len=4", "position 7"],
    ),
    (
        lambda: position_ids_from_attention_mask(z(2, 3)),
        TypeError,
        ["position_ids_from_attention_mask", "mask", "torch.float32"],
    ),
    (
        lambda: position_ids_from_attention_mask(torch.ones(3, dtype=torch.long)),
        ValueError,
        ["position_ids_from_attention_mask", "mask", "(3,)"],
    ),
    (
        lambda: position_ids_from_attention_mask(torch.tensor([[1, 2, 0]])),
        ValueError,
        ["position_ids_from_attention_mask", "mask", "[0, 1, 2]"],
    ),
    # rotation.py
    (lambda: offset_matrix(1, 5), ValueError, ["offset_matrix", "d_model=5"]),
    (lambda: offset_matrix(1, 0), ValueError, ["offset_matrix", "d_model", "0"]),
    (lambda: offset_matrix(1.5, 4), TypeError, ["offset_matrix", "k", "1.5"]),
    (
        lambda: offset_matrix(1, 4, dtype=torch.long),
        TypeError,
        ["offset_matrix", "dtype", "torch.int64"],
    ),
    (
        lambda: symbolic_dot_product_depends_on_difference(0),
        ValueError,
        ["symbolic_dot_product_depends_on_difference", "n_pairs", "0"],
    ),
    # rope.py
    (lambda: rope_frequencies(7), ValueError, ["rope_frequencies", "head_dim=7"]),
    (lambda: rope_frequencies(0), ValueError, ["rope_frequencies", "head_dim", "0"]),
    (
        lambda: rope_frequencies(8, base=0.5),
        ValueError,
        ["rope_frequencies", "base", "0.5"],
    ),
    (
        lambda: apply_rope(z(2, 4, 7)),
        ValueError,
        ["apply_rope", "head_dim must be even", "(2, 4, 7)"],
    ),
    (
        lambda: apply_rope(z(2, 4, 8, dtype=torch.long)),
        TypeError,
        ["apply_rope", "x", "torch.int64"],
    ),
    (lambda: apply_rope(z(8)), ValueError, ["apply_rope", "x", "(8,)"]),
    (
        lambda: apply_rope(z(2, 4, 8), convention="rotate_half"),
        ValueError,
        ["apply_rope", "convention", "'rotate_half'"],
    ),
    (
        lambda: apply_rope(z(2, 4, 8), z(4)),
        TypeError,
        ["apply_rope", "positions", "torch.float32"],
    ),
    (
        lambda: apply_rope(z(2, 4, 8), torch.arange(5)),
        ValueError,
        ["apply_rope", "positions", "(5,)", "(2, 4, 8)"],
    ),
    (
        lambda: apply_rope(z(2, 3, 4, 8), torch.zeros(2, 4, dtype=torch.long)),
        ValueError,
        ["apply_rope", "positions", "(2, 4)", "(2, 3, 4, 8)"],
    ),
    (lambda: rope_angles(z(3), 4), TypeError, ["rope_angles", "positions", "float32"]),
    (
        lambda: rope_angles(torch.arange(3), 3),
        ValueError,
        ["rope_angles", "head_dim=3"],
    ),
    (
        lambda: apply_rope_complex(z(2, 4, 5)),
        ValueError,
        ["apply_rope_complex", "(2, 4, 5)"],
    ),
    (
        lambda: interleaved_to_half_permutation(5),
        ValueError,
        ["interleaved_to_half_permutation", "head_dim=5"],
    ),
    (
        lambda: RotaryEmbedding(8, rotary_dim=10),
        ValueError,
        ["RotaryEmbedding", "rotary_dim=10", "head_dim=8"],
    ),
    (
        lambda: RotaryEmbedding(8, rotary_dim=3),
        ValueError,
        ["RotaryEmbedding", "rotary_dim=3"],
    ),
    (
        lambda: RotaryEmbedding(8, convention="neox"),
        ValueError,
        ["RotaryEmbedding", "convention", "'neox'"],
    ),
    (
        lambda: RotaryEmbedding(8)(z(2, 4, 6)),
        ValueError,
        ["RotaryEmbedding.forward", "head_dim=8", "(2, 4, 6)"],
    ),
    (
        lambda: RotaryEmbedding(8)(z(2, 2, 8), torch.tensor([0, -3])),
        ValueError,
        ["RotaryEmbedding.forward", "positions", "-3"],
    ),
    # conventions.py
    (
        lambda: sincos_interleaved_to_concat(z(4, 5)),
        ValueError,
        ["sincos_interleaved_to_concat", "pe", "(4, 5)"],
    ),
    (
        lambda: sincos_concat_to_interleaved([1.0, 2.0]),
        TypeError,
        ["sincos_concat_to_interleaved", "pe", "list"],
    ),
    (
        lambda: rope_interleaved_to_half_weights(z(10, 4), 2, 4),
        ValueError,
        ["rope_interleaved_to_half_weights", "w", "(10, 4)", "8"],
    ),
    (
        lambda: rope_interleaved_to_half_weights(z(10, 4), 2, 5),
        ValueError,
        ["rope_interleaved_to_half_weights", "head_dim=5"],
    ),
    (
        lambda: rope_half_to_interleaved_weights(z(8, 4), 0, 4),
        ValueError,
        ["rope_half_to_interleaved_weights", "n_heads", "0"],
    ),
    (
        lambda: alibi_bias_bloom_style(0, 3),
        ValueError,
        ["alibi_bias_bloom_style", "n_heads", "0"],
    ),
    (
        lambda: alibi_bias_bloom_style(2, 4, 3),
        ValueError,
        ["alibi_bias_bloom_style", "q_len=4", "k_len=3"],
    ),
    (
        lambda: alibi_forms_softmax_gap(z(4, 4)),
        ValueError,
        ["alibi_forms_softmax_gap", "scores", "(4, 4)"],
    ),
    (
        lambda: alibi_forms_softmax_gap(z(2, 4, 4, dtype=torch.long)),
        TypeError,
        ["alibi_forms_softmax_gap", "scores", "torch.int64"],
    ),
]


@pytest.mark.parametrize(
    ("call", "exc", "needles"),
    CASES,
    ids=[f"{i:02d}-{c[2][0]}" for i, c in enumerate(CASES)],
)
def test_bad_input_message_names_function_argument_and_value(call, exc, needles):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{needles[0]}: "), message
    for needle in needles[1:]:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert not re.search(r"Traceback|<lambda>", message)
