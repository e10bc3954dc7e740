"""Every benchmark runs on a tiny size and its table lists every implementation.

Benchmarks are not timed here (the machines are shared and noisy); this only checks
that `make bench` will not fail on a renamed function or a peer's changed API."""

from __future__ import annotations

import importlib

import pytest

from benchmarks.harness import run_suite

SUITES = [
    "benchmarks.bench_rope",
    "benchmarks.bench_alibi",
    "benchmarks.bench_transformer_xl",
    "benchmarks.bench_sinusoidal",
]


@pytest.mark.parametrize("module", SUITES)
def test_suite_runs_on_tiny_size(module: str) -> None:
    suite = importlib.import_module(module)
    table = run_suite(module, suite.QUICK_SIZES, baseline=suite.BASELINE, memory=False)
    lines = table.splitlines()
    assert len(lines) == 2 + len(suite.CASES) * len(suite.QUICK_SIZES)
    assert "failed" not in table, table
    assert suite.BASELINE in suite.CASES


@pytest.mark.parametrize(
    "module", ["benchmarks.bench_rope", "benchmarks.bench_transformer_xl"]
)
def test_compared_implementations_agree(module: str) -> None:
    """The peers compute the same thing, so the timings compare like with like."""
    import torch

    suite = importlib.import_module(module)
    kw = suite.QUICK_SIZES[0]
    outs = {}
    for name, build in suite.CASES.items():
        out = build(**kw)()
        if isinstance(out, tuple):
            out = out[0]
        outs[name] = out
    if module.endswith("rope"):
        ref = outs["course_lib apply_rope interleaved (reference form)"]
        for name in (
            "course_lib RotaryEmbedding interleaved (cached)",
            "rotary-embedding-torch rotate_queries_or_keys",
            "naive complex form (factors recomputed)",
        ):
            torch.testing.assert_close(outs[name], ref, atol=1e-5, rtol=1e-5)
        half = outs["course_lib apply_rope half (reference form)"]
        for name in (
            "course_lib RotaryEmbedding half (cached)",
            "HF Llama apply_rotary_pos_emb (q and k: 2 tensors)",
        ):
            torch.testing.assert_close(outs[name], half, atol=1e-5, rtol=1e-5)
    else:
        ref = outs[suite.BASELINE]
        for out in outs.values():
            torch.testing.assert_close(out, ref)


def test_alibi_peers_agree() -> None:
    """Every ALiBi attention in the benchmark returns the same output (x-transformers'
    +m*j-free bias -m|i-j| is the same under the causal mask)."""
    import torch

    suite = importlib.import_module("benchmarks.bench_alibi")
    outs = {
        name: build(**suite.QUICK_SIZES[0])() for name, build in suite.CASES.items()
    }
    ref = outs["naive matmul-softmax-matmul (course_lib reference)"]
    for name, out in outs.items():
        if name == suite.BASELINE:
            continue  # the floor has no bias: a different function by design
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4, msg=name)
