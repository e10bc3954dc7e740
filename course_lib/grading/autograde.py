"""Parallel autograding with nbgrader, one submission per worker at a time.

nbgrader's gradebook is one database (SQLite by default) and nbgrader autogrades one
student after another. ``course autograde`` keeps nbgrader's grading but runs it in
``jobs`` worker processes:

1. The parent copies the assignment's definition (graded cells, locked source cells)
   from the course gradebook into a template SQLite file.
2. Each worker grades one submission at a time with nbgrader's own ``Autograde``
   converter (in-process, so nbgrader and torch are imported once per worker, not once
   per student) in a private course folder: a copy of the template gradebook, a copy
   of that student's submission, and an output folder.
3. The worker reads the scores nbgrader wrote into the private gradebook and sends
   them to the parent, which alone writes to the course gradebook, one submission at
   a time, and moves the autograded notebook into ``autograded/``.

Each submission's kernel starts through :mod:`course_lib.grading.kernel` (memory and
CPU limits; the place where a sandbox plugs in), a timer kills it when the submission
exceeds its wall time, and the parent kills a worker that does not answer in time.
Whatever goes wrong (invalid JSON, a dead kernel, a timeout, a crash of nbgrader
itself), the submission is recorded with a score of zero and the reason, and the run
goes on. A second run skips submissions whose files, assignment and graders did not
change since they were graded (``force=True`` regrades everything).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from .course import Course, CourseError, sqlite_url
from .gradebook import (
    StatusRow,
    assignment_fingerprint_parts,
    copy_assignment,
    late_policy_parts,
    merge_submission,
    read_status,
    read_submission,
    record_ungradable,
    stamp_alembic_version,
    submission_scores,
    write_status,
)
from .kernel import (
    KernelContext,
    KernelLauncher,
    KernelLimits,
    RlimitLauncher,
    format_bytes,
    kernel_context,
    kill_process_group,
)

__all__ = ["AutogradeOptions", "AutogradeSummary", "Outcome", "autograde"]

# Seconds the parent waits beyond the wall-time limit before it kills a worker that
# has not reported back (the worker's own timer should have ended the kernel).
_GRACE_SECONDS = 60.0


@dataclass
class AutogradeOptions:
    """How to autograde.

    ``jobs``: worker processes. ``limits``/``launcher``: how each kernel runs.
    ``cell_timeout``: per-cell timeout in seconds (default: the assignment's entry of
    ``c.CourseTimeLimits.per_cell`` in nbgrader_config.py, see :func:`cell_time_limit`).
    ``force``: regrade submissions already graded. ``students``: only these.
    ``progress``: show a progress bar on stderr. ``cluster``: the address of a Dask
    scheduler (``tcp://host:8786``): grade there instead of in ``jobs`` local worker
    processes (:mod:`course_lib.grading.cluster`).
    """

    jobs: int = 1
    limits: KernelLimits = field(default_factory=KernelLimits)
    launcher: KernelLauncher = field(default_factory=RlimitLauncher)
    cell_timeout: int | None = None
    force: bool = False
    students: list[str] | None = None
    progress: bool = True
    cluster: str | None = None


@dataclass
class Outcome:
    """The result for one submission."""

    student: str
    status: str  # "graded", "ungradable" or "unchanged" (skipped: already graded)
    score: float = 0.0
    max_score: float = 0.0
    reason: str = ""
    wall_seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)
    # accidents repaired before grading (course_lib.grading.repair), plain words
    repairs: list[str] = field(default_factory=list)


@dataclass
class AutogradeSummary:
    """Every submission's :class:`Outcome`, and the run's wall time."""

    assignment: str
    outcomes: list[Outcome]
    wall_seconds: float

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


@dataclass(frozen=True)
class _Job:
    student: str
    submission: str  # submitted/<student>/<assignment>
    extension_seconds: float | None = None  # the student's extension of the due date


@dataclass(frozen=True)
class _WorkerSpec:
    assignment: str
    notebooks: tuple[str, ...]
    config: Any  # traitlets Config of the course
    template_db: str
    course_id: str
    source_assignment_dir: str
    scratch: str
    limits: KernelLimits
    launcher: KernelLauncher
    cell_timeout: int | None
    threads: int
    log_path: str
    # what the course knows of each notebook's cells, for the repairs
    references: tuple = ()


# --------------------------------------------------------------------------------------
# fingerprints and pre-checks (parent)


def _hash_tree(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(b"\0")
        digest.update(file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _grader_files(assignment: str, base: Path | None = None) -> list[Path]:
    """The grader of ``assignment`` (``checks/<assignment>.py`` in the package at
    ``base``, by default ``course_lib``) and every module of the package it imports,
    directly or through others (the package ``__init__`` files that Python runs on
    the way are not followed); every module when there is no such grader."""
    import ast

    if base is None:
        import course_lib

        base = Path(course_lib.__file__).parent
    top = base.name
    start = base / "checks" / f"{assignment}.py"
    if not start.is_file():
        return sorted([*base.glob("*.py"), *(base / "checks").glob("*.py")])

    def module_file(name: str) -> Path | None:
        parts = name.split(".")[1:]
        if name.split(".")[0] != top or not parts:
            return None
        for candidate in (
            base.joinpath(*parts).with_suffix(".py"),
            base.joinpath(*parts, "__init__.py"),
        ):
            if candidate.is_file():
                return candidate
        return None

    seen: set[Path] = set()
    todo = [start]
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        package = [top, *file.parent.relative_to(base).parts]
        for node in ast.walk(ast.parse(file.read_text())):
            found: list[Path | None] = []
            if isinstance(node, ast.Import):
                found = [module_file(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                anchor = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    # `from pkg import name`: a submodule if there is one, else an
                    # attribute of pkg itself
                    found.append(module_file(f"{mod}.{alias.name}") or module_file(mod))
            todo += [f for f in found if f is not None]
    return sorted(seen)


def _grader_digest(assignment: str) -> str:
    """A digest of the grader and library code the hidden tests of ``assignment``
    run: a change there changes grades, so it makes a re-run regrade."""
    import course_lib

    base = Path(course_lib.__file__).parent
    digest = hashlib.sha256()
    for file in _grader_files(assignment):
        digest.update(str(file.relative_to(base)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _precheck(job: _Job, notebooks: tuple[str, ...]) -> str | None:
    """Why the submission cannot be graded at all (missing notebook, or a file that
    is not a notebook), in plain words, or ``None``. What can be repaired is
    repaired later (:mod:`course_lib.grading.repair`)."""
    from .repair import Ungradable, read_notebook

    folder = Path(job.submission)
    present = sorted(p.name for p in folder.glob("*.ipynb"))
    missing = [nb for nb in notebooks if f"{nb}.ipynb" not in present]
    if len(missing) == len(notebooks):
        found = ", ".join(present) if present else "no notebook"
        wanted = ", ".join(f"{nb}.ipynb" for nb in notebooks)
        return f"the submission has no {wanted} (found: {found})"
    for nb in notebooks:
        path = folder / f"{nb}.ipynb"
        if not path.exists():
            continue
        try:
            read_notebook(path, f"{nb}.ipynb")
        except Ungradable as exc:
            return str(exc)
    return None


def _read_timestamp(folder: Path) -> str | None:
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    if not path.is_file():
        return None
    text = path.read_text().strip()
    try:
        parse_utc(text)
    except Exception:  # noqa: BLE001 - an unreadable timestamp is ignored
        return None
    return text or None


# --------------------------------------------------------------------------------------
# the worker


def _first_line(text: str, limit: int = 300) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def time_limit_reason(limit: int | float | None, grade_id: str) -> str:
    """What a test cell cut off by the per-cell time limit records: never "wrong".

    >>> time_limit_reason(60, "alibi_bias__hidden")
    'ungradable: time limit (60 s per cell, cell `alibi_bias__hidden`)'
    """
    size = f"{limit:g} s per cell" if limit else "the per-cell limit"
    return f"ungradable: time limit ({size}, cell `{grade_id}`)"


def cell_time_limit(config, assignment: str) -> int | None:
    """The per-cell time limit of ``assignment`` in seconds: its entry of
    ``c.CourseTimeLimits.per_cell`` in ``nbgrader_config.py`` (derived from the
    solution's measured cost, see ``benchmarks/solution_cost.py``), else the global
    ``Execute.timeout`` / ``ExecutePreprocessor.timeout``."""
    table = config.CourseTimeLimits.get("per_cell") or {}
    if assignment in table:
        return int(table[assignment])
    for section in ("Execute", "ExecutePreprocessor"):
        value = config[section].get("timeout")
        if value is not None:
            return int(value)
    return None


def _cell_failures(notebook_path: Path, limit: int | None = None) -> dict[str, str]:
    """grade id -> first line of the error of every graded cell that raised; a cell
    cut off by the time limit says so (:func:`time_limit_reason`)."""
    import nbformat

    nb = nbformat.read(str(notebook_path), as_version=4)
    failures = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell.get("cell_type") != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not errors:
            continue
        names = [o.get("ename", "Error") for o in errors]
        if "CellTimeoutError" in names:
            message = time_limit_reason(limit, meta.get("grade_id", "?"))
        else:
            message = f"{names[0]}: {errors[0].get('evalue', '')}"
        failures[meta.get("grade_id", "?")] = _first_line(message)
    return failures


def _describe_death(codes: list[int | None], at_start: bool = False) -> str:
    """Why the kernel died, from its exit status; ``at_start``: before it answered
    (no cell of the notebook had run, so nothing the student wrote caused it)."""
    when = (
        "as it started, before any cell ran" if at_start else "while the notebook ran"
    )
    code = next((c for c in codes if c not in (None, 0)), None)
    if code is None:
        return f"the kernel died {when}"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": " (killed: out of memory, or by the time limit)",
            "SIGXCPU": " (the CPU-time limit)",
            "SIGSEGV": " (a crash in native code, often a failed allocation)",
        }.get(name, "")
        return f"the kernel died from {name}{hint} {when}"
    return f"the kernel exited with status {code} {when}"


_NBGRADER_ERRORS = (
    (
        r"Cell with id '([^']+)' exists multiple times",
        "the cell `{0}` appears more than once; delete the copies",
    ),
    (
        r"Cell '([^']+)' does not exist in the database",
        "a cell carries the grade id `{0}`, which this assignment does not have; "
        "copy its text into a new cell and delete it",
    ),
    (
        r"Inconsistent checksums for cell ([^\s]+)",
        "the locked cell {0} could not be restored to its released text; fetch a "
        "fresh copy of the exercise and move the answers into it",
    ),
    (
        r"Missing grade cell (\S+) encountered",
        "the test cell {0} is missing and could not be put back; fetch a fresh copy "
        "of the exercise and move the answers into it",
    ),
    (
        r"No notebooks found",
        "the submission holds no notebook of this assignment",
    ),
)


def _nbgrader_error(result: dict[str, Any], student: str, assignment: str) -> str:
    """Why nbgrader failed, in plain words: a known message of nbgrader's log
    explained, else a pointer to the log (never a line of Python)."""
    import re

    text = (result.get("log") or "") + "\n" + (result.get("error") or "")
    for pattern, reason in _NBGRADER_ERRORS:
        found = re.search(pattern, text)
        if found:
            return reason.format(*found.groups())
    return (
        "nbgrader stopped on this notebook without saying why in words; the "
        f"grading log reports/{assignment}/logs/{student}.log has the details"
    )


def _prepare_private_course(spec: _WorkerSpec, job: _Job) -> Path:
    private = Path(tempfile.mkdtemp(prefix="grade-", dir=spec.scratch))
    shutil.copyfile(spec.template_db, private / "gradebook.db")
    if job.extension_seconds is not None:
        import datetime as dt

        from nbgrader.api import Gradebook

        with Gradebook(sqlite_url(private / "gradebook.db"), spec.course_id) as pgb:
            pgb.update_or_create_student(job.student)
            pgb.update_or_create_submission(
                spec.assignment,
                job.student,
                extension=dt.timedelta(seconds=job.extension_seconds),
            )
    source = private / "source" / spec.assignment
    source.mkdir(parents=True)
    # nbgrader copies the assignment's non-notebook files next to the graded notebook;
    # the source notebooks themselves (with the solutions) stay out of reach.
    src_root = Path(spec.source_assignment_dir)
    if src_root.is_dir():
        for file in src_root.rglob("*"):
            rel = file.relative_to(src_root)
            if (
                file.is_file()
                and file.suffix != ".ipynb"
                and not any(part.startswith(".") for part in rel.parts)
            ):
                (source / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, source / rel)
    # symlinks=True: a link in a submission stays a link (copying what it points to,
    # as the grader, could hand a file of the grader's to the student's kernel).
    shutil.copytree(
        job.submission,
        private / "submitted" / job.student / spec.assignment,
        symlinks=True,
    )
    return private


def _private_config(spec: _WorkerSpec, private: Path):
    from .integrity import autograde_preprocessors

    config = copy.deepcopy(spec.config)
    cd = config.CourseDirectory
    cd.root = str(private)
    cd.source_directory = "source"
    cd.submitted_directory = "submitted"
    cd.autograded_directory = "autograded"
    cd.feedback_directory = "feedback"
    cd.release_directory = "release"
    cd.db_url = sqlite_url(private / "gradebook.db")
    cd.course_id = spec.course_id
    config.Autograde.autograde_preprocessors = autograde_preprocessors(
        spec.config.Autograde.get("autograde_preprocessors")
    )
    if spec.cell_timeout is not None:
        config.Execute.timeout = spec.cell_timeout
    # The kernel is thrown away after its notebook ran: kill it instead of asking it
    # to shut down, which costs a second of wall time (torch's interpreter teardown).
    config.Execute.shutdown_kernel = "immediate"
    config.NbGraderAPI.log_level = "INFO"
    return config


def grade_submission(
    spec: _WorkerSpec, job: _Job, on_kernel: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Grade one submission: THE grading function, run by the local worker processes
    (``--jobs``) and by the Dask task (``--cluster``,
    :mod:`course_lib.grading.cluster`) alike.

    ``spec`` and ``job`` name local paths (the template gradebook, the assignment's
    source, the submission, a scratch folder); ``on_kernel`` is told the PID of each
    kernel started. Returns what the parent merges: ``status`` ("graded" or
    "ungradable"), ``reason``, ``wall_seconds``, and when graded ``grades``,
    ``failures``, ``repairs`` and ``autograded`` (the folder of the graded
    notebooks, inside ``private``: the private course folder, for the caller to
    remove); ``log``: nbgrader's log of the run. Never raises for a submission: a
    failure of the tool itself is reported as ungradable, with the traceback in the
    log.
    """
    start = time.perf_counter()
    try:
        out = _grade(spec, job, on_kernel)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        import traceback

        traceback.print_exc()  # into workers.log (a local run)
        detail = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        out = {
            "status": "ungradable",
            "reason": (
                "the grading tool failed on this submission"
                + (f" ({detail[:300]})" if detail else "")
                + f"; the log reports/{spec.assignment}/logs/{job.student}.log "
                "has the details"
            ),
            "log": traceback.format_exc(),
        }
    out["wall_seconds"] = time.perf_counter() - start
    return out


def worker_died(code: int | None) -> dict[str, Any]:
    """The result of a submission whose grading worker died under it."""
    return {
        "status": "ungradable",
        "reason": f"the grading worker died (exit code {code})",
    }


def worker_timed_out(limits: KernelLimits) -> dict[str, Any]:
    """The result of a submission whose grading worker did not answer within its
    wall time and :data:`_GRACE_SECONDS` more, and was stopped."""
    return {
        "status": "ungradable",
        "reason": (
            f"exceeded the time limit of {limits.wall_seconds:g} s per submission "
            "(the grading worker had to be killed)"
        ),
    }


def worker_environment(threads: int) -> None:
    """The environment of a grading worker, passed on to its kernels: ``threads``
    threads for torch's and the BLAS libraries' pools, plots without a display."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ["MPLBACKEND"] = "Agg"
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"


def _grade(
    spec: _WorkerSpec, job: _Job, on_kernel: Callable[[int], None] | None
) -> dict[str, Any]:
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    private = _prepare_private_course(spec, job)
    repairs = _repair(spec, job, private)
    if isinstance(repairs, str):
        return {"private": str(private), "status": "ungradable", "reason": repairs}
    config = _private_config(spec, private)
    context = KernelContext(
        limits=spec.limits,
        launcher=spec.launcher,
        on_start=on_kernel or (lambda pid: None),
    )
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    timer = None
    if spec.limits.wall_seconds is not None:
        timer = threading.Timer(spec.limits.wall_seconds, context.kill)
        timer.daemon = True
    with kernel_context(context):
        if timer is not None:
            timer.start()
        try:
            result = api.autograde(
                spec.assignment, job.student, force=True, create=True
            )
        finally:
            if timer is not None:
                timer.cancel()
            for pid in context.pids:
                kill_process_group(pid)
    log_text = (result.get("log") or "") + (result.get("error") or "")
    out: dict[str, Any] = {"private": str(private), "log": log_text}
    out["repairs"] = repairs
    if context.killed:
        out.update(
            status="ungradable",
            reason=(
                f"exceeded the time limit of {spec.limits.wall_seconds:g} s "
                "per submission"
            ),
        )
        return out
    if not result.get("success"):
        if "DeadKernelError" in log_text or "Kernel died" in log_text:
            at_start = "before replying to kernel_info" in log_text  # nbclient's
            reason = _describe_death(context.exit_codes(), at_start)
        elif "CellTimeoutError" in log_text or "UnresponsiveKernelError" in log_text:
            limit = (
                f"{spec.cell_timeout} s per cell" if spec.cell_timeout else "per cell"
            )
            reason = (
                f"ungradable: time limit ({limit}): a cell ran past it and the "
                "kernel could not be interrupted"
            )
        else:
            reason = _nbgrader_error(result, job.student, spec.assignment)
        out.update(status="ungradable", reason=reason)
        return out
    graded = private / "autograded" / job.student / spec.assignment
    failures: dict[str, str] = {}
    for nb in spec.notebooks:
        path = graded / f"{nb}.ipynb"
        if path.exists():
            failures.update(_cell_failures(path, spec.cell_timeout))
    with Gradebook(config.CourseDirectory.db_url, spec.course_id) as gb:
        grades = read_submission(gb, spec.assignment, job.student)
    # A test cell cut off by the time limit is not judged (it scores 0 in nbgrader's
    # gradebook, which knows no other state), and the submission says so in its
    # reason; its other cells keep their scores (the kernel was interrupted and went
    # on): a slow cell does not zero the rest.
    timed_out = [msg for msg in failures.values() if msg.startswith("ungradable: time")]
    out.update(
        status="graded",
        grades=grades,
        failures=failures,
        autograded=str(graded),
        reason="; ".join(timed_out),
    )
    return out


def _repair(spec: _WorkerSpec, job: _Job, private: Path) -> list[str] | str:
    """Repair the private copy of each submitted notebook (the student's file is
    never touched); the repairs in plain words (routine clean-up left out), or the
    reason the submission cannot be graded."""
    from .repair import Ungradable, repair_file

    folder = private / "submitted" / job.student / spec.assignment
    several = len(spec.references) > 1
    notes: list[str] = []
    for reference in spec.references:
        path = folder / f"{reference.notebook}.ipynb"
        if not path.is_file() or path.is_symlink():
            continue
        try:
            result = repair_file(path, reference, with_notes_cell=True)
        except Ungradable as exc:
            return str(exc)
        for text in result.texts(routine=False):
            notes.append(f"{reference.notebook}.ipynb: {text}" if several else text)
    return notes


def _worker_main(conn: Connection, spec: _WorkerSpec) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    log = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    worker_environment(spec.threads)
    try:
        while True:
            job = conn.recv()
            if job is None:
                break

            def report_kernel(pid: int, student: str = job.student) -> None:
                conn.send(("kernel", student, pid))

            out = grade_submission(spec, job, report_kernel)
            conn.send(("done", job.student, out))
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


class _Worker:
    def __init__(self, ctx, spec: _WorkerSpec, index: int) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_worker_main,
            args=(child, spec),
            name=f"course-autograde-{index}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.job: _Job | None = None
        self.started = 0.0
        self.kernels: list[int] = []

    def send(self, job: _Job) -> None:
        self.job, self.started, self.kernels = job, time.monotonic(), []
        self.conn.send(job)

    def kill(self) -> None:
        for pid in self.kernels:
            kill_process_group(pid)
        with contextlib.suppress(Exception):
            self.process.kill()
        self.process.join(5)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(None)
        self.process.join(10)
        if self.process.is_alive():
            self.kill()


# --------------------------------------------------------------------------------------
# the parent


def _tqdm(total: int, assignment: str, enabled: bool):
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: workers are forked later on
    return tqdm(
        total=total,
        desc=f"autograde {assignment}",
        unit="submission",
        file=sys.stderr,
        disable=not enabled,
        dynamic_ncols=True,
        smoothing=0.1,
    )


def autograde(
    course: Course,
    assignment: str,
    options: AutogradeOptions | None = None,
) -> AutogradeSummary:
    """Autograde every submission of ``assignment`` in ``course``; see the module
    docstring. Returns a summary; the gradebook holds the scores."""
    options = options or AutogradeOptions()
    if options.jobs < 1:
        raise CourseError(f"--jobs must be at least 1, got {options.jobs}")
    t_start = time.perf_counter()
    client = None
    if options.cluster:
        from .cluster import connect

        # before anything is written: an unreachable scheduler leaves no trace
        client = connect(options.cluster)
    try:
        return _autograde(course, assignment, options, client, t_start)
    finally:
        if client is not None:
            from .cluster import disconnect

            disconnect(client)


def _autograde(
    course: Course,
    assignment: str,
    options: AutogradeOptions,
    client: Any,
    t_start: float,
) -> AutogradeSummary:
    from nbgrader.api import Gradebook, MissingEntry

    with course.gradebook(create=False, assignment=assignment) as gb:
        known = [a.name for a in gb.assignments]
        assignment = course.resolve_assignment(
            assignment, known=known + course.source_assignments()
        )
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise CourseError(
                f"{assignment} is not in the gradebook ({course.gradebook_url}); "
                f"release it first: course release {assignment}"
            ) from None
        notebooks = tuple(nb.name for nb in gb.find_assignment(assignment).notebooks)
        status = read_status(gb, assignment)
        parts = assignment_fingerprint_parts(gb, assignment)
        # a new due date or penalty setting changes nbgrader's late penalty: regrade
        parts += late_policy_parts(gb, assignment, course.config)
        have_submission = {s.student.id for s in gb.assignment_submissions(assignment)}
        extensions = {  # nbgrader's late penalty counts from the extended due date
            s.student.id: s.extension.total_seconds()
            for s in gb.assignment_submissions(assignment)
            if s.extension is not None
        }

        submissions = course.submissions(assignment)
        if options.students is not None:
            unknown = sorted(set(options.students) - set(submissions))
            if unknown:
                raise CourseError(
                    f"no submission of {assignment} for: {', '.join(unknown)}"
                )
            submissions = {
                s: p for s, p in submissions.items() if s in options.students
            }

        timeout = options.cell_timeout or cell_time_limit(course.config, assignment)
        base = hashlib.sha256(
            "\n".join(
                [
                    *parts,
                    _grader_digest(assignment),
                    repr(options.limits),
                    repr(timeout),
                    type(options.launcher).__qualname__,
                ]
            ).encode()
        ).hexdigest()
        jobs: list[_Job] = []
        outcomes: list[Outcome] = []
        fingerprints: dict[str, str] = {}
        for student, path in submissions.items():
            fp = hashlib.sha256((base + _hash_tree(path)).encode()).hexdigest()
            fingerprints[student] = fp
            row = status.get(student)
            if (
                not options.force
                and row is not None
                and row.fingerprint == fp
                and student in have_submission
            ):
                outcomes.append(
                    Outcome(
                        student,
                        "unchanged",
                        row.score,
                        row.max_score,
                        row.reason,
                        row.wall_seconds,
                        row.failures,
                        _recorded_repairs(course, assignment, student, notebooks),
                    )
                )
                continue
            jobs.append(_Job(student, str(path), extensions.get(student)))

        scratch = Path(tempfile.mkdtemp(prefix="course-autograde-"))
        if jobs and client is None:
            # e.g. the sandbox's warm template: its imports overlap what follows
            options.launcher.warm_up(assignment, str(scratch / "workers.log"))
            # Every worker checks the test cells' grader calls against the trusted
            # graders (integrity.py), which import torch: import them here, once,
            # while the template imports, and the workers forked below inherit them.
            from .integrity import pristine_graders

            pristine_graders()
        template = scratch / "template.db"
        references = _references(course, gb, assignment, notebooks) if jobs else ()
        if jobs:
            stamp_alembic_version(template, gb)
            with Gradebook(sqlite_url(template), course.course_id) as tgb:
                copy_assignment(gb, tgb, assignment)

    log_dir = course.root / "reports" / assignment / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        outcomes += _run(
            course,
            assignment,
            notebooks,
            jobs,
            fingerprints,
            options,
            scratch,
            template,
            log_dir,
            timeout,
            references,
            client,
        )
    finally:
        options.launcher.cool_down()
        shutil.rmtree(scratch, ignore_errors=True)
    outcomes.sort(key=lambda o: o.student)
    missing = set(submissions) - {o.student for o in outcomes}
    if missing:  # cannot happen; a lost submission must never pass silently
        raise RuntimeError(f"autograde lost submissions: {sorted(missing)}")
    return AutogradeSummary(assignment, outcomes, time.perf_counter() - t_start)


def _run(
    course: Course,
    assignment: str,
    notebooks: tuple[str, ...],
    jobs: list[_Job],
    fingerprints: dict[str, str],
    options: AutogradeOptions,
    scratch: Path,
    template: Path,
    log_dir: Path,
    timeout: int | None,
    references: tuple = (),
    client: Any = None,
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    queue: deque[_Job] = deque()
    pbar = _tqdm(len(jobs), assignment, options.progress and bool(jobs))
    gb = course.gradebook()

    def finish(job: _Job, out: dict[str, Any]) -> None:
        private = out.get("private")
        status = out.get("status", "ungradable")
        reason = out.get("reason", "")
        folder = Path(job.submission)
        dest = course.autograded_dir / job.student / assignment
        if out.get("log"):
            (log_dir / f"{job.student}.log").write_text(out["log"])
        if status == "graded":
            merge_submission(gb, assignment, job.student, out["grades"])
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(out["autograded"], dest)
        else:
            record_ungradable(gb, assignment, job.student, _read_timestamp(folder))
            if dest.exists():
                shutil.rmtree(dest)
        if private:
            shutil.rmtree(private, ignore_errors=True)
        score, max_score = submission_scores(gb, assignment, job.student)
        outcome = Outcome(
            job.student,
            status,
            score,
            max_score,
            reason,
            float(out.get("wall_seconds", 0.0)),
            out.get("failures", {}),
            list(out.get("repairs") or []),
        )
        write_status(
            gb,
            StatusRow(
                assignment=assignment,
                student=job.student,
                status=status,
                reason=reason,
                score=score,
                max_score=max_score,
                fingerprint=fingerprints[job.student],
                wall_seconds=outcome.wall_seconds,
                failures=outcome.failures,
            ),
        )
        outcomes.append(outcome)
        pbar.set_postfix_str(f"{job.student}: {status}", refresh=False)
        pbar.update(1)

    workers: list[_Worker] = []
    ctx = multiprocessing.get_context("fork")
    spec: _WorkerSpec | None = None

    def replace(index: int) -> None:
        nonlocal gb
        workers[index].kill()
        gb.close()  # no open database connection may be inherited by a worker
        workers[index] = _Worker(ctx, spec, index)
        gb = course.gradebook()

    try:
        for job in jobs:
            reason = _precheck(job, notebooks)
            if reason is None:
                queue.append(job)
            else:
                finish(job, {"status": "ungradable", "reason": reason})
        if not queue:
            return outcomes
        n_workers = min(options.jobs, len(queue))
        threads = max(1, (os.cpu_count() or 1) // n_workers)
        spec = _WorkerSpec(
            assignment=assignment,
            notebooks=notebooks,
            config=course.config,
            template_db=str(template),
            course_id=course.course_id,
            source_assignment_dir=str(course.source_dir / assignment),
            scratch=str(scratch),
            limits=options.limits,
            launcher=options.launcher,
            cell_timeout=timeout,
            threads=threads,
            log_path=str(scratch / "workers.log"),
            references=references,
        )
        if client is not None:
            from .cluster import grade_on_cluster

            grade_on_cluster(client, spec, list(queue), finish)
            return outcomes
        gb.close()  # no open database connection may be inherited by a worker
        workers = [_Worker(ctx, spec, i) for i in range(n_workers)]
        gb = course.gradebook()
        deadline_extra = (
            None
            if options.limits.wall_seconds is None
            else options.limits.wall_seconds + _GRACE_SECONDS
        )
        while queue or any(w.job for w in workers):
            for w in workers:
                if w.job is None and queue:
                    w.send(queue.popleft())
            busy = [w for w in workers if w.job is not None]
            wait_for = None
            if deadline_extra is not None:
                now = time.monotonic()
                wait_for = max(0.0, min(w.started + deadline_extra - now for w in busy))
            ready = wait([w.conn for w in busy], timeout=wait_for)
            for w in busy:
                index = workers.index(w)
                if w.conn in ready:
                    try:
                        kind, _student, payload = w.conn.recv()
                    except (EOFError, OSError):
                        job = w.job
                        w.process.join(1)
                        code = w.process.exitcode
                        replace(index)
                        finish(job, worker_died(code))
                        continue
                    if kind == "kernel":
                        w.kernels.append(payload)
                    elif kind == "done":
                        job, w.job = w.job, None
                        finish(job, payload)
                elif (
                    deadline_extra is not None
                    and time.monotonic() > w.started + deadline_extra
                ):
                    job = w.job
                    replace(index)
                    finish(job, worker_timed_out(options.limits))
        return outcomes
    except BaseException:
        for w in workers:
            w.kill()
        raise
    finally:
        for w in workers:
            if w.process.is_alive():
                w.stop()
        gb.close()
        pbar.close()
        log = scratch / "workers.log"
        if log.exists() and log.stat().st_size:
            shutil.copyfile(log, log_dir / "workers.log")


def _recorded_repairs(
    course: Course, assignment: str, student: str, notebooks: tuple[str, ...]
) -> list[str]:
    """The repairs noted in a submission's autograded notebooks (see
    :func:`course_lib.grading.repair.notes_cell`)."""
    from .repair import notes_from_notebook

    folder = course.autograded_dir / student / assignment
    out = []
    for nb in notebooks:
        for text in notes_from_notebook(folder / f"{nb}.ipynb"):
            out.append(f"{nb}.ipynb: {text}" if len(notebooks) > 1 else text)
    return out


def _references(course: Course, gb, assignment: str, notebooks: tuple[str, ...]):
    """What the course knows of each notebook's cells: the gradebook, in the order
    (and with the texts) of the released notebook, else of the source notebook."""
    from .repair import Reference

    refs = []
    for nb in notebooks:
        release = None
        for folder in (course.release_dir, course.source_dir):
            path = folder / assignment / f"{nb}.ipynb"
            if path.is_file():
                release = path
                break
        refs.append(Reference.from_gradebook(gb, assignment, nb, release))
    return tuple(refs)


def summary_lines(summary: AutogradeSummary, limits_text: str) -> list[str]:
    """The table ``course autograde`` prints after a run."""
    lines = [
        f"{summary.assignment}: {len(summary.outcomes)} submissions, "
        f"{summary.count('graded')} graded, {summary.count('ungradable')} "
        f"ungradable, {summary.count('unchanged')} unchanged since the last run "
        f"({summary.wall_seconds:.1f} s; limits per submission: {limits_text})"
    ]
    width = max([7, *(len(o.student) for o in summary.outcomes)])
    lines.append(f"  {'student':<{width}}  {'score':>11}  {'status':<10}  reason")
    for o in summary.outcomes:
        lines.append(
            f"  {o.student:<{width}}  {o.score:>5g} / {o.max_score:<3g}  "
            f"{o.status:<10}  {o.reason}"
        )
        lines += [f"  {'':<{width}}  {'':>11}  repaired:   {r}" for r in o.repairs]
    return lines


def limits_text(limits: KernelLimits) -> str:
    wall = "none" if limits.wall_seconds is None else f"{limits.wall_seconds:g} s"
    return f"memory {format_bytes(limits.memory)}, wall time {wall}"
