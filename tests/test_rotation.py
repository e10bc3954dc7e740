"""The offset matrix of sinusoidal encodings and its sympy derivation."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    apply_rope,
    derive_offset_block,
    offset_matrix,
    sinusoidal_encoding,
    symbolic_dot_product_depends_on_difference,
    symbolic_pe_pair,
    symbolic_rope_score,
)


def _offset_loop(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """M(k) built entry by entry from the angle-addition formulas."""
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = base ** (-2 * i / d_model)
        # sin(p+k)w = cos(kw) sin(pw) + sin(kw) cos(pw)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = math.cos(k * w), math.sin(k * w)
        # cos(p+k)w = -sin(kw) sin(pw) + cos(kw) cos(pw)
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -math.sin(k * w), math.cos(k * w)
    return m


@pytest.mark.parametrize("d_model", [2, 4, 8, 64])
@pytest.mark.parametrize("k", [-17, -1, 0, 1, 3, 50])
def test_offset_matrix_shifts_every_position(d_model, k):
    pe = sinusoidal_encoding(300, d_model).double()
    m = offset_matrix(k, d_model, dtype=torch.float64)
    assert m.shape == (d_model, d_model)
    p = torch.arange(max(0, -k), min(300, 300 - k))  # positions with p+k in the table
    shifted = pe[p] @ m.T  # row p is M(k) @ PE[p]
    torch.testing.assert_close(shifted, pe[p + k], atol=1e-6, rtol=0)
    # The float32 default agrees too.
    m32 = offset_matrix(k, d_model)
    assert m32.dtype == torch.float32
    torch.testing.assert_close(
        pe[p].float() @ m32.T, pe[p + k].float(), atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("d_model", [2, 4, 8, 64])
def test_offset_matrix_equals_angle_addition_loop(d_model):
    for k in (-5, 0, 2, 1000):
        torch.testing.assert_close(
            offset_matrix(k, d_model, dtype=torch.float64), _offset_loop(k, d_model)
        )
    torch.testing.assert_close(
        offset_matrix(3, 8, base=50.0, dtype=torch.float64), _offset_loop(3, 8, 50.0)
    )


def test_sign_convention_is_not_the_counter_clockwise_rotation():
    # The block acts on (sin, cos): the minus sign sits below the diagonal.
    m = offset_matrix(1, 2, dtype=torch.float64)
    assert m[0, 1] == pytest.approx(math.sin(1.0)) and m[1, 0] == pytest.approx(
        -math.sin(1.0)
    )
    pe = sinusoidal_encoding(3, 2).double()
    assert (m.T @ pe[1] - pe[2]).abs().max() > 0.1


@settings(max_examples=20, deadline=None)
@given(
    a=st.integers(-200, 200),
    b=st.integers(-200, 200),
    d_model=st.sampled_from([2, 4, 8, 64]),
)
def test_offset_matrix_is_a_rotation_group(a, b, d_model):
    ma = offset_matrix(a, d_model, dtype=torch.float64)
    mb = offset_matrix(b, d_model, dtype=torch.float64)
    eye = torch.eye(d_model, dtype=torch.float64)
    torch.testing.assert_close(ma.T @ ma, eye)
    assert torch.linalg.det(ma).item() == pytest.approx(1.0, abs=1e-9)
    torch.testing.assert_close(
        ma @ mb, offset_matrix(a + b, d_model, dtype=torch.float64)
    )
    torch.testing.assert_close(offset_matrix(-a, d_model, dtype=torch.float64), ma.T)
    # Block diagonal: nothing couples different frequencies.
    blocks = torch.block_diag(*[torch.ones(2, 2)] * (d_model // 2)).bool()
    assert torch.all(ma[~blocks] == 0)


def test_symbolic_pe_pair():
    p, w = sp.symbols("p omega", real=True)
    assert symbolic_pe_pair(p, w) == sp.Matrix([sp.sin(p * w), sp.cos(p * w)])


def test_derive_offset_block_proofs():
    d = derive_offset_block()
    k, w, p = d.k, d.omega, d.p
    expected = sp.Matrix(
        [[sp.cos(k * w), sp.sin(k * w)], [-sp.sin(k * w), sp.cos(k * w)]]
    )
    assert sp.simplify(d.block - expected).is_zero_matrix
    assert d.residual.is_zero_matrix
    assert d.d_block_d_p.is_zero_matrix and p not in d.block.free_symbols
    assert d.gram_minus_identity.is_zero_matrix
    assert d.determinant == 1
    # Numerically it is the block of offset_matrix for d_model = 2 (omega_0 = 1).
    numeric = sp.lambdify((k, w), d.block.tolist(), "math")
    for kk in (-3, 0, 1, 7):
        torch.testing.assert_close(
            torch.tensor(numeric(kk, 1.0), dtype=torch.float64),
            offset_matrix(kk, 2, dtype=torch.float64),
        )


@pytest.mark.parametrize("n_pairs", [1, 3])
def test_symbolic_dot_product_depends_on_difference(n_pairs):
    expr = symbolic_dot_product_depends_on_difference(n_pairs)
    p, q, t = sp.symbols("p q t", real=True)
    omegas = sp.symbols(f"omega_0:{n_pairs}", real=True)
    target = sum(sp.cos((p - q) * w) for w in omegas)
    assert sp.simplify(expr - target) == 0
    shifted = expr.subs({p: p + t, q: q + t}, simultaneous=True)
    assert sp.simplify(shifted - expr) == 0
    # Numerically equal to the dot product of two rows of the real table.
    if n_pairs == 1:
        pe = sinusoidal_encoding(20, 2).double()
        value = float(expr.subs({p: 13, q: 4, omegas[0]: 1}))
        assert value == pytest.approx(float(pe[13] @ pe[4]), abs=1e-7)


def test_symbolic_rope_score_is_relative_and_matches_apply_rope():
    score, difference = symbolic_rope_score()
    assert difference == 0
    m, n, theta = sp.symbols("m n theta", real=True)
    q0, q1, k0, k1 = sp.symbols("q_0 q_1 k_0 k_1", real=True)
    values = {q0: 0.3, q1: -1.2, k0: 0.7, k1: 0.5, m: 5, n: 2, theta: 1}
    q = torch.tensor([[0.3, -1.2]] * 6, dtype=torch.float64)  # positions 0..5
    k = torch.tensor([[0.7, 0.5]] * 6, dtype=torch.float64)
    rq, rk = apply_rope(q), apply_rope(k)  # head_dim 2: theta_0 = 1
    assert float(score.subs(values)) == pytest.approx(float(rq[5] @ rk[2]), abs=1e-12)
