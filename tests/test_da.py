"""DA-Transformer: the distance rescaling and distance-aware attention."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import DAAttention, da_attention, da_rescale


def naive(distance: float, w: float, v: float) -> float:
    return (1 + math.exp(v)) / (1 + math.exp(v - w * distance))


@pytest.mark.parametrize("w", [-2.0, -0.3, 0.0, 0.1, 1.0, 5.0])
@pytest.mark.parametrize("v", [-3.0, 0.0, 0.7, 4.0])
def test_rescale_is_one_at_distance_zero(w: float, v: float) -> None:
    got = da_rescale(torch.tensor(0.0, dtype=torch.float64), w, v)
    assert got.item() == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("w", [-2.0, -0.3, 0.1, 1.0])
@pytest.mark.parametrize("v", [-3.0, 0.0, 0.7, 4.0, 25.0])
def test_rescale_equals_formula(w: float, v: float) -> None:
    d = torch.arange(0, 40, dtype=torch.float64) * 0.5
    got = da_rescale(d, w, v)
    want = torch.tensor([naive(x, w, v) for x in d.tolist()], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("v", [-2.0, 0.0, 1.5])
def test_rescale_monotone_and_bounded(v: float) -> None:
    d = torch.arange(0, 200, dtype=torch.float64)
    up = da_rescale(d, 0.3, v)
    # Where hat R saturates, neighbours differ by rounding only, and a vectorised exp
    # may treat the SIMD body and the scalar tail of a row differently: allow 4 ulps of
    # the value (1 + e^|v| bounds it) against monotonicity; the first 40 steps are far
    # larger.
    ulps4 = 4 * torch.finfo(torch.float64).eps * (1 + math.exp(abs(v)))
    assert (up.diff() >= -ulps4).all() and (up.diff()[:40] > 0).all()  # saturates later
    # The bound 1 + e^v is reached in floating point: hat R is evaluated as
    # exp(softplus(v) - softplus(v - wR)), about five correctly- or faithfully-rounded
    # float64 ops (exp, log1p, max, add, sub), each <= 1 ulp; the final exp turns an
    # absolute error a*eps in its argument a = log(1 + e^v) into a relative error a*eps.
    # So the saturated value may sit a few ulps above the exact bound, and which side it
    # lands on depends on the CPU's vectorised exp (AMD EPYC: 5.481689070338065 vs the
    # exact 5.4816890703380645). Allow (5 + a) eps relative, a tight bound all the same.
    eps = torch.finfo(torch.float64).eps
    bound = 1 + math.exp(v)
    slack = (5 + abs(math.log(bound))) * eps * bound
    assert (up >= 1 - 5 * eps).all() and (up <= bound + slack).all()
    down = da_rescale(d, -0.3, v)
    assert (down.diff() <= ulps4).all() and (down.diff()[:40] < 0).all()
    assert (down > 0).all() and (down <= 1 + 5 * eps).all()  # same ulp budget at R = 0
    flat = da_rescale(d, 0.0, v)
    # exact by construction: w*R = 0 exactly, softplus(v) - softplus(v) = 0, exp(0) = 1
    assert torch.equal(flat, torch.ones_like(flat))


@pytest.mark.parametrize("v", [-2.0, 0.0, 1.5])
def test_rescale_limits(v: float) -> None:
    far = torch.tensor([1e4], dtype=torch.float64)
    assert da_rescale(far, 1.0, v).item() == pytest.approx(1 + math.exp(v), rel=1e-12)
    assert da_rescale(far, -1.0, v).item() == pytest.approx(0.0, abs=1e-300)
    # v -> -inf: hat R -> 1 for every distance; v -> +inf: hat R -> e^(wR)
    d = torch.arange(5, dtype=torch.float64)
    torch.testing.assert_close(da_rescale(d, 0.5, -60.0), torch.ones(5).double())
    torch.testing.assert_close(da_rescale(d, 0.5, 60.0), torch.exp(0.5 * d))


def test_rescale_is_stable_where_the_naive_formula_overflows() -> None:
    # (1 + e^800) / (1 + e^790) overflows to inf/inf; the value is e^10 (1 + tiny)
    got = da_rescale(torch.tensor(10.0, dtype=torch.float64), 1.0, 800.0)
    assert math.isfinite(got.item())
    assert got.item() == pytest.approx(math.exp(10.0), rel=1e-12)
    got32 = da_rescale(torch.tensor([0.0, 3.0]), 1.0, 80.0)  # float32 e^80 overflows
    torch.testing.assert_close(got32, torch.tensor([1.0, math.exp(3.0)]))


def test_rescale_accepts_integer_distances_and_broadcasts() -> None:
    d = torch.arange(4)
    w = torch.tensor([[0.5], [-0.5]])
    got = da_rescale(d, w, torch.tensor(1.0))
    assert got.shape == (2, 4) and got.dtype == torch.float32
    want = torch.tensor([[naive(x, s, 1.0) for x in range(4)] for s in (0.5, -0.5)])
    torch.testing.assert_close(got, want)


def da_loop(q, k, v, w, v_bias, causal):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    out = torch.zeros(B, H, Lq, v.shape[-1], dtype=q.dtype)
    weights = torch.zeros(B, H, Lq, Lk, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                query = i + Lk - Lq
                s = torch.empty(Lk, dtype=q.dtype)
                for j in range(Lk):
                    r_hat = naive(abs(query - j), w[h].item(), v_bias[h].item())
                    s[j] = max(q[b, h, i] @ k[b, h, j], 0.0) * r_hat / math.sqrt(D)
                    if causal and j > query:
                        s[j] = float("-inf")
                alpha = s.softmax(0)
                weights[b, h, i] = alpha
                out[b, h, i] = alpha @ v[b, h]
    return out, weights


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Lq,Lk", [(1, 1), (5, 5), (3, 7)])
def test_da_attention_equals_brute_force(gen, causal, Lq, Lk) -> None:
    def t(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k, v = t(2, 3, Lq, 4), t(2, 3, Lk, 4), t(2, 3, Lk, 5)
    w, v_bias = t(3), t(3)
    out, weights = da_attention(q, k, v, w, v_bias, causal=causal)
    want_out, want_w = da_loop(q, k, v, w, v_bias, causal)
    assert out.shape == (2, 3, Lq, 5) and weights.shape == (2, 3, Lq, Lk)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(weights, want_w)


def test_relu_makes_anti_aligned_keys_uniform(gen) -> None:
    """Every q.k <= 0 gives zero scores, whatever the distance weights: uniform."""
    q = torch.randn(1, 2, 4, 8, generator=gen).abs()
    k = -torch.rand(1, 2, 4, 8, generator=gen)
    v = torch.randn(1, 2, 4, 3, generator=gen)
    _, weights = da_attention(q, k, v, torch.tensor([2.0, -1.0]), torch.ones(2))
    torch.testing.assert_close(weights, torch.full_like(weights, 0.25))


def test_zero_w_is_plain_relu_attention(gen) -> None:
    q = torch.randn(2, 2, 5, 8, generator=gen)
    k = torch.randn(2, 2, 5, 8, generator=gen)
    v = torch.randn(2, 2, 5, 8, generator=gen)
    out, _ = da_attention(q, k, v, torch.zeros(2), torch.tensor([0.3, -2.0]))
    want = (torch.relu(q @ k.transpose(-2, -1)) / math.sqrt(8)).softmax(-1) @ v
    torch.testing.assert_close(out, want)


def test_positive_w_shifts_attention_to_far_keys(gen) -> None:
    """Equal positive content scores: w > 0 prefers distant keys, w < 0 near ones."""
    q = torch.ones(1, 2, 1, 4)
    k = torch.ones(1, 2, 6, 4)
    v = torch.randn(1, 2, 6, 4, generator=gen)
    _, weights = da_attention(q, k, v, torch.tensor([1.0, -1.0]), torch.zeros(2))
    far_first, near_first = weights[0, 0, 0], weights[0, 1, 0]
    assert (far_first.diff() < 0).all()  # key 0 is farthest from the last query
    assert (near_first.diff() > 0).all()


def test_module_matches_functional_and_learns_w_v(gen) -> None:
    torch.manual_seed(0)
    layer = DAAttention(12, 3, causal=True, w_init=0.5, v_init=-1.0).double()
    x = torch.randn(2, 6, 12, generator=gen, dtype=torch.float64)
    got = layer(x)
    q, k, v = layer.qkv(x).view(2, 6, 3, 3, 4).permute(2, 0, 3, 1, 4)
    z, _ = da_loop(q, k, v, layer.w, layer.v, causal=True)
    want = layer.out(z.transpose(1, 2).reshape(2, 6, 12))
    torch.testing.assert_close(got, want)
    got.square().sum().backward()
    assert layer.w.grad.abs().sum() > 0 and layer.v.grad.abs().sum() > 0


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Lq,Lk", [(4, 4), (3, 7), (1, 5)])
def test_flex_score_mod_equals_dense_da_attention(gen, causal, Lq, Lk) -> None:
    """Chapter 8: DA is exactly a FlexAttention score_mod (eager reference path)."""
    import warnings

    from course_lib import da_attention, da_flex_attention

    q = torch.randn(2, 3, Lq, 8, generator=gen)
    k = torch.randn(2, 3, Lk, 8, generator=gen)
    v = torch.randn(2, 3, Lk, 5, generator=gen)
    w = torch.tensor([-0.5, 0.0, 0.7])
    v_bias = torch.tensor([1.0, -0.3, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flex = da_flex_attention(q, k, v, w, v_bias, causal=causal, compiled=False)
    dense, _ = da_attention(q, k, v, w, v_bias, causal=causal)
    torch.testing.assert_close(flex, dense, atol=1e-5, rtol=1e-5)
