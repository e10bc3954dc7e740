"""`make bench`: every benchmark, peers side by side in the same process; prints a
markdown report and writes it to benchmarks/RESULTS.md.

    python -m benchmarks            # full sizes (several minutes)
    python -m benchmarks --quick    # tiny sizes: checks that every benchmark runs
    python -m benchmarks --only rope,alibi --out /tmp/part.md
    python -m benchmarks --threads 1 --clock cpu   # steadier on a shared machine
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks import harness
from benchmarks.harness import load, machine, run_suite

HERE = Path(__file__).resolve().parent

SUITES = {
    "rope": ("RoPE, fp32", "benchmarks.bench_rope"),
    "alibi": ("ALiBi causal attention, (2, 8, L, 64), fp32", "benchmarks.bench_alibi"),
    "transformer_xl": (
        "Transformer-XL relative scores, (1, 8, Lq, Lk, 64)",
        "benchmarks.bench_transformer_xl",
    ),
    "sinusoidal": ("Sinusoidal table", "benchmarks.bench_sinusoidal"),
}
SCRIPTS = {
    "alloc": (
        "Fresh output vs existing memory: the allocator's share",
        "benchmarks.bench_alloc",
    ),
    "book": ("Book build", "benchmarks.bench_book"),
    "autograde": ("Autograde throughput", "benchmarks.bench_autograde"),
    "timeouts": ("What infinite loops cost a class", "benchmarks.bench_timeouts"),
    "similarity": (
        "Similar submissions: `course similarity`",
        "benchmarks.bench_similarity",
    ),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes, no memory runs")
    ap.add_argument(
        "--only", default="", help="comma-separated: " + ",".join([*SUITES, *SCRIPTS])
    )
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--rounds", type=int, default=9, help="timing rounds per size")
    ap.add_argument(
        "--no-memory", action="store_true", help="skip the peak-memory subprocesses"
    )
    ap.add_argument(
        "--clock",
        choices=sorted(harness.CLOCKS),
        default="wall",
        help="wall time, or the process's CPU time (steadier on a shared machine "
        "with --threads 1)",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="report file (default: RESULTS.md for a complete run; none with "
        "--quick or --only)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    harness.CLOCK = args.clock
    only = {s for s in args.only.split(",") if s}
    parts = [
        "# Benchmarks",
        "",
        f"Run {datetime.datetime.now():%Y-%m-%d %H:%M} on {machine()}.",
        f"Load average at the start: {load()} (other processes share the machine).",
        f"Clock: {args.clock} time. "
        "Medians over interleaved rounds after warm-up (each round calls every "
        "implementation once, in a rotated order); ratios are against the baseline "
        "named in each table, measured in the same rounds. Peak extra memory: one "
        "warm call in a fresh process (see benchmarks/harness.py).",
    ]
    for key, (title, module) in SUITES.items():
        if only and key not in only:
            continue
        suite = importlib.import_module(module)
        sizes = suite.QUICK_SIZES if args.quick else suite.SIZES
        print(f"running {key} ...", file=sys.stderr, flush=True)
        parts += [
            "",
            f"## {title}",
            "",
            run_suite(
                module,
                sizes,
                baseline=suite.BASELINE,
                memory=not (args.quick or args.no_memory),
                extras=getattr(suite, "EXTRAS", None),
                rounds=3 if args.quick else args.rounds,
            ),
        ]
    for key, (title, module) in SCRIPTS.items():
        if only and key not in only or args.quick:
            continue
        if importlib.util.find_spec(module) is None:
            parts += ["", f"## {title}", "", f"not run: `{module}` does not exist yet."]
            continue
        print(f"running {key} ...", file=sys.stderr, flush=True)
        proc = subprocess.run(
            [sys.executable, "-m", module],
            capture_output=True,
            text=True,
            cwd=HERE.parent,
            env=dict(
                os.environ, OMP_NUM_THREADS=str(args.threads), BENCH_CLOCK=args.clock
            ),
        )
        body = (
            proc.stdout.strip()
            if proc.returncode == 0
            else (f"failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        )
        parts += ["", f"## {title}", "", body]
    parts += ["", f"Load average at the end: {load()}."]
    report = "\n".join(parts) + "\n"
    print(report)
    # Only a complete run replaces RESULTS.md (the book reads every table of it).
    out = args.out or (None if args.quick or only else str(HERE / "RESULTS.md"))
    if out:
        Path(out).write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
