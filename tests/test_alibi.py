"""ALiBi: slopes by the authors' code, the bias, the cached module, KV caches."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
import torch

from course_lib import ALiBi, alibi_attention, alibi_bias, alibi_slopes


def paper_slopes(n: int) -> list[float]:
    """Test oracle written from the authors' `get_slopes` (the paper's text, §3, gives
    2^(-8h/n) for every n; for other head counts the code differs).

    For a power of two ``n`` the sequence starts at ``2^(-8/n)`` and that is also the
    ratio. Otherwise take the ``c = 2^floor(log2 n)`` slopes, then every other slope of
    the ``2c``-head sequence (recursively), keeping ``n - c`` of them.
    """

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n", range(1, 129))
def test_slopes_follow_recursive_rule(n: int) -> None:
    got = alibi_slopes(n)
    assert got.shape == (n,) and got.dtype == torch.float32
    want = torch.tensor(paper_slopes(n), dtype=torch.float64)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)


def test_slopes_twelve_heads_as_stated() -> None:
    exponents = [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]
    want = torch.tensor([2.0**-e for e in exponents])
    # Exact on every CPU: see test_float32_slopes_do_not_depend_on_the_cpus_pow below.
    assert torch.equal(alibi_slopes(12), want)


def test_float32_slopes_do_not_depend_on_the_cpus_pow() -> None:
    """alibi_slopes casts a float64 pow(2, -e) to float32. Vectorised and scalar pow
    differ between CPUs by up to 1 float64 ulp; that changes the float32 result only if
    the exact 2^-e lies within 1 float64 ulp of a float32 rounding midpoint. Checked in
    60-digit decimal arithmetic for every slope of 1..128 heads: each lies more than 2
    float64 ulps from any midpoint, so the slopes, and the exact comparisons of slopes
    in these tests and the book, are bit-identical on every CPU."""
    exponents = set()
    for n in range(1, 129):
        c = 1 << (n.bit_length() - 1)
        exponents |= {Fraction(8 * h, c) for h in range(1, c + 1)}
        exponents |= {Fraction(8 * (2 * j + 1), 2 * c) for j in range(n - c)}
    assert len(exponents) > 100
    with localcontext() as ctx:
        ctx.prec = 60
        distances = [_distance_to_float32_midpoint_in_ulp64(e) for e in exponents]
    assert min(d for d in distances if d is not None) > 2


def _distance_to_float32_midpoint_in_ulp64(e: Fraction) -> Decimal | None:
    """How far 2^-e lies from the nearest float32 rounding midpoint, in float64 ulps."""
    exact = Decimal(2) ** (-Decimal(e.numerator) / Decimal(e.denominator))
    k = math.floor(math.log2(float(exact)))  # exact in [2^k, 2^(k+1))
    spacing32 = Decimal(2) ** (k - 23)
    ulp64 = Decimal(2) ** (k - 52)
    offset = exact / spacing32 - int(exact / spacing32)  # position between float32s
    if offset == 0:
        return None  # a power of two: exactly representable
    return abs(offset - Decimal("0.5")) * spacing32 / ulp64


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_power_of_two_slopes_are_geometric_from_2_to_minus_8(n: int) -> None:
    s = alibi_slopes(n).double()
    torch.testing.assert_close(s[0], torch.tensor(2.0 ** (-8 / n), dtype=torch.float64))
    torch.testing.assert_close(s[-1], torch.tensor(2.0**-8, dtype=torch.float64))
    ratio = s[1:] / s[:-1]
    torch.testing.assert_close(ratio, torch.full_like(ratio, 2.0 ** (-8 / n)))


def test_slopes_are_distinct_and_in_unit_interval() -> None:
    for n in (3, 5, 6, 7, 12, 20, 24, 40, 96, 100):
        s = alibi_slopes(n)
        assert (s > 0).all() and (s < 1).all()
        assert len(set(s.tolist())) == n


def test_not_power_of_two_only_rule() -> None:
    """The common mistake 2^(-8h/n) for every n gives different slopes for 12 heads."""
    wrong = torch.tensor([2 ** (-8 * h / 12) for h in range(1, 13)])
    assert not torch.allclose(alibi_slopes(12), wrong)


@pytest.mark.parametrize(
    "n_heads,q_len,k_len", [(1, 1, 1), (3, 4, 4), (5, 2, 7), (8, 6, 9)]
)
def test_bias_equals_loop(n_heads: int, q_len: int, k_len: int) -> None:
    slopes = paper_slopes(n_heads)
    got = alibi_bias(n_heads, q_len, k_len)
    assert got.shape == (n_heads, q_len, k_len)
    want = torch.empty(n_heads, q_len, k_len, dtype=torch.float64)
    for h in range(n_heads):
        for i in range(q_len):
            absolute = i + k_len - q_len
            for j in range(k_len):
                want[h, i, j] = -slopes[h] * abs(absolute - j)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-7)


def test_bias_default_square_and_symmetric() -> None:
    b = alibi_bias(6, 5)
    assert b.shape == (6, 5, 5)
    assert torch.equal(b, b.transpose(1, 2))
    assert torch.equal(b.diagonal(dim1=1, dim2=2), torch.zeros(6, 5))
    assert not torch.signbit(b.diagonal(dim1=1, dim2=2)).any()  # +0, not -0


def test_causal_bias_is_minus_inf_exactly_after_query() -> None:
    q_len, k_len = 3, 7
    b = alibi_bias(4, q_len, k_len, causal=True)
    plain = alibi_bias(4, q_len, k_len)
    for i in range(q_len):
        for j in range(k_len):
            if j > i + k_len - q_len:
                assert torch.isneginf(b[:, i, j]).all()
            else:
                assert torch.equal(b[:, i, j], plain[:, i, j])


def _reference_attention(q, k, v, bias):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_attention_matches_manual_softmax(
    gen: torch.Generator, causal: bool
) -> None:
    q = torch.randn(2, 5, 6, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 5, 9, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 5, 9, 3, generator=gen, dtype=torch.float64)
    got = alibi_attention(q, k, v, causal=causal)
    want = _reference_attention(q, k, v, alibi_bias(5, 6, 9, causal=causal).double())
    assert got.shape == (2, 5, 6, 3)
    torch.testing.assert_close(got, want)


def test_kv_cache_decoding_equals_full_forward(gen: torch.Generator) -> None:
    heads, seq, dim = 6, 10, 8
    q = torch.randn(2, heads, seq, dim, generator=gen)
    k = torch.randn(2, heads, seq, dim, generator=gen)
    v = torch.randn(2, heads, seq, dim, generator=gen)
    full = alibi_attention(q, k, v, causal=True)
    steps = [
        alibi_attention(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1])
        for t in range(seq)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=2), full, atol=1e-6, rtol=1e-5)
    # a prefill of 4 tokens then a chunk of 3 with 4 cached keys
    chunk = alibi_attention(q[:, :, 4:7], k[:, :, :7], v[:, :, :7])
    torch.testing.assert_close(chunk, full[:, :, 4:7], atol=1e-6, rtol=1e-5)


def test_kv_cache_needs_queries_last(gen: torch.Generator) -> None:
    """Putting the single query at position 0 instead of last changes the output."""
    heads, seq, dim = 4, 6, 8
    q = torch.randn(1, heads, seq, dim, generator=gen)
    k = torch.randn(1, heads, seq, dim, generator=gen)
    v = torch.randn(1, heads, seq, dim, generator=gen)
    full = alibi_attention(q, k, v, causal=True)
    wrong_bias = alibi_bias(heads, seq)[:, :1, :]  # query treated as position 0
    wrong = _reference_attention(q[:, :, -1:], k, v, wrong_bias)
    assert (wrong - full[:, :, -1:]).abs().max() > 1e-3


def test_module_returns_4d_cached_slices() -> None:
    alibi = ALiBi(5, causal=True)
    first = alibi(3, 8)
    assert first.shape == (1, 5, 3, 8)
    assert torch.equal(first[0], alibi_bias(5, 3, 8, causal=True))
    assert alibi.bias.shape == (1, 5, 8, 8)
    again = alibi(2, 6)  # shorter: sliced from the cache, not recomputed
    shared = again.untyped_storage().data_ptr()
    assert shared == alibi.bias.untyped_storage().data_ptr()
    assert alibi.bias.shape == (1, 5, 8, 8)
    assert torch.equal(again[0], alibi_bias(5, 2, 6, causal=True))
    longer = alibi(4, 12)
    assert alibi.bias.shape == (1, 5, 12, 12)
    assert torch.equal(longer[0], alibi_bias(5, 4, 12, causal=True))
    assert torch.equal(ALiBi(3)(4)[0], alibi_bias(3, 4))


def test_module_bias_is_not_saved_in_state_dict() -> None:
    alibi = ALiBi(4)
    alibi(5)
    assert "bias" not in alibi.state_dict()


def test_module_bias_works_as_sdpa_mask(gen: torch.Generator) -> None:
    q = torch.randn(2, 4, 5, 8, generator=gen)
    k = torch.randn(2, 4, 5, 8, generator=gen)
    v = torch.randn(2, 4, 5, 8, generator=gen)
    mask = ALiBi(4, causal=True)(5)
    got = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(got, alibi_attention(q, k, v, causal=True))


def test_alibi_attention_equals_library_sdpa_with_bias(gen: torch.Generator) -> None:
    """The SDPA fast path agrees with course_lib's explicit attention plus the bias."""
    from course_lib import causal_mask, scaled_dot_product_attention

    q = torch.randn(2, 3, 4, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, 7, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 3, 7, 8, generator=gen, dtype=torch.float64)
    want, _ = scaled_dot_product_attention(
        q, k, v, bias=alibi_bias(3, 4, 7).double(), mask=causal_mask(4, 7)
    )
    torch.testing.assert_close(alibi_attention(q, k, v, causal=True), want)


def test_module_warm_up_means_no_rebuild_while_decoding() -> None:
    """Chapter 5: after one call at the full length every decoding step is a view of
    the same buffer; without it, each longer request rebuilds the bias."""
    warm = ALiBi(4, causal=True)
    warm(9)
    buffer = warm.bias.data_ptr()
    for t in range(9):
        step = warm(1, t + 1)
        assert step.data_ptr() >= buffer and warm.bias.data_ptr() == buffer
        assert torch.equal(step[0], alibi_bias(4, 1, t + 1, causal=True))
    cold = ALiBi(4, causal=True)
    lengths = []
    for t in range(9):
        cold(1, t + 1)
        lengths.append(cold.bias.shape[-1])
    assert lengths == list(range(1, 10))
