"""What infinite loops cost a class: ``course autograde ex05_alibi --jobs 2`` (default
sandbox) on a class of honest submissions, against the same class with 10 % of them
replaced by an ``alibi_bias`` that never returns (``while True: pass``), in one run.

    python -m benchmarks.bench_timeouts                    # 20 students, 10 % loop
    python -m benchmarks.bench_timeouts --submissions 40 --rounds 2
    python -m benchmarks.bench_timeouts --cell-limit 10    # override ex05's limit

The honest class is as an instructor meets it: the solution's answers and the
honest slow variants of :mod:`benchmarks.honest_variants` in turn (every one worth
full marks). The looping class is the same class where one student in every ten
(``--loop-share``; the middle one of each ten, see :func:`looping_students`, or the
last with ``--placement end``) hands in the loop instead of ``alibi_bias``; those
students keep ``alibi_slopes``' points. Each class is graded in its own copy of one
scratch course from a cold start (a new ``course`` process, as an instructor runs
it); with several rounds the order alternates. Every gradebook must hold the
expected scores. The goal of issue 21: the looping class takes at most 1.5x the
honest class's wall time.

Prints a markdown report on stdout (the per-cell limit in effect, wall and CPU time
of both commands, the ratio, the load average and how busy the machine's CPUs were);
progress goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
A = "ex05_alibi"
GOAL = 1.5
"""Issue 21: the class with 10 % infinite loops takes at most this many times as
long as the honest class."""

LOOP = "def alibi_bias(n_heads, seq_len):\n    while True:\n        pass\n"
"""The most common way a student's notebook hangs (issue 21)."""


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def looping_students(n: int, share: float, placement: str = "middle") -> list[int]:
    """Which of ``n`` students (0-based) hand in the loop: ``ceil(share * n)`` of
    them, one in the middle of each equal block of the class (for 10 %, the
    middle of every ten), where a student at a random place in the class list is
    on average. Not the last: a hang there is waited out after every other
    submission is done, with no other work beside it, the worst case.

    >>> looping_students(20, 0.1), looping_students(3, 0.1), looping_students(10, 0)
    ([5, 15], [1], [])
    >>> looping_students(20, 0.1, "end")
    [9, 19]
    """
    if placement not in ("middle", "end"):
        raise ValueError(f"looping_students: placement must be 'middle' or 'end', "
                         f"got {placement!r}")
    if not 0 <= share <= 1:
        raise ValueError(f"looping_students: share must lie in [0, 1], got {share!r}")
    count = math.ceil(share * n - 1e-9)
    if count == 0:
        return []
    step = n / count
    if placement == "end":
        picks = {math.ceil(step * (i + 1)) - 1 for i in range(count)}
    else:
        picks = {int(step * (i + 0.5)) for i in range(count)}
    return sorted(min(n - 1, i) for i in picks)


def honest_answers(src: Path) -> list[dict[str, str]]:
    """The answers honest students hand in, in turn: the solution's, then each
    round of honest slow variants of ex05 (all worth full marks)."""
    from benchmarks import honest_variants as hv
    from course_lib.grading.synthetic import solution_answers

    right = solution_answers(src)
    out = [right]
    for k in range(hv.rounds(A)):
        answers = dict(right)
        for function, source in hv.variant_answers(A, k).items():
            answers[f"{function}__answer"] = source
        out.append(answers)
    return out


def build(base: Path, n: int, share: float,
          placement: str = "middle") -> tuple[dict, dict]:
    """A released ex05 course at ``base`` (the honest class, collected) and at
    ``base.with_name(base.name + '-loops')`` (the same class, looping students
    replaced); returns the expected score of every student in each."""
    from course_lib.grading.collect import collect
    from course_lib.grading.release import release
    from course_lib.grading.synthetic import (
        scratch_course,
        student_notebook,
        write_submission,
    )

    course = scratch_course(base, ROOT, [A])
    release(course, A)
    src = course.source_dir / A / f"{A}.ipynb"
    rel = course.release_dir / A / f"{A}.ipynb"
    honest = honest_answers(src)
    loops = set(looping_students(n, share, placement))
    looped_base = base.with_name(base.name + "-loops")
    shutil.copytree(base, looped_base)
    expected_honest, expected_loops = {}, {}
    for i in range(n):
        student = f"s{i:03d}"
        answers = honest[i % len(honest)]
        write_submission(base.parent / "inbox-honest", student, A,
                         student_notebook(rel, answers))
        expected_honest[student] = 6.0
        if i in loops:
            answers = {**answers, "alibi_bias__answer": LOOP}
            expected_loops[student] = 3.0  # alibi_slopes' 1 + 2 points
        else:
            expected_loops[student] = 6.0
        write_submission(base.parent / "inbox-loops", student, A,
                         student_notebook(rel, answers))
    from course_lib.grading.course import Course

    for folder, inbox in ((base, "inbox-honest"), (looped_base, "inbox-loops")):
        result = collect(Course(folder), base.parent / inbox, A)
        if result.not_placed:
            raise RuntimeError(f"collect left out {result.not_placed}")
    return expected_honest, expected_loops


def set_cell_limit(course_dir: Path, seconds: int) -> None:
    """Override ex05's per-cell limit in a scratch course's nbgrader_config.py."""
    config = course_dir / "nbgrader_config.py"
    config.write_text(
        config.read_text()
        + f"\nc.CourseTimeLimits.per_cell = {{**CELL_TIME_LIMIT, {A!r}: {seconds}}}\n"
    )


def cell_limit(course_dir: Path) -> int | None:
    """The per-cell limit ``course autograde`` uses for ex05 in a course folder."""
    from traitlets.config.loader import PyFileConfigLoader

    from course_lib.grading.grade import cell_time_limit

    loader = PyFileConfigLoader("nbgrader_config.py", path=str(course_dir))
    config = loader.load_config()
    return cell_time_limit(config, A)


def _machine_cpu() -> tuple[float, float]:
    from benchmarks.solution_cost import _cpu_seconds

    return _cpu_seconds()


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall time, CPU time (the command and the processes it waited for) and the
    standard output of one command; raises if it fails."""
    import subprocess
    import time

    from benchmarks.bench_autograde import _children_cpu

    cpu = _children_cpu()
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return wall, _children_cpu() - cpu, out.stdout


def said_cost(stdout: str) -> str:
    """What ``course autograde`` says its time-outs cost ("" if it says nothing).

    >>> said_cost("x: 2 submissions ...\\n  time-outs cost 10 s of grading time (1 "
    ...           "submissions)\\n  student ...")
    'time-outs cost 10 s of grading time (1 submissions)'
    """
    for line in stdout.splitlines():
        if line.strip().startswith("time-outs cost"):
            return line.strip()
    return ""


def run(n: int, share: float, jobs: int, rounds: int, limit: int | None,
        placement: str = "middle") -> dict:
    """Build both classes and grade each ``rounds`` times; the numbers."""
    from benchmarks.bench_autograde import _scores
    from benchmarks.solution_cost import _busy_share

    tmp = Path(tempfile.mkdtemp(prefix="bench-timeouts-"))
    try:
        env = dict(os.environ)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        from course_lib.grading.kernels.sandbox import grading_edition

        _log("filling the grading edition cache")
        grading_edition()
        _log(f"building two classes of {n} submissions in {tmp}")
        base = tmp / "honest"
        expected = dict(zip(("honest", "loops"), build(base, n, share, placement),
                             strict=True))
        folders = {"honest": base, "loops": base.with_name("honest-loops")}
        if limit is not None:
            for folder in folders.values():
                set_cell_limit(folder, limit)
        per_cell = cell_limit(folders["honest"])
        cmd = [str(BIN / "course"), "autograde", A, "--jobs", str(jobs), "--force",
               "--no-progress"]
        walls: dict[str, list[float]] = {"honest": [], "loops": []}
        cpus: dict[str, list[float]] = {"honest": [], "loops": []}
        said: dict[str, list[str]] = {"honest": [], "loops": []}
        load_start = os.getloadavg()
        machine_start = _machine_cpu()
        for r in range(rounds):
            for name in ("honest", "loops") if r % 2 == 0 else ("loops", "honest"):
                work = tmp / f"run-{name}-{r}"
                shutil.copytree(folders[name], work)
                _log(f"course autograde, {name} class (round {r + 1} of {rounds})")
                wall, cpu, stdout = _timed(cmd, work, env)
                said[name].append(said_cost(stdout))
                got = _scores(work)
                if got != expected[name]:
                    raise RuntimeError(f"{name} class gave {got}, expected "
                                       f"{expected[name]}")
                walls[name].append(wall)
                cpus[name].append(cpu)
                shutil.rmtree(work)
        return {
            "n": n,
            "placement": looping_students(n, share, placement),
            "loops": sum(1 for s in expected["loops"].values() if s < 6.0),
            "jobs": jobs,
            "rounds": rounds,
            "per_cell": per_cell,
            "walls": walls,
            "cpus": cpus,
            "said": said,
            "load_start": load_start,
            "load_end": os.getloadavg(),
            "busy": _busy_share(machine_start, _machine_cpu()),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(result: dict) -> str:
    honest = statistics.median(result["walls"]["honest"])
    loops = statistics.median(result["walls"]["loops"])
    ratio = loops / honest
    n, k = result["n"], result["loops"]
    lines = [
        f"{n} submissions of {A}, graded by `course autograde {A} --jobs "
        f"{result['jobs']}` (default sandbox, warm start) from a cold start; the "
        f"looping class is the same class with {k} of them ({k / n:.0%}) handing in "
        f"`alibi_bias` as `while True: pass` (students "
        f"{', '.join(f's{i:03d}' for i in result['placement'])} of "
        f"s000-s{n - 1:03d}). Per-cell limit for {A}: "
        f"{result['per_cell']} s. Both gradebooks hold the expected scores (6 "
        "points for every honest student, 3 for a looping one). "
        f"{os.cpu_count()} CPUs, shared with other sessions: load average "
        f"{', '.join(f'{x:.1f}' for x in result['load_start'])} at the start, "
        f"{', '.join(f'{x:.1f}' for x in result['load_end'])} at the end; the "
        f"machine's CPUs were {result['busy']:.0%} busy during the run. Medians of "
        f"{result['rounds']} round(s), the order alternating.",
        "",
        "| class | wall (s) | CPU (s) | wall per submission (s) | every round (s) |",
        "|---|---:|---:|---:|---|",
    ]
    for name, label in (("honest", f"{n} honest"),
                        ("loops", f"{n - k} honest + {k} looping")):
        wall = statistics.median(result["walls"][name])
        cpu = statistics.median(result["cpus"][name])
        each = ", ".join(f"{w:.1f}" for w in result["walls"][name])
        lines.append(f"| {label} | {wall:.1f} | {cpu:.1f} | {wall / n:.2f} | {each} |")
    verdict = "meets" if ratio <= GOAL else "misses"
    lines += [
        "",
        f"Ratio looping / honest: **{ratio:.2f}x** ({verdict} the goal of at most "
        f"{GOAL}x); the loops cost {loops - honest:+.1f} s of wall time, "
        f"{(loops - honest) / k if k else float('nan'):.1f} s per looping student "
        f"({result['jobs']} submissions graded side by side; a looping "
        "submission waits out the limit in each `alibi_bias` test cell that still "
        "calls the hung function). CPU (s) counts the processes the "
        "command waited for (the sandboxed kernels are reaped in their own PID "
        "namespace, so most of their CPU time is left out).",
    ]
    told = [t for t in result.get("said", {}).get("loops", []) if t]
    if told:
        lines += ["", "`course autograde` on the looping class, round by round: "
                  + "; ".join(f"{t}" for t in told) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_timeouts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--submissions", type=int, default=20)
    ap.add_argument("--loop-share", type=float, default=0.1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--placement", choices=("middle", "end"), default="middle",
                    help="where in each block of the class the looping student "
                         "is (end: the last, the worst case)")
    ap.add_argument("--cell-limit", type=int, default=None,
                    help="override ex05's per-cell limit (default: nbgrader_config.py)")
    args = ap.parse_args(argv)
    if args.submissions < 1 or args.rounds < 1:
        ap.error("--submissions and --rounds must be at least 1")
    looping = looping_students(args.submissions, args.loop_share, args.placement)
    if not looping:
        ap.error("no student loops: raise --loop-share or --submissions")
    result = run(args.submissions, args.loop_share, args.jobs, args.rounds,
                 args.cell_limit, args.placement)
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
