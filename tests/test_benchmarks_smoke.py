"""Every benchmark runs on a tiny size and its table lists every implementation.

Benchmarks are not timed here (the machines are shared and noisy); this only checks
that `make bench` will not fail on a renamed function or a peer's changed API."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from benchmarks.bench_rope import COPY
from benchmarks.harness import peak_memory, run_suite, time_cases

SUITES = [
    "benchmarks.bench_rope",
    "benchmarks.bench_alibi",
    "benchmarks.bench_transformer_xl",
    "benchmarks.bench_sinusoidal",
]


@pytest.mark.parametrize("module", SUITES)
def test_suite_runs_on_tiny_size(module: str) -> None:
    suite = importlib.import_module(module)
    extras = getattr(suite, "EXTRAS", None)
    table = run_suite(
        module,
        suite.QUICK_SIZES,
        baseline=suite.BASELINE,
        memory=False,
        extras=extras,
        rounds=1,
    )
    lines = table.splitlines()
    assert len(lines) == 2 + len(suite.CASES) * len(suite.QUICK_SIZES)
    assert "failed" not in table, table
    assert suite.BASELINE in suite.CASES
    columns = 4 + len(extras or [])
    assert all(line.count("|") == columns + 1 for line in lines), table
    baseline_row = next(line for line in lines if f"| {suite.BASELINE} |" in line)
    assert baseline_row.split("|")[4].strip() == "1.00"


def test_rounds_interleave_and_count_every_call() -> None:
    calls: list[str] = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    timings = time_cases(fns, warmup=1, rounds=3)
    assert calls[:3] == ["a", "b", "c"]  # warm-up
    assert calls[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # rotated
    assert {n: t.repeats for n, t in timings.items()} == {"a": 3, "b": 3, "c": 3}


def test_peak_memory_sees_a_fresh_output_and_not_a_copy() -> None:
    """A clone of a 16 MiB tensor allocates 16 MiB; a copy into existing memory, none.

    The inputs are built before the measured call, so neither counts them."""
    shape = [1, 1, 2048, 2048]  # 16 MiB of float32
    clone = peak_memory(
        "benchmarks.bench_rope", "clone() of the same tensor", shape=shape
    )
    copy = peak_memory("benchmarks.bench_rope", COPY, shape=shape)
    assert clone is not None and copy is not None
    assert 15 * 2**20 <= clone <= 24 * 2**20, clone
    assert copy <= 2 * 2**20, copy


def test_allocator_table_runs_on_a_tiny_shape() -> None:
    from benchmarks import bench_alloc

    table = bench_alloc.main([[1, 1, 4, 8]])
    lines = table.splitlines()
    assert len(lines) == 2 + len(bench_alloc.OPS)
    assert all(line.count(" ms") == len(bench_alloc.SETTINGS) for line in lines[2:])


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
            "course_lib RotaryEmbedding interleaved, out= preallocated",
            "rotary-embedding-torch rotate_queries_or_keys",
            "naive complex form (factors recomputed)",
        ):
            torch.testing.assert_close(outs[name], ref, atol=1e-5, rtol=1e-5)
        half = outs["course_lib apply_rope half (reference form)"]
        for name in (
            "course_lib RotaryEmbedding half (cached)",
            "course_lib RotaryEmbedding half, out= preallocated",
            suite.HF,
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


def test_committed_results_have_every_case_the_book_reads() -> None:
    """benchmarks/RESULTS.md (read by book/13-making-it-fast.md) is complete: every
    suite's table lists every implementation at every full size, with a time."""
    from benchmarks.__main__ import SUITES

    report = (Path(__file__).resolve().parents[1] / "benchmarks/RESULTS.md").read_text()
    for title, module in SUITES.values():
        suite = importlib.import_module(module)
        assert f"## {title}\n" in report, title
        body = report.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        rows = [line for line in body.splitlines() if line.startswith("| ")][1:]
        labels = {
            (row.split("|")[1].strip(), row.split("|")[2].strip()) for row in rows
        }
        for kw in suite.SIZES:
            size = ", ".join(f"{v}" for v in kw.values())
            for name in suite.CASES:
                assert (size, name) in labels, (title, size, name)
        assert "failed" not in body, title
    assert "## Fresh output vs existing memory" in report
