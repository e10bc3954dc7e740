"""Equations and claims of book chapters 2-4, checked independently.

Each test names the chapter statement it checks. What the library's own tests already
cover (the sinusoidal table against the paper's loop, the concatenated layout, the
Gram matrix as a cosine sum, the offset matrix against angle addition and as a
rotation group, apply_rope against a rotation loop, relative scores, the pairing
permutation and weight conversion, KV-cache decoding, partial rotary) is not repeated.
Tested here is what the chapters derive or claim on top of it; expected values come
from closed forms written out here, brute force, or SymPy.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import sympy as sp
import torch

import course_lib as cl

# --------------------------------------------------------------------------------------
# Chapter 2: sinusoidal encodings
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d_model", "base"), [(4, 10000.0), (128, 10000.0), (512, 10000.0), (64, 500.0)]
)
def test_wavelengths_form_a_geometric_ladder(d_model: int, base: float) -> None:
    """(sin-wavelength): lambda_i = 2 pi b^(2i/d), from 2 pi to 2 pi b^((d-2)/d)."""
    pe = cl.sinusoidal_encoding(3, d_model, base=base).double()
    # omega_i read off the table itself: the angle of pair i at position 1.
    omega = torch.atan2(pe[1, 0::2], pe[1, 1::2])  # (d/2,), all in (0, 1]
    wavelength = 2 * math.pi / omega
    i = torch.arange(d_model // 2, dtype=torch.float64)
    expected = 2 * math.pi * base ** (2 * i / d_model)
    torch.testing.assert_close(wavelength, expected, rtol=1e-6, atol=0)
    assert wavelength[0].item() == pytest.approx(2 * math.pi)
    assert wavelength[-1].item() < 2 * math.pi * base
    ratios = wavelength[1:] / wavelength[:-1]
    torch.testing.assert_close(
        ratios, torch.full_like(ratios, base ** (2 / d_model)), rtol=1e-6, atol=0
    )


def test_chapter_2_wavelength_numbers() -> None:
    """d_model = 512: lambda_255 = 60611.5 and neighbours differ by 1.03663."""
    lam = 2 * math.pi * 10000.0 ** (510 / 512)
    assert lam == pytest.approx(60611.5, abs=0.05)
    assert 10000.0 ** (2 / 512) == pytest.approx(1.03663, abs=5e-6)


def test_fairseq_frequencies_reach_exactly_one_ten_thousandth() -> None:
    """Chapter 2: omega_i = 10000^(-i/(d/2-1)) ends at 1e-4 and equals the paper's
    ladder with base 10000^(h/(h-1)), h = d/2 (the form chapter 9 uses)."""
    d = 16
    h = d // 2
    i = torch.arange(h, dtype=torch.float64)
    fairseq = 10000.0 ** (-i / (h - 1))
    assert fairseq[-1].item() == pytest.approx(1e-4, rel=1e-12)
    as_paper = (10000.0 ** (h / (h - 1))) ** (-2 * i / d)
    torch.testing.assert_close(fairseq, as_paper, rtol=1e-12, atol=0)


@pytest.mark.parametrize("start", [0, 10_000, 1_000_000])
def test_every_row_has_squared_length_half_d(start: int) -> None:
    """(sin-norm): ||PE_p||^2 = d/2 for every position, also far out."""
    d = 64
    rows = cl.sinusoidal_encoding(start + 200, d)[start:].double()
    # a float32 sin/cos accurate to 1 ulp (vector kernels vary by CPU) may give 1 + eps
    assert rows.abs().max() <= 1.0 + torch.finfo(torch.float32).eps
    torch.testing.assert_close(
        rows.pow(2).sum(-1),
        torch.full((200,), d / 2, dtype=torch.float64),
        atol=1e-5,
        rtol=0,
    )


@pytest.mark.parametrize("d_model", [2, 4, 16, 64])
def test_row_distance_is_a_cosine_sum_of_the_offset(d_model: int) -> None:
    """(sin-distance): ||PE_p - PE_{p+k}||^2 = 2 sum_i (1 - cos k w_i), for all p."""
    n = 300
    pe = cl.sinusoidal_encoding(n, d_model).double()
    dist2 = torch.cdist(pe, pe, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    omega = torch.tensor(
        [10000.0 ** (-2 * i / d_model) for i in range(d_model // 2)],
        dtype=torch.float64,
    )
    k = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).double()  # q - p
    expected = 2 * (1 - torch.cos(k[..., None] * omega)).sum(-1)
    torch.testing.assert_close(dist2, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("d_model", [2, 4, 8])
def test_closest_pair_of_rows_is_found_by_scanning_offsets(d_model: int) -> None:
    """Chapter 2: the closest pair among N rows is min_k ||PE_0 - PE_k||."""
    n = 1500
    pe = cl.sinusoidal_encoding(n, d_model).double()
    all_pairs = torch.cdist(pe, pe, compute_mode="donot_use_mm_for_euclid_dist")
    all_pairs.fill_diagonal_(math.inf)
    by_offset = (pe[1:] - pe[0]).norm(dim=-1).min()
    # Equal up to the float32 rounding of the table's entries (about 6e-8 each).
    assert all_pairs.min().item() == pytest.approx(by_offset.item(), abs=1e-6)
    assert int(all_pairs.argmin()) % n - int(all_pairs.argmin()) // n in (
        int((pe[1:] - pe[0]).norm(dim=-1).argmin()) + 1,
        -(int((pe[1:] - pe[0]).norm(dim=-1).argmin()) + 1),
    )


def test_chapter_2_row_separation_numbers() -> None:
    """Over 100 000 offsets: d=4 gets within 0.0016 at offset 84 823, d=8 within
    0.0386 at 69 115, while for d=16 and d=64 the closest row is the neighbour
    (1.0147 and 1.4718 apart)."""
    k = torch.arange(1, 100_001, dtype=torch.float64)
    claims = {4: (0.0016, 84823), 8: (0.0386, 69115), 16: (1.0147, 1), 64: (1.4718, 1)}
    for d, (value, offset) in claims.items():
        omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        dist = torch.sqrt(2 * (1 - torch.cos(k[:, None] * omega)).sum(-1))
        assert dist.min().item() == pytest.approx(value, abs=5e-5)
        assert int(dist.argmin()) + 1 == offset


def test_embedding_scale_matches_token_and_position_sizes(gen) -> None:
    """(sin-scale): with std d^(-1/2) embeddings, ||x|| ~ 1, ||sqrt(d) x|| ~ sqrt(d),
    ||PE|| = sqrt(d/2); the token share of the energy is 2/3 scaled, 1/(1+d/2)
    unscaled; with std-1 embeddings the scaled tokens are sqrt(2d) times longer."""
    d = 512
    x = torch.randn(4000, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    assert x.norm(dim=-1).mean().item() == pytest.approx(1.0, abs=0.01)
    pe = cl.sinusoidal_encoding(4000, d).double()
    for scale, share in ((1.0, 1 / (1 + d / 2)), (math.sqrt(d), 2 / 3)):
        h = scale * x + pe
        got = (scale * x).pow(2).sum() / h.pow(2).sum()
        assert got.item() == pytest.approx(share, rel=0.03)
    unit = torch.randn(2000, d, generator=gen, dtype=torch.float64)
    ratio = (math.sqrt(d) * unit).norm(dim=-1).mean() / math.sqrt(d / 2)
    assert ratio.item() == pytest.approx(math.sqrt(2 * d), rel=0.01)


def test_module_scale_is_the_chapters_formula(gen) -> None:
    """SinusoidalPositionalEncoding(scale_embeddings=True) computes sqrt(d) x + PE."""
    x = torch.randn(2, 7, 16, generator=gen)
    enc = cl.SinusoidalPositionalEncoding(16, scale_embeddings=True)
    torch.testing.assert_close(enc(x), 4.0 * x + cl.sinusoidal_encoding(7, 16))


def test_rows_never_reached_by_training_stay_at_their_initial_values(gen) -> None:
    """Chapter 2: a 16-row table trained on length-8 inputs changes rows 0..7 only."""
    learned = cl.LearnedPositionalEncoding(16, 8, generator=gen)
    before = learned.weight.detach().clone()
    opt = torch.optim.SGD(learned.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 8, 8, generator=gen)
        loss = (learned(x) - x.flip(1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        assert torch.equal(learned.weight.grad[8:], torch.zeros(8, 8))
        assert (learned.weight.grad[:8].abs().sum(-1) > 0).all()
        opt.step()
    assert torch.equal(learned.weight.detach()[8:], before[8:])


def test_left_padded_sentence_gives_the_unpadded_attention_outputs(gen) -> None:
    """Chapter 2: counted position ids + a key mask reproduce the unpadded outputs;
    column ids do not."""
    d = 16
    enc = cl.SinusoidalPositionalEncoding(d)
    w_q, w_k, w_v = (torch.randn(d, d, generator=gen) / 4 for _ in range(3))

    def attend(h, mask):
        out, _ = cl.scaled_dot_product_attention(
            h @ w_q, h @ w_k, h @ w_v, mask=mask.bool()[:, None, :]
        )
        return out

    sentence = torch.randn(4, d, generator=gen)
    for pad_left in (1, 2, 5):
        batch = torch.cat((torch.randn(pad_left, d, generator=gen), sentence))[None]
        mask = torch.cat((torch.zeros(pad_left), torch.ones(4)))[None].long()
        ids = cl.position_ids_from_attention_mask(mask)
        alone = attend(enc(sentence[None]), torch.ones(1, 4))[0]
        padded = attend(enc(batch, position_ids=ids), mask)[0, pad_left:]
        by_column = attend(enc(batch), mask)[0, pad_left:]
        torch.testing.assert_close(padded, alone, atol=1e-5, rtol=0)
        assert (by_column - alone).abs().max() > 1e-2


def test_position_id_is_the_count_of_real_tokens_before_it(gen) -> None:
    """(sin-position-ids): for every real slot, the id is the number of real slots
    before it (counted by a plain loop here), padding on either side or in between;
    the library gives padding 0."""
    masks = [torch.randint(0, 2, (3, 9), generator=gen) for _ in range(4)]
    masks.append(torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]]))
    for mask in masks:
        ids = cl.position_ids_from_attention_mask(mask)
        for b, row in enumerate(mask.tolist()):
            for t, real in enumerate(row):
                if real:
                    assert ids[b, t].item() == sum(row[:t])
                else:
                    assert ids[b, t].item() == 0


def test_offset_only_dot_product_is_blind_to_direction(gen) -> None:
    """Chapter 2: from every anchor p, PE_p . PE_{p+k} = PE_p . PE_{p-k}; a Gram matrix
    that is merely symmetric (any Gram matrix) does not have this property."""
    pe = cl.sinusoidal_encoding(200, 64).double()
    gram = pe @ pe.T
    p = torch.arange(50, 150)[:, None]
    k = torch.arange(1, 50)[None, :]
    torch.testing.assert_close(gram[p, p + k], gram[p, p - k], atol=1e-5, rtol=0)
    other = torch.randn(200, 64, generator=gen, dtype=torch.float64)
    other_gram = other @ other.T
    torch.testing.assert_close(other_gram, other_gram.T)  # symmetric, as every Gram
    assert (other_gram[p, p + k] - other_gram[p, p - k]).abs().max() > 1.0


def test_adamw_decay_shrinks_the_unreached_rows(gen) -> None:
    """Chapter 2: under AdamW, rows without gradient are multiplied by (1 - lr wd) per
    step (Adam's own update is 0 for them); without decay they stay put."""
    lr, decay, steps = 0.01, 0.1, 20
    for wd in (decay, 0.0):
        learned = cl.LearnedPositionalEncoding(16, 8, generator=gen)
        before = learned.weight.detach().clone()
        opt = torch.optim.AdamW(learned.parameters(), lr=lr, weight_decay=wd)
        for _ in range(steps):
            x = torch.randn(4, 8, 8, generator=gen)
            loss = (learned(x) - x.flip(1)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        after = learned.weight.detach()
        expected = before[8:] * (1 - lr * wd) ** steps
        torch.testing.assert_close(after[8:], expected, rtol=1e-6, atol=1e-7)
        assert (after[:8] - before[:8]).abs().max() > 1e-3
    assert (1 - lr * decay) ** steps < 0.99


# --------------------------------------------------------------------------------------
# Chapter 3: relative offsets are rotations
# --------------------------------------------------------------------------------------


def _ccw(a: float) -> torch.Tensor:
    """The counter-clockwise rotation R(a), written out."""
    return torch.tensor(
        [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64
    )


@pytest.mark.parametrize("alpha", [0.3, 1.0, -2.5, 7.0])
def test_offset_block_is_the_transposed_ccw_rotation(alpha: float) -> None:
    """Chapter 3: B(alpha) = R(alpha)^T = R(-alpha); R(k w) shifts backwards."""
    block = cl.offset_matrix(1, 2, base=10000.0, dtype=torch.float64)  # w_0 = 1
    torch.testing.assert_close(block, _ccw(1.0).T)
    b = sp.Symbol("b", real=True)
    sym_block = cl.derive_offset_block().block.subs(
        {sp.Symbol("k", real=True): 1, sp.Symbol("omega", real=True): b}
    )
    numeric = torch.tensor(
        [[float(v.subs(b, alpha)) for v in row] for row in sym_block.tolist()],
        dtype=torch.float64,
    )
    torch.testing.assert_close(numeric, _ccw(-alpha))
    pair = cl.sinusoidal_encoding(12, 2).double()
    torch.testing.assert_close(_ccw(3.0) @ pair[5], pair[2], atol=1e-6, rtol=0)


def test_quadratic_form_of_the_offset_matrix_is_the_cosine() -> None:
    """(rot-quadratic): x^T B(k w) x = cos(k w) for x = (sin p w, cos p w) (SymPy),
    and PE_p^T M(k) PE_p = sum_i cos(k w_i) for every p (numerically)."""
    d = cl.derive_offset_block()
    x = cl.symbolic_pe_pair(d.p, d.omega)
    assert sp.simplify((x.T * d.block * x)[0, 0] - sp.cos(d.k * d.omega)) == 0

    pe = cl.sinusoidal_encoding(500, 32).double()
    omega = 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    for k in (1, 6, 37, 400):
        quad = torch.einsum(
            "pi,ij,pj->p", pe, cl.offset_matrix(k, 32, dtype=torch.float64), pe
        )
        expected = torch.cos(k * omega).sum().expand(500)
        torch.testing.assert_close(quad, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("j", [1, 3, 10])
def test_bilinear_score_with_m_j_attends_j_places_back(j: int) -> None:
    """Chapter 3: PE_p^T M(j) PE_q = PE_p . PE_{q+j}, largest at q = p - j."""
    n, d = 60, 64
    pe = cl.sinusoidal_encoding(n + j, d).double()
    scores = pe[:n] @ cl.offset_matrix(j, d, dtype=torch.float64) @ pe[:n].T
    torch.testing.assert_close(scores, pe[:n] @ pe[j : n + j].T, atol=1e-6, rtol=0)
    assert torch.equal(scores[j:].argmax(-1), torch.arange(n - j))


def test_hand_computation_for_d_model_4() -> None:
    """Chapter 3: PE(0).PE(1) = PE(5).PE(6) = cos 1 + cos(1/100) ~ 1.540252,
    PE(0).PE(5) = cos 5 + cos(1/20) ~ 1.282412, and offset 6 gives more than
    offset 1 (1.958371)."""

    def pe(p):  # PE(p) for d_model = 4, exact
        return sp.Matrix(
            [
                sp.sin(p),
                sp.cos(p),
                sp.sin(sp.Rational(p, 100)),
                sp.cos(sp.Rational(p, 100)),
            ]
        )

    assert pe(0) == sp.Matrix([0, 1, 0, 1])
    one = sp.cos(1) + sp.cos(sp.Rational(1, 100))
    five = sp.cos(5) + sp.cos(sp.Rational(1, 20))
    assert sp.simplify(pe(0).dot(pe(1)) - one) == 0
    assert sp.simplify(pe(5).dot(pe(6)) - one) == 0
    assert sp.simplify(pe(0).dot(pe(5)) - five) == 0
    assert float(one) == pytest.approx(1.540252, abs=5e-7)
    assert float(five) == pytest.approx(1.282412, abs=5e-7)
    six = math.cos(6) + math.cos(0.06)
    assert six == pytest.approx(1.958371, abs=5e-7) and six > float(one)
    # The decimals printed in the chapter, from the formula (not the library).
    printed = {
        1: (0.84147, 0.54030, 0.01000, 0.99995),
        5: (-0.95892, 0.28366, 0.04998, 0.99875),
        6: (-0.27942, 0.96017, 0.05996, 0.99820),
    }
    for p, row in printed.items():
        assert [float(v) for v in pe(p)] == pytest.approx(row, abs=5e-6)


# --------------------------------------------------------------------------------------
# Chapter 4: RoPE
# --------------------------------------------------------------------------------------


def test_plane_dot_product_is_the_real_part_of_a_conjugate_product() -> None:
    """(rope-dot-complex) and (rope-complex), with SymPy."""
    a, b, c, d, m, n, th = sp.symbols("a b c d m n theta", real=True)
    z, w = a + sp.I * b, c + sp.I * d
    assert sp.expand(sp.re(z * sp.conjugate(w)) - (a * c + b * d)) == 0
    score = sp.re(
        sp.expand(z * sp.exp(sp.I * m * th) * sp.conjugate(w * sp.exp(sp.I * n * th)))
    )
    by_offset = (
        a * c * sp.cos((m - n) * th)
        + b * d * sp.cos((m - n) * th)
        + (a * d - b * c) * sp.sin((m - n) * th)
    )
    assert sp.simplify(sp.expand_trig(sp.expand_complex(score) - by_offset)) == 0
    # (R(m th) q)^T R(n th) k equals Re[q conj(k) e^{i(m-n) th}] (the real form).
    rot = sp.Matrix(
        [[sp.cos(m * th), -sp.sin(m * th)], [sp.sin(m * th), sp.cos(m * th)]]
    )
    rot_n = rot.subs(m, n)
    real_form = ((rot * sp.Matrix([a, b])).T * (rot_n * sp.Matrix([c, d])))[0, 0]
    assert sp.simplify(sp.expand_trig(real_form - by_offset)) == 0


@pytest.mark.parametrize("theta", [0.5, 1.0])
def test_only_a_linear_angle_and_a_fixed_length_keep_scores_relative(
    gen, theta: float
) -> None:
    """Chapter 4: angle m theta keeps score(m, n) a function of m - n; angle m^2
    theta or a length 1.1^m do not; zeta^m on queries with zeta^-n on keys (xPos)
    keeps it, scaled by zeta^(m-n)."""
    q, k = torch.randn(2, 1, 2, generator=gen, dtype=torch.float64)

    def score(fq, fk, m, n):
        return (fq(q, m) @ fk(k, n).T).item()

    def turn(x, a):
        return x @ _ccw(a).T

    def rope(x, p):
        return turn(x, p * theta)

    def square(x, p):
        return turn(x, p**2 * theta)

    def grow(x, p):
        return 1.1**p * turn(x, p * theta)

    placements = [(1, 0), (4, 3), (9, 8)]
    same = [score(rope, rope, m, n) for m, n in placements]
    assert max(same) - min(same) < 1e-12
    for bad in (square, grow):
        values = [score(bad, bad, m, n) for m, n in placements]
        assert max(values) - min(values) > 1e-2
    zeta = 0.9

    def xq(x, p):
        return zeta**p * turn(x, p * theta)

    def xk(x, p):
        return zeta ** (-p) * turn(x, p * theta)

    for m, n in placements:
        assert score(xq, xk, m, n) == pytest.approx(
            zeta ** (m - n) * score(rope, rope, m, n), abs=1e-12
        )


@pytest.mark.parametrize("dim", [2, 8, 32])
def test_score_is_q_times_the_offset_rotation_times_k(gen, dim: int) -> None:
    """(rope-score): (R_m q)^T (R_n k) = q^T R_{n-m} k with the block matrix."""
    q, k = torch.randn(2, 1, dim, generator=gen, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)

    def big_r(pos):
        return torch.block_diag(*[_ccw(pos * t) for t in theta.tolist()])

    for m, n in ((0, 0), (7, 2), (3, 40), (1000, 999)):
        lhs = (
            cl.apply_rope(q, torch.tensor([m])) @ cl.apply_rope(k, torch.tensor([n])).T
        )
        assert lhs.item() == pytest.approx((q @ big_r(n - m) @ k.T).item(), abs=1e-9)


def test_rotate_half_formula(gen) -> None:
    """(rope-half): x * [cos|cos] + [-x2 | x1] * [sin|sin] is the "half" convention."""
    seq, d = 9, 12
    x = torch.randn(2, seq, d, generator=gen, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(seq, dtype=torch.float64)[:, None] * theta  # (seq, d/2)
    cos2, sin2 = ang.cos().repeat(1, 2), ang.sin().repeat(1, 2)  # (seq, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    expected = x * cos2 + torch.cat((-x2, x1), dim=-1) * sin2
    torch.testing.assert_close(cl.apply_rope(x, convention="half"), expected)


@pytest.mark.parametrize(("dim", "seed"), [(2, 0), (16, 1), (64, 2), (128, 3)])
def test_abel_summation_identity_and_bound(dim: int, seed: int) -> None:
    """(rope-abel): sum_i h_i e^{i r th_i} = -sum_i (h_{i+1} - h_i) S_{i+1}, and
    |score| <= max_i |h_{i+1} - h_i| * sum_j |S_j|, at many distances."""
    g = torch.Generator().manual_seed(seed)
    theta = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    for _ in range(5):
        q, k = torch.randn(2, dim, generator=g, dtype=torch.float64)
        h = torch.complex(q[0::2], q[1::2]) * torch.complex(k[0::2], k[1::2]).conj()
        h_next = torch.cat((h[1:], torch.zeros(1, dtype=h.dtype)))
        for r in (0, 1, 7, 100, 2000):
            m, n = r + 5, 5
            score = (
                cl.apply_rope(q[None], torch.tensor([m]))
                @ cl.apply_rope(k[None], torch.tensor([n])).T
            ).item()
            e = torch.polar(torch.ones_like(theta), r * theta)  # e^{i r th_i}
            direct = (h * e).sum()
            partial = e.cumsum(0)  # S_1 .. S_{d/2}
            abel = -((h_next - h) * partial).sum()
            assert direct.real.item() == pytest.approx(score, abs=1e-9)
            assert abs(abel - direct).item() < 1e-9
            bound = (h_next - h).abs().max() * partial.abs().sum()
            assert abs(score) <= bound.item() + 1e-12


def test_random_queries_and_keys_do_not_decay_on_average(gen) -> None:
    """Chapter 4: for independent random q, k the mean score is ~0 at every distance,
    while the all-ones score falls from d at r = 0 to about a third by r = 200."""
    d, n = 64, 4000
    q, k = torch.randn(2, n, d, generator=gen, dtype=torch.float64)
    for r in (0, 3, 200):
        s = (cl.apply_rope(q[:, None], torch.tensor([r]))[:, 0] * k).sum(-1)  # (n,)
        assert abs(s.mean().item()) < 4 * s.std().item() / math.sqrt(n)
    ones = torch.ones(201, d, dtype=torch.float64)
    rotated = cl.apply_rope(ones)  # positions 0..200
    score = rotated @ rotated[0]
    assert score[0].item() == pytest.approx(d)
    assert score[200].item() < 0.4 * d
    assert score[100:].max().item() < 0.6 * d


def test_chapter_4_base_numbers() -> None:
    """Head dim 128, context 8192: base 1e4 gives a longest wavelength of 54 410 and 14
    pairs that turn less than once; base 5e5 gives 2 559 196 and 29 pairs."""
    for base, longest, slow, turn in (
        (1e4, 54_410, 14, 0.946),
        (5e5, 2_559_196, 29, 0.020),
    ):
        i = torch.arange(64, dtype=torch.float64)
        lam = 2 * math.pi * base ** (2 * i / 128)
        assert round(lam[-1].item()) == longest
        assert int((lam > 8192).sum()) == slow
        assert 8192 * base ** (-126 / 128) == pytest.approx(turn, abs=5e-4)
        torch.testing.assert_close(
            cl.rope_frequencies(128, base=base, dtype=torch.float64),
            2 * math.pi / lam,
            rtol=1e-12,
            atol=0,
        )


def test_cache_with_restarted_positions_differs_from_the_full_pass(gen) -> None:
    """Chapter 4: rotating new queries at 0..s-1 instead of t..t+s-1 changes scores,
    while shifting every position by the same amount does not."""
    length, t, d = 10, 6, 16
    q, k = torch.randn(2, 1, length, d, generator=gen, dtype=torch.float64)
    full = cl.apply_rope(q) @ cl.apply_rope(k).transpose(-2, -1)
    keys = cl.apply_rope(k)
    restarted = cl.apply_rope(q[..., t:, :]) @ keys.transpose(-2, -1)
    assert (restarted - full[..., t:, :]).abs().max() > 0.1
    shift = torch.arange(length) + 1000
    shifted = cl.apply_rope(q, shift) @ cl.apply_rope(k, shift).transpose(-2, -1)
    torch.testing.assert_close(shifted, full, atol=1e-9, rtol=0)


@pytest.mark.parametrize("sign", [1, -1])
def test_either_rotation_direction_keeps_scores_relative(gen, sign: int) -> None:
    """Chapter 3: rotating queries and keys by R(m theta) or by R(-m theta) both give
    scores that depend on the offset only: q^T R(+-(n-m) theta) k."""
    q, k = torch.randn(2, 2, generator=gen, dtype=torch.float64)
    theta = 0.7
    for m, n in ((1, 0), (5, 4), (12, 3), (30, 21)):
        score = (_ccw(sign * m * theta) @ q) @ (_ccw(sign * n * theta) @ k)
        expected = q @ _ccw(sign * (n - m) * theta) @ k
        assert score.item() == pytest.approx(expected.item(), abs=1e-12)


def test_four_terms_and_the_position_position_term(gen) -> None:
    """(rope-four-terms): the score of added encodings is the sum of the four terms;
    with W_q^T W_k = M(j) the position-position term depends on m - n only and peaks
    at m - n = j, while a mixed term changes with the absolute position."""
    d, d_model, seq = 8, 16, 30
    w_q = torch.randn(d, d_model, generator=gen, dtype=torch.float64)
    w_k = torch.randn(d, d_model, generator=gen, dtype=torch.float64)
    x = torch.randn(seq, d_model, generator=gen, dtype=torch.float64)
    pe = cl.sinusoidal_encoding(seq, d_model).double()
    a = w_q.T @ w_k  # (d_model, d_model)
    full = (x + pe) @ a @ (x + pe).T
    terms = x @ a @ x.T + x @ a @ pe.T + pe @ a @ x.T + pe @ a @ pe.T
    torch.testing.assert_close(full, terms)
    j = 3
    pos_pos = pe @ cl.offset_matrix(j, d_model, dtype=torch.float64) @ pe.T
    for off in (-2, 0, 3, 7):
        diag = torch.diagonal(pos_pos, offset=-off)  # entries with m - n = off
        assert (diag - diag[0]).abs().max() < 1e-5
    assert torch.equal(pos_pos[j:].argmax(-1), torch.arange(seq - j))
    mixed = x[0] @ a @ pe.T  # token 0's content against every absolute position
    assert (mixed - mixed[0]).abs().max() > 1e-1


def test_conjugation_turns_the_complex_score_into_the_real_form() -> None:
    """(rope-conjugation): Re[q conj(k) e^{i(m-n)th}] = Re[conj(q) k e^{i(n-m)th}]
    = q^T R((n-m)th) k = (R((m-n)th) q)^T k."""
    a, b, c, d, m, n, th = sp.symbols("a b c d m n theta", real=True)
    q, k = a + sp.I * b, c + sp.I * d
    qv, kv = sp.Matrix([a, b]), sp.Matrix([c, d])

    def rot(angle):
        return sp.Matrix(
            [[sp.cos(angle), -sp.sin(angle)], [sp.sin(angle), sp.cos(angle)]]
        )

    first = sp.expand_complex(q * sp.conjugate(k) * sp.exp(sp.I * (m - n) * th))
    conj = sp.expand_complex(sp.conjugate(q) * k * sp.exp(sp.I * (n - m) * th))
    forms = [
        sp.re(conj),
        (qv.T * rot((n - m) * th) * kv)[0, 0],
        ((rot((m - n) * th) * qv).T * kv)[0, 0],
    ]
    for form in forms:
        assert sp.simplify(sp.expand_trig(sp.re(first) - form)) == 0
    # the imaginary parts differ in sign: only the real part survives conjugation
    assert sp.simplify(sp.expand_trig(sp.im(first) + sp.im(conj))) == 0
    assert sp.simplify(sp.expand_trig(sp.im(first))) != 0


@pytest.mark.parametrize("dim", [2, 8, 14])
def test_roformer_elementwise_form(gen, dim: int) -> None:
    """(rope-elementwise), RoFormer eq. 34: x * [cos th_0, cos th_0, ...] +
    [-x_1, x_0, -x_3, x_2, ...] * [sin th_0, sin th_0, ...] is apply_rope."""
    seq = 7
    x = torch.randn(3, seq, dim, generator=gen, dtype=torch.float64)
    pos = torch.tensor([0, 1, 5, 9, 100, 1000, 4097])
    theta = torch.tensor(
        [10000.0 ** (-2 * i / dim) for i in range(dim // 2)], dtype=torch.float64
    )
    ang = pos.double()[:, None] * theta  # (seq, d/2)
    cos2 = ang.cos().repeat_interleave(2, dim=-1)  # cos m th_0, cos m th_0, ...
    sin2 = ang.sin().repeat_interleave(2, dim=-1)
    swapped = torch.empty_like(x)
    swapped[..., 0::2], swapped[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    torch.testing.assert_close(cl.apply_rope(x, pos), x * cos2 + swapped * sin2)


def test_converting_weights_needs_the_biases_too(gen) -> None:
    """Chapter 4: permuting per head the rows of W_q, W_k and their biases gives the
    interleaved scores under rotate-half; converting the weights alone does not."""
    h, hd, d_model, seq = 3, 8, 12, 5
    x = torch.randn(seq, d_model, generator=gen, dtype=torch.float64)
    w_q, w_k = torch.randn(2, h * hd, d_model, generator=gen, dtype=torch.float64)
    b_q, b_k = torch.randn(2, h * hd, generator=gen, dtype=torch.float64)
    perm = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])
    rows = (torch.arange(h)[:, None] * hd + perm).flatten()  # per head

    def scores(wq, bq, wk, bk, convention):
        q = (x @ wq.T + bq).view(seq, h, hd).transpose(0, 1)
        k = (x @ wk.T + bk).view(seq, h, hd).transpose(0, 1)
        q, k = (cl.apply_rope(t, convention=convention) for t in (q, k))
        return q @ k.transpose(-2, -1)

    original = scores(w_q, b_q, w_k, b_k, "interleaved")
    both = scores(w_q[rows], b_q[rows], w_k[rows], b_k[rows], "half")
    torch.testing.assert_close(both, original)
    torch.testing.assert_close(
        cl.rope_interleaved_to_half_weights(w_q, h, hd), w_q[rows]
    )
    torch.testing.assert_close(
        cl.rope_interleaved_to_half_weights(b_q, h, hd), b_q[rows]
    )
    weights_only = scores(w_q[rows], b_q, w_k[rows], b_k, "half")
    assert (weights_only - original).abs().max() > 1e-2


def test_half_precision_positions_and_angles() -> None:
    """Chapter 4, precision: bfloat16 holds integers exactly to 256 and float16 to 2048
    (so positions 0..8191 collapse to fewer values); rounding the angle m theta_0 to
    bfloat16 at m ~ 4000 is wrong by more than 0.5 in the cosine, rounding the cosine
    itself costs at most 2^-9."""
    positions = torch.arange(8192)
    for dtype, exact_to in ((torch.bfloat16, 256), (torch.float16, 2048)):
        small = torch.arange(exact_to + 1)
        assert torch.equal(small.to(dtype).long(), small)
        assert positions.to(dtype).unique().numel() < 8192
        assert int(torch.tensor(exact_to + 1).to(dtype).item()) != exact_to + 1
    far = torch.tensor([4000.0, 4001.0, 4002.0, 4003.0], dtype=torch.float64)
    exact = torch.cos(far)
    assert (torch.cos(far.bfloat16().double()) - exact).abs().max() > 0.5
    assert (exact.bfloat16().double() - exact).abs().max() <= 2.0**-9


@pytest.mark.parametrize(
    ("n_heads", "head_dim", "d_in"), [(1, 2, 3), (4, 8, 32), (2, 16, 64), (8, 6, 12)]
)
def test_per_head_conversion_is_the_llama_conversion_scripts_permute(
    gen, n_heads: int, head_dim: int, d_in: int
) -> None:
    """Chapter 4 and ex04: the per-head row permutation equals the reshape formula of
    the `permute` helper in transformers' convert_llama_weights_to_hf.py, written out
    here: view as (heads, head_dim/2, 2, d_in), swap the middle axes, flatten back.
    Its inverse (the conversion scripts' reverse_permute) swaps them the other way.
    (d_in differs from n_heads * head_dim for grouped-query key projections.)"""
    rows = n_heads * head_dim
    w = torch.randn(rows, d_in, generator=gen, dtype=torch.float64)
    by_reshape = (
        w.view(n_heads, head_dim // 2, 2, d_in).transpose(1, 2).reshape(rows, d_in)
    )
    converted = cl.rope_interleaved_to_half_weights(w, n_heads, head_dim)
    assert torch.equal(converted, by_reshape)
    back = (
        converted.view(n_heads, 2, head_dim // 2, d_in)
        .transpose(1, 2)
        .reshape(rows, d_in)
    )
    assert torch.equal(back, w)
    assert torch.equal(
        cl.rope_half_to_interleaved_weights(converted, n_heads, head_dim), w
    )


@pytest.mark.parametrize(
    ("chapter", "graded"),
    [
        ("02-sinusoidal", ["sinusoidal_encoding", "position_ids_from_attention_mask"]),
        ("03-rotation", ["offset_matrix"]),
        (
            "04-rope",
            [
                "apply_rope",
                "_rotate",
                "apply_rope_complex",
                "rope_interleaved_to_half_weights",
                "_permute_head_rows",
            ],
        ),
    ],
)
def test_class_edition_sources_list_no_graded_code(chapter: str, graded: list) -> None:
    """Issue 19, source level (test_publish checks the built HTML): the class edition
    of chapters 2-4 lists none of the graded functions, and no cell assembles a whole
    graded table (chapter 2's former pe_by_loops, chapter 4's stacked block-matrix
    rotation, chapter 3's block_diag of the SymPy block)."""
    from course_lib.grading.editions.launch import strip_open_only

    root = Path(__file__).resolve().parent.parent
    full = (root / "book" / f"{chapter}.md").read_text(encoding="utf-8")
    text = strip_open_only(full)
    assert text != full  # the open edition has the solution dropdown
    for name in graded:  # a listing, or (ex03) the model answer written out
        assert f":pyobject: {name}\n" in full or f"def {name}(" in full
        assert f":pyobject: {name}\n" not in text and f"def {name}(" not in text
    for pattern in (
        "def pe_by_loops",
        "*[torch.tensor(block_fn(shift, om)",
        "for pos in range(seq)], dim=-2",
        # issue 33: a rotation matrix per position (ex04 apply_rope by a
        # loop), the complex-form rotation of a whole tensor, a reusable
        # exact PE(p) for ex03's hand computation, the cumulative-sum form
        # of the position ids (ex02), the per-head row permutation (ex04)
        "def rope_matrix",
        "view_as_complex(q.reshape(",
        "def pe_exact",
        "\\sum_{s \\le t} m_{b,s} - 1",
        "\\sum_{s \\le t} a_{r,s} - 1",  # chapter 2's mask is a_{r,t} since the re-read
        "output rows of $W_q$",
        "permutes its *rows*",
    ):
        assert pattern not in text, pattern


def test_class_edition_of_chapter_9_prints_no_graded_case() -> None:
    """Issue 33: chapter 9 prints ALiBi slopes for 9 heads (no grader's count, and no
    graded count's slopes are a prefix of them other than 8 heads', 1..8 in -log2,
    which says nothing the chapter does not state; 14 heads showed 10 and 12) and
    position ids for masks no grader uses; its RoPE conversion leaves the per-head
    rows to exercise 4 in the class edition."""
    import ast
    import inspect
    import re
    import textwrap

    from course_lib.checks import ex02_sinusoidal, ex05_alibi
    from course_lib.grading.editions.launch import strip_open_only

    root = Path(__file__).resolve().parent.parent
    full = (root / "book" / "09-conventions-errata.md").read_text(encoding="utf-8")
    text = strip_open_only(full)
    assert "output rows of $W_q$" in full and "output rows of $W_q$" not in text
    printed = set(re.findall(r"cl\.alibi_slopes\((\d+)\)\.double\(\)\.log2\(\)", text))
    assert printed == {"9"}
    graded_counts = set()  # every int tuple in the public check and the hidden grade
    # (a term's seed draws its hidden counts from 17 to 128, above the 9 shown here)
    for fn in (ex05_alibi._public_alibi_slopes, ex05_alibi._hidden_slope_counts):
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
            if isinstance(node, ast.Tuple) and all(
                isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts
            ):
                graded_counts |= {e.value for e in node.elts}
    assert {8, 17} <= graded_counts  # the tuples were found (public 8, hidden 17)
    assert not {int(n) for n in printed} & graded_counts
    for shown_n in map(int, printed):  # the library's slopes share prefixes
        shown_exps = (-cl.alibi_slopes(shown_n).double().log2()).tolist()
        for n in graded_counts:
            exps = (-cl.alibi_slopes(n).double().log2()).tolist()
            if n < shown_n and shown_exps[:n] == exps:
                assert exps == list(range(1, n + 1)) or n <= 2, n
    rows = set()
    for mask in ex02_sinusoidal._PUBLIC_MASKS:
        rows |= {tuple(r) for r in mask}
    for mask in ex02_sinusoidal._hidden_masks():
        rows |= {tuple(r) for r in mask.long().tolist()}
    shown = re.findall(r"(right|left)_padded = torch\.tensor\((\[\[.*?\]\])\)", text)
    assert len(shown) == 2
    for _, literal in shown:
        for row in eval(literal):  # noqa: S307 - a literal list from the chapter
            assert tuple(row) not in rows or len(set(row)) == 1, row
