"""Autograde throughput: ``course autograde --jobs 2`` against plain sequential
``nbgrader autograde`` on the same submissions, in the same run.

    python -m benchmarks.bench_autograde                  # 8, then 32 submissions
    python -m benchmarks.bench_autograde --submissions 16 --jobs 2 --rounds 2
    python -m benchmarks.bench_autograde --only-cluster   # --cluster against --jobs
    python -m benchmarks.bench_autograde --check-only     # `course check` start-up

A scratch course with ex05_alibi is released once and given ``--submissions``
synthetic submissions (right answers, a wrong sign, untouched stubs, in turn). Each
command grades its own copy of it from a cold start (a new process, as an instructor
runs it); the order of the commands alternates between rounds, and every gradebook
must hold the expected scores. ``course autograde`` runs with its default sandbox
(kernels forked from the warm template), with the sandbox and cold kernels
(``COURSE_WARM_START=0``), and with ``--unsafe-no-sandbox`` (the sandbox's cost).
The optional package ``rfc3987-syntax`` (the Makefile uninstalls it) slows every
start of nbgrader: it is blocked (a shadow package on ``PYTHONPATH`` that raises
``ImportError``, which is what uninstalling it amounts to) in the main rows, and
its cost is measured separately.
``course check`` (a student's command) is timed on its own, after the autograde
tables or alone with ``--check-only``: the median wall time of ``--check-runs`` runs
on the release notebook of ex05, each a new process, against the floor measured in
the same run, a new Python importing torch (every check starts a fresh kernel, which
imports it).
Prints a markdown report on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
A = "ex05_alibi"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _build(base: Path, n: int) -> dict[str, float]:
    """A released ex05 course at ``base`` with ``n`` collected submissions; returns
    the score each student must get (from the variant it was given)."""
    from course_lib.grading.collect import collect
    from course_lib.grading.release import release
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    course = scratch_course(base, ROOT, [A])
    release(course, A)
    src = course.source_dir / A / f"{A}.ipynb"
    rel = course.release_dir / A / f"{A}.ipynb"
    right = solution_answers(src)
    wrong = dict(right)
    wrong["alibi_bias__answer"] = right["alibi_bias__answer"].replace(
        "return -alibi_slopes", "return alibi_slopes"
    )
    variants = [(right, 6.0), (wrong, 3.0), (right, 6.0), (None, 0.0)]
    inbox = base.parent / "inbox"
    expected = {}
    for i in range(n):
        answers, score = variants[i % len(variants)]
        student = f"s{i:03d}"
        write_submission(inbox, student, A, student_notebook(rel, answers))
        expected[student] = score
    collect(course, inbox, A)
    return expected


def _scores(course_dir: Path) -> dict[str, float]:
    from course_lib.grading.course import Course

    course = Course(course_dir)
    with course.gradebook() as gb:
        return {s.student.id: float(s.score) for s in gb.assignment_submissions(A)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system, the command and every process it
    waited for: workers, kernels) of one command."""
    cpu = _children_cpu()
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return wall, _children_cpu() - cpu


def _startup(env: dict[str, str], repeat: int = 3) -> float:
    """Median wall time of ``nbgrader --version`` (imports and application set-up)."""
    times = [
        _timed([str(BIN / "nbgrader"), "--version"], ROOT, env)[0]
        for _ in range(repeat)
    ]
    return statistics.median(times)


def _cluster_rows(
    tmp: Path, base: Path, expected: dict[str, float], jobs: int, env: dict[str, str]
) -> list[str]:
    """``course autograde --cluster`` on a scheduler and two workers started here
    (``dask scheduler``, ``dask worker --nthreads 1``, each in its own folder), against
    ``course autograde --jobs {jobs}`` on the same submissions: the report's rows,
    and the overhead per submission the cluster path adds. The first cluster run
    meets freshly started workers (each writes its grading edition of course_lib
    once); the second meets them warm, as a term's later runs do."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    dask = str(BIN / "dask")
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--no-dashboard", "--port"]
            + [address.rsplit(":", 1)[1]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    try:
        from distributed import Client

        with Client(address, timeout=60, set_as_default=False) as client:
            for name in ("w1", "w2"):
                folder = tmp / "dask" / name
                folder.mkdir(parents=True)
                procs.append(
                    subprocess.Popen(
                        [dask, "worker", address, "--nthreads", "1", "--name", name]
                        + ["--no-dashboard", "--local-directory", str(folder)],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        cwd=folder,
                        env=env,
                    )
                )
            client.wait_for_workers(2, timeout=120)
        course = [str(BIN / "course"), "autograde", A, "--force", "--no-progress"]
        runs = [
            (f"course autograde --jobs {jobs} (sandboxed)", [*course, "--jobs"]),
            ("course autograde --cluster, 2 new workers", [*course, "--cluster"]),
            ("course autograde --cluster, 2 warm workers", [*course, "--cluster"]),
        ]
        walls = {}
        for name, cmd in runs:
            work = tmp / f"cluster-{len(walls)}"
            shutil.copytree(base, work)
            _log(f"{name}")
            cmd = [*cmd, str(jobs) if cmd[-1] == "--jobs" else address]
            walls[name] = _timed(cmd, work, env)[0]
            got = _scores(work)
            if got != expected:
                raise RuntimeError(f"{name} gave {got}, expected {expected}")
            shutil.rmtree(work)
    finally:
        for proc in procs[::-1]:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    n = len(expected)
    local = walls[runs[0][0]]
    lines = [
        "",
        f"The cluster path on this machine: a Dask scheduler and 2 workers "
        f"(`dask worker --nthreads 1`) on 127.0.0.1 against `--jobs {jobs}`, the same "
        f"{n} submissions; both gradebooks agree with the expected scores. The "
        "workers were started before the timed commands.",
        "",
        "| command | wall (s) | wall per submission (s) | overhead per submission "
        f"vs --jobs {jobs} (s) |",
        "|---|---:|---:|---:|",
    ]
    for name, _ in runs:
        wall = walls[name]
        lines.append(
            f"| {name} | {wall:.1f} | {wall / n:.2f} | {(wall - local) / n:+.2f} |"
        )
    lines += [
        "",
        "The overhead is what Dask adds per submission (shipping the submission and "
        "the graded notebook, scheduling, the client's merge), spread over the "
        "workers; with new workers it includes each worker's one-time set-up (its "
        "sandbox check and grading edition).",
    ]
    if any(walls[name] < local for name, _ in runs[1:]):
        lines[-1] += (
            " A negative overhead: the workers had nbgrader and the grading edition "
            "loaded already, which a --jobs run loads again at every start, and that "
            "saved more than Dask added."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_autograde",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--submissions",
        default="8,32",
        help="comma-separated class sizes, one table each (default 8,32)",
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repetitions of each measurement (median reported)",
    )
    ap.add_argument(
        "--no-cluster",
        action="store_true",
        help="leave out the cluster rows (course autograde --cluster)",
    )
    ap.add_argument(
        "--only-cluster",
        action="store_true",
        help="only the cluster rows (course autograde --cluster against --jobs)",
    )
    ap.add_argument(
        "--check-only",
        action="store_true",
        help="only the `course check` rows (no course is built, nothing graded)",
    )
    ap.add_argument(
        "--check-runs",
        type=int,
        default=5,
        help="runs of each `course check` row (median reported; default 5)",
    )
    args = ap.parse_args(argv)
    if args.check_only:
        print("\n".join(_check_rows(args.check_runs)))
        return 0

    sizes = [int(n) for n in str(args.submissions).split(",") if n.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="bench-autograde-"))
    try:
        env = dict(os.environ)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        with_rfc = importlib.util.find_spec("rfc3987_syntax") is not None
        without = env
        if with_rfc:
            shadow = tmp / "no_rfc3987" / "rfc3987_syntax"
            shadow.mkdir(parents=True)
            (shadow / "__init__.py").write_text(
                "raise ImportError('rfc3987-syntax blocked for the benchmark')\n"
            )
            without = dict(env, PYTHONPATH=str(shadow.parent))
        # The grading edition is written by a term's first run and copied from the
        # grading user's cache by every later one: fill the cache before timing.
        from course_lib.grading.kernels.sandbox import grading_edition

        _log("filling the grading edition cache")
        grading_edition()
        out: list[str] = []
        for k, n in enumerate(sizes):
            _log(f"building a course with {n} submissions in {tmp}")
            base = tmp / f"base-{n}"
            expected = _build(base, n)
            if args.only_cluster:
                out += _cluster_rows(tmp, base, expected, args.jobs, without)
                break
            first = k == 0
            out += ["", *_main_rows(tmp, base, expected, args, env, without, first)]
            if first and not args.no_cluster:
                out += _cluster_rows(tmp, base, expected, args.jobs, without)
        if not args.only_cluster:
            out += ["", *_check_rows(args.check_runs)]
        print("\n".join(out).strip("\n"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _main_rows(
    tmp: Path,
    base: Path,
    expected: dict[str, float],
    args: argparse.Namespace,
    env: dict[str, str],
    without: dict[str, str],
    extras: bool,
) -> list[str]:
    """The main table for one class size: sequential nbgrader, course autograde
    sandboxed (kernels forked from the warm template, and started cold), and
    unsandboxed; with ``extras``, the rfc3987-syntax row and the start-up table."""
    n = len(expected)
    with_rfc = without is not env
    nbgrader = [str(BIN / "nbgrader"), "autograde", A, "--force"]
    course = [
        str(BIN / "course"),
        "autograde",
        A,
        "--jobs",
        str(args.jobs),
        "--force",
        "--no-progress",
    ]
    cold = dict(without, COURSE_WARM_START="0")
    runs = [
        ("nbgrader autograde (sequential)", nbgrader, without),
        (
            f"course autograde --jobs {args.jobs} (sandboxed, warm start)",
            course,
            without,
        ),
        (f"course autograde --jobs {args.jobs} (sandboxed, cold start)", course, cold),
        (
            f"course autograde --jobs {args.jobs} --unsafe-no-sandbox",
            [*course, "--unsafe-no-sandbox"],
            without,
        ),
    ]
    if with_rfc and extras:
        runs.append(
            ("nbgrader autograde (sequential), rfc3987-syntax installed", nbgrader, env)
        )
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for name, cmd, run_env in runs if r % 2 == 0 else runs[::-1]:
            work = tmp / f"run-{n}-{r}-{len(walls)}"
            shutil.copytree(base, work)
            _log(f"{name}, {n} submissions (round {r + 1})")
            wall, cpu = _timed(cmd, work, run_env)
            cpus.setdefault(name, []).append(cpu)
            got = _scores(work)
            if got != expected:
                raise RuntimeError(f"{name} gave {got}, expected {expected}")
            walls.setdefault(name, []).append(wall)
            shutil.rmtree(work)

    baseline = statistics.median(walls[runs[0][0]])
    lines = [
        f"{n} submissions of {A}; every gradebook agrees with the expected scores "
        f"({sorted(set(expected.values()))} points). "
        f"{os.cpu_count()} CPUs; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} (other processes share "
        "the machine). Wall time of the whole command from a cold start (a new "
        "process) and its CPU time (user + system of the command, its workers "
        f"and kernels), medians of {args.rounds} round(s); rfc3987-syntax blocked "
        "unless the row says otherwise (the Makefile uninstalls it). The grading "
        "edition of course_lib was in the grading user's cache (a term's first "
        "run writes it, in about 10 s).",
        "",
        "| command | wall (s) | CPU (s) | wall per submission (s) "
        "| speed-up vs nbgrader |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, _, _ in runs:
        wall = statistics.median(walls[name])
        cpu = statistics.median(cpus[name])
        lines.append(
            f"| {name} | {wall:.1f} | {cpu:.1f} | {wall / n:.2f} | "
            f"{baseline / wall:.2f}x |"
        )
    lines += [
        "",
        "CPU (s) counts the processes the command waited for; the sandboxed "
        "kernels run in their own PID namespace and are reaped there, so the "
        "sandboxed rows leave most of the kernels' CPU time out. Warm start: the "
        "run's template imports torch and the grading edition once, and "
        "every kernel is forked from it into its own sandbox; cold start "
        "(COURSE_WARM_START=0): every kernel is a new Python.",
    ]
    if not extras:
        return lines
    startup = {"rfc3987-syntax removed": _startup(without)}
    if with_rfc:
        startup["rfc3987-syntax installed"] = _startup(env)
    lines += ["", "| `nbgrader --version` start-up | wall (s) |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in startup.items()]
    if with_rfc:
        saved = startup["rfc3987-syntax installed"] - startup["rfc3987-syntax removed"]
        slower = statistics.median(walls[runs[-1][0]]) - baseline
        lines += [
            "",
            f"rfc3987-syntax costs {saved:.1f} s at every nbgrader start-up; "
            f"the sequential run took {slower:+.1f} s with it installed (a "
            "difference of a few seconds is within the noise of a shared "
            "machine).",
        ]
    return lines


def _check_rows(runs: int) -> list[str]:
    """``course check`` on the release notebook of ex05 (its two exercises are the
    stubs: both fail, exit status 1), each run a new process, against what any new
    Python that imports torch pays; the commands alternate, medians of ``runs``."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    release = ROOT / "notebooks" / A / f"{A}.ipynb"
    python = sys.executable
    check = f"course check notebooks/{A}/{A}.ipynb"
    course = str(BIN / "course")
    kernel_imports = "import ipykernel.kernelapp, torch, course_lib.checks"
    rows = [
        ("`course --version`", [course, "--version"], (0,)),
        ("`python -c 'import course_lib'`", [python, "-c", "import course_lib"], (0,)),
        ("`python -c 'import torch'` (floor)", [python, "-c", "import torch"], (0,)),
        (
            f"`python -c '{kernel_imports}'` (what the check's kernel imports)",
            [python, "-c", kernel_imports],
            (0,),
        ),
        (f"`{check}` (release notebook)", [course, "check", str(release)], (1,)),
    ]
    walls: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for r in range(runs):
        for name, cmd, codes in rows if r % 2 == 0 else rows[::-1]:
            _log(f"{name} (run {r + 1} of {runs})")
            start = time.perf_counter()
            out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            walls[name].append(time.perf_counter() - start)
            if out.returncode not in codes or (
                cmd[1:2] == ["check"]
                and ("note:" in out.stdout or "0 of 2 exercises pass" not in out.stdout)
            ):
                raise RuntimeError(
                    f"{' '.join(cmd)} exited {out.returncode}:\n"
                    f"{out.stdout[-2000:]}{out.stderr[-2000:]}"
                )
    median = {name: statistics.median(w) for name, w in walls.items()}
    floor = median[rows[2][0]]
    kernel = median[rows[3][0]]
    total = median[rows[4][0]]
    lines = [
        f"`course check`, a student's command: each command a new process, run "
        f"{runs} times, the commands alternating; {os.cpu_count()} CPUs, load "
        f"average at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        "| command (new process) | median wall (s) | fastest (s) |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {name} | {median[name]:.2f} | {min(walls[name]):.2f} |"
        for name, _, _ in rows
    ]
    lines += [
        "",
        f"`course check` runs the notebook in a new kernel (student code never runs "
        f"in the command's own process), and that kernel imports torch: "
        f"{floor:.2f} s of the {total:.2f} s is what any new Python pays for "
        f"`import torch` here, {kernel:.2f} s what it pays for the kernel's and the "
        f"checks' imports as well. The command itself imports no torch; it starts "
        f"the kernel before it reads and repairs the notebook, so its own "
        f"start-up is spent while the kernel boots.",
    ]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
