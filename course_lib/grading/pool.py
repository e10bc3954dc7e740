"""The local backend: ``jobs`` worker processes on this machine, one submission each
at a time.

Each worker is forked from the grading process (so nbgrader, torch and the trusted
graders it imported are there at once), dies with it (however it dies: a parent-death
signal, :mod:`course_lib.grading.kernels.guard`), writes its output to the run's
``workers.log``, and grades with :func:`course_lib.grading.grade.grade_submission`.
The parent hands out the submissions, passes every result to ``finish`` as it
arrives (exactly once per submission), and replaces a worker that died or did not
answer within the wall time and :data:`~course_lib.grading.grade.GRACE_SECONDS`
more, recording that submission as ungradable.

May import: :mod:`course_lib.grading.grade`, :mod:`course_lib.grading.kernels`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from .grade import (
    GRACE_SECONDS,
    Job,
    WorkerSpec,
    grade_submission,
    worker_died,
    worker_environment,
    worker_timed_out,
)
from .kernels.guard import die_with_parent
from .kernels.start import kill_process_group

__all__ = ["grade_locally"]

Finish = Callable[[Job, dict[str, Any]], None]


def _worker_main(conn: Connection, spec: WorkerSpec, parent: int) -> None:
    die_with_parent(parent)  # and its kernel with it (see kernels.guard)
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
    def __init__(self, ctx, spec: WorkerSpec, index: int) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_worker_main,
            args=(child, spec, os.getpid()),
            name=f"course-autograde-{index}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.job: Job | None = None
        self.started = 0.0
        self.kernels: list[int] = []

    def send(self, job: Job) -> None:
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


class _Pool:
    """The workers of one run and the submissions each holds."""

    def __init__(
        self,
        spec: WorkerSpec,
        n_workers: int,
        forking: Callable[[], contextlib.AbstractContextManager],
    ) -> None:
        self.spec = spec
        self.forking = forking
        self.ctx = multiprocessing.get_context("fork")
        self.workers: list[_Worker] = []
        with forking():
            self.workers = [_Worker(self.ctx, spec, i) for i in range(n_workers)]
        wall = spec.limits.wall_seconds
        self.patience = None if wall is None else wall + GRACE_SECONDS

    def replace(self, worker: _Worker) -> None:
        index = self.workers.index(worker)
        worker.kill()
        with self.forking():
            self.workers[index] = _Worker(self.ctx, self.spec, index)

    def wait(self) -> list[Any]:
        """Wait until a busy worker has sent something or one is overdue."""
        busy = [w for w in self.workers if w.job is not None]
        timeout = None
        if self.patience is not None:
            now = time.monotonic()
            timeout = max(0.0, min(w.started + self.patience - now for w in busy))
        return wait([w.conn for w in busy], timeout=timeout)

    def overdue(self, worker: _Worker) -> bool:
        return (
            self.patience is not None
            and time.monotonic() > worker.started + self.patience
        )

    def close(self, killed: bool) -> None:
        for w in self.workers:
            if killed:
                w.kill()
            elif w.process.is_alive():
                w.stop()


def _collect(pool: _Pool, worker: _Worker, finish: Finish) -> None:
    """Take what ``worker`` sent: a kernel's PID, its result, or its death."""
    try:
        kind, _student, payload = worker.conn.recv()
    except (EOFError, OSError):
        job = worker.job
        worker.process.join(1)
        code = worker.process.exitcode
        pool.replace(worker)
        finish(job, worker_died(code))
        return
    if kind == "kernel":
        worker.kernels.append(payload)
    elif kind == "done":
        job, worker.job = worker.job, None
        finish(job, payload)


def grade_locally(
    spec: WorkerSpec,
    jobs: list[Job],
    finish: Finish,
    n_workers: int,
    forking: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> None:
    """Grade ``jobs`` under ``spec`` in ``n_workers`` forked worker processes;
    ``finish(job, out)`` is called with each result as it arrives, exactly once per
    job, in this process. Each fork happens inside ``forking()`` (the caller closes
    its database connections there: none may be inherited by a worker)."""
    queue = deque(jobs)
    pool = _Pool(spec, n_workers, forking)
    killed = True
    try:
        while queue or any(w.job for w in pool.workers):
            for w in pool.workers:
                if w.job is None and queue:
                    w.send(queue.popleft())
            ready = pool.wait()
            for w in [w for w in pool.workers if w.job is not None]:
                if w.conn in ready:
                    _collect(pool, w, finish)
                elif pool.overdue(w):
                    job = w.job
                    pool.replace(w)
                    finish(job, worker_timed_out(spec.limits))
        killed = False
    finally:
        pool.close(killed)
