"""Measure what the sandbox costs per submission (not a test; run it by hand).

    .venv/bin/python tests/adversarial/measure_cost.py [--students 6] [--rounds 3]

1. Kernel start: a Jupyter kernel started through
   :class:`~course_lib.grading.kernels.start.GradingKernelManager` until it answers
   ``kernel_info``, with the plain resource-limit launcher and with the sandbox,
   alternating (no notebook, no torch import: the launch itself).
2. Whole submissions: a scratch course with ``--students`` correct ex05_alibi
   submissions graded by ``course autograde --jobs 1 --force``, in the sandbox and
   with ``--unsafe-no-sandbox``, alternating for ``--rounds`` rounds; per-submission
   wall time as ``course autograde`` records it. Both runs judge the test cells
   outside the kernel; the time that takes is read from the grading logs.

Prints medians (and the spread) as a markdown table.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
A = "ex05_alibi"


def kernel_start(launcher, n: int) -> list[float]:
    """Seconds from start_kernel to the kernel's first kernel_info reply."""
    from jupyter_client.utils import run_sync

    from course_lib.grading.kernels.start import (
        GradingKernelManager,
        KernelContext,
        KernelLimits,
        kernel_context,
    )

    async def one(cwd: str) -> float:
        km = GradingKernelManager(kernel_name="python3")
        start = time.perf_counter()
        await km.start_kernel(cwd=cwd)
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=120)
        elapsed = time.perf_counter() - start
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        await km.cleanup_resources()
        return elapsed

    times = []
    context = KernelContext(limits=KernelLimits(), launcher=launcher)
    with tempfile.TemporaryDirectory() as cwd, kernel_context(context):
        for _ in range(n):
            times.append(run_sync(one)(cwd))
    return times


def _course(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return out


def submissions(students: int, rounds: int) -> dict[str, list[float]]:
    from course_lib.grading.gradebook import read_status
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    results: dict[str, list[float]] = {"sandbox": [], "no sandbox": [], "verify": []}
    with tempfile.TemporaryDirectory() as tmp:
        course = scratch_course(Path(tmp) / "course", ROOT, [A])
        _course(["release", A], course.root)
        sol = solution_answers(course.root / "solutions" / A / f"{A}.ipynb")
        release = course.root / "notebooks" / A / f"{A}.ipynb"
        for i in range(students):
            nb = student_notebook(release, sol)
            write_submission(Path(tmp) / "inbox", f"s{i:02d}", A, nb)
        _course(["collect", str(Path(tmp) / "inbox"), "-a", A], course.root)
        for _ in range(rounds):
            for name, flags in (
                ("sandbox", []),
                ("no sandbox", ["--unsafe-no-sandbox"]),
            ):
                _course(
                    ["autograde", A, "--jobs", "1", "--force", "--no-progress", *flags],
                    course.root,
                )
                with course.gradebook() as gb:
                    rows = read_status(gb, A).values()
                    assert all(r.score == r.max_score for r in rows), rows
                    results[name] += [r.wall_seconds for r in rows]
                for log in (course.root / "reports" / A / "logs").glob("s*.log"):
                    found = re.findall(r"in ([0-9.]+) s", log.read_text())
                    results["verify"] += [float(x) for x in found[-1:]]
    return results


def _row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | - | - | 0 |"
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return (
        f"| {name} | {statistics.median(values):.2f} | "
        f"{q[0]:.2f} to {q[2]:.2f} | {len(values)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--starts", type=int, default=8)
    args = parser.parse_args()

    from course_lib.grading.kernels.sandbox import SandboxLauncher
    from course_lib.grading.kernels.start import RlimitLauncher

    starts: dict[str, list[float]] = {"rlimit only": [], "sandbox": []}
    for _ in range(args.starts):
        starts["rlimit only"] += kernel_start(RlimitLauncher(), 1)
        starts["sandbox"] += kernel_start(SandboxLauncher(), 1)
    print("| kernel start to kernel_info (s) | median | quartiles | n |")
    print("|---|---|---|---|")
    for name, values in starts.items():
        print(_row(name, values))
    whole = submissions(args.students, args.rounds)
    print()
    print("| one ex05 submission, --jobs 1 (s) | median | quartiles | n |")
    print("|---|---|---|---|")
    for name in ("no sandbox", "sandbox"):
        print(_row(name, whole[name]))
    print(_row("of which: test cells judged outside the kernel", whole["verify"]))


if __name__ == "__main__":
    main()
