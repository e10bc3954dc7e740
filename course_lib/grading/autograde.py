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

Each submission's kernel starts through :mod:`course_lib.grading.kernels` (memory and
CPU limits, the sandbox), a timer kills it when the submission exceeds its wall time,
and the parent kills a worker that does not answer in time.
Whatever goes wrong (invalid JSON, a dead kernel, a timeout, a crash of nbgrader
itself), the submission is recorded with a score of zero and the reason, and the run
goes on. A second run skips submissions whose files, assignment and graders did not
change since they were graded (``force=True`` regrades everything).

This module is the orchestrator: it decides what to grade (:func:`_plan`), hands the
submissions to a backend, local worker processes (:mod:`course_lib.grading.pool`) or a
Dask cluster (:mod:`course_lib.grading.cluster`), both running
:func:`course_lib.grading.grade.grade_submission`, and merges each result into the
course (:class:`_Merger`). The backends never import it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .course import Course, sqlite_url
from .errors import CourseError
from .grade import Job, WorkerSpec, cell_time_limit, time_out_seconds
from .gradebook import (
    StatusRow,
    assignment_fingerprint_parts,
    copy_assignment,
    late_policy_parts,
    merge_submission,
    read_status,
    record_ungradable,
    submission_scores,
    write_judgements,
    write_status,
)
from .kernels.guard import owned_tempdir
from .kernels.start import KernelLauncher, KernelLimits, RlimitLauncher, format_bytes
from .late import apply_penalties

__all__ = ["AutogradeOptions", "AutogradeSummary", "Outcome", "autograde"]


@dataclass
class AutogradeOptions:
    """How to autograde.

    ``jobs``: worker processes. ``limits``/``launcher``: how each kernel runs.
    ``cell_timeout``: per-cell timeout in seconds (default: the assignment's entry of
    ``c.CourseTimeLimits.per_cell`` in nbgrader_config.py, see :func:`cell_time_limit`).
    ``force``: regrade submissions already graded. ``students``: only these.
    ``progress``: show a progress bar on stderr. ``cluster``: the address of a Dask
    scheduler (``tcp://host:8786``): grade there instead of in ``jobs`` local worker
    processes (:mod:`course_lib.grading.cluster`). ``wall_from_cells``: the wall
    time per submission follows from the per-cell limit (:func:`derived_limits`),
    instead of ``limits.wall_seconds``.
    """

    jobs: int = 1
    limits: KernelLimits = field(default_factory=KernelLimits)
    launcher: KernelLauncher = field(default_factory=RlimitLauncher)
    cell_timeout: int | None = None
    force: bool = False
    students: list[str] | None = None
    progress: bool = True
    cluster: str | None = None
    wall_from_cells: bool = False


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
    # accidents repaired before grading (course_lib.grading.notebooks.repair), in
    # plain words
    repairs: list[str] = field(default_factory=list)


@dataclass
class AutogradeSummary:
    """Every submission's :class:`Outcome`, and the run's wall time."""

    assignment: str
    outcomes: list[Outcome]
    wall_seconds: float
    limits: KernelLimits = field(default_factory=KernelLimits)  # as graded

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


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


def _precheck(job: Job, notebooks: tuple[str, ...]) -> str | None:
    """Why the submission cannot be graded at all (missing notebook, or a file that
    is not a notebook), in plain words, or ``None``. What can be repaired is
    repaired later (:mod:`course_lib.grading.notebooks.repair`)."""
    from .notebooks.repair import Ungradable, read_notebook

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
# the plan: what to grade


@dataclass
class _Plan:
    """What a run grades, decided before anything is graded."""

    assignment: str
    notebooks: tuple[str, ...]
    submissions: dict[str, Path]
    timeout: int | None  # per cell, seconds
    limits: KernelLimits  # per submission
    jobs: list[Job] = field(default_factory=list)  # to grade
    rejected: list[tuple[Job, str]] = field(default_factory=list)  # and why
    unchanged: list[Outcome] = field(default_factory=list)
    fingerprints: dict[str, str] = field(default_factory=dict)


def _known_assignment(course: Course, gb, assignment: str) -> str:
    """``assignment`` as the gradebook names it, or why it cannot be graded."""
    from nbgrader.api import MissingEntry

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
    return assignment


def _chosen_submissions(
    course: Course, assignment: str, students: list[str] | None
) -> dict[str, Path]:
    submissions = course.submissions(assignment)
    if students is None:
        return submissions
    unknown = sorted(set(students) - set(submissions))
    if unknown:
        raise CourseError(f"no submission of {assignment} for: {', '.join(unknown)}")
    return {s: p for s, p in submissions.items() if s in students}


def _run_fingerprint(
    course: Course, gb, assignment: str, plan: _Plan, launcher: KernelLauncher
) -> str:
    """What every grade of this run depends on besides the submission: the
    assignment's cells, its late policy (a new due date or penalty changes
    nbgrader's late penalty), the graders' code, the limits and the launcher."""
    parts = assignment_fingerprint_parts(gb, assignment)
    parts += late_policy_parts(gb, assignment, course.config)
    parts += [
        _grader_digest(assignment),
        repr(plan.limits),
        repr(plan.timeout),
        type(launcher).__qualname__,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# Seconds a submission gets beyond its cells' limits: starting the kernel, nbgrader's
# own steps and saving the graded notebook.
START_SECONDS = 60


def derived_limits(
    course: Course,
    assignment: str,
    notebooks: tuple[str, ...],
    cell_limit: int | None,
    limits: KernelLimits,
) -> KernelLimits:
    """``limits`` with the wall time that follows from the per-cell limit: every code
    cell of the released notebooks may run ``cell_limit`` seconds, plus
    :data:`START_SECONDS` (cells a student added are not counted: they may use
    what the others leave)."""
    import dataclasses

    import nbformat

    if not cell_limit:
        return limits
    cells = 0
    for nb in notebooks:
        for folder in (course.release_dir, course.source_dir):
            path = folder / assignment / f"{nb}.ipynb"
            if path.is_file():
                notebook = nbformat.read(str(path), as_version=4)
                cells += sum(c.cell_type == "code" for c in notebook.cells)
                break
    return dataclasses.replace(
        limits,
        wall_seconds=float(cell_limit * cells + START_SECONDS),
        wall_basis=f"{cell_limit:g} s per cell x {cells} code cells + "
        f"{START_SECONDS} s to start and save",
    )


def _plan(course: Course, gb, assignment: str, options: AutogradeOptions) -> _Plan:
    """Which submissions to grade, which cannot be graded at all (and why), and the
    outcome of those unchanged since they were last graded (their files, the
    assignment and the graders alike)."""
    assignment = _known_assignment(course, gb, assignment)
    from .editions.term import read_term, released_term_problem

    problem = released_term_problem(gb, assignment, read_term(course))
    if problem:
        raise CourseError(problem)
    notebooks = tuple(nb.name for nb in gb.find_assignment(assignment).notebooks)
    timeout = options.cell_timeout or cell_time_limit(course.config, assignment)
    limits = options.limits
    if options.wall_from_cells:
        limits = derived_limits(course, assignment, notebooks, timeout, limits)
    plan = _Plan(
        assignment,
        notebooks,
        _chosen_submissions(course, assignment, options.students),
        timeout,
        limits,
    )
    base = _run_fingerprint(course, gb, assignment, plan, options.launcher)
    status = read_status(gb, assignment)
    submitted = list(gb.assignment_submissions(assignment))
    have_submission = {s.student.id for s in submitted}
    extensions = {  # nbgrader's late penalty counts from the extended due date
        s.student.id: s.extension.total_seconds()
        for s in submitted
        if s.extension is not None
    }
    for student, path in plan.submissions.items():
        fp = hashlib.sha256((base + _hash_tree(path)).encode()).hexdigest()
        plan.fingerprints[student] = fp
        row = status.get(student)
        if (
            not options.force
            and row is not None
            and row.fingerprint == fp
            and student in have_submission
        ):
            plan.unchanged.append(_unchanged(course, plan, row))
            continue
        job = Job(student, str(path), extensions.get(student))
        reason = _precheck(job, notebooks)
        if reason is None:
            plan.jobs.append(job)
        else:
            plan.rejected.append((job, reason))
    return plan


def _unchanged(course: Course, plan: _Plan, row: StatusRow) -> Outcome:
    return Outcome(
        row.student,
        "unchanged",
        row.score,
        row.max_score,
        row.reason,
        row.wall_seconds,
        row.failures,
        _recorded_repairs(course, plan.assignment, row.student, plan.notebooks),
    )


# --------------------------------------------------------------------------------------
# the run


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
    scratch = owned_tempdir("course-autograde-")
    try:
        with course.gradebook(create=False, assignment=assignment) as gb:
            plan = _plan(course, gb, assignment, options)
            if plan.jobs and client is None:
                _warm_up(options.launcher, plan.assignment, scratch)
            spec = _spec(course, gb, plan, options, scratch) if plan.jobs else None
        log_dir = course.root / "reports" / plan.assignment / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        graded = _run(course, plan, spec, options, log_dir, client)
    finally:
        options.launcher.cool_down()
        shutil.rmtree(scratch, ignore_errors=True)
    outcomes = sorted(plan.unchanged + graded, key=lambda o: o.student)
    missing = set(plan.submissions) - {o.student for o in outcomes}
    if missing:  # cannot happen; a lost submission must never pass silently
        raise RuntimeError(f"autograde lost submissions: {sorted(missing)}")
    return AutogradeSummary(
        plan.assignment, outcomes, time.perf_counter() - t_start, plan.limits
    )


def _warm_up(launcher: KernelLauncher, assignment: str, scratch: Path) -> None:
    """Start what the launcher keeps warm (the sandbox's template: its imports
    overlap what follows), and import the trusted graders here, once: every worker
    checks the test cells' grader calls against them (integrity.py), and the workers
    forked later inherit them with torch."""
    launcher.warm_up(assignment, str(scratch / "workers.log"))
    from .notebooks.integrity import pristine_graders

    pristine_graders()


def _spec(
    course: Course, gb, plan: _Plan, options: AutogradeOptions, scratch: Path
) -> WorkerSpec:
    """What every grading of the run shares; writes the template gradebook (the
    assignment's definition) that each grading copies."""
    from nbgrader.api import Gradebook

    template = scratch / "template.db"
    with Gradebook(sqlite_url(template), course.course_id) as tgb:
        copy_assignment(gb, tgb, plan.assignment)
    n_workers = min(options.jobs, len(plan.jobs))
    return WorkerSpec(
        assignment=plan.assignment,
        notebooks=plan.notebooks,
        config=course.config,
        template_db=str(template),
        course_id=course.course_id,
        source_assignment_dir=str(course.source_dir / plan.assignment),
        scratch=str(scratch),
        limits=plan.limits,
        launcher=options.launcher,
        cell_timeout=plan.timeout,
        threads=max(1, (os.cpu_count() or 1) // n_workers),
        log_path=str(scratch / "workers.log"),
        references=_references(course, gb, plan.assignment, plan.notebooks),
    )


def _run(
    course: Course,
    plan: _Plan,
    spec: WorkerSpec | None,
    options: AutogradeOptions,
    log_dir: Path,
    client: Any,
) -> list[Outcome]:
    """Record the plan's rejected submissions, grade its jobs on the chosen backend;
    the outcome of each."""
    total = len(plan.jobs) + len(plan.rejected)
    pbar = _tqdm(total, plan.assignment, options.progress and bool(total))
    merger = _Merger(course, plan, log_dir, pbar)
    try:
        for job, reason in plan.rejected:
            merger(job, {"status": "ungradable", "reason": reason})
        if spec is None:
            return merger.outcomes
        if client is not None:
            from .cluster import grade_on_cluster

            grade_on_cluster(client, spec, plan.jobs, merger)
        else:
            from .pool import grade_locally

            n_workers = min(options.jobs, len(plan.jobs))
            grade_locally(spec, plan.jobs, merger, n_workers, merger.forking)
        return merger.outcomes
    finally:
        merger.close()
        log = Path(spec.log_path) if spec is not None else None
        if log is not None and log.exists() and log.stat().st_size:
            shutil.copyfile(log, log_dir / "workers.log")


class _Merger:
    """Merges each result into the course as it arrives; this process alone writes
    to the gradebook: the scores, the autograded notebooks, the log and the status
    row of the submission, one submission at a time."""

    def __init__(self, course: Course, plan: _Plan, log_dir: Path, pbar) -> None:
        self.course, self.plan, self.log_dir, self.pbar = course, plan, log_dir, pbar
        self.gb = course.gradebook()
        self.outcomes: list[Outcome] = []

    @contextlib.contextmanager
    def forking(self):
        """No open database connection may be inherited by a forked worker."""
        self.gb.close()
        try:
            yield
        finally:
            self.gb = self.course.gradebook()

    def close(self) -> None:
        self.gb.close()
        self.pbar.close()

    def __call__(self, job: Job, out: dict[str, Any]) -> None:
        status = out.get("status", "ungradable")
        if out.get("log"):
            (self.log_dir / f"{job.student}.log").write_text(out["log"])
        self._store(job, status, out)
        write_judgements(
            self.gb,
            self.plan.assignment,
            job.student,
            list(out.get("judgements") or []) if status == "graded" else [],
        )
        score, max_score = submission_scores(self.gb, self.plan.assignment, job.student)
        outcome = Outcome(
            job.student,
            status,
            score,
            max_score,
            out.get("reason", ""),
            float(out.get("wall_seconds", 0.0)),
            out.get("failures", {}),
            list(out.get("repairs") or []),
        )
        write_status(
            self.gb,
            StatusRow(
                assignment=self.plan.assignment,
                student=job.student,
                status=status,
                reason=outcome.reason,
                score=score,
                max_score=max_score,
                fingerprint=self.plan.fingerprints[job.student],
                wall_seconds=outcome.wall_seconds,
                failures=outcome.failures,
            ),
        )
        self.outcomes.append(outcome)
        self.pbar.set_postfix_str(f"{job.student}: {status}", refresh=False)
        self.pbar.update(1)

    def _store(self, job: Job, status: str, out: dict[str, Any]) -> None:
        """The grades into the gradebook and the graded notebooks into
        ``autograded/`` (an ungradable submission: a zero, and no notebooks)."""
        assignment = self.plan.assignment
        dest = self.course.autograded_dir / job.student / assignment
        if status == "graded":
            merge_submission(self.gb, assignment, job.student, out["grades"])
            # the penalty on the course gradebook's score, hand grades included,
            # as nbgrader autograde computes it (the private one has none)
            apply_penalties(self.gb, assignment, self.course.config, [job.student])
        else:
            stamp = _read_timestamp(Path(job.submission))
            record_ungradable(self.gb, assignment, job.student, stamp)
        if dest.exists():
            shutil.rmtree(dest)
        if status == "graded":
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(out["autograded"], dest)
        if out.get("private"):
            shutil.rmtree(out["private"], ignore_errors=True)


def _recorded_repairs(
    course: Course, assignment: str, student: str, notebooks: tuple[str, ...]
) -> list[str]:
    """The repairs noted in a submission's autograded notebooks (see
    :func:`course_lib.grading.notebooks.repair.notes_cell`)."""
    from .notebooks.repair import notes_from_notebook

    folder = course.autograded_dir / student / assignment
    out = []
    for nb in notebooks:
        for text in notes_from_notebook(folder / f"{nb}.ipynb"):
            out.append(f"{nb}.ipynb: {text}" if len(notebooks) > 1 else text)
    return out


def _references(course: Course, gb, assignment: str, notebooks: tuple[str, ...]):
    """What the course knows of each notebook's cells: the gradebook, in the order
    (and with the texts) of the released notebook, else of the source notebook."""
    from .notebooks.repair import Reference

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
    waited = {
        o.student: time_out_seconds(o.reason, o.failures)
        for o in summary.outcomes
        if o.status != "unchanged"
    }
    if any(waited.values()):
        lines.append(
            f"  time-outs cost {sum(waited.values()):g} s of grading time "
            f"({sum(v > 0 for v in waited.values())} submissions)"
        )
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
    wall = "none" if limits.wall_seconds is None else limits.wall_text()
    return f"memory {format_bytes(limits.memory)}, wall time {wall}"
