"""Timing and memory measurement shared by the benchmark suites.

* Time: every implementation of a suite is built once, warmed up, then timed in
  rounds: each round calls every implementation once, in a rotated order, so that a
  burst of load from other processes on a shared machine lands on all of them alike.
  The figure is the median over rounds; ratios are taken against a baseline measured
  in the same rounds. The clock is wall time, or (``CLOCK = "cpu"``) the CPU time of
  the process, user and system: with one thread on a shared machine it leaves out
  the time other processes held the core, which wall time cannot.
* Per tensor: a peer whose call does the work for several tensors (Hugging Face
  rotates q and k together) is divided by that count (``PER_CALL`` in a suite).
* Peak memory: each case runs again in a fresh subprocess: one warm-up call (so
  compilation and caches built on first use are not counted), then the peak resident
  set (``VmHWM``, reset through ``/proc/self/clear_refs``) during one more call, above
  what the process held just before it. glibc is told to serve every block of 128 KiB
  or more with its own ``mmap`` (``MALLOC_MMAP_THRESHOLD_``) so freed memory leaves
  the resident set at once and cannot hide the next call's allocations. It measures
  what the operation allocates, whoever allocates it (PyTorch, MKL, oneDNN).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import platform
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

    def scaled(self, factor: float) -> Timing:
        return Timing(
            self.median_s * factor, self.q1_s * factor, self.q3_s * factor, self.repeats
        )


def _summary(samples: list[float]) -> Timing:
    qs = statistics.quantiles(samples, n=4) if len(samples) > 1 else samples * 3
    return Timing(statistics.median(samples), qs[0], qs[2], len(samples))


def time_call(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 9,
    max_seconds: float = 20.0,
) -> Timing:
    """Median wall time of ``fn()``; stops early (after 3 repeats) past max_seconds."""
    timings = time_cases(
        {"fn": fn}, warmup=warmup, rounds=repeats, max_seconds=max_seconds
    )
    return timings["fn"]


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = os.environ.get("BENCH_CLOCK", "wall")  # python -m benchmarks --clock sets it


def time_cases(
    fns: dict[str, Callable[[], object]],
    *,
    warmup: int = 2,
    rounds: int = 9,
    max_seconds: float = 60.0,
) -> dict[str, Timing]:
    """Median wall time of every function, timed in interleaved rounds.

    Each function is called ``warmup`` times first. Then each round calls every
    function once; round ``r`` starts at function ``r mod n`` so no function always
    runs first or last. Stops after 3 rounds once ``max_seconds`` (wall) have passed.
    The clock is ``CLOCKS[CLOCK]``.
    """
    clock = CLOCKS[CLOCK]
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    start = time.perf_counter()
    for r in range(rounds):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            gc.collect()
            t0 = clock()
            fns[name]()
            samples[name].append(clock() - t0)
        if r >= 2 and time.perf_counter() - start > max_seconds:
            break
    return {name: _summary(s) for name, s in samples.items()}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _measure_here(module: str, case: str, kwargs: dict) -> int:
    suite = importlib.import_module(module)
    fn = suite.CASES[case](**kwargs)
    fn()  # warm-up: compilation, caches filled on first use
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set (VmHWM) to the current one
    before = _status_kib("VmRSS")
    fn()
    peak = _status_kib("VmHWM")
    return max(0, peak - before) * 1024


def peak_memory(module: str, case: str, **kwargs: object) -> int | None:
    """Peak extra resident memory (bytes) of one warm call, in a fresh process.

    Returns None when the case fails there (the caller reports it)."""
    cmd = [sys.executable, "-m", "benchmarks.harness", module, case, json.dumps(kwargs)]
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(torch.get_num_threads()),
        MALLOC_MMAP_THRESHOLD_="131072",
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
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
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        thp = "unknown"
    return (
        f"{cpu}, {os.cpu_count()} cores, {_mem_gib():.0f} GiB RAM, transparent huge "
        f"pages: {thp}; torch {torch.__version__}, {torch.get_num_threads()} "
        f"thread(s), Python {platform.python_version()}"
    )


def _mem_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        return float("nan")


def load() -> str:
    """The 1-minute load average against the core count (other processes' share)."""
    one, _, _ = os.getloadavg()
    return f"{one:.1f} on {os.cpu_count()} cores"


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


# An extra column: header, and a function (case name, size kwargs, timings of every
# case at that size) -> cell text.
Extra = tuple[str, Callable[[str, dict, dict[str, "Timing"]], str]]


def run_suite(
    module: str,
    sizes: list[dict],
    *,
    baseline: str,
    memory: bool = True,
    size_label: Callable[[dict], str] = lambda kw: ", ".join(
        f"{v}" for v in kw.values()
    ),
    extras: list[Extra] | None = None,
    rounds: int = 9,
) -> str:
    """Time (and optionally measure memory of) every case of a suite at every size.

    Returns a markdown table with the median time (per tensor where the suite's
    ``PER_CALL`` says a call handles several), the ratio to ``baseline`` measured in
    the same rounds, any ``extras`` columns, and the peak extra memory. A case that
    raises is reported with its error instead of a time.
    """
    suite = importlib.import_module(module)
    per_call: dict[str, int] = getattr(suite, "PER_CALL", {})
    extras = extras or []
    header = ["size", "implementation", "median", "× " + baseline]
    header += [h for h, _ in extras]
    if memory:
        header.append("peak extra memory")
    rows: list[list[str]] = []
    for kw in sizes:
        fns: dict[str, Callable[[], object]] = {}
        errors: dict[str, str] = {}
        for name, build in suite.CASES.items():
            try:
                fn = build(**kw)
                fn()  # fail here, not in the middle of the rounds
                fns[name] = fn
            except Exception as exc:  # noqa: BLE001 - report, don't stop the run
                errors[name] = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
        timings = {
            name: t.scaled(1.0 / per_call.get(name, 1))
            for name, t in time_cases(fns, rounds=rounds).items()
        }
        fns.clear()
        gc.collect()
        base = timings.get(baseline)
        for name in suite.CASES:
            if name in errors:
                row = [size_label(kw), name, errors[name], ""] + [""] * len(extras)
                rows.append(row + ([""] if memory else []))
                continue
            res = timings[name]
            ratio = f"{res.median_s / base.median_s:.2f}" if base else ""
            row = [size_label(kw), name, fmt_time(res.median_s), ratio]
            row += [cell(name, kw, timings) for _, cell in extras]
            if memory:
                row.append(fmt_bytes(peak_memory(module, name, **kw)))
            rows.append(row)
    return markdown_table(header, rows)


if __name__ == "__main__":  # subprocess entry of peak_memory
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(_measure_here(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
