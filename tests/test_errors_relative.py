"""Bad input to ALiBi, relative, Transformer-XL and DA functions: clear errors.

Each message names the function, the argument and the value or shape received.
"""

from __future__ import annotations

import pytest
import torch

from course_lib import (
    ALiBi,
    DAAttention,
    RelMultiHeadAttention,
    ShawRelativeAttention,
    T5RelativeBias,
    alibi_attention,
    alibi_bias,
    alibi_slopes,
    da_attention,
    da_rescale,
    rel_attention_scores,
    rel_attention_scores_gather,
    rel_shift,
    relative_position_index,
    relative_sinusoidal_embedding,
    shaw_relative_attention,
    t5_relative_position_bucket,
    transformer_xl_mask,
)


def f32(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape)


def i64(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.long)


Q4, K4 = f32(1, 2, 3, 4), f32(1, 2, 5, 4)
TABLE = f32(5, 4)  # 2 * 2 + 1 rows
R, UV = f32(2, 5, 4), f32(2, 4)

CASES = [
    # ------------------------------------------------------------------ alibi.py
    (lambda: alibi_slopes(0), ValueError, ["alibi_slopes", "n_heads", "0"]),
    (lambda: alibi_slopes(-3), ValueError, ["alibi_slopes", "n_heads", "-3"]),
    (lambda: alibi_slopes(2.5), TypeError, ["alibi_slopes", "n_heads", "2.5"]),
    (lambda: alibi_bias(0, 4), ValueError, ["alibi_bias", "n_heads", "0"]),
    (lambda: alibi_bias(4, 0), ValueError, ["alibi_bias", "q_len", "0"]),
    (lambda: alibi_bias(4, 3, -1), ValueError, ["alibi_bias", "k_len", "-1"]),
    (lambda: alibi_bias(4, 5, 3), ValueError, ["alibi_bias", "q_len=5", "k_len=3"]),
    (lambda: alibi_bias(4, "5"), TypeError, ["alibi_bias", "q_len", "'5'"]),
    (lambda: ALiBi(0), ValueError, ["ALiBi", "n_heads", "0"]),
    (lambda: ALiBi(2)(0), ValueError, ["ALiBi.forward", "q_len", "0"]),
    (lambda: ALiBi(2)(4, 2), ValueError, ["ALiBi.forward", "k_len=2"]),
    (
        lambda: alibi_attention(i64(1, 2, 3, 4), K4, K4),
        TypeError,
        ["alibi_attention", "q", "torch.int64"],
    ),
    (
        lambda: alibi_attention(f32(2, 3, 4), K4, K4),
        ValueError,
        ["alibi_attention", "q", "4 dimensions", "(2, 3, 4)"],
    ),
    (
        lambda: alibi_attention(Q4, f32(1, 3, 5, 4), f32(1, 3, 5, 4)),
        ValueError,
        ["alibi_attention", "(batch, heads)", "(1, 3, 5, 4)"],
    ),
    (
        lambda: alibi_attention(Q4, f32(1, 2, 5, 6), K4),
        ValueError,
        ["alibi_attention", "head_dim", "(1, 2, 5, 6)"],
    ),
    (
        lambda: alibi_attention(Q4, K4, f32(1, 2, 4, 4)),
        ValueError,
        ["alibi_attention", "v", "(1, 2, 4, 4)"],
    ),
    (
        lambda: alibi_attention(f32(1, 2, 6, 4), K4, K4),
        ValueError,
        ["alibi_attention", "q_len=6", "k_len=5"],
    ),
    # --------------------------------------------------------------- relative.py
    (
        lambda: relative_position_index(3, 3, 0),
        ValueError,
        ["relative_position_index", "max_distance", "0"],
    ),
    (
        lambda: relative_position_index(0, 3, 2),
        ValueError,
        ["relative_position_index", "q_len", "0"],
    ),
    (
        lambda: relative_position_index(4, 3, 2),
        ValueError,
        ["relative_position_index", "q_len=4", "k_len=3"],
    ),
    (
        lambda: relative_position_index(3, 3.0, 2),
        TypeError,
        ["relative_position_index", "k_len", "3.0"],
    ),
    (
        lambda: shaw_relative_attention(Q4, K4, K4, TABLE, TABLE, 0),
        ValueError,
        ["shaw_relative_attention", "max_distance", "0"],
    ),
    (
        lambda: shaw_relative_attention(Q4, K4, K4, f32(4, 4), TABLE, 2),
        ValueError,
        ["shaw_relative_attention", "a_k", "(5, 4)", "(4, 4)"],
    ),
    (
        lambda: shaw_relative_attention(Q4, K4, K4, TABLE, f32(5, 3), 2),
        ValueError,
        ["shaw_relative_attention", "a_v", "(5, 3)"],
    ),
    (
        lambda: shaw_relative_attention(Q4, K4, K4, i64(5, 4), TABLE, 2),
        TypeError,
        ["shaw_relative_attention", "a_k", "torch.int64"],
    ),
    (
        lambda: shaw_relative_attention(Q4, f32(1, 2, 5, 3), K4, TABLE, TABLE, 2),
        ValueError,
        ["shaw_relative_attention", "k", "(1, 2, 5, 3)"],
    ),
    (
        lambda: shaw_relative_attention(Q4, K4, f32(1, 2, 5, 3), TABLE, TABLE, 2),
        ValueError,
        ["shaw_relative_attention", "v", "head_dim 4", "(1, 2, 5, 3)"],
    ),
    (
        lambda: shaw_relative_attention(i64(1, 2, 3, 4), K4, K4, TABLE, TABLE, 2),
        TypeError,
        ["shaw_relative_attention", "q", "torch.int64"],
    ),
    (
        lambda: shaw_relative_attention(K4, Q4, Q4, TABLE, TABLE, 2),
        ValueError,
        ["shaw_relative_attention", "q_len <= k_len", "(1, 2, 5, 4)"],
    ),
    (
        lambda: shaw_relative_attention(Q4, K4, K4, TABLE, TABLE, 2, mask=f32(3, 5)),
        TypeError,
        ["shaw_relative_attention", "mask", "boolean", "torch.float32"],
    ),
    (
        lambda: shaw_relative_attention(
            Q4, K4, K4, TABLE, TABLE, 2, mask=torch.ones(3, 4, dtype=torch.bool)
        ),
        ValueError,
        ["shaw_relative_attention", "mask", "(1, 2, 3, 5)", "(3, 4)"],
    ),
    (
        lambda: shaw_relative_attention(
            Q4, K4, K4, TABLE, TABLE, 2, mask=torch.ones(2, 2, 3, 5, dtype=torch.bool)
        ),
        ValueError,
        ["shaw_relative_attention", "mask", "(1, 2, 3, 5)", "(2, 2, 3, 5)"],
    ),
    (
        lambda: ShawRelativeAttention(10, 3, 2),
        ValueError,
        ["ShawRelativeAttention", "d_model=10", "n_heads=3"],
    ),
    (
        lambda: ShawRelativeAttention(8, 2, 0),
        ValueError,
        ["ShawRelativeAttention", "max_distance", "0"],
    ),
    (
        lambda: ShawRelativeAttention(8, 2, 2)(f32(5, 8)),
        ValueError,
        ["ShawRelativeAttention.forward", "x", "(5, 8)"],
    ),
    (
        lambda: t5_relative_position_bucket(f32(4)),
        TypeError,
        ["t5_relative_position_bucket", "relative_position", "torch.float32"],
    ),
    (
        lambda: t5_relative_position_bucket([1, 2]),
        TypeError,
        ["t5_relative_position_bucket", "relative_position", "list"],
    ),
    (
        lambda: t5_relative_position_bucket(i64(4), num_buckets=31),
        ValueError,
        ["t5_relative_position_bucket", "num_buckets", "even", "31"],
    ),
    (
        lambda: t5_relative_position_bucket(i64(4), num_buckets=2),
        ValueError,
        ["t5_relative_position_bucket", "num_buckets", "2"],
    ),
    (
        lambda: t5_relative_position_bucket(i64(4), num_buckets=1, bidirectional=False),
        ValueError,
        ["t5_relative_position_bucket", "num_buckets", "1"],
    ),
    (
        lambda: t5_relative_position_bucket(i64(4), max_distance=0),
        ValueError,
        ["t5_relative_position_bucket", "max_distance", "0"],
    ),
    (
        lambda: t5_relative_position_bucket(i64(4), num_buckets=32, max_distance=8),
        ValueError,
        ["t5_relative_position_bucket", "max_distance", "8", "exact"],
    ),
    (lambda: T5RelativeBias(0), ValueError, ["T5RelativeBias", "num_heads", "0"]),
    (
        lambda: T5RelativeBias(2, num_buckets=7),
        ValueError,
        ["t5_relative_position_bucket", "num_buckets", "7"],
    ),
    (
        lambda: T5RelativeBias(2)(0),
        ValueError,
        ["T5RelativeBias.bucket_grid", "q_len", "0"],
    ),
    (
        lambda: T5RelativeBias(2)(5, 3),
        ValueError,
        ["T5RelativeBias.bucket_grid", "q_len=5", "k_len=3"],
    ),
    # ---------------------------------------------------------- transformer_xl.py
    (lambda: rel_shift(i64(3, 4)), TypeError, ["rel_shift", "x", "torch.int64"]),
    (lambda: rel_shift(f32(4)), ValueError, ["rel_shift", "x", "(4,)"]),
    (lambda: rel_shift(f32(2, 5, 3)), ValueError, ["rel_shift", "x", "(2, 5, 3)"]),
    (lambda: rel_shift(f32(0, 3)), ValueError, ["rel_shift", "x", "(0, 3)"]),
    (
        lambda: transformer_xl_mask(4, 2),
        ValueError,
        ["transformer_xl_mask", "q_len=4", "k_len=2"],
    ),
    (
        lambda: transformer_xl_mask(0, 2),
        ValueError,
        ["transformer_xl_mask", "q_len", "0"],
    ),
    (
        lambda: rel_attention_scores(Q4, K4, f32(2, 4, 4), UV, UV),
        ValueError,
        ["rel_attention_scores", "r", "(2, 5, 4)", "(2, 4, 4)"],
    ),
    (
        lambda: rel_attention_scores(Q4, K4, R, f32(3, 4), UV),
        ValueError,
        ["rel_attention_scores", "u", "(2, 4)", "(3, 4)"],
    ),
    (
        lambda: rel_attention_scores(Q4, K4, R, UV, f32(2, 5)),
        ValueError,
        ["rel_attention_scores", "v", "(2, 4)", "(2, 5)"],
    ),
    (
        lambda: rel_attention_scores(Q4, f32(1, 2, 5, 3), R, UV, UV),
        ValueError,
        ["rel_attention_scores", "k", "(1, 2, 5, 3)"],
    ),
    (
        lambda: rel_attention_scores(Q4, K4, R.long(), UV, UV),
        TypeError,
        ["rel_attention_scores", "r", "torch.int64"],
    ),
    (
        lambda: rel_attention_scores(Q4, K4, f32(5, 4), UV, UV),
        ValueError,
        ["rel_attention_scores", "r", "3 dimensions", "(5, 4)"],
    ),
    (
        lambda: rel_attention_scores(K4, Q4, f32(2, 3, 4), UV, UV),
        ValueError,
        ["rel_attention_scores", "q_len <= k_len", "(1, 2, 5, 4)"],
    ),
    (
        lambda: rel_attention_scores_gather(Q4, K4, f32(2, 4, 4), UV, UV),
        ValueError,
        ["rel_attention_scores_gather", "r", "(2, 4, 4)"],
    ),
    (
        lambda: relative_sinusoidal_embedding(5, 7),
        ValueError,
        ["relative_sinusoidal_embedding", "d_model", "7"],
    ),
    (
        lambda: relative_sinusoidal_embedding(0, 8),
        ValueError,
        ["relative_sinusoidal_embedding", "k_len", "0"],
    ),
    (
        lambda: relative_sinusoidal_embedding(5, 8, clamp_len=-1),
        ValueError,
        ["relative_sinusoidal_embedding", "clamp_len", "-1"],
    ),
    (
        lambda: relative_sinusoidal_embedding(5, 8, base=-1.0),
        ValueError,
        ["relative_sinusoidal_embedding", "base", "-1.0"],
    ),
    (
        lambda: RelMultiHeadAttention(8, 3),
        ValueError,
        ["RelMultiHeadAttention", "d_model=8", "n_heads=3"],
    ),
    (
        lambda: RelMultiHeadAttention(8, 2, mem_len=-2),
        ValueError,
        ["RelMultiHeadAttention", "mem_len", "-2"],
    ),
    (
        lambda: RelMultiHeadAttention(8, 0),
        ValueError,
        ["RelMultiHeadAttention", "n_heads", "0"],
    ),
    (
        lambda: RelMultiHeadAttention(8, 2)(f32(1, 3, 6)),
        ValueError,
        ["RelMultiHeadAttention.forward", "x", "(1, 3, 6)"],
    ),
    (
        lambda: RelMultiHeadAttention(8, 2)(f32(1, 3, 8), f32(2, 4, 8)),
        ValueError,
        ["RelMultiHeadAttention.forward", "mems", "(2, 4, 8)"],
    ),
    (
        lambda: RelMultiHeadAttention(8, 2)(f32(1, 3, 8), i64(1, 4, 8)),
        TypeError,
        ["RelMultiHeadAttention.forward", "mems", "torch.int64"],
    ),
    (
        lambda: RelMultiHeadAttention(8, 2)(
            f32(1, 3, 8), attn_mask=torch.ones(3, 4, dtype=torch.bool)
        ),
        ValueError,
        ["RelMultiHeadAttention.forward", "attn_mask", "(3, 3)", "(3, 4)"],
    ),
    # --------------------------------------------------------------------- da.py
    (lambda: da_rescale("3", 1.0, 0.0), TypeError, ["da_rescale", "distance", "'3'"]),
    (
        lambda: da_rescale(f32(4), torch.ones(3), 0.0),
        ValueError,
        ["da_rescale", "broadcast", "(4,)", "(3,)"],
    ),
    (lambda: da_rescale(f32(4), True, 0.0), TypeError, ["da_rescale", "w", "True"]),
    (
        lambda: da_attention(Q4, K4, K4, torch.ones(3), torch.ones(2)),
        ValueError,
        ["da_attention", "w", "(2,)", "(3,)"],
    ),
    (
        lambda: da_attention(Q4, K4, K4, torch.ones(2), torch.ones(2, 1)),
        ValueError,
        ["da_attention", "v_bias", "1 dimensions", "(2, 1)"],
    ),
    (
        lambda: da_attention(Q4, K4, K4, i64(2), torch.ones(2)),
        TypeError,
        ["da_attention", "w", "torch.int64"],
    ),
    (
        lambda: da_attention(Q4, K4, K4, [1.0, 1.0], torch.ones(2)),
        TypeError,
        ["da_attention", "w", "list"],
    ),
    (
        lambda: da_attention(i64(1, 2, 3, 4), K4, K4, UV[:, 0], UV[:, 0]),
        TypeError,
        ["da_attention", "q", "torch.int64"],
    ),
    (
        lambda: da_attention(Q4, K4, f32(1, 2, 4, 4), UV[:, 0], UV[:, 0]),
        ValueError,
        ["da_attention", "v", "(1, 2, 4, 4)"],
    ),
    (
        lambda: da_attention(K4, Q4, Q4, UV[:, 0], UV[:, 0]),
        ValueError,
        ["da_attention", "q_len <= k_len", "(1, 2, 5, 4)"],
    ),
    (
        lambda: DAAttention(10, 4),
        ValueError,
        ["DAAttention", "d_model=10", "n_heads=4"],
    ),
    (
        lambda: DAAttention(8, 2)(i64(1, 3, 8)),
        TypeError,
        ["DAAttention.forward", "x", "torch.int64"],
    ),
]


@pytest.mark.parametrize(
    "call,exc,fragments", CASES, ids=[f"case{i}" for i in range(len(CASES))]
)
def test_bad_input_raises_clear_error(call, exc, fragments) -> None:
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    assert message.startswith(fragments[0] + ":"), message
    for fragment in fragments[1:]:
        assert fragment in message, f"{fragment!r} not in {message!r}"
