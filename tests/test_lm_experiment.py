"""End-to-end checks of the language-model extrapolation pipeline (no claim about
which method wins) and of the committed results file."""

import json
import math
from pathlib import Path

import pytest
import torch

from course_lib.experiments.lm import (
    EXTENSION_METHODS,
    FINE_TUNED,
    LM_METHODS,
    LMConfig,
    code_hash,
    contrast,
    encode,
    extension_factor,
    extension_scaling,
    load_corpus,
    log_interval,
    merge_records,
    nll_blocks,
    perplexity,
    rope_extension,
    run_lm_experiment,
    train_lm,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "course_lib" / "data" / "lm_extrapolation.json"
TINY = LMConfig(train_length=8, multipliers=(1, 2, 4), extension_multipliers=(2, 4),
                seeds=(0, 1), steps=4, batch_size=4, d_model=16, n_heads=2,
                d_ff=32, eval_tokens=96, fine_tune_steps=2, bootstrap=200,
                sliding_multipliers=(1, 2), extension_sliding_multipliers=(2,),
                fine_tune_multipliers=(2, 4))


def test_corpus_is_deterministic_and_split_disjointly():
    text, digest, (train, val) = load_corpus()
    text2, digest2, (train2, val2) = load_corpus()
    assert (digest, train, val) == (digest2, train2, val2)
    assert len(train) + len(val) + 1 == len(text)  # one joining newline between
    assert int(encode(text).max()) < 128
    # issue 33: the validation split is a tenth of the bytes, in whole topics (every
    # tenth topic by name held 2 % of them)
    from pydoc_data.topics import topics

    bodies = [b.encode("ascii", "replace").decode("ascii") for b in topics.values()]
    in_val = [b for b in bodies if b in val]
    assert all((b in train) != (b in val) for b in bodies if len(b) > 200)
    assert len(val) >= (len(text) - len(bodies) + 1) / 10
    # dropping the last topic taken (in hash order) would leave less than a tenth
    assert len(val) - max(len(b) for b in in_val) < len(text) / 10 + len(in_val)


def test_loss_decreases_on_a_fixed_seed():
    data = encode(load_corpus()[2][0][:20000])
    cfg = LMConfig(train_length=16, steps=30, batch_size=8, d_model=16,
                   n_heads=2, d_ff=32, lr=1e-2)
    _, losses = train_lm("rope", 0, cfg, data)
    # initial loss is near log(128) = 4.85 nats; 30 steps must cut it clearly
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5


def test_perplexity_shapes_and_windows():
    data = encode("the quick brown fox jumps over the lazy dog. " * 4)
    model, _ = train_lm("alibi", 0, TINY, data)
    out = model(data[None, :40])
    assert out.shape == (1, 40, 128)
    for stride in (None, 1, 8):
        ppl = perplexity(model, data, 16, stride=stride)
        assert 1.0 <= ppl < 1e6
    # with stride == length the sliding window scores the same tokens as the
    # non-overlapping windows only when windows tile exactly; here both are
    # exp of a mean NLL of the same model, so they agree to float rounding
    n = (data.numel() - 1) // 16 * 16
    a = perplexity(model, data[: n + 1], 16)
    b = perplexity(model, data[: n + 1], 16, stride=16)
    assert math.isclose(a, b, rel_tol=1e-5)  # float32 sums of ~1e2 terms
    with pytest.raises(ValueError, match="exceeds"):
        perplexity(model, data, 10_000)


def test_rope_extension_needs_a_rope_model():
    data = encode("abcdefgh" * 10)
    model, _ = train_lm("alibi", 0, TINY, data)
    with pytest.raises(ValueError, match="must use RoPE"):
        rope_extension(model, {"method": "linear", "factor": 2.0})


def test_log_interval_is_bounded():
    r = log_interval([1.0, 1.01, 3.0])
    assert 1.0 <= r["low"] <= r["mean"] <= r["high"]
    geo = math.exp(sum(math.log(v) for v in (1.0, 1.01, 3.0)) / 3)
    assert math.isclose(r["mean"], geo, rel_tol=1e-12)
    with pytest.raises(ValueError, match=">= 1"):
        log_interval([0.5, 2.0])


def test_code_hash_sees_code_not_docstrings(monkeypatch):
    import inspect

    from course_lib.experiments import lm

    source = inspect.getsource(lm)
    before = code_hash()

    def hash_of(text):
        monkeypatch.setattr(inspect, "getsource",
                            lambda mod, _real=inspect.getsource: text if mod is lm
                            else _real(mod))
        try:
            return code_hash()
        finally:
            monkeypatch.undo()

    assert hash_of(source) == before
    reworded = source.replace('"""The ALiBi paper', '"""Reworded: the ALiBi paper', 1)
    assert reworded != source and hash_of(reworded + "\n# a comment\n") == before
    changed = source.replace("math.log(v) for v in values",
                             "math.log(v) + 0 for v in values", 1)
    assert changed != source and hash_of(changed) != before


def test_committed_results_come_from_this_code():
    assert json.loads(RESULTS.read_text())["code_sha256"] == code_hash(), (
        "course_lib/data/lm_extrapolation.json was made by other code: "
        "run `course lab --lm`")


def _check_cell(cell, n_seeds):
    assert len(cell["values"]) == n_seeds == len(cell["blocks"])
    assert 1.0 <= cell["low"] <= cell["mean"] <= cell["high"]
    # the stored per-seed perplexities are exp of the block sums over the counts
    for v, row in zip(cell["values"], cell["blocks"], strict=True):
        assert len(row) == len(cell["counts"])
        assert math.isclose(math.log(v), sum(row) / sum(cell["counts"]),
                            rel_tol=1e-9)
    # the mean is the geometric mean over seeds
    geo = math.exp(sum(math.log(v) for v in cell["values"]) / n_seeds)
    assert math.isclose(cell["mean"], geo, rel_tol=1e-9)


def _check_record(rec, cfg_methods):
    for key in ("code_sha256", "corpus_sha256", "seeds", "settings", "timing",
                "perplexity", "extension", "reference", "factors", "sliding_stride",
                "block_tokens", "interval"):
        assert key in rec
    assert len(rec["code_sha256"]) == 64 and len(rec["corpus_sha256"]) == 64
    assert rec["corpus_sha256"] == load_corpus()[1]
    assert rec["timing"]["cpu_seconds"] > 0
    n = len(rec["seeds"])
    L = rec["settings"]["train_length"]
    s = rec["settings"]

    def at(name):
        return {str(m * L) for m in s[name]}

    for kind in ("nonoverlap", "sliding"):
        slide = kind == "sliding"
        assert set(rec["perplexity"][kind]) == set(cfg_methods)
        for per in rec["perplexity"][kind].values():
            assert set(per) == at("sliding_multipliers" if slide else "multipliers")
            for cell in per.values():
                _check_cell(cell, n)
        for stage in ("no_fine_tune", "fine_tune"):
            for per in rec["extension"][kind][stage].values():
                want = at("extension_multipliers" if stage == "no_fine_tune"
                          else "fine_tune_multipliers")
                if slide:
                    want &= at("extension_sliding_multipliers")
                assert set(per) == want
                for cell in per.values():
                    _check_cell(cell, n)
        for per in rec["reference"][kind].values():
            for cell in per.values():
                _check_cell(cell, n)
    # issue 33: at T = L the sliding window uses the short stride, so it scores the
    # first window whole and then `stride` tokens per window (with stride L it would
    # be the non-overlapping score itself)
    stride = rec["sliding_stride_at_L"]
    assert 1 <= stride < L and rec["sliding_stride"] == L
    n_tok = rec["eval_tokens"]
    windows = (n_tok - L) // stride + 1
    for m in cfg_methods:
        counts = rec["perplexity"]["sliding"][m][str(L)]["counts"]
        assert sum(counts) == L + stride * (windows - 1)
        assert sum(rec["perplexity"]["nonoverlap"][m][str(L)]["counts"]) == (
            n_tok // L * L)


def _dynamic_factor_by_definition(length, L):
    # dynamic NTK (emozilla 2023; YaRN section 3.3): s = max(1, l / L), l the
    # length of the input in use
    return max(1.0, length / L)


def test_dynamic_ntk_uses_length_over_L():
    cfg = LMConfig()
    L = cfg.train_length
    for mult in (2, 4, 8):
        T = mult * L
        assert extension_factor("dynamic", T, cfg) == _dynamic_factor_by_definition(
            T, L) == mult
    assert extension_factor("dynamic", L // 2, cfg) == 1.0
    # static NTK keeps one factor (the largest extension multiplier) at every length
    assert {extension_factor("ntk", m * L, cfg) for m in (2, 4, 8)} == {8.0}
    # end to end: the rotary table of the model at T holds the NTK-scaled angles
    # theta_i' = (b s^(d/(d-2)))^(-2i/d) with s = T/L, not the misconfigured
    # s = (T/L)^2 - T/L + 1 of Hugging Face's rule fed the target ratio
    small = LMConfig(train_length=8, d_model=16, n_heads=2, d_ff=32, steps=1,
                     batch_size=4)
    model, _ = train_lm("rope", 0, small, encode("abcdefgh" * 20))
    d = small.d_model // small.n_heads
    i = torch.arange(d // 2, dtype=torch.float64)
    for mult in (2, 4, 8):
        T = mult * small.train_length
        rope_extension(model, extension_scaling("dynamic", T, small))
        model(torch.zeros(1, T, dtype=torch.long))  # the module sees length T
        cos1 = model.shared["rope"].cos_cached[1]  # cos(theta_i') at position 1
        for s, equal in ((float(mult), True), (float(mult * mult - mult + 1), False)):
            theta = (10000.0 * s ** (d / (d - 2))) ** (-2 * i / d)
            assert torch.allclose(cos1, theta.cos(), atol=1e-12) is equal, (mult, s)
    rope_extension(model, None)


def test_nll_blocks_count_the_scored_tokens():
    data = encode("the quick brown fox jumps over the lazy dog. " * 4)
    n = data.numel() - 1
    model, _ = train_lm("alibi", 0, TINY, data)
    length, stride, block = 16, 4, 20
    sums, counts = nll_blocks(model, data, length, stride=stride, block=block)
    n_windows = (n - length) // stride + 1
    assert counts.sum() == length + (n_windows - 1) * stride
    assert counts.numel() == -(-n // block)
    sums_all, counts_all = nll_blocks(model, data, length)
    assert counts_all.sum() == n // length * length
    assert math.isclose(math.exp(float(sums_all.sum() / counts_all.sum())),
                        perplexity(model, data, length), rel_tol=1e-12)
    # a token's block is its input position // block: the first block holds the
    # first window's 16 predictions plus the 4 of the next window
    assert counts[0] == block


def _cell(blocks, counts):
    return {"blocks": blocks, "counts": counts}


def test_contrast_adds_seed_and_text_variance():
    counts = [10, 10, 10, 10]
    # the same NLL per token in every block and seed: no noise at all
    flat = _cell([[20.0] * 4] * 3, counts)
    c = contrast(flat, replicates=100)
    assert math.isclose(c["ratio"], math.exp(2.0), rel_tol=1e-12)
    assert math.isclose(c["low"], c["high"], rel_tol=1e-12)
    # seeds differ, blocks within a seed do not: the seed t-interval of chapter 10
    seeds = _cell([[10.0] * 4, [20.0] * 4, [30.0] * 4], counts)
    c = contrast(seeds, replicates=100)
    assert c["se_text"] < 1e-12
    lo = log_interval([math.exp(1.0), math.exp(2.0), math.exp(3.0)])
    assert math.isclose(c["low"], lo["low"], rel_tol=1e-9)
    assert math.isclose(c["high"], lo["high"], rel_tol=1e-9)
    # blocks differ, seeds do not: only text noise, wider than no noise
    text = _cell([[10.0, 30.0, 15.0, 25.0]] * 3, counts)
    c = contrast(text, replicates=500)
    assert c["sd_seed"] == 0 and c["se_text"] > 0 and c["low"] < c["high"]
    # a cell against itself, paired: ratio 1, no width
    c = contrast(text, text, paired=True, replicates=100)
    assert c["ratio"] == 1.0 and math.isclose(c["low"], 1.0, abs_tol=1e-12)
    with pytest.raises(ValueError, match="same text blocks"):
        contrast(text, _cell([[1.0]] * 3, [1]))


def test_t5_buckets_are_exact_only_up_to_half_of_L():
    # model.py builds T5's causal bias with num_buckets = max_distance = L: the first
    # L/2 buckets are one per distance, the rest logarithmic (T5's rule, computed
    # here from its formula, not from the library)
    from course_lib.experiments.model import ModelConfig, TinyTransformer
    from course_lib.relative import t5_relative_position_bucket

    L = 32
    model = TinyTransformer(ModelConfig(vocab_size=4, n_classes=4, method="t5",
                                        train_length=L))
    t5 = model.shared["t5"]
    assert (t5.num_buckets, t5.max_distance) == (L, L)
    exact = L // 2
    dist = torch.arange(0, 4 * L)

    def by_formula(d):
        if d < exact:
            return d
        b = exact + int(math.log(d / exact) / math.log(L / exact) * (L - exact))
        return min(b, L - 1)

    want = [by_formula(int(d)) for d in dist]
    got = t5_relative_position_bucket(-dist, bidirectional=False, num_buckets=L,
                                      max_distance=L).tolist()
    assert got == want
    trained = set(got[:L])  # distances 0 .. L-1 occur in training
    assert got[:exact] == list(range(exact))
    assert set(range(L)) - trained == {20}  # one bucket is never used at L = 32
    assert len(trained) < L
    assert set(got[L:]) == {L - 1}  # every longer distance shares the last bucket


def test_tiny_run_writes_the_full_record_format():
    rec = run_lm_experiment(TINY, log=lambda *_: None)
    json.loads(json.dumps(rec))
    _check_record(rec, LM_METHODS)
    for kind in ("nonoverlap", "sliding"):
        assert set(rec["extension"][kind]["no_fine_tune"]) == set(EXTENSION_METHODS)
        assert set(rec["extension"][kind]["fine_tune"]) == set(FINE_TUNED)
    assert set(rec["reference"]["nonoverlap"]) == {"sinusoidal", "rope"}
    assert rec["reference"]["sliding"] == {}
    L = TINY.train_length
    assert rec["sliding_stride_at_L"] == TINY.stride_at_L == max(1, L // 8)
    assert rec["factors"]["dynamic"] == {str(m * L): float(m) for m in (2, 4)}
    assert rec["factors"]["ntk"] == {str(m * L): 4.0 for m in (2, 4)}
    # at the largest multiplier static and dynamic NTK are the same rotation
    top = str(4 * L)
    ext = rec["extension"]["nonoverlap"]["no_fine_tune"]
    assert ext["ntk"][top]["values"] == ext["dynamic"][top]["values"]
    # the control fine-tune changes the model (it is not plain RoPE re-scored)
    ft = rec["extension"]["nonoverlap"]["fine_tune"]["plain"][top]["values"]
    plain = rec["perplexity"]["nonoverlap"]["rope"][top]["values"]
    assert ft != plain
    from course_lib.viz import plot_lm_perplexity

    fig = plot_lm_perplexity(rec)
    assert len(fig.axes) == 2
    assert all(len(ax.get_lines()) == len(LM_METHODS) + 1 for ax in fig.axes)


def test_committed_results_file_has_the_expected_format():
    rec = json.loads(RESULTS.read_text())
    _check_record(rec, rec["settings"]["methods"])
    assert len(rec["seeds"]) == 3
    # the whole validation split is scored
    assert rec["eval_tokens"] == len(load_corpus()[2][1]) - 1
    # the dynamic NTK factors follow the definition s = max(1, T / L)
    L = rec["settings"]["train_length"]
    for T, s in rec["factors"]["dynamic"].items():
        assert s == _dynamic_factor_by_definition(int(T), L)
    assert sorted(rec["factors"]["dynamic"].values()) == [2.0, 4.0, 8.0]


CHAPTER = ROOT / "book" / "12-lm-extrapolation.md"


def _prose(text):
    """The chapter's Markdown without code cells, math, inline code and roles."""
    import re

    text = re.sub(r"```.*?```", " ", text, flags=re.S)  # code cells, directives
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " ", text)
    text = re.sub(r"\{[a-z:]+\}`[^`]*`", " ", text)  # {cite}`...`, {glue:text}`...`
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"^---\n.*?\n---\n", " ", text, flags=re.S)  # front matter
    # names with numbers in them, and the papers' section numbers, are not results
    text = re.sub(r"WikiText-103|Llama 3\.1", " ", text)
    return re.sub(r"(section|appendix|appendices|Figure|Table|chapter)s? [A-Z]?[\d.]+",
                  " ", text)


def test_chapter_prose_types_no_results():
    # every result the chapter states is computed from the record at build time:
    # its prose (outside code, math and glue) holds no decimal number, no number of
    # three or more digits and no percentage other than the 95 % of the intervals
    import re

    prose = _prose(CHAPTER.read_text())
    found = re.findall(r"\d+\.\d+|\d{3,}|\d+,\d{3}|\d+ ?%", prose)
    assert set(found) <= {"95 %"}, found
    assert json.loads(RESULTS.read_text())["interval"].startswith("95%")
    # and the machinery is used: glued settings and computed statements
    text = CHAPTER.read_text()
    assert "{glue:text}`" in text and "rep.comparisons(record, floor=unigram)" in text


def test_prose_check_catches_a_typed_number():
    assert "7.29" in _prose("RoPE has perplexity 7.29 at $L$.")
    assert "95 %" in _prose("a 95 % interval, see section 2.1")
    assert "2.1" not in _prose("see section 2.1 and `x = 3.5` and $t_{0.975}$")


def test_chapter_comparisons_follow_their_intervals():
    from course_lib.experiments import lm_report

    rec = json.loads(RESULTS.read_text())
    comps = lm_report.comparisons(rec)
    assert comps
    m = lm_report.MARGIN
    for c in comps.values():
        assert c.low <= c.ratio <= c.high
        assert c.paired  # issue 33: every comparison is paired over seeds
        # lower / higher only for an interval wholly beyond the margin: never for a
        # difference that may lie inside it (e.g. [1.007, 1.025] at a 2 % margin)
        want = ("equivalent" if 1 / m < c.low and c.high < m else
                "lower" if c.high < 1 / m else "higher" if c.low > m else "undecided")
        assert c.verdict == want, c
    assert lm_report.verdict({"low": 1.007, "high": 1.025}) == "undecided"
    assert lm_report.verdict({"low": 1.021, "high": 1.5}) == "higher"
    assert lm_report.verdict({"low": 0.5, "high": 0.979}) == "lower"
    # static NTK against NTK at s = T/L only where their factors differ (at the
    # largest multiplier both are the same rotation, a ratio of exactly 1)
    for T, f in rec["factors"]["ntk"].items():
        assert (f"ntk/{T}" in comps) == (f != rec["factors"]["dynamic"][T])
    # the point estimate of a paired ratio is the geometric mean over seeds of the
    # per-seed ratios on the text blocks both cells scored (at T = 16L the last,
    # short block holds no whole window), recomputed here from the stored blocks
    L = rec["settings"]["train_length"]
    top = max(rec["settings"]["multipliers"]) * L
    per = rec["perplexity"]["nonoverlap"]["alibi"]
    a, b = per[str(top)], per[str(L)]
    both = [j for j, (x, y) in enumerate(zip(a["counts"], b["counts"], strict=True))
            if x > 0 and y > 0]
    assert 0 < len(both) < len(a["counts"])  # the tail block is left out

    def log_ppl(cell, row):
        return sum(row[j] for j in both) / sum(cell["counts"][j] for j in both)

    diffs = [log_ppl(a, ra) - log_ppl(b, rb)
             for ra, rb in zip(a["blocks"], b["blocks"], strict=True)]
    geo = math.exp(sum(diffs) / len(diffs))
    assert math.isclose(comps["rise/nonoverlap/alibi"].ratio, geo, rel_tol=1e-9)
    # the dynamic NTK rows of the table print the factors of the definition
    table = lm_report.extension_table(rec, "nonoverlap")
    row = next(r for r in table.splitlines() if r.startswith("| NTK at s = T/L"))
    for m in rec["settings"]["extension_multipliers"]:
        assert f"s = {_dynamic_factor_by_definition(m * L, L):g}" in row


def test_parts_merge_into_the_record_of_one_run():
    """``course lab --lm --methods ...`` runs parts of the experiment in parallel
    processes; merged, they give exactly the record of one run (issue 33 re-run)."""
    cfg = LMConfig(**{**TINY.__dict__, "seeds": (0,)})
    full = run_lm_experiment(cfg, log=lambda *_: None)
    parts = [
        run_lm_experiment(LMConfig(**{**cfg.__dict__, "methods": methods,
                                      "reference_methods": refs}),
                          log=lambda *_: None)
        for methods, refs in ((("none", "sinusoidal", "learned", "t5", "alibi"),
                               ("sinusoidal",)),
                              (("rope", "rope+yarn"), ("rope",)))]
    merged = merge_records(parts)
    for key in ("perplexity", "extension", "reference", "factors", "settings"):
        assert json.dumps(merged[key], sort_keys=True) == json.dumps(
            full[key], sort_keys=True), key
    assert merged["timing"]["cpu_seconds"] == pytest.approx(
        sum(p["timing"]["cpu_seconds"] for p in parts))
    with pytest.raises(ValueError, match="more than one part"):
        merge_records([parts[0], parts[0]])
    other = json.loads(json.dumps(parts[1]))
    other["settings"]["steps"] += 1
    with pytest.raises(ValueError, match="steps"):
        merge_records([parts[0], other])


def test_yarn_and_its_ablation_reach_the_rotary_table():
    """The LM run's YaRN takes its ramp from the turns at L (the same frequencies as
    LLaMA's beta = 32 at this L); 'pi+t' is PI times YaRN's attention factor and
    'ramp' YaRN's frequencies without it."""
    import course_lib as cl

    model, _ = train_lm("rope", 0, TINY, encode("abc " * 50))
    L, T = TINY.train_length, 4 * TINY.train_length
    tables = {}
    for m in ("linear", "pi+t", "ramp", "yarn"):
        rope_extension(model, extension_scaling(m, T, TINY))
        rot = model.shared["rope"]
        rot._grow(T)
        tables[m] = rot.cos_cached[:T]
    a = cl.yarn_attention_factor(T / L)
    assert torch.allclose(tables["pi+t"], a * tables["linear"], rtol=1e-15, atol=0)
    assert torch.allclose(tables["yarn"], a * tables["ramp"], rtol=1e-15, atol=0)
    hd = TINY.d_model // TINY.n_heads
    llama, _ = cl.rope_scaled_frequencies(hd, method="yarn", factor=T / L,
                                          original_max_position=L,
                                          dtype=torch.float64)
    pos = torch.arange(T, dtype=torch.float64)
    assert torch.allclose(tables["ramp"], (pos[:, None] * llama).cos(), atol=1e-12)


def test_dynamic_ntk_token_by_token_uses_the_factor_of_each_position():
    """lm_dynamic scores position p with the NTK base of s = max(1, (p + 1) / L)
    over the window's first p + 1 tokens (issue 33: dynamic NTK run as dynamic).
    With one window and blocks of one token the per-position NLL is visible:
    below L it is plain RoPE's, at the window's last position it is NTK at T/L over
    the whole window, and in between it differs from both."""
    from course_lib.experiments.lm_dynamic import dynamic_nll_blocks

    L, T = TINY.train_length, 4 * TINY.train_length
    model, _ = train_lm("rope", 0, TINY, encode("the quick brown fox " * 30))
    data = encode(load_corpus()[2][1][: T + 1])  # exactly one window of T
    dyn, counts = dynamic_nll_blocks(model, data, T, block=1)  # (T,) per position
    assert torch.equal(counts, torch.ones(T, dtype=torch.float64))
    rope_extension(model, None)
    plain, _ = nll_blocks(model, data, T, block=1)
    rope_extension(model, {"method": "ntk", "factor": T / L})
    whole, _ = nll_blocks(model, data, T, block=1)
    rope_extension(model, None)
    # causal attention: positions below L see only s = 1 frames in both
    assert torch.allclose(dyn[:L], plain[:L], rtol=0, atol=1e-5)
    assert torch.allclose(dyn[-1:], whole[-1:], rtol=0, atol=1e-5)
    mid = slice(L + 1, T - 1)
    assert not torch.allclose(dyn[mid], whole[mid], atol=1e-5)
    assert not torch.allclose(dyn[mid], plain[mid], atol=1e-5)
    # windows no longer than L: the dynamic score is plain RoPE's
    short, _ = dynamic_nll_blocks(model, data, L, block=L)
    ref, _ = nll_blocks(model, data, L, block=L)
    assert torch.allclose(short, ref, rtol=0, atol=1e-4)


def test_stored_dynamic_cells_pair_with_the_record():
    """The stored dynamic-NTK cells use the record's seeds, text blocks and counts,
    and the chapter's comparisons follow the margin rule."""
    from course_lib.experiments import lm_report

    rec = json.loads(RESULTS.read_text())
    dyn = lm_report.load_dynamic()
    assert dyn is not None and dyn["seeds"] == rec["seeds"]
    assert dyn["code_sha256"] == rec["code_sha256"]
    L = rec["settings"]["train_length"]
    assert set(dyn["cells"]) == {str(m * L)
                                 for m in rec["settings"]["extension_multipliers"]}
    for T, cell in dyn["cells"].items():
        assert cell["counts"] == rec["perplexity"]["nonoverlap"]["rope"][T]["counts"]
        assert len(cell["blocks"]) == len(rec["seeds"])
    comps = lm_report.dynamic_comparisons(rec, dyn)
    for key, c in comps.items():
        if key.startswith("dynppl/"):
            assert 1 <= c.low <= c.ratio <= c.high
        else:
            assert c.verdict == lm_report.verdict({"low": c.low, "high": c.high})


def test_unigram_floor_and_no_equivalence_between_collapsed_cells():
    """The chapter's 'collapsed' level is the validation perplexity of the training
    split's byte frequencies (add-one over 128 bytes), recomputed here with a
    Counter; two cells at or above it are 'collapsed', never equivalent."""
    from collections import Counter

    from course_lib.experiments import lm_report

    _, _, (train, val) = load_corpus()
    tr = encode(train).tolist()
    va = encode(val).tolist()[1:]
    counts = Counter(tr)
    total = len(tr) + 128
    nll = -sum(math.log((counts[b] + 1) / total) for b in va) / len(va)
    floor = lm_report.unigram_perplexity()
    assert math.isclose(floor, math.exp(nll), rel_tol=1e-9)
    assert 1 < floor < 128  # better than uniform over the bytes
    rec = json.loads(RESULTS.read_text())
    cell = rec["perplexity"]["nonoverlap"]["alibi"][str(rec["settings"]["train_length"])]
    # the same cell against itself is equivalent, unless both sit at the floor
    c = lm_report.compare(rec, "x", "x", cell, cell, floor=floor)
    assert c.verdict == "equivalent"
    c = lm_report.compare(rec, "x", "x", cell, cell, floor=cell["mean"] / 2)
    assert c.verdict == "collapsed"
    means = lm_report.all_means(rec, lm_report.load_dynamic())
    assert len(means) > 100 and max(means) < floor  # the chapter's statement
    comps = lm_report.comparisons(rec, floor=floor)
    assert all(c.verdict != "collapsed" for c in comps.values())


def _shift_invariant(method: str, L: int = 8) -> bool:
    """Whether the position signal of a TinyTransformer with ``method`` depends on
    distances only: the attention terms (bias or rotated q.k) of positions
    ``i + L, j + L`` equal those of ``i, j``, and the inputs to the first block of
    the same tokens do not change when the tokens move by ``L``."""
    from course_lib.experiments.model import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=16, n_classes=16, method=method,
                                        train_length=L, d_model=16, n_heads=2))
    tokens = torch.randint(0, 16, (1, L))
    doubled = torch.cat([torch.randint(0, 16, (1, L)), tokens], dim=1)  # (1, 2L)
    same_input = torch.allclose(model.embed_tokens(tokens),
                                model.embed_tokens(doubled)[:, L:], atol=1e-6)
    same_scores = True
    if method == "rope":
        q, k = torch.randn(2, 1, 1, 2 * L, 8, dtype=torch.float64).unbind(0)
        q[..., L:, :], k[..., L:, :] = q[..., :L, :], k[..., :L, :]
        rope = model.shared["rope"]
        rq, rk = rope(q.float()), rope(k.float())
        scores = rq @ rk.transpose(-2, -1)  # (1, 1, 2L, 2L)
        same_scores = torch.allclose(scores[..., L:, L:], scores[..., :L, :L],
                                     atol=1e-4)
    elif method == "t5":
        bias = model.shared["t5"](2 * L)
        same_scores = torch.allclose(bias[:, L:, L:], bias[:, :L, :L])
    elif method == "alibi":
        from course_lib import alibi_bias

        bias = alibi_bias(2, 2 * L, causal=True)
        same_scores = torch.equal(bias[:, L:, L:], bias[:, :L, :L])
    return same_input and same_scores


def test_sliding_context_comparisons_only_for_distance_only_methods():
    """Chapter 12: a sliding-window score at 2L against L asks whether context
    beyond L helps only where moving a window leaves the position signal of the
    near context unchanged (distance-only methods; Press et al., appendix B.2 draw
    the context conclusion for ALiBi and T5 and report the sinusoidal model's
    sliding perplexity exploding). Which methods those are is derived here from the
    models, not from the report's list."""
    from course_lib.experiments import lm_report

    base = [m for m in LM_METHODS if m != "rope+yarn"]  # rope+yarn: a rescaled rope
    derived = {m for m in base if _shift_invariant(m)}
    # NoPE passes the shift test (it has no position signal to shift), but a causal
    # model without one infers positions from the prefix (Haviv et al. 2022): left
    # out, as RoPE + YaRN is (its factor changes with the length)
    assert "none" in derived
    assert derived - {"none"} == set(lm_report.DISTANCE_ONLY)
    assert "rope+yarn" not in lm_report.DISTANCE_ONLY
    assert set(base) - derived == set(lm_report.ABSOLUTE)
    rec = json.loads(RESULTS.read_text())
    comps = lm_report.comparisons(rec)
    gains = {k.split("/")[2] for k in comps if k.startswith(("gain2/", "gain4/"))}
    assert gains == set(lm_report.DISTANCE_ONLY) & set(rec["perplexity"]["sliding"])
    for m in lm_report.ABSOLUTE:
        assert "untrained" in comps[f"rise/sliding/{m}"].text
    text = CHAPTER.read_text()
    assert "For which methods the sliding window answers that question" in text
    assert "explodes" in text and "Table 13" in text


def test_no_verdict_from_per_cell_intervals():
    """Chapter 12 states no ordering read off cells' own intervals ('the lowest
    geometric mean', 'beyond the interval(s)'): every verdict is a paired ratio."""
    text = CHAPTER.read_text()
    for phrase in ("lowest geometric mean", "beyond the interval", "inside the intervals",
                   "overlapping intervals"):
        assert phrase not in text, phrase
