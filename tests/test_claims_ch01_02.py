"""Claims of chapters 1 and 2 added or corrected by the chapter review
(issue 18, item 5).

Each test names the statement it checks. Expected values come from closed forms written
out here, brute force, or the peer code the chapter names; none is copied from the
chapter's output. What ``test_book_equations_01.py`` and
``test_book_equations_02_04.py`` already check is not repeated.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

import course_lib as cl

ROOT = Path(__file__).resolve().parent.parent
CH1 = ROOT / "book" / "01-permutation.md"
CH2 = ROOT / "book" / "02-sinusoidal.md"


def _prose(chapter: Path) -> str:
    """The chapter's text outside code cells and outside MyST directive options."""
    text = chapter.read_text()
    return re.sub(r"```.*?```", "", text, flags=re.S)


# --------------------------------------------------------------------------------------
# Chapter 1
# --------------------------------------------------------------------------------------


def test_one_causal_layer_with_a_bos_token_writes_the_absolute_position() -> None:
    """Chapter 1 (Kazemnejad et al., Theorem 1): with a beginning-of-sequence token, one
    causal attention layer can write each token's absolute position into its output;
    the same layer without the mask cannot (every token gets the same number)."""
    n, d = 9, 4
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    q = torch.zeros(n, d, dtype=torch.float64)  # equal scores: uniform over the seen
    v = torch.zeros(n, 1, dtype=torch.float64)
    v[0] = 1.0  # only the BOS token (position 0) carries a 1
    causal, _ = cl.scaled_dot_product_attention(q, x, v, mask=cl.causal_mask(n, n))
    expected = 1.0 / torch.arange(1, n + 1, dtype=torch.float64)  # 1 / (t + 1)
    torch.testing.assert_close(causal[:, 0], expected, rtol=1e-12, atol=0)
    position = (1.0 / causal[:, 0]).round().long() - 1  # read the position back
    assert torch.equal(position, torch.arange(n))
    full, _ = cl.scaled_dot_product_attention(q, x, v)
    uniform = torch.full((n,), 1.0 / n, dtype=torch.float64)
    torch.testing.assert_close(full[:, 0], uniform)


def test_rotating_queries_and_keys_breaks_equivariance(gen) -> None:
    """Chapter 1, What to remember: encodings applied to queries and keys (RoPE)
    break the symmetry as well: SA(PX) != P SA(X) once q and k are rotated by their
    positions."""
    n, d_model, d_k = 6, 8, 4
    x = torch.randn(n, d_model, generator=gen, dtype=torch.float64)
    w_q, w_k, w_v = torch.randn(3, d_model, d_k, generator=gen, dtype=torch.float64)

    def rotary_head(h: torch.Tensor) -> torch.Tensor:
        q, k = cl.apply_rope(h @ w_q), cl.apply_rope(h @ w_k)  # (n, d_k) each
        out, _ = cl.scaled_dot_product_attention(q, k, h @ w_v)
        return out

    p = cl.permutation_matrix([5, 4, 3, 2, 1, 0]).double()
    gap = (rotary_head(p @ x) - p @ rotary_head(x)).abs().max().item()
    assert gap > 1e-3
    plain = (
        (
            cl.self_attention(p @ x, w_q, w_k, w_v)
            - p @ cl.self_attention(x, w_q, w_k, w_v)
        )
        .abs()
        .max()
        .item()
    )
    assert plain < 1e-12


def test_chapter_1_cites_what_it_attributes() -> None:
    """Chapter 1: the simple recurrence is Elman's (the LSTM adds gates), NoPE's
    mechanism is Haviv et al.'s conjecture and Kazemnejad et al.'s Theorem 1, and the
    cited keys exist in the bibliography."""
    text = CH1.read_text()
    assert "{cite}`elman1990finding`" in text
    assert "conjecture" in text and "Theorem 1" in text
    bib = (ROOT / "book" / "references.bib").read_text()
    for key in set(re.findall(r"\{cite\}`([^`]+)`", text)):
        for k in key.split(","):
            assert re.search(r"@\w+\{" + re.escape(k.strip()) + ",", bib), k


# --------------------------------------------------------------------------------------
# Chapter 2
# --------------------------------------------------------------------------------------


def _loop_table(max_len: int, d_model: int, exponent) -> torch.Tensor:
    """A tutorial-style loop over the columns in steps of two; ``exponent(col, d)``
    is what the loop puts into 10000 ** exponent."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pos = torch.arange(max_len, dtype=torch.float64)
    for col in range(0, d_model, 2):
        angle = pos / 10000.0 ** exponent(col, d_model)
        pe[:, col], pe[:, col + 1] = angle.sin(), angle.cos()
    return pe


@pytest.mark.parametrize("d_model", [8, 64])
def test_the_two_exponent_slips_are_other_bases(d_model: int) -> None:
    """Chapter 2: the paper's exponent 2i/d (i the pair index); using the column index
    in 2i/d doubles it (base 10^8); writing i/d halves it (base 100), all frequencies
    in the fast half of the log range."""
    right = _loop_table(300, d_model, lambda col, d: col / d)  # col = 2i
    torch.testing.assert_close(
        right.float(), cl.sinusoidal_encoding(300, d_model), atol=1e-6, rtol=0
    )
    doubled = _loop_table(300, d_model, lambda col, d: 2 * col / d)
    torch.testing.assert_close(
        doubled,
        cl.sinusoidal_encoding(300, d_model, base=1e8).double(),
        atol=1e-6,
        rtol=0,
    )
    halved = _loop_table(300, d_model, lambda col, d: (col // 2) / d)  # i / d
    torch.testing.assert_close(
        halved,
        cl.sinusoidal_encoding(300, d_model, base=100.0).double(),
        atol=1e-6,
        rtol=0,
    )


def test_marian_cpp_and_tensor2tensor_spacing() -> None:
    """Chapter 2: tensor2tensor's get_timing_signal_1d and Marian's C++
    SinusoidalPositionEmbeddings use omega_i = 10000^(-i/(d/2-1)) in [sin | cos] order.
    Marian's loop (src/tensors/cpu/tensor_operators.cpp), re-expressed: column c holds
    sin (c < d/2) or cos of p * exp(-(c mod d/2) * ln(10000)/(d/2 - 1))."""
    d, n = 16, 50
    half = d // 2
    increment = math.log(10000.0) / (half - 1)
    marian = torch.empty(n, d, dtype=torch.float64)
    for p in range(n):
        for c in range(d):
            v = p * math.exp((c % half) * -increment)
            marian[p, c] = math.sin(v) if c < half else math.cos(v)
    as_paper = cl.sinusoidal_encoding(
        n, d, base=10000.0 ** (half / (half - 1)), layout="concat"
    ).double()
    torch.testing.assert_close(marian, as_paper, atol=1e-6, rtol=0)
    assert math.exp((half - 1) * -increment) == pytest.approx(1e-4, rel=1e-12)


def _closest_offset(d: int, n: int = 100_000) -> tuple[float, int, float]:
    """(min distance, its offset, neighbour distance) over offsets 1..n, by
    ||PE_0 - PE_k||^2 = 2 sum_i (1 - cos k w_i), the frequencies written out here."""
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    best, best_k, neighbour = math.inf, 0, math.nan
    for k in torch.arange(1, n + 1, dtype=torch.float64).split(5_000):
        dist = (2 * (1 - torch.cos(k[:, None] * omega)).sum(-1)).sqrt()
        if math.isnan(neighbour):
            neighbour = dist[0].item()
        if dist.min().item() < best:
            best, best_k = dist.min().item(), int(k[int(dist.argmin())].item())
    return best, best_k, neighbour


@pytest.mark.parametrize("d_model", [16, 32, 128, 256, 512, 1024])
def test_from_width_16_the_nearest_row_is_the_neighbour(d_model: int) -> None:
    """Chapter 2: for every width from 16 to 512 in its list (and 1024), the closest row
    to any row within 100 000 positions is its neighbour."""
    best, best_k, neighbour = _closest_offset(d_model)
    assert best_k == 1
    assert best == pytest.approx(neighbour)


def test_width_64_neighbour_distance_and_float32_rounding() -> None:
    """Chapter 2: at d_model = 64 the neighbour distance is tens of millions of times
    the largest float32 rounding error of an entry in [-1, 1] (u = 2^-24)."""
    _, best_k, neighbour = _closest_offset(64)
    assert best_k == 1
    u = 2.0**-24
    assert torch.finfo(torch.float32).eps / 2 == u
    assert neighbour / u > 1e7
    # the neighbour distance written out: sqrt(2 sum_i (1 - cos w_i))
    i = torch.arange(32, dtype=torch.float64)
    closed = math.sqrt(2 * (1 - torch.cos(10000.0 ** (-2 * i / 64))).sum().item())
    assert neighbour == pytest.approx(closed, rel=1e-12)


def test_chapter_2_prose_takes_its_separation_numbers_from_glue() -> None:
    """Chapter 2: the row-separation figures in the prose are glued from the cell that
    computes them (no hand-typed 84 823, 0.0016, 1.47), and every glued name is set."""
    prose = _prose(CH2)
    for typed in ("84 823", "84823", "0.0016", "1.47", "ten million"):
        assert typed not in prose, typed
    used = set(re.findall(r"\{glue:text\}`([^`:]+)", CH2.read_text()))
    assert used >= {"d4_gap", "d4_offset", "d64_gap", "d64_ratio"}
    defined = set(re.findall(r'glue\("([^"]+)"', CH2.read_text()))
    assert used <= defined


def test_pytorch_adamw_decay_follows_the_learning_rate(gen) -> None:
    """Chapter 2: PyTorch's AdamW multiplies a parameter without gradient by
    (1 - lr * wd) per step, so the decay scales with the learning rate (the paper's
    Algorithm 2 uses the schedule multiplier eta_t instead of the learning rate)."""
    steps, wd = 10, 0.1
    for lr in (0.01, 0.05):
        w = torch.nn.Parameter(torch.randn(5, generator=gen, dtype=torch.float64))
        before = w.detach().clone()
        opt = torch.optim.AdamW([w], lr=lr, weight_decay=wd)
        for _ in range(steps):
            opt.zero_grad()
            w.grad = torch.zeros_like(w)  # no gradient reaches these entries
            opt.step()
        torch.testing.assert_close(
            w.detach(), before * (1 - lr * wd) ** steps, rtol=1e-12, atol=0
        )


def test_huggingface_generation_position_ids_count_real_tokens() -> None:
    """Chapter 2: the installed transformers derives generation position ids from a
    cumulative sum of attention_mask and gives padding the id 0, like the library."""
    utils = pytest.importorskip("transformers.generation.utils")
    prepare = utils.GenerationMixin._prepare_position_ids_for_generation
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    input_ids = torch.ones_like(mask)
    got = prepare(None, input_ids, {"attention_mask": mask})
    assert torch.equal(got, cl.position_ids_from_attention_mask(mask))
    assert torch.equal(
        got[mask == 0], torch.zeros(int((mask == 0).sum()), dtype=got.dtype)
    )


def test_chapter_2_cites_what_it_attributes() -> None:
    """Chapter 2: learned positions are credited to Gehring et al. (Vaswani's [9]), GPT
    (its section 4.1) and BERT (Appendix A.2), the extrapolation failure of sinusoids to
    Press et al. (Figure 1), and every cited key is in the bibliography."""
    text = CH2.read_text()
    for key in (
        "gehring2017convs2s",
        "radford2018gpt",
        "press2022alibi",
        "loshchilov2019adamw",
    ):
        assert f"{{cite}}`{key}`" in text, key
    assert "Appendix A.2" in text and "Figure 1" in text
    bib = (ROOT / "book" / "references.bib").read_text()
    for key in set(re.findall(r"\{cite\}`([^`]+)`", text)):
        for k in key.split(","):
            assert re.search(r"@\w+\{" + re.escape(k.strip()) + ",", bib), k


def test_precision_of_positions_and_angles() -> None:
    """Chapter 2, why double precision: p * omega_0 = p is exact in float32 (integers up
    to 2^24); float32 numbers near 100 000 are 1/128 apart and float32 angles of the
    pairs i >= 1 there are off by thousandths of a radian; bfloat16 (8 significant
    bits) holds integers exactly up to 256, float16 (11 bits) up to 2048 and nothing
    above 65 504."""
    big = torch.tensor(100_000.0)
    assert (torch.nextafter(big, torch.tensor(math.inf)) - big).item() == 1 / 128
    positions = torch.arange(99_990, 100_000, dtype=torch.float64)
    omega = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    angles32 = (positions.float()[:, None] * omega.float()).double()
    errors = (angles32 - positions[:, None] * omega).abs()  # (10, 32)
    error = errors.max().item()
    assert 1e-3 <= error < 1e-2
    # the fastest pair is exact (p * omega_0 = p, an integer below 2^24): the loss is
    # in the pairs i >= 1
    assert errors[:, 0].max().item() == 0.0
    assert errors[:, 1:].max().item() == error
    exact_ints = torch.tensor([2.0**24 - 1, 2.0**24], dtype=torch.float64)
    assert torch.equal(exact_ints.float().double(), exact_ints)
    assert torch.tensor(2.0**24 + 1).float().item() != 2.0**24 + 1
    for dtype, bits in ((torch.bfloat16, 8), (torch.float16, 11)):
        n = 2**bits
        exact = torch.arange(n + 1, dtype=torch.float64)
        assert torch.equal(exact.to(dtype).double(), exact)
        assert torch.tensor(float(n + 1)).to(dtype).item() != n + 1
    assert torch.finfo(torch.float16).max == 65504.0
    assert torch.tensor(65520.0).to(torch.float16).isinf()


def test_attention_over_a_memory_is_invariant_to_its_order(gen) -> None:
    """Chapter 1: with queries from elsewhere (cross-attention), reordering the keys and
    values together changes nothing: softmax(Q K^T P^T) P V = softmax(Q K^T) V;
    reordering the keys alone does change the output."""
    q = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    out, _ = cl.scaled_dot_product_attention(q, k, v)
    p = cl.permutation_matrix([2, 5, 0, 1, 4, 3]).double()
    both, _ = cl.scaled_dot_product_attention(q, p @ k, p @ v)
    torch.testing.assert_close(both, out, rtol=1e-12, atol=1e-12)
    keys_only, _ = cl.scaled_dot_product_attention(q, p @ k, v)
    assert (keys_only - out).abs().max() > 1e-3


def test_invariance_keeps_every_row_and_sympy_checks_one_size(gen) -> None:
    """Chapter 1 (issue 33): invariance means row i of f(PX) is row i of f(X) (a row
    sum pooled over tokens is invariant, row by row, while attention is not); the
    SymPy check is said to cover one size only (3 tokens, 2 features)."""
    x = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    p = cl.permutation_matrix([3, 0, 4, 1, 2]).double()

    def pooled(t):  # every row gets the mean over tokens: an invariant map
        return t.mean(0, keepdim=True).expand_as(t)

    torch.testing.assert_close(pooled(p @ x), pooled(x), rtol=0, atol=1e-12)
    out, _ = cl.scaled_dot_product_attention(x, x, x)
    out_p, _ = cl.scaled_dot_product_attention(p @ x, p @ x, p @ x)
    assert (out_p - out).abs().max() > 1e-3  # not invariant: rows move
    torch.testing.assert_close(out_p, p @ out, rtol=0, atol=1e-12)  # equivariant
    text = " ".join(CH1.read_text(encoding="utf-8").split())
    assert "row $i$ of $f(PX)$ is row $i$ of $f(X)$" in text
    assert "covers every real matrix *of one size* at once" in text
    assert "only the proof covers every $n$ and $d$" in text
    assert "give every token the same output whatever the order" not in text


def test_chapter_2_does_not_overclaim_the_paper() -> None:
    """Chapter 2 (issue 33): the relative property was Vaswani et al.'s hypothesis
    (§3.5), not a property they showed; the sqrt(d) argument is a reconstruction (the
    paper, §3.4, gives no reason)."""
    text = " ".join(CH2.read_text(encoding="utf-8").split())
    assert "met all four" not in text
    assert "the fourth was their hypothesis" in text
    assert "what follows is a reconstruction, not the authors' argument" in text
    assert "The numbers make it plain" not in text
    assert "$p\\,\\omega_0 = p$ is an integer, and float32 holds every integer" in text


def test_heatmap_sentence_is_glued_and_the_ranges_shrink() -> None:
    """Review O3 (issue 33): column 32 of the 64 x 64 table still spans about 0.59
    over the 64 positions, so chapter 2 no longer says the right half 'barely changes
    at all'; the ranges of the sine columns 32, 34, ..., 62 fall strictly, computed
    here from the closed form sin(p * 10000^(-c/64)), and both quoted ranges are
    glued."""
    p = torch.arange(64, dtype=torch.float64)[:, None]
    cols = torch.arange(32, 64, 2, dtype=torch.float64)
    sines = torch.sin(p * 10000.0 ** (-cols / 64))  # (64, 16)
    ranges = sines.max(0).values - sines.min(0).values
    assert torch.all(ranges.diff() < 0)
    assert ranges[0] > 0.5 and ranges[-1] < 0.01
    text = CH2.read_text(encoding="utf-8")
    assert "barely changes at all" not in text
    for name in ("heat_range_32", "heat_range_62"):
        assert f'glue("{name}"' in text and f"{{glue:text}}`{name}:" in text


def test_chapter_2_does_not_name_the_cumsum_of_exercise_2() -> None:
    """Review G2 (issue 33): exercise 2 asks for the position ids without a loop; the
    chapter defines them by the count of real tokens before each slot and does not
    name the cumulative sum that computes them (the solution, in the open edition's
    dropdown only)."""
    from course_lib.grading.editions.launch import strip_open_only

    prose = strip_open_only(CH2.read_text(encoding="utf-8"))
    assert "cumulative sum" not in prose and "cumsum" not in prose


def test_chapter_1_says_what_n_and_d_are() -> None:
    """Notation N2 (issue 33): chapter 1's n is the number of tokens (L elsewhere), not
    a position, and its d is d_model; the chapter says so."""
    text = " ".join(CH1.read_text(encoding="utf-8").split())
    assert "$n$ is the number of tokens, which the other chapters call $L$" in text


def test_embedding_scale_numbers_are_measured_and_glued() -> None:
    """Chapter 2, scaling by sqrt(d_model) (re-read, helper A): for d = 512 the encoding
    has length sqrt(d/2) = 16, sqrt(512) = 22.6; embeddings of standard deviation
    d^-1/2 give the token part the energy share d / (d + d/2) = 2/3 when scaled and
    1 / (1 + d/2) = 0.39 % when not (measured here on other random tokens, within the
    chapter's 3 % margin); with standard deviation 1 the scaled tokens are
    sqrt(2 d) = 32 times longer than the positions. The prose glues these numbers and
    the chapter's cells assert them."""
    d = 512
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = torch.arange(64, dtype=torch.float64)[:, None] * omega  # (64, d/2)
    pe = torch.stack([angles.sin(), angles.cos()], -1).flatten(1)  # (64, d)
    assert torch.allclose(pe.norm(dim=-1), torch.full((64,), 16.0, dtype=torch.float64))
    g = torch.Generator().manual_seed(123)
    x = torch.randn(64, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    for scale, predicted in ((math.sqrt(d), 2 / 3), (1.0, 1 / (1 + d / 2))):
        share = (scale * x).pow(2).sum() / (scale * x + pe).pow(2).sum()
        assert math.isclose(share.item(), predicted, rel_tol=0.03), (scale, share)
    assert f"{1 / (1 + d / 2):.1%}" == "0.4%" and f"{math.sqrt(d):.1f}" == "22.6"
    assert math.sqrt(2 * d) == 32.0
    text = CH2.read_text(encoding="utf-8")
    prose = _prose(CH2)
    for typed in ("\\approx 22.6", "= 0.4\\%", "= 32$ times", "length 16,"):
        assert typed not in prose, typed
    for name in ("scale_pos_len", "scale_sqrt_d", "share_predicted_unscaled",
                 "std1_ratio", "std1_measured"):
        assert f"{{glue:text}}`{name}:" in text and f'glue("{name}"' in text, name
    assert "rel_tol=0.03), (scale, share)" in text  # the cell checks the shares


def test_dot_product_figure_checks_what_its_caption_says() -> None:
    """Chapter 2, fig-sin-dot (re-read, helper A): from anchors 0, 32 and 64 of a
    128 x 64 table the curves PE_p . PE_{p+k} coincide on the offsets they share, peak
    at k = 0 with d/2 = 32 and are symmetric in k (closed form sum_i cos(k w_i) here);
    the chapter's cell asserts all three, not only where the argmax lies."""
    omega = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    p = torch.arange(128, dtype=torch.float64)
    pe = torch.stack([torch.sin(p[:, None] * omega), torch.cos(p[:, None] * omega)],
                     -1).flatten(1)  # (128, 64), interleaved
    gram = pe @ pe.T
    curves = {a: {k: gram[a, a + k].item() for k in range(-a, 128 - a)}
              for a in (0, 32, 64)}
    for a, curve in curves.items():
        assert max(curve, key=curve.get) == 0 and math.isclose(curve[0], 32.0)
        for k, v in curve.items():
            assert math.isclose(v, torch.cos(k * omega).sum().item(), abs_tol=1e-9)
            assert -k not in curve or math.isclose(v, curve[-k], abs_tol=1e-9)
    text = CH2.read_text(encoding="utf-8")
    cell = text[text.index("name: fig-sin-dot"):text.index("dot_fig\n```")]
    assert "math.isclose(curve[0], 64 / 2" in cell  # the peak value
    assert "curve[k], curve[-k]" in cell  # the symmetry
    assert "curve[k], curves[0][k]" in cell  # the curves coincide


def test_chapter_2_padding_claims_say_what_the_cells_check() -> None:
    """Chapter 2, padded batches (re-read, helper A): the left-padded sentence gives the
    unpadded outputs up to float32 rounding (the cell's tolerance), not 'exactly'; the
    mask is a_{r,t} (the notation table keeps m for positions and ALiBi slopes, and b is
    the base in this chapter); the position-ids figure is checked row by row in both
    panels."""
    text = " ".join(CH2.read_text(encoding="utf-8").split())
    assert "produces exactly the outputs" not in text
    assert "up to float32 rounding" in text
    assert "m_{b,t}" not in text and "m_{b,s}" not in text and "a_{r,s} = 1" in text
    assert "_{b,t}" not in text  # b is the base of the frequencies in this chapter
    assert "drawn[panel, row]" in text
