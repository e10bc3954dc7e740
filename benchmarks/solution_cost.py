"""The cold cost of every assignment's solution notebook, cell by cell, measured the
way a first ``course autograde`` runs it; the numbers the per-cell time limits of
``nbgrader_config.py`` are derived from.

    python -m benchmarks.solution_cost                 # every folder of solutions/
    python -m benchmarks.solution_cost ex10_lab ex05_alibi
    python -m benchmarks.solution_cost --unsafe-no-sandbox   # no bubblewrap here

Each notebook of ``solutions/<assignment>/`` runs in a new kernel (a new process:
nothing imported, nothing cached in memory), started exactly as grading starts one:
through :class:`~course_lib.grading.kernels.start.GradingKernelManager` with the grading
sandbox (read-only ``.venv`` and course, ``PYTHONDONTWRITEBYTECODE``, an empty
in-memory ``HOME`` so no matplotlib or other user cache survives), one thread
(``course autograde`` gives each of its ``--jobs`` workers ``cpus / jobs`` threads,
one on the CI machine), in a scratch copy of the assignment folder. Per cell, the
wall time between the kernel starting the cell and finishing it
(nbclient's ``iopub.status.busy`` / ``iopub.status.idle`` timestamps). As before a
first grading, ``course_lib``'s bytecode is compiled first (the sandbox cannot write
it). The operating system's page cache is not dropped (that needs root and slows
every other process on the machine): run it first thing after a fresh clone for the
coldest numbers.

Prints a markdown table (slowest cell with its grade id, whole notebook, and the
limit the course derives: :func:`derived_limit`, at least ``MARGIN`` times the
slowest cell) and, with ``--json FILE``, writes the numbers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MARGIN = 5.0
"""The per-cell limit is at least this many times the solution's slowest cold cell."""

FLOOR_SECONDS = 120
"""No assignment gets less (the course's single limit before per-assignment limits):
a busy machine (two cores shared by several graders) must never cut off a cell that
takes a second when idle."""


def derived_limit(slowest_cell_seconds: float) -> int:
    """The per-cell limit for a solution whose slowest cold cell took this long:
    ``MARGIN`` times it, rounded up to a multiple of 30 s, and at least
    ``FLOOR_SECONDS``.

    >>> derived_limit(1.2), derived_limit(25.0), derived_limit(40.0)
    (120, 150, 210)
    """
    if not slowest_cell_seconds >= 0:
        raise ValueError(
            f"derived_limit: the measured time must be a number >= 0, got "
            f"{slowest_cell_seconds!r}"
        )
    return max(FLOOR_SECONDS, 30 * math.ceil(MARGIN * slowest_cell_seconds / 30))


def assignments(root: Path = ROOT) -> list[str]:
    """Every assignment of the course: each folder of ``solutions/`` holding a
    notebook."""
    return sorted(
        p.name
        for p in (root / "solutions").iterdir()
        if p.is_dir() and any(p.glob("*.ipynb"))
    )


def _seconds(meta: dict, start: str, end: str) -> float | None:
    a, b = meta.get(start), meta.get(end)
    if not a or not b:
        return None
    def parse(stamp: str) -> dt.datetime:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return (parse(b) - parse(a)).total_seconds()


def run_notebook(path: Path, launcher, *, threads: int = 1) -> dict:
    """Run one notebook in a new grading kernel; its cells' times and whether any
    cell raised."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from course_lib.grading.kernels.start import (
        GradingKernelManager,
        KernelContext,
        KernelLimits,
        kernel_context,
    )

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ["MPLBACKEND"] = "Agg"
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    with tempfile.TemporaryDirectory(prefix="solution-cost-") as scratch:
        work = Path(scratch) / path.parent.name
        shutil.copytree(path.parent, work)
        nb = nbformat.read(str(work / path.name), as_version=4)
        client = NotebookClient(
            nb,
            timeout=1800,
            kernel_name="python3",
            kernel_manager_class=GradingKernelManager,
            resources={"metadata": {"path": str(work)}},
            record_timing=True,
            allow_errors=True,  # as nbgrader runs a notebook: every cell runs
        )
        context = KernelContext(
            limits=KernelLimits(memory=4 << 30, wall_seconds=None), launcher=launcher
        )
        error = None
        start = time.perf_counter()
        with kernel_context(context):
            try:
                client.execute()
            except CellExecutionError as exc:
                lines = [ln for ln in str(exc).splitlines() if ln.strip()]
                error = lines[-1] if lines else type(exc).__name__
        total = time.perf_counter() - start
    cells = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("execution", {})
        secs = _seconds(meta, "iopub.status.busy", "iopub.status.idle")
        if secs is None:
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"
        cells.append({"cell": grade_id, "seconds": round(secs, 2)})
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors and error is None:
            first = errors[0]
            error = f"{grade_id}: {first.get('ename')}: {first.get('evalue')}"[:300]
    return {"notebook": path.name, "cells": cells, "total_seconds": round(total, 1),
            "error": error}


def measure(names: list[str], launcher, *, threads: int = 1) -> list[dict]:
    rows = []
    for name in names:
        for nb in sorted((ROOT / "solutions" / name).glob("*.ipynb")):
            print(f"{name}/{nb.name} ...", file=sys.stderr, flush=True)
            result = run_notebook(nb, launcher, threads=threads)
            slowest = max(result["cells"], key=lambda c: c["seconds"],
                          default={"cell": "-", "seconds": 0.0})
            rows.append({
                "assignment": name,
                **result,
                "slowest_cell": slowest["cell"],
                "slowest_seconds": slowest["seconds"],
                "limit": derived_limit(slowest["seconds"]),
            })
            print(f"  slowest {slowest['cell']} {slowest['seconds']:.1f} s, "
                  f"notebook {result['total_seconds']:.1f} s"
                  + (f", ERROR {result['error']}" if result["error"] else ""),
                  file=sys.stderr, flush=True)
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return f"{cpu}, {os.cpu_count()} cores, load average {load:.1f} at the start"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="default: every one")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="run kernels without the bubblewrap sandbox")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the numbers")
    args = parser.parse_args(argv)

    from course_lib.grading.course import Course
    from course_lib.grading.kernels.sandbox import grading_launcher

    known = assignments()
    names = args.assignments or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"no such assignment in solutions/: {', '.join(unknown)}")
    course = Course(ROOT)
    launcher, warning = grading_launcher(course, unsafe=args.unsafe_no_sandbox)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = machine()
    rows = measure(names, launcher, threads=args.threads)
    print(f"Solution notebooks run cold ({'no sandbox' if warning else 'sandbox'}, "
          f"{args.threads} thread), {when}, {where}.\n")
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    table = config.CourseTimeLimits.get("per_cell") or {}
    print("| assignment | slowest cell | its time (s) | notebook (s) "
          "| derived limit (s) | nbgrader_config.py (s) |")
    print("|---|---|---|---|---|---|")
    short = []
    for r in rows:
        configured = table.get(r["assignment"])
        if configured is None or configured < r["limit"]:
            short.append(r["assignment"])
        print(f"| {r['assignment']} | `{r['slowest_cell']}` "
              f"| {r['slowest_seconds']:.1f} | {r['total_seconds']:.1f} "
              f"| {r['limit']} | {configured if configured is not None else '-'} |")
    if short:
        print(f"\nnbgrader_config.py lacks a limit, or has one below the derived "
              f"limit, for: {', '.join(short)}")
    if args.json:
        args.json.write_text(json.dumps({"date": when, "machine": where,
                                         "rows": rows}, indent=1))
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
