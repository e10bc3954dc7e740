"""The cold cost of every assignment's solution notebook, cell by cell, measured the
way a first ``course autograde`` runs it; the numbers the per-cell time limits of
``nbgrader_config.py`` are derived from.

    python -m benchmarks.solution_cost                 # every folder of solutions/
    python -m benchmarks.solution_cost ex10_lab ex05_alibi
    python -m benchmarks.solution_cost --unsafe-no-sandbox   # no bubblewrap here
    python -m benchmarks.solution_cost --variants --json run.json   # + honest variants
    python -m benchmarks.solution_cost --merge run1.json run2.json \
        --json benchmarks/honest_costs.json   # the larger time of each, as recorded

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

``--variants`` also runs the honest slow answers of :mod:`benchmarks.honest_variants`
(one notebook per round of variants, each in a new kernel, see
:func:`measure_variants`), records every variant's cost (its slower test cell), the
load average at the start and end and how busy the machine's CPUs were, and derives
each limit above the slower of the solution's slowest cell and the slowest honest
variant. ``benchmarks/honest_costs.json`` is that record (two runs merged, the
larger time of each); ``nbgrader_config.py``'s table is copied from it, and
``tests/test_time_limits.py`` checks the two agree.
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
"""The per-cell limit is at least this many times the slower of the solution's
slowest cold cell and the slowest honest variant's test cell. Why 5: the numbers are
measured cold, one thread, ``nice -n 10``, on a shared two-core machine that is
itself busy (load average and CPU share are recorded with them); a grading run that
meets a busier machine (eight single-threaded graders on two cores give each a
quarter of a core, 4x slower than alone) still finishes every honest cell."""

FLOOR_SECONDS = 10
"""No assignment gets less: the slowest cell of every solution notebook is its
imports (``import torch``: 2.4 s in a new process here, 5 s on a busy machine,
DESIGN.md), and a cold kernel on a busy machine, with the operating system's page
cache empty after a fresh clone, must still get through them; 10 s is twice the
busy figure. An infinite loop costs this, not the 120 s it cost before (issue 21)."""

TRAINING_FLOOR_SECONDS = 30
"""The floor of an assignment whose graded cell trains a model (``TRAINS``): its
thousands of small operations each wait when another process holds the core, so it
slows down more than the margin's 4x (issue 10: 37.2 s with two threads and one
core busy; on one thread, as the grader now trains, 4.9 s under the same load:
30 s is 6x that)."""

TRAINS = frozenset({"ex10_lab"})
"""The assignments whose hidden test trains a model in the kernel (ex10: 150 steps
of the lab's tiny transformer with the student's bias)."""


def derived_limit(slowest_cell_seconds: float, assignment: str | None = None) -> int:
    """The per-cell limit for an assignment whose slowest cold cell (the solution's
    or an honest variant's) took this long: ``MARGIN`` times it, rounded up to a
    whole second, and at least ``FLOOR_SECONDS`` (``TRAINING_FLOOR_SECONDS`` for an
    assignment in ``TRAINS``).

    >>> derived_limit(1.2), derived_limit(2.01), derived_limit(25.0)
    (10, 11, 125)
    >>> derived_limit(1.2, "ex10_lab"), derived_limit(7.0, "ex10_lab")
    (30, 35)
    """
    if not slowest_cell_seconds >= 0:
        raise ValueError(
            f"derived_limit: the measured time must be a number >= 0, got "
            f"{slowest_cell_seconds!r}"
        )
    floor = TRAINING_FLOOR_SECONDS if assignment in TRAINS else FLOOR_SECONDS
    # round() first: 5 * 2.2 is 11.000000000000002 in binary, not 12 s
    return max(floor, math.ceil(round(MARGIN * slowest_cell_seconds, 6)))


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


def run_notebook(path: Path, launcher, *, threads: int = 1,
                 answers: dict[str, str] | None = None) -> dict:
    """Run one notebook in a new grading kernel; its cells' times and whether any
    cell raised. ``answers`` (``{function: source}``) replaces the source of the
    answer cells ``<function>__answer`` first (an honest variant's notebook)."""
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
    # as nbgrader sets it while it autogrades: a notebook skips optional work then
    # (ex10's "Try it" cell, 34 s of training when run without it)
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    with tempfile.TemporaryDirectory(prefix="solution-cost-") as scratch:
        work = Path(scratch) / path.parent.name
        shutil.copytree(path.parent, work)
        nb = nbformat.read(str(work / path.name), as_version=4)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if answers and gid.endswith("__answer"):
                cell.source = answers.get(gid.removesuffix("__answer"), cell.source)
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
                "limit": derived_limit(slowest["seconds"], name),
            })
            print(f"  slowest {slowest['cell']} {slowest['seconds']:.1f} s, "
                  f"notebook {result['total_seconds']:.1f} s"
                  + (f", ERROR {result['error']}" if result["error"] else ""),
                  file=sys.stderr, flush=True)
    return rows


def _graded_seconds(cells: list[dict], function: str) -> tuple[str, float]:
    """The slower of ``function``'s public and hidden test cells: (grade id, s)."""
    mine = [c for c in cells
            if c["cell"] in (f"{function}__public", f"{function}__hidden")]
    slowest = max(mine, key=lambda c: c["seconds"],
                  default={"cell": "-", "seconds": 0.0})
    return slowest["cell"], slowest["seconds"]


def measure_variants(names: list[str], launcher, *, threads: int = 1) -> dict:
    """Per assignment: the solution notebook run cold, then one notebook per round
    ``k`` of honest variants (:mod:`benchmarks.honest_variants`: every graded
    function's ``k``-th variant in place of its answer, the solution's answer where
    a function has fewer variants), each in a new sandboxed grading kernel.

    A function's cost in a run is the slower of its public and hidden test cells;
    a cell that calls another graded function (``alibi_bias`` calls
    ``alibi_slopes``) runs with that function's variant of the same round, as a
    student who wrote both the slow way. Returns the per-assignment record that
    ``--variants --json`` writes (see :func:`slowest_honest`)."""
    from benchmarks import honest_variants as hv

    out = {}
    for name in names:
        nb = hv.solution_notebook(name, ROOT)
        functions = hv.graded_functions(name, ROOT)
        print(f"{name}: solution ...", file=sys.stderr, flush=True)
        sol = run_notebook(nb, launcher, threads=threads)
        slowest = max(sol["cells"], key=lambda c: c["seconds"],
                      default={"cell": "-", "seconds": 0.0})
        record = {
            "solution": {"slowest_cell": slowest["cell"],
                         "seconds": slowest["seconds"],
                         "total_seconds": sol["total_seconds"],
                         "cells": {c["cell"]: c["seconds"] for c in sol["cells"]}},
            "functions": {f: {"solution": _graded_seconds(sol["cells"], f)[1],
                              "variants": {}} for f in functions},
            "errors": [f"solution: {sol['error']}"] if sol["error"] else [],
        }
        for k in range(hv.rounds(name, ROOT)):
            print(f"{name}: honest variants, round {k + 1} of "
                  f"{hv.rounds(name, ROOT)} ...", file=sys.stderr, flush=True)
            run = run_notebook(nb, launcher, threads=threads,
                               answers=hv.variant_answers(name, k, ROOT))
            if run["error"]:
                record["errors"].append(f"round {k + 1}: {run['error']}")
            for f in functions:
                variant = hv.variant_of_round(name, f, k)
                if variant is not None:
                    cell, secs = _graded_seconds(run["cells"], f)
                    record["functions"][f]["variants"][variant] = {
                        "cell": cell, "seconds": secs}
            slowest_cell = max(run["cells"], key=lambda c: c["seconds"],
                               default={"cell": "-", "seconds": 0.0})
            record.setdefault("rounds", []).append(
                {"slowest_cell": slowest_cell["cell"],
                 "seconds": slowest_cell["seconds"],
                 "total_seconds": run["total_seconds"]})
        record["slowest_honest"] = slowest_honest(record)
        record["limit"] = derived_limit(
            max(record["solution"]["seconds"], record["slowest_honest"]["seconds"]),
            name)
        s = record["slowest_honest"]
        print(f"  solution {record['solution']['seconds']:.2f} s "
              f"(`{record['solution']['slowest_cell']}`), slowest honest "
              f"{s['function']}/{s['variant']} {s['seconds']:.2f} s, "
              f"limit {record['limit']} s"
              + (f", ERRORS {record['errors']}" if record["errors"] else ""),
              file=sys.stderr, flush=True)
        out[name] = record
    return out


def slowest_honest(record: dict) -> dict:
    """The slowest honest variant of one assignment's record: function, variant,
    cell and seconds."""
    rows = [
        {"function": f, "variant": v, "cell": r["cell"], "seconds": r["seconds"]}
        for f, entry in record["functions"].items()
        for v, r in entry["variants"].items()
    ]
    return max(rows, key=lambda r: r["seconds"])


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
    parser.add_argument("--variants", action="store_true",
                        help="also run every honest slow variant "
                             "(benchmarks/honest_variants.py) and derive the limit "
                             "above the slowest")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        metavar="RUN_JSON",
                        help="merge files of earlier --variants --json runs (the "
                             "larger time of each) into --json; runs nothing")
    args = parser.parse_args(argv)
    if args.merge:
        if not args.json:
            parser.error("--merge needs --json FILE to write to")
        merged = merge_records([json.loads(f.read_text()) for f in args.merge])
        args.json.write_text(json.dumps(merged, indent=1) + "\n")
        _print_variant_table(merged["assignments"])
        return 0

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
    if args.variants:
        return _main_variants(args, names, launcher, warning, when, where)
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


def _main_variants(args, names, launcher, warning, when, where) -> int:
    """``--variants``: the solution and every honest variant, cold; the table of
    ``nbgrader_config.py`` (solution cost, slowest honest variant, limit)."""
    loads = [os.getloadavg()]
    cpu_start = _cpu_seconds()
    record = measure_variants(names, launcher, threads=args.threads)
    loads.append(os.getloadavg())
    busy = _cpu_seconds()
    print(f"Solution notebooks and honest variants run cold "
          f"({'no sandbox' if warning else 'sandbox'}, {args.threads} thread), "
          f"{when}, {where}; load average (1, 5, 15 min) "
          f"{', '.join(f'{x:.1f}' for x in loads[0])} at the start and "
          f"{', '.join(f'{x:.1f}' for x in loads[1])} at the end; the whole "
          f"machine's CPUs were {_busy_share(cpu_start, busy):.0%} busy during "
          "the run (a shared machine: other sessions ran beside it).\n")
    _print_variant_table(record)
    if args.json:
        args.json.write_text(json.dumps({
            "date": when, "machine": where,
            "sandbox": not warning, "threads": args.threads,
            "load_average_start": [round(x, 2) for x in loads[0]],
            "load_average_end": [round(x, 2) for x in loads[1]],
            "cpu_busy_share": round(_busy_share(cpu_start, busy), 3),
            "margin": MARGIN, "floor_seconds": FLOOR_SECONDS,
            "training_floor_seconds": TRAINING_FLOOR_SECONDS,
            "assignments": record,
        }, indent=1) + "\n")
    errors = {n: r["errors"] for n, r in record.items() if r["errors"]}
    if errors:
        print(f"\ncells raised (a variant that is not correct?): {errors}",
              file=sys.stderr)
    return 1 if errors else 0


def _print_variant_table(record: dict) -> None:
    print("| assignment | solution: slowest cell (s) | slowest honest variant "
          "| its cell (s) | derived limit (s) |")
    print("|---|---|---|---|---|")
    for name, r in record.items():
        s = r["slowest_honest"]
        print(f"| {name} | {r['solution']['seconds']:.2f} "
              f"(`{r['solution']['slowest_cell']}`) "
              f"| `{s['function']}`: {s['variant']} | {s['seconds']:.2f} "
              f"(`{s['cell']}`) | {r['limit']} |")


def merge_records(runs: list[dict]) -> dict:
    """Several ``--variants --json`` files as one: every cell's and every
    variant's larger time, the slowest honest variant and the limit derived again,
    and each run's date, machine, load and CPU share kept in ``runs``."""
    if not runs:
        raise ValueError("merge_records: no runs to merge")
    out = {"runs": [], "sandbox": all(r["sandbox"] for r in runs),
           "threads": max(r["threads"] for r in runs),
           "margin": MARGIN, "floor_seconds": FLOOR_SECONDS,
           "training_floor_seconds": TRAINING_FLOOR_SECONDS, "assignments": {}}
    for run in runs:
        out["runs"] += run.get("runs") or [
            {k: run[k] for k in ("date", "machine", "load_average_start",
                                 "load_average_end", "cpu_busy_share")}]
    out["load_average_start"] = max((r["load_average_start"] for r in out["runs"]),
                                    key=lambda x: x[0])
    out["cpu_busy_share"] = max(r["cpu_busy_share"] for r in out["runs"])
    names = sorted(set().union(*(r["assignments"] for r in runs)))
    for name in names:
        entries = [r["assignments"][name] for r in runs if name in r["assignments"]]
        # a run where a cell raised measured a notebook that stopped short: left
        # out where another run measured the assignment without an error
        if any(not e["errors"] for e in entries):
            entries = [e for e in entries if not e["errors"]]
        cells: dict[str, float] = {}
        for e in entries:
            for cell, secs in e["solution"]["cells"].items():
                cells[cell] = max(secs, cells.get(cell, 0.0))
        slowest = max(cells, key=cells.get)
        merged = {
            "solution": {"slowest_cell": slowest, "seconds": cells[slowest],
                         "total_seconds": max(e["solution"]["total_seconds"]
                                              for e in entries),
                         "cells": cells},
            "functions": {},
            "errors": [x for e in entries for x in e["errors"]],
            "rounds": [],
        }
        for e in entries:
            for k, rnd in enumerate(e.get("rounds", [])):
                if k == len(merged["rounds"]):
                    merged["rounds"].append(dict(rnd))
                elif rnd["seconds"] > merged["rounds"][k]["seconds"]:
                    merged["rounds"][k] = dict(rnd)
            for f, fe in e["functions"].items():
                m = merged["functions"].setdefault(f, {"solution": 0.0,
                                                       "variants": {}})
                m["solution"] = max(m["solution"], fe["solution"])
                for v, r in fe["variants"].items():
                    if r["seconds"] >= m["variants"].get(v, {"seconds": -1})["seconds"]:
                        m["variants"][v] = dict(r)
        merged["slowest_honest"] = slowest_honest(merged)
        merged["limit"] = derived_limit(
            max(cells[slowest], merged["slowest_honest"]["seconds"]), name)
        out["assignments"][name] = merged
    return out


def _cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot (/proc/stat)."""
    try:
        fields = [float(v) for v in Path("/proc/stat").read_text().split("\n")[0]
                  .split()[1:]]
    except (OSError, ValueError):
        return (0.0, 0.0)
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return (sum(fields) - idle, sum(fields))


def _busy_share(start: tuple[float, float], end: tuple[float, float]) -> float:
    total = end[1] - start[1]
    return (end[0] - start[0]) / total if total > 0 else float("nan")


if __name__ == "__main__":
    sys.exit(main())
