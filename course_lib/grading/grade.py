"""Grading one submission: the function that every backend runs.

:func:`grade_submission` grades one submission in a private course folder (a copy of
the assignment's template gradebook, the submission, an output folder) with nbgrader's
own ``Autograde`` converter, its kernel started under the run's limits and launcher
(:mod:`course_lib.grading.kernels`). It never raises for a submission: whatever goes
wrong is a result with ``status`` "ungradable" and a reason in plain words.

The local worker processes (:mod:`course_lib.grading.pool`) and the Dask task
(:mod:`course_lib.grading.cluster`) both call it; neither knows the other, nor the
orchestrator (:mod:`course_lib.grading.autograde`) that merges what they return.

May import: the course and gradebook modules, :mod:`course_lib.grading.kernels`,
:mod:`course_lib.grading.notebooks`.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .course import sqlite_url
from .gradebook import read_submission
from .kernels.start import (
    KernelContext,
    KernelLauncher,
    KernelLimits,
    kernel_context,
    kill_process_group,
)

__all__ = [
    "GRACE_SECONDS",
    "Job",
    "WorkerSpec",
    "cell_time_limit",
    "grade_submission",
    "time_limit_reason",
    "time_out_seconds",
    "worker_died",
    "worker_environment",
    "worker_timed_out",
]

# Seconds a backend waits beyond the wall-time limit before it gives up on a grading
# that has not reported back (the grading's own timer should have ended the kernel).
GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class Job:
    """One submission to grade."""

    student: str
    submission: str  # submitted/<student>/<assignment>
    extension_seconds: float | None = None  # the student's extension of the due date


@dataclass(frozen=True)
class WorkerSpec:
    """What every grading of a run shares: the assignment, the course's settings
    and local paths, the limits and launcher of each kernel."""

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


def _first_line(text: str, limit: int = 300) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def time_limit_reason(
    limit: int | float | None, grade_id: str, detail: str = ""
) -> str:
    """What a test cell cut off by the per-cell time limit records: never "wrong";
    ``detail``: which function did not return.

    >>> time_limit_reason(60, "alibi_bias__hidden")
    'ungradable: time limit (60 s per cell, cell `alibi_bias__hidden`)'
    >>> time_limit_reason(10, "f__public", "`f` did not return")
    'ungradable: time limit (10 s per cell, cell `f__public`): `f` did not return'
    """
    size = f"{limit:g} s per cell" if limit else "the per-cell limit"
    return f"ungradable: time limit ({size}, cell `{grade_id}`)" + (
        f": {detail}" if detail else ""
    )


_CELL_LIMIT = re.compile(r"^ungradable: time limit \((\d+(?:\.\d+)?) s per cell")
_WALL_LIMIT = re.compile(r"exceeded the time limit of (\d+(?:\.\d+)?) s per submission")


def time_out_seconds(reason: str, failures: dict[str, str]) -> float:
    """Seconds a submission's time-outs cost the run, from what its grading recorded
    (:func:`time_limit_reason`, :meth:`KernelLimits.wall_text`): a cell cut off by
    the per-cell limit waited that limit (a cell not run again waited nothing); a
    submission stopped at its wall time, all of it.

    >>> time_out_seconds("", {"f__public": time_limit_reason(10, "f__public")})
    10.0
    >>> time_out_seconds("exceeded the time limit of 150 s per submission", {})
    150.0
    """
    wall = _WALL_LIMIT.search(reason or "")
    if wall:
        return float(wall[1])
    cells = (_CELL_LIMIT.match(text) for text in (failures or {}).values())
    return float(sum(float(m[1]) for m in cells if m))


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


def _cell_failures(nb, limit: int | None = None) -> dict[str, str]:
    """grade id -> first line of the error of every graded cell of the notebook
    ``nb`` that raised; a cell cut off by the time limit says so
    (:func:`time_limit_reason`), and so does one not run because a function it
    checks had already hung."""
    from .notebooks.integrity import HUNG_BEFORE

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
            said = str(errors[names.index("CellTimeoutError")].get("evalue", ""))
            detail = said if said.endswith("did not return") else ""
            message = time_limit_reason(limit, meta.get("grade_id", "?"), detail)
        elif HUNG_BEFORE in names:
            said = errors[names.index(HUNG_BEFORE)].get("evalue", "")
            message = f"ungradable: time limit: {said}"
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
    text = (result.get("log") or "") + "\n" + (result.get("error") or "")
    for pattern, reason in _NBGRADER_ERRORS:
        found = re.search(pattern, text)
        if found:
            return reason.format(*found.groups())
    return (
        "nbgrader stopped on this notebook without saying why in words; the "
        f"grading log reports/{assignment}/logs/{student}.log has the details"
    )


def _prepare_private_course(spec: WorkerSpec, job: Job) -> Path:
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


def _private_config(spec: WorkerSpec, private: Path):
    from .notebooks.integrity import autograde_preprocessors

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
    spec: WorkerSpec, job: Job, on_kernel: Callable[[int], None] | None = None
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
    wall time and :data:`GRACE_SECONDS` more, and was stopped."""
    return {
        "status": "ungradable",
        "reason": (
            f"exceeded the time limit of {limits.wall_text()} "
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
    spec: WorkerSpec, job: Job, on_kernel: Callable[[int], None] | None
) -> dict[str, Any]:
    private = _prepare_private_course(spec, job)
    repairs = _repair(spec, job, private)
    if isinstance(repairs, str):
        return {"private": str(private), "status": "ungradable", "reason": repairs}
    config = _private_config(spec, private)
    result, context = _autograde_one(spec, job, config, on_kernel)
    log_text = (result.get("log") or "") + (result.get("error") or "")
    out: dict[str, Any] = {"private": str(private), "log": log_text}
    out["repairs"] = repairs
    if context.killed:
        out.update(
            status="ungradable",
            reason=f"exceeded the time limit of {spec.limits.wall_text()}",
        )
    elif not result.get("success"):
        reason = _failure_reason(spec, job, result, log_text, context)
        out.update(status="ungradable", reason=reason)
    else:
        out.update(_graded(spec, job, private, config))
    return out


def _autograde_one(spec: WorkerSpec, job: Job, config, on_kernel):
    """nbgrader's autograde of the one submission in the private course, its kernel
    started under the run's limits and killed when the wall time is up; nbgrader's
    result and the kernel context."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

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
    return result, context


def _failure_reason(spec, job, result, log_text: str, context) -> str:
    """Why nbgrader could not grade the submission, in plain words."""
    if "DeadKernelError" in log_text or "Kernel died" in log_text:
        at_start = "before replying to kernel_info" in log_text  # nbclient's
        return _describe_death(context.exit_codes(), at_start)
    if "CellTimeoutError" in log_text or "UnresponsiveKernelError" in log_text:
        limit = f"{spec.cell_timeout} s per cell" if spec.cell_timeout else "per cell"
        return (
            f"ungradable: time limit ({limit}): a cell ran past it and the "
            "kernel could not be interrupted"
        )
    return _nbgrader_error(result, job.student, spec.assignment)


def _graded(spec: WorkerSpec, job: Job, private: Path, config) -> dict[str, Any]:
    """A graded submission: its grades from the private gradebook, each failed
    test cell's first line and judgement, the folder of its graded notebooks."""
    import nbformat
    from nbgrader.api import Gradebook

    from .notebooks.integrity import judgements

    graded = private / "autograded" / job.student / spec.assignment
    failures: dict[str, str] = {}
    judged: list[dict[str, str]] = []
    for name in spec.notebooks:
        path = graded / f"{name}.ipynb"
        if not path.exists():
            continue
        nb = nbformat.read(str(path), as_version=4)
        lost = _cell_failures(nb, spec.cell_timeout)
        failures.update(lost)
        # why each cell that lost its points failed (VerifiedExecute's judgements)
        judged += [
            {"notebook": name, **j.to_json()}
            for j in judgements(nb)
            if j.grade_id in lost
        ]
    with Gradebook(config.CourseDirectory.db_url, spec.course_id) as gb:
        grades = read_submission(gb, spec.assignment, job.student)
    # graded: now the outputs the student's code made are reduced to inert types
    # before any browser (feedback, formgrader) shows them
    for path in sorted(graded.glob("*.ipynb")):
        _make_safe(path)
    # A test cell cut off by the time limit is not judged (it scores 0 in nbgrader's
    # gradebook, which knows no other state), and the submission says so in its
    # reason; its other cells keep their scores (the kernel was interrupted and went
    # on): a slow cell does not zero the rest.
    timed_out = [msg for msg in failures.values() if msg.startswith("ungradable: time")]
    return dict(
        status="graded",
        grades=grades,
        failures=failures,
        judgements=judged,
        autograded=str(graded),
        reason="; ".join(timed_out),
    )


def _make_safe(path: Path) -> None:
    """The autograded notebook at ``path`` with inert outputs only
    (:func:`course_lib.grading.notebooks.safe.safe_outputs`)."""
    import nbformat

    from .notebooks.safe import safe_outputs

    nb = nbformat.read(str(path), as_version=4)
    if safe_outputs(nb):
        nbformat.write(nb, str(path))


def _repair(spec: WorkerSpec, job: Job, private: Path) -> list[str] | str:
    """Repair the private copy of each submitted notebook (the student's file is
    never touched); the repairs in plain words (routine clean-up left out), or the
    reason the submission cannot be graded."""
    from .notebooks.repair import Ungradable, repair_file

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
