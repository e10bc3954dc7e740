"""Claims of chapters 5 and 7 added or corrected by the chapter review (issue 18).

Each test names the statement it checks. Expected values come from closed forms written
out here, brute force, or independent re-implementations of the peer code the chapter
names (the authors' ``get_slopes`` and ``_rel_shift``, flash-attn's ALiBi convention,
XLNet's bidirectional ``rel_shift``); none is copied from a chapter's output. What
``test_book_equations_05_09.py``, ``test_alibi.py`` and ``test_transformer_xl.py``
already check is not repeated.
"""

from __future__ import annotations

import importlib
import math
import re
import types
from pathlib import Path

import pytest
import torch

import course_lib as cl

ROOT = Path(__file__).resolve().parent.parent
CH5 = ROOT / "book" / "05-alibi.md"
CH7 = ROOT / "book" / "07-transformer-xl.md"


def _prose(chapter: Path) -> str:
    """The chapter's text outside code cells."""
    return re.sub(r"```.*?```", "", chapter.read_text(), flags=re.S)


def _code(chapter: Path) -> str:
    return "\n".join(
        re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", chapter.read_text(), re.S)
    )


# --------------------------------------------------------------------------------------
# chapter 5


def _authors_get_slopes(n: int) -> list[float]:
    """The authors' rule as their comment and code describe it, written out here:
    powers of two give the geometric sequence with first term = ratio = 2^(-8/n);
    otherwise the closest lower power of two c, then every other slope of the
    2c-head model starting with the first, n - c of them."""
    if n & (n - 1) == 0:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]
    c = 1 << (n.bit_length() - 1)
    return _authors_get_slopes(c) + _authors_get_slopes(2 * c)[0::2][: n - c]


def test_bloom_176b_with_112_heads_takes_48_slopes_from_the_code_rule() -> None:
    """Ch. 5: "BLOOM ... has 112 heads, so 48 of its heads get their slopes from the
    rule": the first 64 slopes are those of 64 heads, the other 48 are slopes of the
    128-head model that the 64-head model does not have."""
    n, c = 112, 64
    slopes = cl.alibi_slopes(n).double()
    torch.testing.assert_close(
        slopes,
        torch.tensor(_authors_get_slopes(n), dtype=torch.float64),
        rtol=1e-6,
        atol=0,
    )
    assert torch.equal(cl.alibi_slopes(n)[:c], cl.alibi_slopes(c))
    extra = -slopes[c:].log2() * (2 * c) / 8  # h of the 128-head model
    assert extra.numel() == n - c == 48
    torch.testing.assert_close(
        extra, torch.arange(1, 2 * (n - c), 2).double(), rtol=0, atol=1e-4
    )
    text_rule = 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)
    assert (slopes - text_rule).abs().max() > 0.1  # the paper's text differs here
    assert "112 heads" in _prose(CH5)


def test_flash_attn_alibi_convention_is_the_library_bias() -> None:
    """Ch. 5: flash-attn adds -m_h |i + L_k - L_q - j| to the score of query i and key
    j (its docstring); with causal=True keys after the query are masked: the same as
    alibi_bias with the queries last."""
    for heads, q_len, k_len in ((4, 3, 7), (6, 1, 9), (8, 5, 5)):
        m = cl.alibi_slopes(heads).double()[:, None, None]
        i = torch.arange(q_len, dtype=torch.float64)[:, None]
        j = torch.arange(k_len, dtype=torch.float64)[None, :]
        docstring = -m * (i + k_len - q_len - j).abs()  # (H, Lq, Lk)
        torch.testing.assert_close(
            cl.alibi_bias(heads, q_len, k_len).double(), docstring, rtol=0, atol=1e-6
        )
        causal = docstring.masked_fill(j > i + k_len - q_len, float("-inf"))
        torch.testing.assert_close(
            cl.alibi_bias(heads, q_len, k_len, causal=True).double(),
            causal,
            rtol=0,
            atol=1e-6,
        )


def test_slope_divided_by_the_scale_before_scaling_is_the_unscaled_bias(
    gen: torch.Generator,
) -> None:
    """Ch. 5: flash-attn's kernel adds the bias to the unscaled q.k with each slope
    divided by the softmax scale, so after the scaling the bias is -m|.|, unscaled,
    as in the paper's footnote 10; adding the undivided bias before the scaling (the
    mistake) differs."""
    batch, heads, q_len, k_len, d = 2, 4, 5, 9, 16
    q = torch.randn(batch, heads, q_len, d, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, heads, k_len, d, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, heads, k_len, d, generator=gen, dtype=torch.float64)
    scale = 1 / math.sqrt(d)
    bias = cl.alibi_bias(heads, q_len, k_len, causal=True).double()  # (H, Lq, Lk)
    raw = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk), unscaled
    kernel = torch.softmax(scale * (raw + bias / scale), dim=-1) @ v
    library, _ = cl.scaled_dot_product_attention(q, k, v, bias=bias)
    torch.testing.assert_close(kernel, library)
    before = torch.softmax(scale * (raw + bias), dim=-1) @ v
    assert (before - library).abs().max() > 1e-3


def test_chapter_5_glues_every_number_it_cites() -> None:
    """Ch. 5: the half-lives in the prose are glued from the cell that computes them
    (no hand-typed copy of 1.4 ... 177 in the text), and the glued values are
    ln 2 / m for the steepest and the gentlest of eight heads; so are BLOOM's extra
    heads (112 - 64), sqrt(d) for the scaling and the colour-scale ratio of the first
    figure (re-read of chapter 5)."""
    prose, code = _prose(CH5), _code(CH5)
    used = set(re.findall(r"\{glue:text\}`([\w]+)", prose))
    glued = set(re.findall(r"glue\(\"(\w+)\"", code))
    assert used == {
        "alibi_half_first",
        "alibi_half_last",
        "bloom_extra_heads",
        "alibi_sqrt_64",
        "alibi_sqrt_128",
        "alibi_shade_ratio",
    }
    assert used <= glued
    assert "177" not in prose and "1.4, 2.8" not in prose
    for typed in ("so 48 of", "eight times for", "Dark cells are strongly"):
        assert typed not in " ".join(prose.split()), typed
    half = math.log(2) / cl.alibi_slopes(8).double()
    assert f"{half[0].item():.1f}" == f"{2 * math.log(2):.1f}"
    assert f"{half[-1].item():.0f}" == f"{256 * math.log(2):.0f}"


def _span_figure_cell() -> str:
    """The code of the chapter-5 cell that draws ``fig-alibi-span`` (options cut)."""
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", CH5.read_text(), re.S)
    (cell,) = [c for c in cells if "name: fig-alibi-span" in c]
    return cell


def test_alibi_span_caption_numbers_are_read_from_the_plotted_curves() -> None:
    """Ch. 5, issue 33: the caption of fig-alibi-span quotes, for the steepest and the
    gentlest of 8 heads, the first distance whose cumulative weight reaches 1/2 on the
    64-key row. Those numbers are glued by the figure's own cell from the plotted lines;
    here they are recomputed from the closed form of the truncated geometric
    distribution, cum(D) = (1 - e^{-m(D+1)}) / (1 - e^{-64 m}), in float64."""
    cell = _span_figure_cell()
    options, code = cell.split("\n---\n", 1)
    caption = options.split("caption: |", 1)[1].split("name:", 1)[0]
    # each number the caption states about the crossings is a glue role, none typed
    assert set(re.findall(r"\{glue:text\}`(\w+)", caption)) == {
        "alibi_span_first",
        "alibi_span_last",
        "alibi_half_first",
        "alibi_half_last",
        "alibi_m_first",
        "alibi_m_last",
    }
    no_roles = re.sub(r"\{glue:text\}`[^`]*`", "", caption)
    maths = re.findall(r"\$[^$]*\$", no_roles)  # formulas: slopes and ln 2/m only
    assert {" ".join(f.split()) for f in maths} <= {
        "$m$",
        "$\\ln 2/m$",
    }, maths
    typed = sorted(set(re.findall(r"\d+", re.sub(r"\$[^$]*\$", "", no_roles))))
    assert typed == ["64", "8"], typed  # the figure's sizes, not results
    assert "ln 2 / m$ tokens" not in caption  # the old, wrong claim for 64 keys
    glued: dict = {}
    namespace = {
        "viz": importlib.import_module("course_lib.viz"),
        "glue": lambda name, value, display=True: glued.__setitem__(name, value),
        "math": math,
        "torch": torch,
        "cl": cl,
    }
    exec(code, namespace)  # noqa: S102 - the course's own chapter
    n_keys = 64
    expected = []
    for m in cl.alibi_slopes(8).double().tolist():
        cum = [
            (1 - math.exp(-m * (d + 1))) / (1 - math.exp(-m * n_keys))
            for d in range(n_keys)
        ]
        expected.append(next(d for d, c in enumerate(cum) if c >= 0.5))
    assert namespace["first_half"] == expected
    assert glued["alibi_span_first"] == expected[0]
    assert glued["alibi_span_last"] == expected[-1]
    # the slopes m quoted beside them, fitted from the plotted weights: 2^-1 and 2^-8
    assert glued["alibi_m_first"] == pytest.approx(2.0**-1, rel=1e-5)
    assert glued["alibi_m_last"] == pytest.approx(2.0**-8, rel=1e-5)
    # the prose's closed form D = -ln((1 + e^{-m n}) / 2) / m for the crossing of the
    # tail: the first distance with cum >= 1/2 is the first integer >= D - 1
    for m, first in zip(cl.alibi_slopes(8).double().tolist(), expected, strict=True):
        cross = -math.log((1 + math.exp(-m * n_keys)) / 2) / m
        assert first == math.ceil(cross - 1 - 1e-12)
    # the prose's limits: ln 2 / m for m n large, n / 2 (the middle) for m n small
    for m, want in ((1.0, math.log(2)), (1e-9, n_keys / 2)):
        cross = -math.log((1 + math.exp(-m * n_keys)) / 2) / m
        assert cross == pytest.approx(want, rel=1e-5)  # error ~ m n / 4 relative
    # the numbers: the gentle heads cross near 24, 28, 30, far from ln 2 / m
    assert expected[-3:] == [24, 28, 30]
    assert expected[-1] < math.log(2) / 2.0**-8 / 5


def test_one_extra_slope_lies_above_the_power_of_two_range() -> None:
    """Ch. 5, issue 33: for a head count n that is not a power of two, the first extra
    slope 2^(-4/c) is steeper than every slope of the c-head model, and the other
    n - c - 1 lie strictly between two of its slopes (12 heads: 2^-0.5 above, three
    between)."""
    for n in range(3, 200):
        c = 1 << (n.bit_length() - 1)
        if n == c:
            continue
        slopes = cl.alibi_slopes(n).double()
        first, extra = slopes[:c], slopes[c:]
        above = extra > first.max()
        assert above.tolist() == [True] + [False] * (n - c - 1)
        inside = extra[~above]
        assert ((inside < first.max()) & (inside > first.min())).all()
        assert not torch.isin(inside, first).any()
    prose = " ".join(_prose(CH5).split())
    assert (
        "only the other $n - c - 1$ extra slopes (three of the four for 12 heads)"
        in prose
    )


def test_chapter_5_says_a_causal_model_can_infer_absolute_position() -> None:
    """Ch. 5, issue 33: the bias is free of absolute position, the model is not
    (Haviv et al. 2022)."""
    prose = " ".join(_prose(CH5).split())
    assert "Nothing depends on absolute position" not in prose
    assert "{cite}`haviv2022nopos`" in prose


def test_half_life_is_where_the_tail_crosses_one_half() -> None:
    """Ch. 5: for a long row, half of a head's prior attention lies within about
    ln 2 / m tokens: the weight at distances >= ceil(ln2/m) is at most 1/2 and at
    distances >= floor(ln2/m) at least 1/2 (closed form of the geometric tail)."""
    length = 5000
    for m in cl.alibi_slopes(8).double().tolist():
        t = math.log(2) / m
        dist = torch.arange(length, dtype=torch.float64)
        w = torch.softmax(-m * dist, dim=0)  # weights by distance, content-free
        tail = w.flip(0).cumsum(0).flip(0)  # tail[D] = weight at distances >= D
        assert tail[math.ceil(t)] <= 0.5 + 1e-12
        assert tail[math.floor(t)] >= 0.5 - 1e-12


def test_chapter_5_cites_the_paper_for_what_the_paper_says() -> None:
    """Ch. 5: the unscaled bias is the paper's footnote 10, the sliding-window result
    its appendix B (a hypothesis, "might not be using"), the trainable-slope remark
    §3 with footnote 11; the closest-power-of-two rule is the code's, not the
    paper's."""
    prose = " ".join(_prose(CH5).split())
    assert "footnote 10" in prose and "footnote 11" in prose
    assert "might not be using contexts longer than the ones it was trained on" in prose
    assert "hypothesise" in prose
    assert "paper's rule" not in prose
    assert "is the reason" not in prose  # the finite span fits the reading, no more


# --------------------------------------------------------------------------------------
# chapter 7


def _authors_rel_shift(x: torch.Tensor) -> torch.Tensor:
    """The authors' PyTorch ``_rel_shift`` on their (q_len, k_len, batch, heads)
    layout: pad one zero column on the left, view as (k_len + 1, q_len, ...), drop the
    first row, view back."""
    q_len, k_len = x.shape[:2]
    zero_pad = x.new_zeros(q_len, 1, *x.shape[2:])
    padded = torch.cat([zero_pad, x], dim=1)  # (Lq, Lk + 1, B, H)
    padded = padded.view(k_len + 1, q_len, *x.shape[2:])
    return padded[1:].reshape(x.shape)


@pytest.mark.parametrize("q_len,k_len", [(3, 5), (4, 4), (1, 6), (5, 12)])
def test_library_shift_is_the_authors_pad_and_reshape(
    gen: torch.Generator, q_len: int, k_len: int
) -> None:
    """Ch. 7: the authors' code shifts with one zero pad and reshapes; the library's
    rel_shift is the same operation, garbage entries included."""
    x = torch.randn(2, 3, q_len, k_len, generator=gen)  # (B, H, Lq, Lk)
    theirs = _authors_rel_shift(x.permute(2, 3, 0, 1)).permute(2, 3, 0, 1)
    assert torch.equal(cl.rel_shift(x), theirs)


@pytest.mark.parametrize("q_len,k_len", [(3, 5), (2, 7), (4, 4)])
def test_appendix_b_term_d_is_one_row_shifted_left(
    gen: torch.Generator, q_len: int, k_len: int
) -> None:
    """Ch. 7: appendix B computes term (d) as one row d~ = [v . r_c] over the
    descending distances and left-shifts it into every query's row, by
    L_q - 1 - i for row i; that equals the library's (d) term on every visible
    entry."""
    heads, d = 2, 4
    v = torch.randn(heads, d, generator=gen, dtype=torch.float64)
    r = torch.randn(heads, k_len, d, generator=gen, dtype=torch.float64)
    d_row = torch.einsum("hd,hcd->hc", v, r)  # (H, Lk): one row per head
    zq = torch.zeros(1, heads, q_len, d, dtype=torch.float64)
    zk = torch.zeros(1, heads, k_len, d, dtype=torch.float64)
    zb = torch.zeros(heads, d, dtype=torch.float64)
    term_d = cl.rel_attention_scores(zq, zk, r, zb, v)[0] * math.sqrt(d)  # (H,Lq,Lk)
    for i in range(q_len):
        visible = i + k_len - q_len + 1  # keys 0 .. i'
        shift = q_len - 1 - i
        torch.testing.assert_close(
            term_d[:, i, :visible], d_row[:, shift : shift + visible]
        )
        assert torch.isinf(term_d[:, i, visible:]).all()


def _xlnet_rel_shift(x: torch.Tensor, k_len: int) -> torch.Tensor:
    """XLNet's ``rel_shift`` written out on a (q_len, width) matrix: read the numbers
    as (width, q_len), drop the first row, read as (q_len, width - 1), keep the first
    k_len columns."""
    q_len, width = x.shape
    y = x.reshape(width, q_len)[1:]
    return y.reshape(q_len, width - 1)[:, :k_len]


@pytest.mark.parametrize("q_len,k_len", [(1, 3), (3, 5), (4, 4), (2, 9)])
def test_xlnet_lists_one_unused_distance_more(
    gen: torch.Generator, q_len: int, k_len: int
) -> None:
    """Ch. 7: XLNet's code (attn_type="bi") lists the distances L_k down to -L_q + 1,
    one more than the L_k + L_q - 1 needed; the extra distance L_k is never used, and
    XLNet's shift on its input equals the course's shift on the input without that
    column."""
    distances = torch.arange(k_len, -q_len, -1)  # XLNet's fwd_pos_seq
    assert distances.numel() == k_len + q_len
    x = torch.randn(q_len, k_len + q_len, generator=gen)
    theirs = _xlnet_rel_shift(x, k_len)
    torch.testing.assert_close(theirs, cl.rel_shift_bidirectional(x[:, 1:]))
    labels = distances.float().expand(q_len, -1).contiguous()
    used = _xlnet_rel_shift(labels, k_len)
    assert (used != k_len).all()  # distance L_k never reaches the output
    i_pos = torch.arange(q_len)[:, None] + k_len - q_len
    assert torch.equal(used, (i_pos - torch.arange(k_len)[None, :]).float())


def _segments(layers, x: torch.Tensor, seg: int) -> torch.Tensor:
    mems, outs = [None] * len(layers), []
    for s in range(0, x.shape[1], seg):
        h = x[:, s : s + seg]
        for n, layer in enumerate(layers):
            h, mems[n] = layer(h, mems[n])
        outs.append(h)
    return torch.cat(outs, dim=1)


def _at_once(layers, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x, _ = layer(x, attn_mask=mask)
    return x


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("mem_segments", [1, 2])
def test_recurrence_is_a_window_of_m_positions_before_the_segment(
    gen: torch.Generator, depth: int, mem_segments: int
) -> None:
    """Ch. 7: with a memory of M positions, the recurrence equals a full pass in which
    each query sees its own segment up to itself and the M positions before its
    segment, at every layer (M = L is the block-banded case); a window of M positions
    before the query itself is a different computation."""
    seg, n_seg, width = 4, 4, 16
    mem = mem_segments * seg
    torch.manual_seed(3)
    layers = [
        cl.RelMultiHeadAttention(width, 2, mem_len=mem).double() for _ in range(depth)
    ]
    x = torch.randn(1, n_seg * seg, width, generator=gen, dtype=torch.float64)
    pos = torch.arange(n_seg * seg)
    start = pos // seg * seg  # first position of each query's segment
    window = pos[None, :] >= (start - mem)[:, None]  # (T, T), causal mask added inside
    rec = _segments(layers, x, seg)
    torch.testing.assert_close(rec, _at_once(layers, x, window))
    sliding = pos[None, :] >= (pos - mem)[:, None]
    assert (rec - _at_once(layers, x, sliding)).abs().max() > 1e-6


def test_chapter_7_attributions() -> None:
    """Ch. 7: the paper's appendix B describes left shifts (the pad-and-reshape is the
    authors' code), no equation number the paper does not print is cited, untie_r is
    the TensorFlow code's switch, and the 1/sqrt(d) is the code's, not the
    paper's."""
    prose = " ".join(_prose(CH7).split())
    assert "a set of left-shifts" in prose
    assert "the authors (appendix B) use one zero pad" not in prose
    assert "equation (3)" not in prose.lower() and "eq. 3" not in prose.lower()
    assert "`untie_r`" in prose and "TensorFlow" in prose
    assert "has no $1/\\sqrt{d}$" in prose


def test_chapter_7_gives_the_mask_its_own_reason_and_per_segment_positions_theirs() -> (
    None
):
    """Ch. 7, issue 33: a causal language model masks the future in any case (the
    shift's leftovers decide where the mask goes, they are not why it exists); only
    absolute positions numbered per segment (Dai et al. §3.3, U_{1:L} for every
    segment) fail with a cache. The content term alone already reads the next token
    when unmasked: with zero position terms, changing the key of token i + 1 changes
    the unmasked score row of query i."""
    prose = " ".join(_prose(CH7).split())
    assert "They leak the next token, so the causal mask" not in prose
    assert "whatever its position encoding" in prose
    assert "Why per-segment absolute positions break" in prose and "§3.3" in prose
    assert "Absolute positions cannot tell memory from segment" not in prose
    # the chapter no longer points the exercise's bidirectional shift at the proof
    assert "the proof above is the tool for it" not in prose
    assert "differs from the one you need by exactly that column" not in prose
    gen = torch.Generator().manual_seed(0)
    q_len = k_len = 4
    q = torch.randn(1, 1, q_len, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, k_len, 8, generator=gen, dtype=torch.float64)
    k2 = k.clone()
    k2[0, 0, 2] += 1.0  # another token at position 2
    content = q @ k.transpose(-2, -1)  # term (a), no mask, no position
    changed = q @ k2.transpose(-2, -1)
    assert (changed - content)[0, 0, 1, 2].abs() > 0  # query 1 sees token 2


def test_why_it_works_listing_is_open_edition_only_and_right() -> None:
    """Review G4 (issue 33): chapter 7's index bookkeeping (which padded entry each
    output entry reads), which with the pad is a complete rel_shift, is a static
    listing in the open edition only. The listing runs here: its asserts hold, and
    gathering the padded matrix at (src_row, src_col) reproduces the library's shift
    on every entry, the masked leftovers included."""
    from course_lib.grading.editions.launch import strip_open_only

    text = CH7.read_text()
    match = re.search(
        r"```python\n(# position in memory order of each output entry\n.*?)```",
        text,
        re.S,
    )
    assert match, "the 'why it works' listing is missing"
    listing = match.group(1)
    assert "src_row" not in _code(CH7)  # no longer an executed cell
    assert "src_row" not in strip_open_only(text)  # and not in the class edition
    q_len, k_len = 3, 5
    rows = torch.arange(q_len)[:, None]
    cols = torch.arange(k_len)[None, :]
    scope = {
        "torch": torch,
        "cl": cl,
        "q_len": q_len,
        "k_len": k_len,
        "rows": rows,
        "cols": cols,
        "print": lambda *a: None,
    }
    exec(listing, scope)  # noqa: S102 - the chapter's own listing, asserts included
    x = torch.randn(q_len, k_len, generator=torch.Generator().manual_seed(3))
    padded = torch.cat((torch.zeros(q_len, 1), x), dim=1)
    gathered = padded[scope["src_row"], scope["src_col"]]
    assert torch.equal(gathered, cl.rel_shift(x))


def _cell_with(chapter: Path, marker: str) -> str:
    """The code of the one code cell of ``chapter`` that contains ``marker``."""
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", chapter.read_text(), re.S)
    (cell,) = [c for c in cells if marker in c]
    return cell


def test_alibi_property_cell_rejects_a_bias_without_the_absolute_value() -> None:
    """Ch. 5 (re-read, B1): the cell that checks the properties of (alibi-bias-last)
    on the library's bias passes on the library and fails on the bias without the
    absolute value, -m (i' - j), exercise 5's named mistake, which is zero at the own
    key and changes by one per step as well (only the direction tells it apart)."""
    cell = _cell_with(CH5, "own_key = (D == 0)")
    exec(cell, {"torch": torch, "cl": cl})  # noqa: S102 - the course's own chapter

    def signed_bias(n_heads, q_len, k_len=None, causal=False):
        k_len = q_len if k_len is None else k_len
        i = torch.arange(q_len)[:, None] + k_len - q_len
        j = torch.arange(k_len)[None, :]
        bias = -cl.alibi_slopes(n_heads)[:, None, None] * (i - j)
        return bias.masked_fill(j > i, float("-inf")) if causal else bias

    wrong = types.SimpleNamespace(
        alibi_bias=signed_bias,
        alibi_slopes=cl.alibi_slopes,
        causal_mask=cl.causal_mask,
    )
    with pytest.raises(AssertionError):
        exec(cell, {"torch": torch, "cl": wrong})  # noqa: S102


def test_bloom_form_argmax_is_checked_for_every_query_and_head() -> None:
    """Ch. 5 (re-read, B2): 'the +m j form puts the most weight on the last key,
    wherever the query is' is asserted for all 9 queries of all 8 heads, not one."""
    cell = _cell_with(CH5, "alibi_bias_bloom_style(8, 9)")
    assert "paper[0, 4].argmax() == 4" not in cell
    namespace = {"torch": torch, "cl": cl, "print": lambda *a, **k: None}
    exec(cell, namespace)  # noqa: S102 - the course's own chapter
    assert namespace["bloom"].argmax(-1).eq(8).all()
    assert namespace["paper"].argmax(-1).eq(torch.arange(9)).all()
