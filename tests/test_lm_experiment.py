"""End-to-end checks of the language-model extrapolation pipeline (no claim about
which method wins) and of the committed results file."""

import json
import math
from pathlib import Path

import pytest

from course_lib.experiments.lm import (
    LM_METHODS,
    LMConfig,
    code_hash,
    encode,
    load_corpus,
    log_interval,
    perplexity,
    rope_extension,
    run_lm_experiment,
    train_lm,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "course_lib" / "data" / "lm_extrapolation.json"
TINY = LMConfig(train_length=8, multipliers=(1, 2), extension_multipliers=(2,),
                seeds=(0,), steps=4, batch_size=4, d_model=16, n_heads=2,
                d_ff=32, eval_tokens=64, fine_tune_steps=2)


def test_corpus_is_deterministic_and_split_disjointly():
    text, digest, (train, val) = load_corpus()
    text2, digest2, (train2, val2) = load_corpus()
    assert (digest, train, val) == (digest2, train2, val2)
    assert len(train) + len(val) + 1 == len(text)  # one joining newline between
    assert int(encode(text).max()) < 128


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


def _check_record(rec, cfg_methods):
    for key in ("code_sha256", "corpus_sha256", "seeds", "settings", "timing",
                "perplexity", "extension", "sliding_stride", "interval"):
        assert key in rec
    assert len(rec["code_sha256"]) == 64 and len(rec["corpus_sha256"]) == 64
    assert rec["corpus_sha256"] == load_corpus()[1]
    assert rec["timing"]["cpu_seconds"] > 0
    L = rec["settings"]["train_length"]
    lengths = {str(m * L) for m in rec["settings"]["multipliers"]}
    for kind in ("nonoverlap", "sliding"):
        assert set(rec["perplexity"][kind]) == set(cfg_methods)
        for per in rec["perplexity"][kind].values():
            assert set(per) == lengths
            for cell in per.values():
                assert len(cell["values"]) == len(rec["seeds"])
                assert 1.0 <= cell["low"] <= cell["mean"] <= cell["high"]
    for kind in ("no_fine_tune", "fine_tune"):
        for per in rec["extension"][kind].values():
            for cell in per.values():
                assert 1.0 <= cell["low"] <= cell["mean"] <= cell["high"]


def test_tiny_run_writes_the_full_record_format():
    rec = run_lm_experiment(TINY, log=lambda *_: None)
    json.loads(json.dumps(rec))
    _check_record(rec, LM_METHODS)
    assert set(rec["extension"]["no_fine_tune"]) == {"linear", "dynamic", "yarn",
                                                      "llama3"}
    assert set(rec["extension"]["fine_tune"]) == {"linear", "yarn"}
    from course_lib.viz import plot_lm_perplexity

    fig = plot_lm_perplexity(rec)
    assert len(fig.axes) == 2
    assert all(len(ax.get_lines()) == len(LM_METHODS) + 1 for ax in fig.axes)


def test_committed_results_file_has_the_expected_format():
    rec = json.loads(RESULTS.read_text())
    _check_record(rec, rec["settings"]["methods"])
    assert len(rec["seeds"]) == 3
