"""``course autograde --cluster`` on a real Dask cluster on 127.0.0.1.

A scheduler and two workers run as separate processes (``dask scheduler``,
``dask worker --no-nanny``: the worker's PID is the process that grades), each
worker in its own working folder; the course folder is never shown to them. Twelve
ex05_alibi submissions of the synthetic class of ``tests/test_e2e_class.py`` (right,
wrong, hostile, ungradable) are graded on the cluster and by the local ``--jobs 2``
run; every score, cell grade, status, reason and failure must agree. Then the faults,
each on part of that class (8, 6 or 4 of the 12, every kind of submission among
them, to keep the cost down) and each compared with the local run: a worker killed by
its PID mid-run, an unreachable scheduler, an interrupted client, a lost scheduler, a
worker with other code; and the PostgreSQL gradebook of ``tests/test_postgres.py``
(4 submissions and a killed worker).

Run with ``-s`` to see the transcript of the fault tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import course_cli
from test_e2e_class import CELLS, A, _build_class, _expected_total
from test_postgres import postgres_url  # noqa: F401 - the fixture, reused

from course_lib.grading.synthetic import scratch_course

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DASK = Path(sys.executable).with_name("dask")
# the 12 of the e2e class that run in seconds: right, wrong, repaired, hostile
# (os._exit, a 200 GB allocation, delegating to the library), ungradable
STUDENTS = (
    "correct",
    "partial",
    "positive_bias",
    "pow2_slopes",
    "stub",
    "syntax_error",
    "exit",
    "hog_torch",
    "deleted_tests",
    "edited_tests",
    "not_json",
    "uses_reference",
)
PG_STUDENTS = ("correct", "partial", "exit", "not_json")
# the faults below need a class, not all twelve: right, wrong, repaired, hostile and
# ungradable, each graded the same as in the local run of all twelve
FAULT_STUDENTS = (
    "correct",
    "partial",
    "syntax_error",
    "exit",
    "hog_torch",
    "deleted_tests",
    "not_json",
    "uses_reference",
)
LIMITS = ("--cell-timeout", "15", "--timeout", "45", "--memory", "2G")


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _course(*args: str, cwd: Path, db: str | None = None, **kw):
    extra = ["--db", db] if db else []
    return course_cli(*args, *extra, cwd=cwd, timeout=600, **kw)


class Cluster:
    """A scheduler and named workers, each a process of its own."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self.workers: dict[str, subprocess.Popen] = {}
        log = (base / "scheduler.log").open("w")
        self.scheduler = subprocess.Popen(
            [DASK, "scheduler", "--host", "127.0.0.1", "--no-dashboard"]
            + ["--port", self.address.rsplit(":", 1)[1]],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=base,
        )
        from distributed import Client

        self.client = Client(self.address, timeout=60, set_as_default=False)

    def start(self, name: str, preload: Path | None = None) -> None:
        folder = self.base / name
        folder.mkdir(exist_ok=True)
        log = (folder / "worker.log").open("a")
        extra = ["--preload", str(preload)] if preload else []
        self.workers[name] = subprocess.Popen(
            [DASK, "worker", self.address, "--name", name, "--nthreads", "1"]
            + ["--no-nanny", "--no-dashboard", "--local-directory", str(folder)]
            + extra,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )

    def wait(self, n: int) -> None:
        self.client.wait_for_workers(n, timeout=120)

    def address_of(self, name: str) -> str:
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return next(a for a, w in info.items() if w.get("name") == name)

    def ensure(self) -> None:
        """Both workers up (a test may have killed one)."""
        for name in ("w1", "w2"):
            if name not in self.workers or self.workers[name].poll() is not None:
                self.start(name)
        self.wait(2)

    def stop(self) -> None:
        try:
            self.client.close(timeout=10)
        except Exception:  # noqa: BLE001 - its scheduler may be gone (a test)
            pass
        # the workers before their scheduler (a worker whose scheduler closes
        # while it closes itself can hang in its own close: seen for 30 s), and
        # SIGKILL for one that does not end in 10 s (its shutdown is not tested)
        for group in (list(self.workers.values()), [self.scheduler]):
            for proc in group:
                if proc.poll() is None:
                    proc.terminate()
            deadline = time.monotonic() + 10
            for proc in group:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not DASK.exists():
        pytest.fail("the dask command is missing: pip install 'course_lib[grading]'")
    c = Cluster(tmp_path_factory.mktemp("dask"))
    try:
        c.ensure()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A released ex05 course with the 12 submissions collected, and what each
    student should get (``tests/test_e2e_class.py``'s table)."""
    tmp = tmp_path_factory.mktemp("class")
    course = scratch_course(tmp / "course", ROOT, [A])
    assert _course("release", A, cwd=course.root).returncode == 0
    inbox = tmp / "inbox"
    expected = _build_class(course.root, inbox)
    for path in inbox.iterdir():
        if path.name.removesuffix(f"_{A}.ipynb") not in STUDENTS:
            path.unlink()
    out = _course("collect", str(inbox), "--assignment", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    return course.root, inbox, {s: expected[s] for s in STUDENTS}


def _copy(released, dest: Path) -> Path:
    shutil.copytree(released[0], dest)
    return dest


def _results(root: Path, db: str | None = None) -> dict[str, tuple]:
    """student -> (status, reason, score, max score, failures, grade per cell),
    each from the gradebook, with the number of submissions, notebooks and grades
    it holds for the student (each must be exactly one, one, four)."""
    from course_lib.grading.course import Course
    from course_lib.grading.gradebook import read_status

    with Course(root, db_url=db).gradebook() as gb:
        status = read_status(gb, A)
        subs = [s for s in gb.assignment_submissions(A)]
        counts: dict[str, int] = {}
        for sub in subs:
            counts[sub.student.id] = counts.get(sub.student.id, 0) + 1
        out = {}
        for sub in subs:
            row = status[sub.student.id]
            grades = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
            n_grades = sum(len(nb.grades) for nb in sub.notebooks)
            out[sub.student.id] = (
                row.status,
                row.reason,
                row.score,
                row.max_score,
                row.failures,
                tuple(grades.get(c) for c in CELLS),
                (counts[sub.student.id], len(sub.notebooks), n_grades),
            )
    assert set(out) == set(status), "a status row without a submission, or back"
    return out


def _table(stdout: str) -> list[str]:
    """The result table without its first line (which has the wall time)."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{A}: "))
    return [ln for ln in lines[start + 1 :] if not ln.startswith("kernels: ")]


def _rows(table: list[str], students) -> list[str]:
    """``table`` (:func:`_table`) with only the rows of ``students``: its header,
    and each of their rows with the lines under it."""
    rows, keep = table[:1], False
    for line in table[1:]:
        if line[2:3] != " ":  # a student's row; the lines under it are indented
            keep = line.split()[0] in students
        if keep:
            rows.append(line)
    return rows


def _only(students) -> list[str]:
    return [arg for student in students for arg in ("--student", student)]


@pytest.fixture(scope="module")
def local_run(released, tmp_path_factory):
    root = _copy(released, tmp_path_factory.mktemp("local") / "course")
    out = _course("autograde", A, "--jobs", "2", "--no-progress", *LIMITS, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    results = _results(root)
    # the reference itself agrees with the e2e table (derived there per case)
    expected = released[2]
    for student, expect in expected.items():
        assert results[student][2] == _expected_total(expect), (student, results)
        want = "ungradable" if "ungradable" in expect else "graded"
        assert results[student][0] == want, (student, results[student])
    return results, _table(out.stdout)


@pytest.fixture(scope="module")
def cluster_run(released, cluster, local_run, tmp_path_factory):
    root = _copy(released, tmp_path_factory.mktemp("on-cluster") / "course")
    cluster.ensure()
    out = _course(
        "autograde", A, "--cluster", cluster.address, "--no-progress", *LIMITS, cwd=root
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return root, out


def test_cluster_grades_exactly_like_local_jobs(cluster_run, local_run, cluster):
    root, out = cluster_run
    results, table = local_run
    assert f"{len(STUDENTS)} submissions" in out.stdout
    assert _results(root) == results
    assert _table(out.stdout) == table
    for student, row in results.items():
        graded = root / "autograded" / student / A / f"{A}.ipynb"
        assert graded.is_file() == (row[0] == "graded"), student
        assert row[6] == (1, 1, len(CELLS)), (student, row[6])
    # the course folder never reached a worker: no worker folder holds a file of it
    for name in ("w1", "w2"):
        leftovers = list((cluster.base / name).glob("**/*.ipynb"))
        assert not leftovers


def test_rerun_on_the_cluster_skips_and_force_regrades(cluster_run, cluster):
    root, _ = cluster_run
    before = _results(root)
    again = _course(
        "autograde", A, "--cluster", cluster.address, "--no-progress", *LIMITS, cwd=root
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{len(STUDENTS)} unchanged" in again.stdout
    forced = _course(
        "autograde", A, "--cluster", cluster.address, "--no-progress", *LIMITS,
        "--student", "correct", "--student", "exit", "--force", cwd=root,
    )  # fmt: skip
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert "2 submissions, 1 graded, 1 ungradable, 0 unchanged" in forced.stdout
    after = _results(root)
    assert after == before


# A worker that takes a submission and then holds it: its task writes the student's
# name to the mark file (MARK: its absolute path; dask runs a copy of this preload
# from the worker's own folder) and blocks until the worker dies. A test kills it
# once the mark is there, so the kill always lands while it holds a submission.
_HOLDING_WORKER = """
import threading
from pathlib import Path
from course_lib.grading import cluster

def grade_task(shared, student, *args, **kwargs):
    Path(MARK).write_text(student)
    threading.Event().wait()

cluster.grade_task = grade_task
"""


def _start_holding_worker(cluster: Cluster, name: str) -> Path:
    """Start worker ``name`` as a holding worker beside the others, before the run
    sends its submissions (so that it takes one); the file its mark goes to."""
    folder = cluster.base / name
    folder.mkdir(exist_ok=True)
    preload = folder / "holding_worker.py"
    mark = folder / "HOLD_MARK"
    mark.unlink(missing_ok=True)
    preload.write_text(f"MARK = {str(mark)!r}\n{_HOLDING_WORKER}")
    cluster.start(name, preload=preload)
    cluster.wait(len(cluster.workers))
    return mark


def _kill_when_held(cluster: Cluster, name: str, mark: Path, run) -> str:
    """Wait until the holding worker ``name`` holds a submission of ``run``, kill it
    with SIGKILL by its PID; the student it held."""
    deadline = time.monotonic() + 300  # a safety net: the mark comes, or the run ends
    while not mark.exists():
        if run.poll() is not None or time.monotonic() > deadline:
            run.kill()  # it would wait for the held submission forever
            cluster.workers.pop(name).kill()
            out, err = run.communicate()
            raise AssertionError(f"{name} never took a submission:\n{out}\n{err}")
        time.sleep(0.1)
    proc = cluster.workers.pop(name)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    held = mark.read_text()
    _log(f"killed worker {name} (pid {proc.pid}) while it held {held}")
    return held


def _graded_once(root: Path, reference: dict, students, db: str | None = None):
    results = _results(root, db)
    assert sorted(results) == sorted(students)
    for student in students:
        assert results[student][6] == (1, 1, len(CELLS)), (student, results[student])
        assert results[student][:6] == reference[student][:6], student
    return results


def test_a_worker_killed_mid_run(released, cluster, local_run, tmp_path):
    root = _copy(released, tmp_path / "course")
    cluster.ensure()
    mark = _start_holding_worker(cluster, "w3")
    students = FAULT_STUDENTS
    _log(f"grading {len(students)} submissions on {cluster.address}, workers w1 w2 w3")
    run = subprocess.Popen(
        [sys.executable, "-m", "course_lib.cli", "autograde", A, "--no-progress"]
        + ["--cluster", cluster.address, *LIMITS, *_only(students)],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    held = _kill_when_held(cluster, "w3", mark, run)
    stdout, stderr = run.communicate(timeout=600)
    _log(f"course autograde exited with {run.returncode}")
    for line in stdout.splitlines():
        _log(f"  | {line}")
    assert run.returncode == 0, stderr[-3000:]
    results = _graded_once(root, local_run[0], students)
    # retried on another worker, graded as locally
    _log(f"{held} (held by the killed worker): {results[held][:4]}")
    # each student listed once, as locally
    assert _table(stdout) == _rows(local_run[1], students)


def test_unreachable_scheduler_one_line_and_nothing_written(released, tmp_path):
    root = _copy(released, tmp_path / "course")
    db = root / "gradebook.db"
    before = (hashlib.sha256(db.read_bytes()).hexdigest(), sorted(root.rglob("*")))
    port = _free_port()  # nobody listens there
    out = _course(
        "autograde", A, "--cluster", f"tcp://127.0.0.1:{port}", cwd=root,
        env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"},
    )  # fmt: skip
    _log(f"unreachable scheduler: exit {out.returncode}, stderr {out.stderr!r}")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(
        f"course autograde: error: cannot reach the Dask scheduler at "
        f"tcp://127.0.0.1:{port}"
    )
    assert "nothing was graded or written" in lines[0]
    after = (hashlib.sha256(db.read_bytes()).hexdigest(), sorted(root.rglob("*")))
    assert after == before


# `course autograde --cluster` as the CLI runs it, except that right after the
# client has merged its N-th result from the cluster it sends a signal to a process:
# itself (SIGINT, as Ctrl-C does) or the scheduler (SIGKILL). The fault lands at a
# known point of the run, never after the run has already finished, however busy
# the machine. Arguments: N, the PID (0: the client itself), the signal, then the
# command line of `course`.
_SIGNAL_AFTER = """
import os, signal, sys
from course_lib import cli
from course_lib.grading import cluster

n, pid, sig = int(sys.argv[1]), int(sys.argv[2]) or os.getpid(), int(sys.argv[3])
real = cluster.grade_on_cluster
# Ctrl-C reaches a command started from a terminal with Python's own handler; a
# test run started in the background (`make test &`, nohup, some CI runners)
# passes SIGINT on ignored, and Python keeps an ignored SIGINT ignored
signal.signal(signal.SIGINT, signal.default_int_handler)


def grade_on_cluster(client, spec, jobs, finish):
    merged = []

    def merge_then_signal(job, out):
        finish(job, out)
        merged.append(job.student)
        if len(merged) == n:
            os.kill(pid, sig)

    return real(client, spec, jobs, merge_then_signal)

cluster.grade_on_cluster = grade_on_cluster
sys.exit(cli.main(sys.argv[4:]))
"""


def _course_signalling(n: int, pid: int, sig: int, *args: str, cwd: Path):
    """``course *args`` that sends ``sig`` to ``pid`` (0: itself) after its
    ``n``-th merge from the cluster (:data:`_SIGNAL_AFTER`)."""
    return subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_AFTER, str(n), str(pid), str(int(sig)), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_interrupted_client_keeps_results_and_rerun_grades_the_rest(
    released, cluster, local_run, tmp_path
):
    root = _copy(released, tmp_path / "course")
    cluster.ensure()
    n, students = 4, FAULT_STUDENTS
    run = _course_signalling(
        n, 0, signal.SIGINT, "autograde", A, "--no-progress",
        "--cluster", cluster.address, *LIMITS, *_only(students), cwd=root,
    )  # fmt: skip
    stdout, stderr = run.communicate(timeout=120)
    _log(f"Ctrl-C: exit {run.returncode}, stderr tail {stderr.strip()[-200:]!r}")
    assert run.returncode == 130, stdout[-3000:] + stderr[-3000:]
    assert "course autograde: interrupted" in stderr
    kept = _results(root)
    _log(f"kept after the interrupt: {len(kept)} of {len(students)}")
    # the n merged from the cluster, and those found ungradable before any was sent
    assert n <= len(kept) < len(students)
    for student, row in kept.items():
        assert row[:6] == local_run[0][student][:6], student
    # no task of the interrupted run is left on the cluster
    deadline = time.monotonic() + 60
    while any(cluster.client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(cluster.client.processing().values())
    rerun = _course(
        "autograde", A, "--cluster", cluster.address, "--no-progress", *LIMITS,
        *_only(students), cwd=root,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    _log(f"re-run: {rerun.stdout.splitlines()[0]}")
    assert f"{len(kept)} unchanged since the last run" in rerun.stdout
    graded = len(students) - len(kept)
    first = rerun.stdout.splitlines()[0]
    done = sum(
        int(first.split(f" {w}")[0].rsplit(" ", 1)[1]) for w in ("graded", "ungradable")
    )
    assert done == graded, first
    _graded_once(root, local_run[0], students)


def test_a_worker_with_other_code_refuses(released, cluster, tmp_path, monkeypatch):
    from course_lib.grading import cluster as cluster_mod
    from course_lib.grading.autograde import AutogradeOptions, autograde
    from course_lib.grading.course import Course
    from course_lib.grading.errors import CourseError
    from course_lib.grading.kernels.start import RlimitLauncher

    root = _copy(released, tmp_path / "course")
    cluster.ensure()
    before = sorted(root.rglob("*"))
    other = "course_lib 0.0.1 (files 0123456789abcdef)"
    monkeypatch.setattr(cluster_mod, "library_fingerprint", lambda: other)
    options = AutogradeOptions(
        launcher=RlimitLauncher(), cluster=cluster.address, progress=False
    )
    with pytest.raises(CourseError) as info:
        autograde(Course(root), A, options)
    message = str(info.value)
    _log(f"other code: {message}")
    assert message.startswith("the worker tcp://127.0.0.1:")
    assert f"this client {other}" in message
    assert "install the same course_lib on every worker" in message
    assert sorted(root.rglob("*")) == before


def test_postgresql_gradebook_with_a_killed_worker(
    postgres_url,  # noqa: F811 - the fixture of test_postgres.py
    released,
    cluster,
    local_run,
    tmp_path,
):
    root = scratch_course(tmp_path / "course", ROOT, [A]).root
    assert _course("release", A, cwd=root, db=postgres_url).returncode == 0
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for student in PG_STUDENTS:
        name = f"{student}_{A}.ipynb"
        shutil.copyfile(released[1] / name, inbox / name)
    out = _course("collect", str(inbox), "-a", A, cwd=root, db=postgres_url)
    assert out.returncode == 0, out.stderr
    cluster.ensure()
    mark = _start_holding_worker(cluster, "w3")
    _log(f"PostgreSQL gradebook: grading {PG_STUDENTS} on {cluster.address}")
    run = subprocess.Popen(
        [sys.executable, "-m", "course_lib.cli", "autograde", A, "--no-progress"]
        + ["--cluster", cluster.address, "--db", postgres_url, *LIMITS],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _kill_when_held(cluster, "w3", mark, run)
    stdout, stderr = run.communicate(timeout=600)
    _log(f"course autograde exited with {run.returncode}: {stdout.splitlines()[:1]}")
    assert run.returncode == 0, stderr[-3000:]
    _graded_once(root, local_run[0], PG_STUDENTS, db=postgres_url)
    assert not (root / "gradebook.db").exists()


def test_lost_scheduler_keeps_what_was_merged(released, local_run, tmp_path):
    """A cluster of its own (its scheduler is killed): one worker, six submissions;
    the scheduler is killed right after the first result is merged."""
    (tmp_path / "dask").mkdir()
    own = Cluster(tmp_path / "dask")
    try:
        own.start("w1")
        own.wait(1)
        root = _copy(released, tmp_path / "course")
        students = STUDENTS[:6]
        run = _course_signalling(
            1, own.scheduler.pid, signal.SIGKILL, "autograde", A, "--no-progress",
            "--cluster", own.address, *LIMITS,
            *_only(students), cwd=root,
        )  # fmt: skip
        stdout, stderr = run.communicate(timeout=180)
        _log(f"lost scheduler: exit {run.returncode}, stderr {stderr!r}")
        assert run.returncode == 2, stdout + stderr
        lines = stderr.splitlines()
        assert len(lines) == 1, stderr
        assert lines[0].startswith("course autograde: error: lost the Dask scheduler")
        kept = _results(root)
        sent = f"{len(kept)} of the {len(students)} submissions sent were graded"
        assert f"{sent} and kept; run the command again" in lines[0]
        assert 1 <= len(kept) < len(students)
        for student, row in kept.items():
            assert row[:6] == local_run[0][student][:6], student
            assert row[6] == (1, 1, len(CELLS)), student
    finally:
        own.stop()


def test_a_grading_that_hangs_past_its_limit_is_stopped(monkeypatch):
    """The task's watchdog (no cluster needed): a grading that does not answer
    within the wall time and the grace period is recorded as the local parent
    records it, and the kernels it reported are killed; one that answers in time
    is returned as it is."""
    import threading
    import types

    from course_lib.grading import cluster as cluster_mod
    from course_lib.grading import grade
    from course_lib.grading.kernels.start import KernelLimits

    monkeypatch.setattr(grade, "GRACE_SECONDS", 0.2)
    limits = KernelLimits(wall_seconds=0.3)
    spec = types.SimpleNamespace(limits=limits)
    job = types.SimpleNamespace(student="ada")
    kernel = subprocess.Popen(["sleep", "60"], start_new_session=True)
    release = threading.Event()

    def hangs(spec, job, on_kernel):
        on_kernel(kernel.pid)
        release.wait(30)
        return {"status": "graded"}

    monkeypatch.setattr(grade, "grade_submission", hangs)
    try:
        out = cluster_mod._grade_watched(spec, job)
        assert out == grade.worker_timed_out(limits)
        assert "exceeded the time limit of 0.3 s per submission" in out["reason"]
        assert kernel.wait(10) == -signal.SIGKILL
    finally:
        release.set()
        if kernel.poll() is None:
            kernel.kill()
    answer = {"status": "graded", "grades": {"x": 1}}
    monkeypatch.setattr(grade, "grade_submission", lambda s, j, k: dict(answer))
    assert cluster_mod._grade_watched(spec, job) == answer


def test_shipped_files_stay_inside_their_folder(tmp_path):
    from course_lib.grading import cluster as cluster_mod

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.ipynb").write_bytes(b"{}")
    (src / "link").symlink_to("/etc/passwd")
    packed = cluster_mod._pack(src)
    assert packed == (
        ("link", "link", b"/etc/passwd"),
        ("sub/a.ipynb", "file", b"{}"),
    )  # the link stays a link: what it points to is never read
    dest = tmp_path / "dest"
    cluster_mod._unpack(packed, dest)
    assert (dest / "link").is_symlink() and os.readlink(dest / "link") == "/etc/passwd"
    assert (dest / "sub" / "a.ipynb").read_bytes() == b"{}"
    for bad in ("../escape", "/abs/path", ""):
        with pytest.raises(ValueError, match="outside its folder"):
            cluster_mod._unpack([(bad, "file", b"x")], tmp_path / "other")
