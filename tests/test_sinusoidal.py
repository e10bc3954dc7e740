"""Sinusoidal and learned absolute encodings, and position ids for padded batches."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    causal_mask,
    position_ids_from_attention_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)


def _vaswani_loop(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE written from section 3.5 of Vaswani et al., one entry at a time."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@pytest.mark.parametrize(
    ("max_len", "d_model", "base"),
    [
        (1, 2, 10000.0),
        (20, 4, 10000.0),
        (50, 6, 10000.0),
        (64, 64, 10000.0),
        (30, 8, 100.0),
        (2000, 16, 10000.0),
    ],
)
def test_matches_the_paper_loop(max_len, d_model, base):
    pe = sinusoidal_encoding(max_len, d_model, base=base)
    assert pe.shape == (max_len, d_model) and pe.dtype == torch.float32
    ref = _vaswani_loop(max_len, d_model, base)
    # One float32 rounding of an exact float64 value: half an ulp of 1.
    torch.testing.assert_close(pe.double(), ref, atol=6e-8, rtol=0)


def test_concat_layout_is_all_sines_then_all_cosines():
    ref = _vaswani_loop(40, 10)
    concat = sinusoidal_encoding(40, 10, layout="concat").double()
    torch.testing.assert_close(concat[:, :5], ref[:, 0::2], atol=6e-8, rtol=0)
    torch.testing.assert_close(concat[:, 5:], ref[:, 1::2], atol=6e-8, rtol=0)


def test_not_the_off_by_two_exponent():
    # A classic bug writes base^(i/d) (or base^(2*(2i)/d)) instead of base^(2i/d).
    pe = sinusoidal_encoding(10, 8)
    pos, i = 5, 2
    assert pe[pos, 2 * i] == pytest.approx(
        math.sin(pos / 10000 ** (2 * i / 8)), abs=1e-6
    )
    assert abs(pe[pos, 2 * i] - math.sin(pos / 10000 ** (4 * i / 8))) > 1e-2


def test_bounded_and_rows_unique():
    pe = sinusoidal_encoding(1024, 64)
    # |sin|, |cos| <= 1 exactly; a float32 sin/cos accurate to 1 ulp (the
    # vectorised kernels differ by CPU) may return 1 + eps at most.
    assert pe.abs().max() <= 1.0 + torch.finfo(pe.dtype).eps
    # Each (sin, cos) pair lies on the unit circle, so every row has norm sqrt(d/2).
    torch.testing.assert_close(pe.norm(dim=-1), torch.full((1024,), math.sqrt(32.0)))
    dist = torch.cdist(pe.double(), pe.double())  # (1024, 1024)
    off_diag = dist + torch.eye(1024, dtype=torch.float64) * 1e9
    assert off_diag.min() > 1e-3


def test_dot_product_depends_only_on_distance():
    pe = sinusoidal_encoding(200, 32).double()
    gram = pe @ pe.T  # (200, 200)
    omega = 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    p = torch.arange(200, dtype=torch.float64)
    diff = p[:, None] - p[None, :]  # (200, 200)
    expected = torch.cos(diff[..., None] * omega).sum(-1)  # sum_i cos((p-q) w_i)
    torch.testing.assert_close(gram, expected, atol=1e-5, rtol=0)
    # Shifting both positions leaves the product unchanged, and it is symmetric.
    torch.testing.assert_close(gram[:-50, :-50], gram[50:, 50:], atol=1e-5, rtol=0)
    torch.testing.assert_close(gram, gram.T)


def test_module_adds_encoding_with_optional_scale(gen):
    x = torch.randn(3, 7, 16, generator=gen)
    pe = sinusoidal_encoding(7, 16)
    torch.testing.assert_close(SinusoidalPositionalEncoding(16)(x), x + pe)
    scaled = SinusoidalPositionalEncoding(16, scale_embeddings=True)(x)
    torch.testing.assert_close(scaled, x * 4.0 + pe)
    concat = SinusoidalPositionalEncoding(16, layout="concat")(x)
    torch.testing.assert_close(concat, x + sinusoidal_encoding(7, 16, layout="concat"))


def test_module_grows_its_table_and_uses_position_ids(gen):
    enc = SinusoidalPositionalEncoding(8, max_len=4)
    x = torch.zeros(2, 10, 8)
    torch.testing.assert_close(enc(x)[0], sinusoidal_encoding(10, 8))
    assert enc.pe.shape[0] >= 10
    ids = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    out = enc(torch.zeros(2, 5, 8), position_ids=ids)
    torch.testing.assert_close(out, sinusoidal_encoding(5, 8)[ids])
    out = enc(torch.zeros(2, 3, 8), position_ids=torch.tensor([100, 101, 102]))
    torch.testing.assert_close(out[1], sinusoidal_encoding(103, 8)[100:])


def test_module_dropout_only_in_training(gen):
    enc = SinusoidalPositionalEncoding(8, dropout=0.5)
    x = torch.ones(1, 6, 8)
    enc.eval()
    torch.testing.assert_close(enc(x), x + sinusoidal_encoding(6, 8))
    enc.train()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        dropped = enc(x)
    assert (dropped == 0).any()
    kept = dropped != 0
    torch.testing.assert_close(
        dropped[kept], 2.0 * (x + sinusoidal_encoding(6, 8))[kept]
    )


def test_learned_encoding_adds_its_table_and_learns(gen):
    enc = LearnedPositionalEncoding(6, 4, generator=torch.Generator().manual_seed(1))
    x = torch.randn(2, 5, 4, generator=gen)
    torch.testing.assert_close(enc(x), x + enc.weight[:5])
    ids = torch.tensor([5, 0, 3])
    torch.testing.assert_close(enc(x[:, :3], ids), x[:, :3] + enc.weight[ids])
    enc(x).sum().backward()
    assert enc.weight.grad is not None
    torch.testing.assert_close(enc.weight.grad[:5], torch.full((5, 4), 2.0))
    assert torch.all(enc.weight.grad[5] == 0)
    scaled = LearnedPositionalEncoding(6, 4, scale_embeddings=True)
    torch.testing.assert_close(scaled(x), x * 2.0 + scaled.weight[:5])


def test_learned_encoding_rejects_positions_beyond_max_len():
    enc = LearnedPositionalEncoding(8, 4)
    with pytest.raises(ValueError, match=r"max_len=8") as info:
        enc(torch.zeros(1, 9, 4))
    assert "LearnedPositionalEncoding" in str(info.value)
    with pytest.raises(ValueError, match=r"position 8 .*max_len=8"):
        enc(torch.zeros(1, 2, 4), torch.tensor([3, 8]))


def _ids_loop(mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(mask.shape, dtype=torch.long)
    for b in range(mask.shape[0]):
        count = 0
        for t in range(mask.shape[1]):
            if mask[b, t]:
                out[b, t] = count
                count += 1
    return out


def test_position_ids_left_and_right_padding():
    mask = torch.tensor(
        [
            [0, 0, 1, 1, 1],
            [1, 1, 1, 0, 0],
            [1, 1, 1, 1, 1],
            [0, 0, 0, 0, 0],
            [0, 1, 0, 1, 1],
        ]
    )
    ids = position_ids_from_attention_mask(mask)
    assert ids.dtype == torch.long and ids.shape == (5, 5)
    expected = torch.tensor(
        [
            [0, 0, 0, 1, 2],
            [0, 1, 2, 0, 0],
            [0, 1, 2, 3, 4],
            [0, 0, 0, 0, 0],
            [0, 0, 0, 1, 2],
        ]
    )
    torch.testing.assert_close(ids, expected, rtol=0, atol=0)
    torch.testing.assert_close(position_ids_from_attention_mask(mask.bool()), expected)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=4)
)
def test_position_ids_equal_a_counting_loop(rows):
    mask = torch.tensor(rows)
    torch.testing.assert_close(
        position_ids_from_attention_mask(mask), _ids_loop(mask), rtol=0, atol=0
    )


class _TinyModel(torch.nn.Module):
    """Embedding + absolute encoding + one causal attention layer with padding mask."""

    def __init__(self, encoding: torch.nn.Module, d_model: int = 8) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.embed = torch.randn(11, d_model, generator=g)
        self.w = [torch.randn(d_model, d_model, generator=g) for _ in range(3)]
        self.encoding = encoding

    def forward(self, tokens, attention_mask, position_ids=None):
        h = self.encoding(self.embed[tokens], position_ids)  # (B, S, d)
        q, k, v = (h @ w for w in self.w)
        seq = tokens.shape[1]
        mask = causal_mask(seq) & attention_mask.bool()[:, None, :]  # (B, S, S)
        out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
        return out  # (B, S, d)


@pytest.mark.parametrize(
    "encoding",
    [
        SinusoidalPositionalEncoding(8),
        LearnedPositionalEncoding(16, 8, generator=torch.Generator().manual_seed(2)),
    ],
    ids=["sinusoidal", "learned"],
)
def test_left_padded_batch_equals_unpadded(encoding):
    model = _TinyModel(encoding)
    short, long = torch.tensor([3, 1, 4]), torch.tensor([2, 7, 1, 8, 2, 8])
    pad = 0
    tokens = torch.stack([torch.cat([torch.full((3,), pad), short]), long])  # (2, 6)
    attention_mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    ids = position_ids_from_attention_mask(attention_mask)
    batched = model(tokens, attention_mask, ids)

    alone_short = model(short[None], torch.ones(1, 3))[0]
    alone_long = model(long[None], torch.ones(1, 6))[0]
    torch.testing.assert_close(batched[0, 3:], alone_short)
    torch.testing.assert_close(batched[1], alone_long)
    # Without the position ids the padded sequence is encoded at positions 3, 4, 5.
    wrong = model(tokens, attention_mask)
    assert (wrong[0, 3:] - alone_short).abs().max() > 1e-3
