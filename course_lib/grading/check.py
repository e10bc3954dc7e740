"""``course check``: run a student's notebook and report each exercise's public check.

The notebook runs top to bottom in a fresh kernel, from a temporary copy (the
student's file is never modified), with the notebook's folder as working directory
and the same memory limit as grading. Every cell whose nbgrader ``grade_id`` ends in
``__public`` is one exercise: it passes when it ran without an error, and the report
shows the grader's message either way. No course folder or gradebook is needed.

Before it runs, the copy goes through the repairs grading makes
(:mod:`course_lib.grading.notebooks.repair`, judged by the notebook's own grading
metadata): a test cell pasted twice, a test cell dragged above its answer, a cell whose
grading metadata changed. The report names each such accident and how to fix it, so that
the student can fix it before submitting, and the checks run as grading would run them.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CourseError
from .kernels.start import (
    GradingKernelManager,
    KernelContext,
    KernelLimits,
    kernel_context,
    kill_process_group,
)

__all__ = ["CheckReport", "ExerciseResult", "check_notebook", "format_report"]

PUBLIC_SUFFIX = "__public"
ANSWER_SUFFIX = "__answer"


@dataclass
class ExerciseResult:
    """One public check: the function it checks, whether it passed, the message."""

    name: str
    passed: bool
    message: str
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    """Every exercise of a notebook, plus problems outside the exercises."""

    notebook: str
    exercises: list[ExerciseResult]
    problems: list[str] = field(default_factory=list)
    # accidents in the notebook (pasted, moved or changed cells), with the fix
    accidents: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(e.passed for e in self.exercises) and bool(self.exercises)


def _grade_id(cell) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") or ""


def _error(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = str(output.get("evalue", "")).strip()
            name = output.get("ename", "Error")
            return f"{name}: {value}" if value else name
    return None


def _stdout(cell) -> str:
    text = "".join(
        "".join(o.get("text", ""))
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )
    return text.strip()


class _CheckKernelManager(GradingKernelManager):
    """:class:`GradingKernelManager` for ``course check``: after the kernel is killed
    it looks for the process's end every 10 ms, not every 100 ms (jupyter_client's
    default), so the report is not held back by a poll interval."""

    async def _async_wait(self, pollinterval: float = 0.01) -> None:
        await super()._async_wait(pollinterval=min(pollinterval, 0.01))


def _kernel_name(metadata) -> str:
    """The kernel a notebook's metadata names (``python3`` when none)."""
    spec = metadata.get("kernelspec") if isinstance(metadata, dict) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else "python3"


def _peek_kernel_name(path: Path) -> str | None:
    """The kernel the notebook at ``path`` names, from a plain JSON read (no nbformat,
    which takes longer to import than the kernel takes to launch); ``None`` when the
    file is no JSON object (then no kernel is started before the file is read)."""
    try:
        raw = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    return _kernel_name(raw.get("metadata"))


def _start_kernel(kernel: str, cwd: Path) -> _CheckKernelManager:
    """Launch the kernel as nbclient would (same command, working directory and
    history file), under the current :func:`kernel_context`; return its manager.
    The kernel boots while the notebook is read and repaired."""
    from jupyter_core.utils import run_sync

    km = _CheckKernelManager(kernel_name=kernel)
    # an unknown kernel raises here (NoSuchKernel), before start_kernel would log it
    km.kernel_spec  # noqa: B018
    # nbclient's NotebookClient.async_start_new_kernel: its ipython_hist_file default
    extra = ["--HistoryManager.hist_file=:memory:"] if km.ipykernel else []
    # the kernel's own log lines (stderr) are not the student's concern
    run_sync(km.start_kernel)(
        extra_arguments=extra, cwd=str(cwd), stderr=subprocess.DEVNULL
    )
    return km


def _discard_kernel(km: _CheckKernelManager) -> None:
    """Shut down a kernel started early that is not used (its process group is
    killed with the context's anyway)."""
    from jupyter_core.utils import run_sync

    with contextlib.suppress(Exception):
        run_sync(km.shutdown_kernel)(now=True)


def cell_limit(notebook: Path) -> int:
    """Seconds each cell of ``notebook`` may run by default: twice the course's
    per-cell limit for the assignment it is named after, plus 10 s (inside the
    kernel each checked function gets the limit itself, and says it did not return;
    this only stops a loop outside any function), else 120."""
    from .._time_limits import CELL_TIME_LIMIT

    limit = CELL_TIME_LIMIT.get(notebook.stem)
    return 2 * limit + 10 if limit else 120


def check_notebook(
    path: str | Path,
    *,
    cell_timeout: int | None = None,
    limits: KernelLimits | None = None,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Run the notebook at ``path`` and return one result per public check;
    ``cell_timeout``: seconds per cell (default :func:`cell_limit`); ``progress`` is
    told a line as each public check starts.

    The kernel is launched first, from a quick look at the file for its kernel name:
    it boots while this process imports nbformat and nbclient and reads and repairs
    the notebook. Nothing runs in it before nbclient runs the repaired copy."""
    path = Path(path).resolve()
    if not path.is_file():
        raise CourseError(f"{path} does not exist")
    if cell_timeout is None:
        cell_timeout = cell_limit(path)
    limits = limits or KernelLimits(wall_seconds=None)
    context = KernelContext(limits=limits)
    timer = None

    def start_timer() -> None:
        nonlocal timer
        if limits.wall_seconds is not None and timer is None:
            timer = threading.Timer(limits.wall_seconds, context.kill)
            timer.daemon = True
            timer.start()

    km = None  # the kernel started early, until nbclient takes it over
    with kernel_context(context):
        try:
            early = _peek_kernel_name(path)
            if early is not None:
                try:
                    km = _start_kernel(early, path.parent)
                except Exception:  # noqa: BLE001 - nbclient tries again, reports it
                    for pid in list(context.pids):
                        kill_process_group(pid)
                else:
                    start_timer()
            nb, accidents, origins = _read_and_repair(path)
            kernel = nb.metadata.get("kernelspec", {}).get("name") or "python3"
            if km is not None and km.kernel_name != kernel:  # the quick look erred
                _discard_kernel(km)
                km = None
            client = _client(nb, path, kernel, cell_timeout, km, progress)
            km = None  # nbclient shuts it down, as it would its own
            start_timer()
            problems = _execute(client, context, limits)
        finally:
            if timer is not None:
                timer.cancel()
            if km is not None:  # an error before the run (no public checks, ...)
                _discard_kernel(km)
            context.kill()
    report = _report(path, nb, problems, origins)
    report.accidents = accidents
    return report


def _read_and_repair(path: Path):
    """The repaired copy of the notebook (the student's file is never modified), the
    accidents repaired, and each cell's number in the student's file."""
    from .notebooks.repair import Reference, Ungradable, read_notebook, repair_notebook

    try:
        nb, _ = read_notebook(path, path.name)
    except Ungradable as exc:
        raise CourseError(str(exc)) from None
    repaired = repair_notebook(nb, Reference.from_own_metadata(nb, path.stem))
    accidents = [n.advice or n.text for n in repaired.notes if not n.routine]
    nb = repaired.notebook
    publics = [
        c
        for c in nb.cells
        if c.cell_type == "code" and _grade_id(c).endswith(PUBLIC_SUFFIX)
    ]
    if not publics:
        raise CourseError(
            f"{path.name} has no public checks (cells whose nbgrader grade_id ends "
            f"in {PUBLIC_SUFFIX!r})"
        )
    return nb, accidents, repaired.origins


def _client(nb, path: Path, kernel: str, cell_timeout: int, km, progress=None):
    from nbclient import NotebookClient

    def started(cell, cell_index):
        gid = _grade_id(cell)
        if progress is not None and gid.endswith(PUBLIC_SUFFIX):
            progress(f"checking {gid[: -len(PUBLIC_SUFFIX)]} ...")

    client = NotebookClient(
        nb,
        km=km,
        timeout=cell_timeout,
        kernel_name=kernel,
        allow_errors=True,
        interrupt_on_timeout=True,
        shutdown_kernel="immediate",
        kernel_manager_class=_CheckKernelManager,
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_execute=started,
    )
    # a kernel started early is shut down at the end like one nbclient started
    client.owns_km = True
    return client


def _execute(client, context: KernelContext, limits: KernelLimits) -> list[str]:
    """Run every cell of the client's notebook; what went wrong outside the cells."""
    from nbclient.exceptions import DeadKernelError

    problems: list[str] = []
    try:
        # the kernel's own log lines (stderr) are not the student's concern
        client.execute(stderr=subprocess.DEVNULL)
    except DeadKernelError:
        if context.killed:
            problems.append(
                f"the notebook exceeded {limits.wall_seconds:g} s and was stopped"
            )
        else:
            problems.append(
                "the kernel died while the notebook ran (did a cell call "
                "exit() or run out of memory?); later cells did not run"
            )
    except Exception as exc:  # noqa: BLE001 - e.g. a kernel that never started
        problems.append(f"the notebook could not run: {type(exc).__name__}: {exc}")
    return problems


def _report(
    path: Path, nb, problems: list[str], origins: list[int | None] | None = None
) -> CheckReport:
    answers = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        gid = _grade_id(cell)
        err = _error(cell)
        if gid.endswith(ANSWER_SUFFIX):
            answers[gid[: -len(ANSWER_SUFFIX)]] = err
        elif err and not gid.endswith(PUBLIC_SUFFIX) and not gid.endswith("__hidden"):
            number = origins[index] if origins else index + 1
            where = f"cell {number}" if number else "a restored cell"
            problems.append(f"{where} ({gid or 'no id'}) raised {err}")
    exercises = []
    for cell in nb.cells:
        gid = _grade_id(cell)
        if cell.cell_type != "code" or not gid.endswith(PUBLIC_SUFFIX):
            continue
        name = gid[: -len(PUBLIC_SUFFIX)]
        err = _error(cell)
        ran = cell.get("execution_count") is not None or bool(cell.get("outputs"))
        notes = []
        if answers.get(name):
            notes.append(f"your answer cell raised {answers[name]}")
        if err:
            exercises.append(ExerciseResult(name, False, err, notes))
        elif not ran:
            exercises.append(ExerciseResult(name, False, "not run", notes))
        else:
            exercises.append(
                ExerciseResult(name, True, _stdout(cell) or "passed", notes)
            )
    return CheckReport(path.name, exercises, problems)


def format_report(report: CheckReport) -> str:
    """The text ``course check`` prints."""
    width = max(len(e.name) for e in report.exercises)
    lines = [f"{report.notebook}: {len(report.exercises)} exercises"]
    if report.accidents:
        lines.append(
            "  accidents (grading repairs them, but fix them before you submit):"
        )
        lines += [f"  - {accident}" for accident in report.accidents]
    for e in report.exercises:
        mark = "PASS" if e.passed else "FAIL"
        first, *rest = e.message.splitlines() or [""]
        lines.append(f"  {mark}  {e.name:<{width}}  {first}")
        lines += [f"        {' ' * width}  {line}" for line in rest]
        lines += [f"        {' ' * width}  ({note})" for note in e.notes]
    for problem in report.problems:
        lines.append(f"  note: {problem}")
    passed = sum(e.passed for e in report.exercises)
    lines.append(
        f"{passed} of {len(report.exercises)} exercises pass their public checks."
        + (" Hidden tests run when your work is graded." if report.ok else "")
    )
    return "\n".join(lines)
