"""Claims of chapters 12 (language models on real text) and 13 (making it fast) that
code can check: the PyTorch behaviour chapter 13 states (which SDPA masks the CPU
flash kernel takes, the alignment of ``is_causal``), the work ``alibi_attention``
skips, the words of chapter 13 against the stored benchmark run
(``benchmarks/RESULTS.md``: "faster", "slower", "about a copy", ...), the class
edition's guards on the listings that answer exercise 4, the sliding-window cost
chapter 12 states, and the interval bands of the chapter 12 figure."""

from __future__ import annotations

import inspect
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import course_lib as cl
from course_lib import alibi as alibi_module

ROOT = Path(__file__).resolve().parents[1]
CH12 = ROOT / "book" / "12-lm-extrapolation.md"
CH13 = ROOT / "book" / "13-making-it-fast.md"
REPORT = ROOT / "benchmarks" / "RESULTS.md"
LM_RESULTS = ROOT / "course_lib" / "data" / "lm_extrapolation.json"


# --------------------------------------------------------------------------
# Chapter 13: what PyTorch does (run here, in the installed version)


def _flash_accepts(q, k, v, **kwargs) -> bool:
    """Whether SDPA runs with only the CPU flash kernel allowed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                F.scaled_dot_product_attention(q, k, v, **kwargs)
    except RuntimeError:
        return False
    return True


def test_cpu_flash_kernel_takes_2d_and_4d_masks_without_grad_only():
    # chapter 13: "the CPU flash kernel takes a mask of two or four dimensions, the
    # leading two of size 1 or of the batch and head counts, and no mask that
    # requires a gradient"; a 3-D mask silently runs the math path
    g = torch.Generator().manual_seed(0)
    B, H, S = 2, 4, 16
    q, k, v = (torch.randn(B, H, S, 8, generator=g) for _ in range(3))
    bias = cl.alibi_bias(H, S, causal=True)  # (H, S, S)
    assert _flash_accepts(q, k, v, attn_mask=bias[None])  # (1, H, S, S)
    assert _flash_accepts(q, k, v, attn_mask=bias[None].expand(B, H, S, S))
    assert _flash_accepts(q, k, v, attn_mask=bias[0])  # (S, S)
    assert _flash_accepts(q, k, v, attn_mask=bias[None, :1])  # (1, 1, S, S)
    assert not _flash_accepts(q, k, v, attn_mask=bias)  # (H, S, S)
    learned = bias[None].clone().requires_grad_()
    assert not _flash_accepts(q, k, v, attn_mask=learned)
    assert _flash_accepts(q, k, v, is_causal=True)
    # the default dispatch still answers the 3-D and the learned mask (math path),
    # with the numbers of the 4-D one
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
    for mask in (bias, learned):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_is_causal_is_upper_left_and_a_lower_right_mask_is_the_cache_answer():
    # chapter 13, "Decoding with a key/value cache"
    g = torch.Generator().manual_seed(1)
    n_keys, n_new = 10, 3
    q, k, v = (torch.randn(1, 2, n_keys, 8, generator=g) for _ in range(3))
    right = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, -n_new:]
    q_new = q[:, :, -n_new:]
    upper_left = F.scaled_dot_product_attention(q_new, k, v, is_causal=True)
    # upper left: query i sees keys 0..i, as if it were the i-th position
    first = F.scaled_dot_product_attention(
        q_new, k[:, :, :n_new], v[:, :, :n_new], is_causal=True)
    torch.testing.assert_close(upper_left, first, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(upper_left, right, atol=1e-2)
    lower_right = torch.ones(n_new, n_keys, dtype=torch.bool).tril(n_keys - n_new)
    by_mask = F.scaled_dot_product_attention(q_new, k, v, attn_mask=lower_right)
    torch.testing.assert_close(by_mask, right, atol=1e-6, rtol=1e-6)
    # the course's ALiBi attention puts the queries last
    step = cl.alibi_attention(q_new, k, v)
    whole = cl.alibi_attention(q, k, v)[:, :, -n_new:]
    torch.testing.assert_close(step, whole, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("length", [1024, 2048])
def test_alibi_attention_computes_the_share_of_scores_the_chapter_states(length):
    # n query blocks of b queries; block j (1-based) sees j * b keys, so the blocks
    # compute b^2 n (n + 1) / 2 of the L^2 = (n b)^2 scores: (n + 1) / (2 n)
    b = alibi_module.QUERY_BLOCK
    n = length // b
    blocks = alibi_module._alibi_mask_blocks(
        1, length, length, True, torch.float32, torch.device("cpu"))
    alibi_module._MASK_CACHE.clear()
    computed = sum((stop - start) * keys for start, stop, keys, _ in blocks)
    assert computed * 2 * n == (n + 1) * length**2
    assert len(blocks) == n


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_rotary_embedding_rotates_16_bit_inputs_in_float32(dtype, convention):
    # chapter 13: "a bfloat16 or float16 tensor is rotated in float32 and rounded
    # once at the end"
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 2, 5, 16, generator=g).to(dtype)
    positions = torch.arange(1500, 1505)  # where a 16-bit angle is off by radians
    rope = cl.RotaryEmbedding(16, convention=convention)
    once = cl.apply_rope(x.double(), positions, convention=convention)
    assert torch.equal(rope(x, positions), rope(x.float(), positions).to(dtype))
    # rounded once: within half a unit in the last place of the exact result
    eps = torch.finfo(dtype).eps
    err = (rope(x, positions).double() - once).abs()
    assert bool((err <= once.abs() * eps / 2 + 1e-6).all())


def test_bfloat16_steps_by_8_between_1024_and_2048():
    # chapter 13: "bfloat16 keeps 8 significant bits, so between 1024 and 2048 it
    # steps by 8 and an angle there is off by up to 4 radians"
    assert torch.finfo(torch.bfloat16).eps == 2.0**-7  # 8 significant bits
    m = torch.arange(1024, 2048, dtype=torch.float64)
    rounded = m.to(torch.bfloat16).double()
    assert torch.equal(torch.unique(rounded), torch.arange(1024, 2049, 8).double())
    assert float((rounded - m).abs().max()) == 4.0


def test_a_rotate_half_checkpoint_runs_interleaved_after_permuting_rows_and_biases():
    # chapter 13: permute, per head, the rows of W_q, W_k (q = W_q x) and the
    # entries of their biases; the attention scores are then those of the
    # rotate-half model
    g = torch.Generator().manual_seed(3)
    H, D, dm, S = 2, 8, 12, 6
    wq, wk = (torch.randn(H * D, dm, generator=g, dtype=torch.float64)
              for _ in range(2))
    bq, bk = (torch.randn(H * D, generator=g, dtype=torch.float64) for _ in range(2))
    x = torch.randn(S, dm, generator=g, dtype=torch.float64)
    pos = torch.arange(S)

    def scores(wq, bq, wk, bk, convention):
        q = (x @ wq.T + bq).view(S, H, D).transpose(0, 1)  # (H, S, D)
        k = (x @ wk.T + bk).view(S, H, D).transpose(0, 1)  # (H, S, D)
        q = cl.apply_rope(q, pos, convention=convention)
        k = cl.apply_rope(k, pos, convention=convention)
        return q @ k.transpose(-2, -1)  # (H, S, S)

    conv = cl.rope_half_to_interleaved_weights
    half = scores(wq, bq, wk, bk, "half")
    inter = scores(conv(wq, H, D), conv(bq, H, D), conv(wk, H, D), conv(bk, H, D),
                   "interleaved")
    torch.testing.assert_close(inter, half, atol=1e-10, rtol=1e-10)
    # without the biases permuted, the scores differ
    wrong = scores(conv(wq, H, D), bq, conv(wk, H, D), bk, "interleaved")
    assert not torch.allclose(wrong, half, atol=1e-3)


def test_flex_attention_is_compiled_with_static_shapes():
    # chapter 13: "the course compiles with static shapes
    # (torch.compile(flex_attention, dynamic=False))"
    from course_lib import _flex

    src = inspect.getsource(_flex.compiled_flex_attention)
    assert "torch.compile(flex_attention, dynamic=False)" in src
    assert isinstance(torch._dynamo.config.recompile_limit, int)
    assert torch._dynamo.config.recompile_limit >= 1


# --------------------------------------------------------------------------
# Chapter 13: the class edition hides the listings that answer exercise 4


def test_class_edition_hides_the_rotation_listings():
    """The interleaved rotation (exercise 4) and the blocked rotate-half one (exercise
    4's rotate-half variant) are listed in the open edition only."""
    text = CH13.read_text()
    guarded = re.findall(
        r"::::\{only\} not class_edition\n(.*?)\n::::", text, flags=re.S)
    for name in ("_rotate", "_rotate_cached", "_rotate_half_blocked"):
        includes = re.findall(rf":pyobject: {name}\n", text)
        inside = [g for g in guarded if f":pyobject: {name}\n" in g]
        assert includes and len(inside) == len(includes), name


# --------------------------------------------------------------------------
# Chapter 13: its words against the stored benchmark run


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {t.strip(): b for t, b in zip(parts[1::2], parts[2::2], strict=True)}


def _table(body: str) -> list[dict[str, str]]:
    lines = [s for s in body.splitlines() if s.startswith("|")]
    cells = [[c.strip() for c in s.strip("|").split("|")] for s in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def _section(prefix: str) -> str:
    (body,) = [b for t, b in _sections(REPORT.read_text()).items()
               if t.startswith(prefix)]
    return body


def _value(rows, size, name, column):
    (row,) = [r for r in rows if r["size"] == size
              and r["implementation"].startswith(name)]
    (key,) = [c for c in row if c.startswith(column)]
    return float(row[key].split()[0])


def _ms(cell: str) -> float:
    value, unit = cell.split()
    return float(value) * {"s": 1e3, "ms": 1.0, "µs": 1e-3}[unit]


SMALL, BIG = "[4, 8, 1024, 64]", "[1, 32, 4096, 128]"


def test_stored_run_is_the_one_the_chapter_describes():
    # "the stored run uses one thread and the CPU time of the process"
    header = REPORT.read_text().split("\n## ", 1)[0]
    assert " 1 thread(s)" in header
    assert "Clock: cpu time" in header
    assert "Load average at the start" in header


@pytest.mark.parametrize("size", [SMALL, BIG])
def test_rope_words_hold_in_the_stored_run(size):
    rows = _table(_section("RoPE"))

    def clones(name):
        return _value(rows, size, name, "× clone")

    peer = min(clones("HF Llama"), clones("rotary-embedding-torch"))
    inter = clones("course_lib RotaryEmbedding interleaved (cached)")
    half = clones("course_lib RotaryEmbedding half (cached)")
    # "times faster than the faster of the two peers", "than the peers"
    assert peer > inter and peer > half
    # "either way it does three operations on every element where the interleaved
    # form does one": rotate-half is the slower of the two fast forms
    assert half > inter
    # "the naive complex form ... is nearly as fast as the cached one", and both are
    # far from the reference forms (what made the reference slow was the temporaries)
    naive = clones("naive complex form")
    refs = [clones("course_lib apply_rope interleaved (reference"),
            clones("course_lib apply_rope half (reference")]
    assert naive < min(refs) / 2 and inter < min(refs) / 2
    assert naive / inter < 1.25
    # "the reference forms themselves sit with the peers": within a factor of the
    # peers' range, not with the fast forms
    peers = [clones("HF Llama"), clones("rotary-embedding-torch")]
    for r in refs:
        assert min(peers) / 2.5 < r < max(peers) * 2.5
    # with out=, the rotations cost at least a copy (a copy is the floor)
    for convention in ("interleaved", "half"):
        name = f"course_lib RotaryEmbedding {convention}, out="
        assert _value(rows, size, name, "× copy") >= 0.95


def test_allocator_words_hold_in_the_stored_run():
    alloc = {(r["shape"], r["operation"]): r for r in _table(_section("Fresh output"))}
    copy = "copy_() into a preallocated tensor"

    def t(shape, op, column):
        return _ms(alloc[shape, op][column])

    # "with the default settings the small tensor is reused from the heap and a clone
    # costs about what a copy costs"
    assert t(SMALL, "clone()", "default glibc") < 1.5 * t(SMALL, copy, "default glibc")
    # "the big tensor is above the 32 MiB ceiling and every clone faults in all its
    # pages again"
    assert t(BIG, "clone()", "default glibc") > 2 * t(BIG, copy, "default glibc")
    # "keep the heap and the clone drops to about a copy"
    assert t(BIG, "clone()", "keep the heap") < 1.5 * t(BIG, copy, "keep the heap")
    # "force every block through mmap and even the small tensor pays"
    assert t(SMALL, "clone()", "always mmap") > 2 * t(SMALL, "clone()", "default glibc")
    # the sizes the text glues: 8 and 64 MiB of float32, below and above 32 MiB
    assert 4 * 8 * 1024 * 64 * 4 < 32 * 2**20 < 1 * 32 * 4096 * 128 * 4


@pytest.mark.parametrize("size", ["1024", "2048"])
def test_alibi_words_hold_in_the_stored_run(size):
    rows = _table(_section("ALiBi"))
    floor = "× SDPA"
    fast = _value(rows, size, "course_lib alibi_attention", floor)
    whole = _value(rows, size, "SDPA + cached 4-D", floor)
    three_d = _value(rows, size, "SDPA + 3-D", floor)
    # "... times as fast as the faster x-transformers path"
    assert _value(rows, size, "course_lib alibi_attention",
                  "speed-up over x-transformers") > 1
    # the whole mask takes longer than the blocks, and the 3-D mask longer still
    assert whole > fast and three_d > whole
    # "the readable reference needs ... MiB, the two course fast paths ... at most"
    def mem(name):
        return _value(rows, size, name, "peak extra memory")

    assert mem("naive") > 4 * max(mem("course_lib alibi_attention"),
                                  mem("course_lib alibi_flex_attention"))


def test_transformer_xl_sinusoidal_and_grading_words_hold_in_the_stored_run():
    xl = _table(_section("Transformer-XL"))
    for size in ("512, 1024", "1024, 2048"):
        gather = _value(xl, size, "explicit index gather", "× course_lib")
        naive = _value(xl, size, "naive", "× course_lib")
        assert 1 < gather < naive  # the shift is fastest, the pairs slowest
        mem = {n: _value(xl, size, n, "peak extra memory")
               for n in ("course_lib", "explicit index gather", "naive")}
        assert mem["course_lib"] < mem["explicit index gather"] < mem["naive"]
    sin = _table(_section("Sinusoidal"))
    assert _value(sin, "2048, 512", "double Python", "× course_lib") > 1
    # grading: the warm start beats the cold one, and both two-worker runs gain more
    # than two cores alone could give ("the rest of the gain is process starts that
    # no longer happen")
    grading = _section("Autograde throughput")
    blocks = [b.strip() for b in re.split(r"\n\s*\n", grading)]
    classes = {}
    for text, tbl in zip(blocks, blocks[1:], strict=False):
        found = re.match(r"(\d+) submissions of", text)
        if found and tbl.startswith("|"):
            classes[int(found.group(1))] = _table(tbl)
    assert len(classes) >= 2

    def wall(rows, name):
        (row,) = [r for r in rows if r["command"].startswith(name)]
        return float(row["wall (s)"])

    for rows in classes.values():
        seq = wall(rows, "nbgrader autograde (sequential)")
        warm = wall(rows, "course autograde --jobs 2 (sandboxed, warm")
        cold = wall(rows, "course autograde --jobs 2 (sandboxed, cold")
        assert warm < cold and seq / warm > 2
    # course check: "most of the wait is that one import torch"
    check = next(_table(b) for b in blocks if b.startswith("| command (new process)"))

    def median(prefix):
        (row,) = [r for r in check if r["command (new process)"].startswith(prefix)]
        return float(row["median wall (s)"])

    assert median("`python -c 'import torch'") > 0.5 * median("`course check")


def test_chapter_13_glues_the_numbers_it_derives():
    text = CH13.read_text()
    # sizes and page counts come from code, not from typing
    for name in ("page_kib", "small_mib", "big_mib", "xl_pairs_gib", "query_block",
                 "recompile_limit", "torch_version", "alibi_explained",
                 "alibi_flex_vs"):
        assert f"{{glue:text}}`{name}" in text, name
    prose = re.sub(r"```.*?```", " ", text, flags=re.S)
    for name in ("sin_positions", "sin_dims"):
        assert f"{{glue:text}}`{name}`" in text, name
    for typed in ("4 GiB of float32", "blocks of 256", "one page (4 KiB)",
                  "the 8 MiB tensor", "the 64 MiB tensor", "a fresh 64 MiB block",
                  "for 2048 positions and 512 dimensions"):
        assert typed not in prose, typed


def test_chapter_13_writes_the_head_dimension_as_the_notation_table_does():
    # book/intro.md's notation table: $d$ (head_dim) is the width of one head's query
    # and key; chapter 13 once wrote $D$ in its Transformer-XL section
    intro = (ROOT / "book" / "intro.md").read_text()
    assert "| $d$, `head_dim` |" in intro
    text = CH13.read_text()
    maths = re.findall(r"\$([^$\n]+)\$", re.sub(r"```.*?```", " ", text, flags=re.S))
    assert maths
    assert not [m for m in maths if re.search(r"(?<![A-Za-z\\])D(?![A-Za-z])", m)]
    assert "$(H, L_q, L_k, d)$" in text and "$1/\\sqrt{d}$" in text
    for name in ("xl_lq", "xl_lk", "xl_heads", "xl_d"):
        assert f"{{glue:text}}`{name}`" in text, name


# --------------------------------------------------------------------------
# Chapter 12


class _Counting(torch.nn.Module):
    """A stand-in model that counts the token positions it is asked to process."""

    def __init__(self, vocab: int = 256) -> None:
        super().__init__()
        self.vocab, self.positions = vocab, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.positions += x.numel()
        return torch.zeros(*x.shape, self.vocab)  # (B, T, vocab)


@pytest.mark.parametrize("mult", [2, 4, 8])
def test_sliding_window_processes_nearly_T_over_L_positions_per_scored_token(mult):
    # chapter 12: "it processes nearly T/L times as many token positions per scored
    # token" (one window of T for every L scored tokens; the first window scores all)
    from course_lib.experiments.lm import nll_blocks

    L, n = 16, 4096
    T = mult * L
    data = torch.randint(0, 256, (n + 1,), generator=torch.Generator().manual_seed(0))
    model = _Counting()
    _, counts = nll_blocks(model, data, T, stride=L)
    ratio = model.positions / float(counts.sum())
    assert ratio <= T / L
    assert ratio > 0.9 * T / L
    model = _Counting()
    _, counts = nll_blocks(model, data, T)  # non-overlapping: one pass per token
    assert model.positions == counts.sum()


def test_lm_figure_bands_are_the_stored_intervals():
    # viz.plot_lm_perplexity: the band of each line is the record's [low, high]
    import numpy as np

    from course_lib import viz

    record = json.loads(LM_RESULTS.read_text())
    fig = viz.plot_lm_perplexity(record)
    ax = fig.axes[0]
    methods = list(record["perplexity"]["nonoverlap"])
    assert len(ax.collections) == len(methods)
    for band, method in zip(ax.collections, methods, strict=True):
        per = record["perplexity"]["nonoverlap"][method]
        ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
        for cell in per.values():
            assert 1.0 <= cell["low"] <= cell["mean"] <= cell["high"]
            for bound in (cell["low"], cell["high"]):
                assert np.isclose(ys, bound, rtol=1e-9).any(), (method, bound)


def test_t5_buckets_above_half_of_L_are_not_all_shared():
    # chapter 12 and experiments/model.py: only distances below L/2 are *guaranteed*
    # a bucket of their own; above, a logarithmic bucket may hold several distances
    # or none. At L = 32: 0..26, 29, 30 (and 31 within the training distances) have
    # one each, 27 and 28 share bucket 28, bucket 20 is never used. Derived here from
    # T5's formula, bucket = L/2 + floor(log(d / (L/2)) / log(2) * L/2) for d >= L/2.
    import math

    from course_lib.relative import t5_relative_position_bucket

    L = 32
    half = L // 2
    by_formula = [d if d < half else min(L - 1, half + int(
        math.log(d / half) / math.log(L / half) * (L - half))) for d in range(L)]
    got = t5_relative_position_bucket(-torch.arange(L), bidirectional=False,
                                      num_buckets=L, max_distance=L).tolist()
    assert got == by_formula
    own = [d for d in range(L) if got.count(got[d]) == 1]
    assert own == [*range(27), 29, 30, 31]
    assert [d for d in range(L) if got[d] == 28] == [27, 28]
    assert set(range(L)) - set(got) == {20}
    text = CH12.read_text()
    assert "so only distances below $L/2$\n  have a bucket of their own" not in text
    assert "guaranteed one bucket per distance" in text


def test_chapter_12_renders_the_math_of_its_computed_text():
    # the computed statements and tables (display(Markdown(...))) hold $L$; myst-nb
    # renders text/markdown outputs as CommonMark unless told otherwise, which shows
    # the dollars literally
    text = CH12.read_text()
    front = text.split("\n---\n", 1)[0]
    assert "mystnb:\n  render_markdown_format: myst" in front
    # an output that needs it (the sliding table's heading)
    assert "every token scored past $L$ sits at an untrained position)\\n\\n\"" in text


def test_chapter_12_sliding_reference_is_scored_with_a_short_stride():
    """Issue 33 (serious 3): with stride L the sliding score at T = L is the
    non-overlapping one; the record scores T = L with a short stride, the chapter
    says so from the record, and compares 4L with 2L (both stride L) as well."""
    record = json.loads(LM_RESULTS.read_text())
    L = record["settings"]["train_length"]
    short = record["sliding_stride_at_L"]
    assert 1 <= short < L
    for m, per in record["perplexity"]["sliding"].items():
        at_l = sum(per[str(L)]["counts"])
        plain = sum(record["perplexity"]["nonoverlap"][m][str(L)]["counts"])
        assert at_l != plain  # no longer the same tokens
    text = CH12.read_text()
    assert '"short_stride", record["sliding_stride_at_L"]' in text
    assert "{glue:text}`short_stride`" in text
    assert "gain4/sliding/alibi" in text


def test_chapter_12_glues_the_model_size_it_states():
    text = CH12.read_text()
    for name in ("n_layers", "steps", "train_kb", "L"):
        assert f"{{glue:text}}`{name}" in text, name
    assert "two-layer models" not in text
