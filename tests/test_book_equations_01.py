"""Equations and claims of book chapter 1 (attention does not see order).

The library's own tests already check ``permutation_matrix`` against its definition,
``self_attention`` against the formula, its equivariance on random inputs, and that
adding positions breaks it. Tested here is what the chapter derives or claims on top
of that: each step of the proof, the symbolic proof, the extension to a whole encoder
layer (against PyTorch's own ``nn.TransformerEncoderLayer``), pooling, the cat and the
dog, the causal mask and the recurrent network.
"""

from __future__ import annotations

import itertools

import pytest
import sympy as sp
import torch

import course_lib as cl

PERMS_4 = list(itertools.permutations(range(4)))


def _symbols(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{i}{j}", real=True))


def _softmax_rows(s: sp.Matrix) -> sp.Matrix:
    e = s.applyfunc(sp.exp)
    return sp.Matrix(s.rows, s.cols, lambda i, j: e[i, j] / sum(e.row(i)))


def _sym_perm(perm) -> sp.Matrix:
    """Permutation matrix written from the definition P_ij = [j = perm(i)]."""
    n = len(perm)
    return sp.Matrix(n, n, lambda i, j: 1 if j == perm[i] else 0)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_step3_softmax_of_reordered_scores_symbolically(perm) -> None:
    """(step 3) softmax(P S P^T) = P softmax(S) P^T for a fully symbolic S."""
    s = _symbols("s", 3, 3)
    p = _sym_perm(perm)
    gap = _softmax_rows(p * s * p.T) - p * _softmax_rows(s) * p.T
    assert gap.applyfunc(sp.simplify).is_zero_matrix


def test_step3_softmax_of_a_reordered_vector() -> None:
    """softmax(s_sigma)_j = softmax(s)_sigma(j), numerically with -inf entries too."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(5, generator=g, dtype=torch.float64)
    s[3] = float("-inf")
    for sigma in itertools.permutations(range(5)):
        sigma = torch.tensor(sigma)
        reordered = torch.softmax(s[sigma], 0)
        torch.testing.assert_close(reordered, torch.softmax(s, 0)[sigma],
                                   rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("perm", PERMS_4)
def test_steps1_to_4_of_the_proof(perm) -> None:
    """Q' = PQ, K' = PK, V' = PV; scores PSP^T; A(PX) = P A(X) P^T; SA(PX) = P SA(X)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    w_q, w_k, w_v = torch.randn(3, 6, 3, generator=g, dtype=torch.float64)
    p = cl.permutation_matrix(perm).double()
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    qp, kp, vp = (p @ x) @ w_q, (p @ x) @ w_k, (p @ x) @ w_v
    for before, after in ((q, qp), (k, kp), (v, vp)):
        torch.testing.assert_close(after, p @ before)
    torch.testing.assert_close(qp @ kp.T, p @ (q @ k.T) @ p.T)
    _, a = cl.scaled_dot_product_attention(q, k, v)
    out_p, a_p = cl.scaled_dot_product_attention(qp, kp, vp)
    torch.testing.assert_close(a_p, p @ a @ p.T)
    torch.testing.assert_close(out_p, p @ cl.self_attention(x, w_q, w_k, w_v))


def test_full_head_symbolically_equivariant_not_invariant() -> None:
    """SA(PX) - P SA(X) expands to 0 for all 6 permutations; SA(PX) - SA(X) does not."""
    x = _symbols("x", 3, 2)
    wq, wk, wv = (_symbols(name, 2, 2) for name in "abc")

    def sa(m: sp.Matrix) -> sp.Matrix:
        return _softmax_rows((m * wq) * (m * wk).T / sp.sqrt(2)) * (m * wv)

    sa_x = sa(x)
    # is_zero_matrix is None (undecided) for SA(PX) - SA(X), and `not None` passes:
    # show non-invariance at a rational point instead
    point = {s: sp.Rational(k % 5 + 2, 3) for k, s in enumerate(
        sorted(sa_x.free_symbols, key=str))}
    for perm in itertools.permutations(range(3)):
        p = _sym_perm(perm)
        assert (sa(p * x) - p * sa_x).applyfunc(sp.expand).is_zero_matrix is True
        if perm != (0, 1, 2):
            gap = (sa(p * x) - sa_x).subs(point).evalf()
            assert max(abs(e) for e in gap) > 1e-3, perm


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_whole_encoder_layer_is_equivariant(norm_first: bool) -> None:
    """Several heads, residuals, layer norm and the feed-forward block keep it."""
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=16, nhead=4, dim_feedforward=32, dropout=0.0, batch_first=True,
        norm_first=norm_first, dtype=torch.float64,
    ).eval()
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(3),
                    dtype=torch.float64)
    with torch.no_grad():
        out = layer(x)
        perms = ([6, 5, 4, 3, 2, 1, 0], [1, 2, 3, 4, 5, 6, 0], [3, 0, 6, 1, 5, 2, 4])
        for perm in perms:
            torch.testing.assert_close(layer(cl.permute_tokens(x, perm)),
                                       cl.permute_tokens(out, perm))
        assert not torch.allclose(layer(cl.permute_tokens(x, [1, 0, 2, 3, 4, 5, 6])),
                                  out, atol=1e-3)


def test_pooling_an_equivariant_layer_is_invariant() -> None:
    """sum_i f(PX)_i = sum_i f(X)_i; likewise mean and max."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    w = torch.randn(3, 5, 5, generator=g, dtype=torch.float64)
    out = cl.self_attention(x, *w)
    for perm in PERMS_4:
        out_p = cl.self_attention(cl.permute_tokens(x, perm), *w)
        torch.testing.assert_close(out_p.sum(0), out.sum(0))
        torch.testing.assert_close(out_p.mean(0), out.mean(0))
        torch.testing.assert_close(out_p.max(0).values, out.max(0).values)


def test_the_cat_and_the_dog_give_the_same_multiset_of_outputs() -> None:
    """Same words, same vectors: each word's output is the same in both sentences."""
    g = torch.Generator().manual_seed(5)
    vocab = {w: v for w, v in zip(["the", "cat", "chased", "dog"],
                                  torch.randn(4, 8, generator=g, dtype=torch.float64),
                                  strict=True)}
    w = torch.randn(3, 8, 4, generator=g, dtype=torch.float64)
    s1, s2 = "the cat chased the dog".split(), "the dog chased the cat".split()
    o1 = cl.self_attention(torch.stack([vocab[t] for t in s1]), *w)
    o2 = cl.self_attention(torch.stack([vocab[t] for t in s2]), *w)
    for word in ("cat", "dog", "chased"):
        torch.testing.assert_close(o1[s1.index(word)], o2[s2.index(word)])
    rows1 = sorted(map(tuple, o1.round(decimals=10).tolist()))
    rows2 = sorted(map(tuple, o2.round(decimals=10).tolist()))
    assert rows1 == rows2
    assert not torch.allclose(o1, o2, atol=1e-3)  # same multiset, different order


def test_a_causal_mask_breaks_equivariance() -> None:
    """The first token sees only itself, the last sees all; reordering changes them."""
    g = torch.Generator().manual_seed(6)
    q, k, v = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    mask = cl.causal_mask(6, 6)
    out, _ = cl.scaled_dot_product_attention(q, k, v, mask=mask)
    full, _ = cl.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out[0], v[0])
    torch.testing.assert_close(out[-1], full[-1])
    for perm in itertools.permutations(range(6)):
        if list(perm) == list(range(6)):
            continue
        p = cl.permutation_matrix(perm).double()
        out_p, _ = cl.scaled_dot_product_attention(p @ q, p @ k, p @ v, mask=mask)
        assert not torch.allclose(out_p, p @ out, atol=1e-6), perm


def test_a_recurrent_network_sees_the_order() -> None:
    """h_t = phi(W h_{t-1} + U x_t): reordering the inputs changes the final state."""
    torch.manual_seed(7)
    rnn = torch.nn.RNN(8, 4, batch_first=True, dtype=torch.float64)
    x = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(8),
                    dtype=torch.float64)
    with torch.no_grad():
        _, h = rnn(x)
        _, h_rev = rnn(x.flip(1))
        _, h_same = rnn(x.clone())
    assert not torch.allclose(h, h_rev, atol=1e-3)
    torch.testing.assert_close(h, h_same)
