"""Timing and memory measurement shared by the benchmark suites.

* Time: the median of ``repeats`` calls after ``warmup`` calls, all in one process, so
  the implementations being compared share the same machine state; results are
  reported as ratios against peers measured in the same run.
* Peak memory: each case runs once more in a fresh subprocess; the figure is the
  growth of the resident set (``ru_maxrss``) during the call, above what the inputs
  already occupied. It measures what the operation allocates, whoever allocates it.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

# A case builder takes a size and returns a zero-argument function to time.
Builder = Callable[..., Callable[[], object]]


@dataclass
class Timing:
    median_s: float
    q1_s: float
    q3_s: float
    repeats: int


def time_call(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 9,
    max_seconds: float = 20.0,
) -> Timing:
    """Median wall time of ``fn()``; stops early (after 3 repeats) past max_seconds."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    for i in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if i >= 2 and time.perf_counter() - start > max_seconds:
            break
    qs = statistics.quantiles(samples, n=4) if len(samples) > 1 else samples * 3
    return Timing(statistics.median(samples), qs[0], qs[2], len(samples))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _measure_here(module: str, case: str, kwargs: dict) -> int:
    suite = importlib.import_module(module)
    fn = suite.CASES[case](**kwargs)
    gc.collect()
    before = _rss_bytes()
    fn()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return max(0, peak - before)


def peak_memory(module: str, case: str, **kwargs: object) -> int | None:
    """Peak extra resident memory (bytes) of one call, measured in a fresh process.

    Returns None when the case fails there (the caller reports it)."""
    cmd = [sys.executable, "-m", "benchmarks.harness", module, case, json.dumps(kwargs)]
    env = dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads()))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        return None
    return int(proc.stdout.strip().splitlines()[-1])


def machine() -> str:
    """One line describing the machine and software the numbers come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, Python {platform.python_version()}"
    )


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**20:.0f} MiB"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # subprocess entry of peak_memory
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(_measure_here(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))


def run_suite(
    module: str,
    sizes: list[dict],
    *,
    baseline: str,
    memory: bool = True,
    size_label: Callable[[dict], str] = lambda kw: ", ".join(
        f"{v}" for v in kw.values()
    ),
    extra: Callable[[str, dict, Timing], str] | None = None,
    extra_header: str = "",
) -> str:
    """Time (and optionally measure memory of) every case of a suite at every size.

    Returns a markdown table with the median time, the ratio to ``baseline`` measured
    in the same run, and the peak extra memory. A case that raises is reported with
    its error instead of a time.
    """
    suite = importlib.import_module(module)
    header = ["size", "implementation", "median", "× " + baseline]
    if extra:
        header.append(extra_header)
    if memory:
        header.append("peak extra memory")
    rows: list[list[str]] = []
    for kw in sizes:
        results: dict[str, Timing | str] = {}
        for name, build in suite.CASES.items():
            try:
                fn = build(**kw)
                results[name] = time_call(fn)
            except Exception as exc:  # noqa: BLE001 - report, don't stop the run
                results[name] = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
            finally:
                fn = None  # noqa: F841 - free the inputs before the next case
                gc.collect()
        base = results.get(baseline)
        for name, res in results.items():
            if isinstance(res, str):
                row = [size_label(kw), name, res, "", *([""] if extra else [])]
                if memory:
                    row.append("")
                rows.append(row)
                continue
            ratio = (
                f"{res.median_s / base.median_s:.2f}"
                if isinstance(base, Timing)
                else ""
            )
            row = [size_label(kw), name, fmt_time(res.median_s), ratio]
            if extra:
                row.append(extra(name, kw, res))
            if memory:
                row.append(fmt_bytes(peak_memory(module, name, **kw)))
            rows.append(row)
    return markdown_table(header, rows)
