"""``course autograde --cluster``: grade on a Dask cluster, one task per submission.

A class of thousands outgrows one machine. Dask distributed runs on an ad-hoc set of
machines (``dask scheduler`` / ``dask worker``), on Slurm (dask-jobqueue) and on
Kubernetes (dask-kubernetes), behind one client API; this module is its client side
and the task its workers run.

* **One grading function.** Each task calls
  :func:`course_lib.grading.grade.grade_submission`, the function the local
  worker processes of ``--jobs`` call: same private course folder, same repairs,
  same sandbox, same limits, same reasons.
* **No shared file system.** What a run shares (the assignment's definition from the
  gradebook, hidden tests included, and the assignment's non-notebook source files)
  is scattered to the workers once; each task carries one submission's files. The
  graded notebooks and the gradebook rows come back as data, and the client alone
  merges them into the course gradebook (PostgreSQL for a class of that size;
  SQLite works too) and writes ``autograded/``. Nothing else of the course folder
  leaves the client.
* **Same code on both sides.** Every task first compares the worker's ``course_lib``
  (version and a hash of the installed package's files, :func:`library_fingerprint`)
  with the client's; a worker with other code refuses, and the run stops with a
  message that names the worker.
* **The sandbox on the workers.** When the client grades in the sandbox, each worker
  builds its own (bubblewrap, and the grading edition of ``course_lib`` written on
  the worker); a worker that cannot refuses to grade without it.
* **Faults.** A worker that dies mid-task loses its task to another worker (Dask
  reschedules it); each submission's result is merged once, when its task
  completes. A submission whose task killed several workers in turn is recorded as
  ungradable. A scheduler that cannot be reached is one line of error before
  anything is written. An interrupted client keeps what was merged; a re-run grades
  the rest (the change check skips what was graded).

A worker runs one grading at a time (the kernel set-up is per process): start
workers with ``--nthreads 1`` and as many worker processes per machine as it has
cores to spare (``--nworkers``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .editions.library import library_fingerprint
from .errors import CourseError
from .kernels.guard import owned_tempdir, sweep_leftovers

__all__ = [
    "connect",
    "disconnect",
    "grade_on_cluster",
]

# Seconds to wait for a first worker to join. How long to wait for the scheduler to
# answer is Dask's own setting, distributed.comm.timeouts.connect (30 s; in the
# environment: DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=10s).
WORKER_WAIT = 60.0
# A run with no worker left for this long stops (its results so far are kept).
NO_WORKER_PATIENCE = 120.0

_LOCK = threading.Lock()  # one grading per worker process at a time
_WORKER_STATE: dict[str, Any] = {}


# --------------------------------------------------------------------------------------
# what travels


@dataclasses.dataclass(frozen=True)
class _Shared:
    """What every task of a run shares; scattered to the workers once."""

    spec: Any  # grade.WorkerSpec, its paths emptied
    template_db: bytes  # the assignment's definition (gradebook), hidden tests too
    source_files: tuple[tuple[str, bytes], ...]  # non-notebook files of the source
    library: str  # the client's library_fingerprint()


def _source_files(folder: Path) -> tuple[tuple[str, bytes], ...]:
    """The assignment's source files that nbgrader copies next to a graded notebook
    (the notebooks, with the solutions, stay on the client)."""
    out = []
    if folder.is_dir():
        for file in sorted(folder.rglob("*")):
            rel = file.relative_to(folder)
            if (
                file.is_file()
                and file.suffix != ".ipynb"
                and not any(part.startswith(".") for part in rel.parts)
            ):
                out.append((rel.as_posix(), file.read_bytes()))
    return tuple(out)


def _pack(folder: Path) -> tuple[tuple[str, str, bytes], ...]:
    """Every file and symbolic link under ``folder``: (path, "file" or "link",
    content or link target). A link stays a link (never what it points to: that
    could be a file of the grader's)."""
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out.append((rel, "link", os.readlink(path).encode()))
        elif path.is_file():
            out.append((rel, "file", path.read_bytes()))
    return tuple(out)


def _unpack(entries, folder: Path) -> None:
    from pathlib import PurePosixPath

    folder.mkdir(parents=True, exist_ok=True)
    for rel, kind, data in entries:
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
            raise ValueError(f"a file name leads outside its folder: {rel}")
        target = folder.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "link":
            os.symlink(data.decode(), target)
        else:
            target.write_bytes(data)


# --------------------------------------------------------------------------------------
# the worker side


def _worker_launcher(launcher):
    """The launcher this worker grades with: the client's, with a grading edition
    of this worker's ``course_lib`` when it is the sandbox (written once per worker
    process); or the reason this worker cannot build the sandbox."""
    from .kernels.sandbox import (
        SandboxLauncher,
        sandbox_problem,
        with_grading_edition,
    )

    if not isinstance(launcher, SandboxLauncher):
        return launcher, None
    key = ("sandbox", launcher.settings)
    if key not in _WORKER_STATE:
        problem = sandbox_problem(launcher)
        if problem is not None:
            _WORKER_STATE[key] = (None, problem)
        else:
            _WORKER_STATE[key] = (with_grading_edition(launcher), None)
    return _WORKER_STATE[key]


def _scratch_root() -> Path:
    """This worker's working folder (its ``--local-directory``), else a temporary
    folder."""
    try:
        from distributed import get_worker

        base = Path(get_worker().local_directory)
    except (ImportError, ValueError):
        base = Path(tempfile.gettempdir())
    folder = base / "course-autograde"
    folder.mkdir(parents=True, exist_ok=True)
    if not _WORKER_STATE.get("swept"):
        # what an earlier worker here left when it was killed (its guard gone too)
        _WORKER_STATE["swept"] = True
        removed = sweep_leftovers() + sweep_leftovers(folder, ("run-",))
        if removed:
            print(
                f"course worker {_worker_name()}: removed {removed} temporary "
                "folder(s) left by grading processes that are gone",
                flush=True,
            )
    return folder


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        import socket

        return socket.gethostname()


def _threads() -> int:
    try:
        from distributed import get_worker

        nthreads = get_worker().state.nthreads
    except (ImportError, ValueError, AttributeError):
        nthreads = 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, cpus // max(1, nthreads))


def _grade_watched(spec, job) -> dict[str, Any]:
    """:func:`~course_lib.grading.grade.grade_submission` in a thread of its own,
    watched as the local parent watches its workers: when it has not answered within
    the wall time and the grace period after it, its kernels are killed, the
    submission is recorded as the local run records it, and this worker retires
    (the stuck thread cannot be stopped, and must not share the process with a next
    grading; a worker under a nanny is started afresh, see the guide)."""
    from . import grade
    from .kernels.start import kill_process_group

    kernels: list[int] = []
    result: dict[str, Any] = {}

    def run() -> None:
        result.update(grade.grade_submission(spec, job, kernels.append))

    thread = threading.Thread(target=run, name=f"grade-{job.student}", daemon=True)
    thread.start()
    limit = spec.limits.wall_seconds
    thread.join(None if limit is None else limit + grade.GRACE_SECONDS)
    if not thread.is_alive():
        return result
    for pid in kernels:
        kill_process_group(pid)
    _retire()
    return grade.worker_timed_out(spec.limits)


def _retire() -> None:
    """Close this Dask worker once the running task has reported (its scheduler
    moves the results it holds elsewhere first); nothing outside a worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    _WORKER_STATE["retired"] = True
    worker.loop.add_callback(worker.close_gracefully)


def grade_task(
    shared: _Shared,
    student: str,
    files: tuple[tuple[str, str, bytes], ...],
    extension_seconds: float | None,
) -> dict[str, Any]:
    """The Dask task: grade one submission on this worker with
    :func:`~course_lib.grading.grade.grade_submission`. Returns its result with
    the graded notebooks as data (``autograded_files``), or ``refused`` (why this
    worker does not grade at all)."""
    from .grade import Job, worker_environment

    mine = library_fingerprint()
    if mine != shared.library:
        return {
            "refused": (
                f"the worker {_worker_name()} has {mine}, the client {shared.library}; "
                "install the same course_lib on every worker (pip install of the "
                "same version or commit) and restart the workers"
            )
        }
    with _LOCK:
        if _WORKER_STATE.get("retired"):  # a task that reached it as it closed
            from distributed import Reschedule

            raise Reschedule()  # to another worker
        launcher, problem = _worker_launcher(shared.spec.launcher)
        if problem is not None:
            return {
                "refused": (
                    f"the worker {_worker_name()} cannot build the grading sandbox: "
                    f"{problem}. Install bubblewrap and allow unprivileged user "
                    "namespaces there (see the instructor guide, 'Grading on a "
                    "cluster'), or take that worker out of the cluster"
                )
            }
        scratch = owned_tempdir("run-", _scratch_root())
        try:
            template = scratch / "template.db"
            template.write_bytes(shared.template_db)
            source = scratch / "source" / shared.spec.assignment
            _unpack([(rel, "file", data) for rel, data in shared.source_files], source)
            submission = scratch / "submission" / student / shared.spec.assignment
            _unpack(files, submission)
            threads = _threads()
            spec = dataclasses.replace(
                shared.spec,
                template_db=str(template),
                source_assignment_dir=str(source),
                scratch=str(scratch),
                launcher=launcher,
                threads=threads,
                log_path=os.devnull,
            )
            worker_environment(threads)
            job = Job(student, str(submission), extension_seconds)
            out = _grade_watched(spec, job)
            autograded = out.pop("autograded", None)
            out.pop("private", None)
            if autograded is not None:
                out["autograded_files"] = _pack(Path(autograded))
            out["worker"] = _worker_name()
            return out
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------------------
# the client side


def connect(address: str):
    """A Dask client of the scheduler at ``address`` with at least one worker, or a
    :class:`~course_lib.grading.course.CourseError` that says what is wrong."""
    try:
        from distributed import Client
    except ImportError:
        raise CourseError(
            "grading on a cluster needs Dask (dask and distributed), part of "
            "course_lib[grading]; install it with pip install 'course_lib[grading]'"
        ) from None
    import logging

    # the client's own reconnection messages would repeat what the error says
    for name in [*logging.root.manager.loggerDict, "distributed"]:
        if name.split(".")[0] == "distributed":
            logging.getLogger(name).setLevel(logging.CRITICAL)
    import dask
    from dask.utils import parse_timedelta

    timeout = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"))
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CourseError(
            f"cannot reach the Dask scheduler at {address} ({detail[:200]}); start it "
            "with `dask scheduler` and check the address and the firewall; nothing "
            "was graded or written"
        ) from None
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT)
    except (OSError, TimeoutError) as exc:
        with contextlib.suppress(Exception):
            client.close()
        raise CourseError(
            f"the Dask scheduler at {address} has no worker (waited "
            f"{WORKER_WAIT:g} s); start some with `dask worker {address} --nthreads 1`;"
            " nothing was graded or written"
        ) from exc
    # every worker there now runs the client's course_lib (a worker that joins later
    # is checked by each of its tasks)
    try:
        theirs = client.run(_worker_fingerprint)
    except Exception as exc:  # noqa: BLE001 - any failure here stops the run
        with contextlib.suppress(Exception):
            client.close()
        raise CourseError(
            f"could not ask the Dask workers at {address} for their course_lib "
            f"({type(exc).__name__}: {str(exc)[:200]}); nothing was graded or written"
        ) from None
    mine = library_fingerprint()
    other = {worker: fp for worker, fp in theirs.items() if fp != mine}
    if other:
        with contextlib.suppress(Exception):
            client.close()
        worker, fp = sorted(other.items())[0]
        more = f" (and {len(other) - 1} more)" if len(other) > 1 else ""
        raise CourseError(
            f"the worker {worker}{more} has {fp}, this client {mine}: the workers must "
            "grade with the same code; install the same course_lib on every worker "
            "and restart them. Nothing was graded or written"
        )
    return client


def _worker_fingerprint() -> str:
    """Run on each worker by :func:`connect` (by reference: the worker's own code)."""
    return library_fingerprint()


def disconnect(client) -> None:
    with contextlib.suppress(Exception):
        client.close(timeout=10)


def _lost_reason(exc: BaseException) -> str:
    name = type(exc).__name__
    if name == "KilledWorker":
        return (
            "the grading worker died on this submission, again on every worker that "
            "took it over"
        )
    detail = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    return f"the cluster failed on this submission ({name}: {detail[:200]})"


def grade_on_cluster(
    client,
    spec,
    jobs: list,
    finish: Callable[[Any, dict[str, Any]], None],
) -> None:
    """Grade ``jobs`` (:class:`~course_lib.grading.grade.Job`) on the cluster
    of ``client`` under ``spec`` (the local run's worker spec); ``finish(job, out)``
    merges each result as it arrives, exactly once per job."""
    shared_future = client.scatter(_shared(spec), broadcast=True, hash=False)
    run = os.urandom(4).hex()
    futures = {}
    for job in jobs:
        future = client.submit(
            grade_task,
            shared_future,
            job.student,
            _pack(Path(job.submission)),
            job.extension_seconds,
            key=f"autograde-{spec.assignment}-{job.student}-{run}",
            pure=False,
        )
        futures[future] = job
    done: set[str] = set()
    try:
        pending = dict(futures)
        waiting = _WorkerWatch(client)
        while pending:
            batch = [f for f in pending if f.done()]
            for future in batch:
                del pending[future]
            if not batch:
                waiting.check(_kept(done, jobs))
                time.sleep(0.2)
                continue
            for future in batch:
                job = futures[future]
                if job.student in done:  # never merged twice
                    continue
                out = _result(future, job, Path(spec.scratch) / "returned", done, jobs)
                done.add(job.student)
                finish(job, out)
    finally:
        left = [f for f, job in futures.items() if job.student not in done]
        if left:
            with contextlib.suppress(Exception):
                client.cancel(left, force=True)
        with contextlib.suppress(Exception):
            client.cancel([shared_future], force=True)


def _shared(spec) -> _Shared:
    """What every task of the run gets. The course's gradebook URL (a password,
    perhaps) and folder stay here: each worker grades in its private course folder
    (``grade._private_config``)."""
    config = copy.deepcopy(spec.config)
    config.CourseDirectory.db_url = "sqlite://"
    config.CourseDirectory.root = ""
    return _Shared(
        spec=dataclasses.replace(
            spec,
            config=config,
            template_db="",
            source_assignment_dir="",
            scratch="",
            log_path="",
        ),
        template_db=Path(spec.template_db).read_bytes(),
        source_files=_source_files(Path(spec.source_assignment_dir)),
        library=library_fingerprint(),
    )


def _kept(done: set[str], jobs: list) -> str:
    return f"{len(done)} of the {len(jobs)} submissions sent were graded and kept"


class _WorkerWatch:
    """Gives up when the cluster has had no worker for :data:`NO_WORKER_PATIENCE`
    seconds."""

    def __init__(self, client) -> None:
        self.client = client
        self.since: float | None = None

    def check(self, kept: str) -> None:
        if self.client.scheduler_info().get("workers"):
            self.since = None
            return
        self.since = self.since or time.monotonic()
        if time.monotonic() - self.since > NO_WORKER_PATIENCE:
            raise CourseError(
                f"no Dask worker left for {NO_WORKER_PATIENCE:g} s; {kept}; start "
                "workers and run the command again to grade the rest"
            )


def _result(future, job, returned: Path, done: set[str], jobs: list) -> dict:
    """A finished task's result, its graded notebooks unpacked under ``returned``;
    a failed task is an ungradable submission, a lost scheduler ends the run."""
    from concurrent.futures import CancelledError

    try:
        out = future.result()
    except (CancelledError, OSError) as exc:
        raise CourseError(
            f"lost the Dask scheduler ({type(exc).__name__}); {_kept(done, jobs)}; "
            "run the command again to grade the rest"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a task failure: recorded
        out = {"status": "ungradable", "reason": _lost_reason(exc)}
    if "refused" in out:
        raise CourseError(out["refused"])
    files = out.pop("autograded_files", None)
    if files is not None:
        folder = returned / job.student
        _unpack(files, folder)
        out["autograded"] = str(folder)
        out["private"] = str(folder)
    return out
