"""A killed grader leaves nothing running and nothing on disk.

Two kills with SIGKILL, the signal no clean-up code sees: ``course autograde``
(local, ``--jobs 2``, the bubblewrap sandbox with its warm template) and a real
``dask worker`` of a ``course autograde --cluster`` run, each while a kernel of the
run is grading a submission that never ends. Within 10 s of the kill, no process of
the run may be left and no folder of it: the processes are looked up by the run's
own paths (its course folder, its temporary folder, its worker folder) and as
descendants of the killed process, never by a broad name; each run gets a temporary
folder of its own (``TMPDIR``), which must then be empty.

Also: a kernel that outlives its wall time is killed by the sandbox's own watcher
with the grader gone, and a later run sweeps the folders of a run whose guard was
killed too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_e2e_class import _course_cmd

from course_lib.grading.synthetic import (
    scratch_course,
    solution_answers,
    student_notebook,
    write_submission,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"
DASK = Path(sys.executable).with_name("dask")
GONE_WITHIN = 10.0  # seconds, the bound
# a public check that never returns (cell limit far beyond the test's time)
HANG = "import time\nwhile True:\n    time.sleep(1)\n"


# ------------------------------------------------------------------ processes


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(parent PID, state, start time) of process ``pid``, ``None`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0].decode(), fields[19].decode()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _processes() -> dict[int, tuple[int, str, str]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            info = _stat(int(name))
            if info is not None and info[1] not in ("Z", "X"):
                out[int(name)] = info
    return out


def _run_processes(paths: list[Path], roots: tuple[int, ...] = ()) -> dict:
    """The live processes of a run: those whose command line or working folder
    names one of the run's ``paths``, the ``roots``, and every descendant of those
    (``hold`` and a warm kernel name no path of their own). PID -> (start time,
    command line)."""
    procs = _processes()
    keys = [str(p) for p in paths]
    found = {
        pid
        for pid in procs
        if pid in roots
        or any(k in _cmdline(pid) or _cwd(pid).startswith(k) for k in keys)
    }
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return {pid: (procs[pid][2], _cmdline(pid)) for pid in found}


def _kernel_of(run: dict) -> int | None:
    """A kernel of the run: warm, a child of the sandbox's PID 1 (``hold``, the
    kernel names no path of its own); cold, ``ipykernel_launcher``."""
    for pid, (_, cmd) in run.items():
        info = _stat(pid)
        if info and "_sandbox_exec.py hold" in _cmdline(info[0]):
            return pid
        if cmd.startswith(sys.executable) and "-m ipykernel_launcher" in cmd:
            return pid
    return None


def _wait_for_kernel(paths: list[Path], roots: tuple[int, ...], owner) -> dict:
    """The run's processes once one of its kernels runs (the submission that never
    returns keeps it running: a state that lasts, not a moment to catch)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        run = _run_processes(paths, roots)
        if _kernel_of(run) is not None:
            return run
        if owner.poll() is not None:
            pytest.fail(
                f"the run ended before its kernel started: {owner.returncode}\n"
                + owner.log_path.read_text(errors="replace")[-3000:]
            )
        time.sleep(0.5)
    pytest.fail(
        "no kernel of the run started within 300 s\n"
        + owner.log_path.read_text(errors="replace")[-3000:]
    )


def _left_after_kill(before: dict, paths: list[Path]) -> dict:
    """What is left of the run GONE_WITHIN seconds after the kill at most: the
    processes seen before that still run (same PID and start time), and any process
    naming the run's paths."""
    deadline = time.monotonic() + GONE_WITHIN
    while True:
        now = _processes()
        left = {
            pid: cmd
            for pid, (start, cmd) in before.items()
            if pid in now and now[pid][2] == start
        }
        left.update({p: c for p, (_, c) in _run_processes(paths).items()})
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _left_folders(folders: list[Path]) -> list[str]:
    """What is left in the run's ``folders`` GONE_WITHIN seconds after the kill at
    most; torch's compile cache (``torchinductor_<user>``, made when the grading
    edition is first planned) is torch's, shared by every run of the user, and
    kept on purpose."""
    deadline = time.monotonic() + GONE_WITHIN
    while True:
        left = [
            str(p)
            for f in folders
            if f.is_dir()
            for p in sorted(f.iterdir())
            if not p.name.startswith("torchinductor_")
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _kill_all(run: dict) -> None:
    for pid in run:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ------------------------------------------------------------------ the class


@pytest.fixture(scope="module")
def hanging_class(tmp_path_factory):
    """A released ex05 course with two submissions collected: one right, one whose
    first cell never returns."""
    tmp = tmp_path_factory.mktemp("owner")
    course = scratch_course(tmp / "course", ROOT, [A])
    assert _course_cmd("release", A, cwd=course.root).returncode == 0
    release = course.root / "notebooks" / A / f"{A}.ipynb"
    answers = solution_answers(course.root / "solutions" / A / f"{A}.ipynb")
    inbox = tmp / "inbox"
    write_submission(inbox, "honest", A, student_notebook(release, answers))
    hang = dict(answers)
    hang["alibi_slopes__answer"] = HANG + answers["alibi_slopes__answer"]
    write_submission(inbox, "hangs", A, student_notebook(release, hang))
    out = _course_cmd("collect", str(inbox), "--assignment", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    return course.root


@pytest.fixture
def run_tmp():
    """A temporary folder for one run (its ``TMPDIR``), in the system's temporary
    folder: pytest's own is private to this user, and a sandbox running as another
    user (as root, the sandbox drops to ``nobody``) must pass through it."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="course-test-run-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _env(tmpdir: Path) -> dict[str, str]:
    tmpdir.mkdir(parents=True, exist_ok=True)
    tmpdir.chmod(0o711)
    return {**os.environ, "TMPDIR": str(tmpdir)}


def _start(command: list, cwd: Path, tmpdir: Path, log: Path) -> subprocess.Popen:
    """``command`` with its own temporary folder, its output in ``log``."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            command, cwd=cwd, env=_env(tmpdir), stdout=out, stderr=subprocess.STDOUT
        )
    proc.log_path = log
    return proc


# ------------------------------------------------------------------ the tests


def test_sigkill_of_course_autograde_leaves_nothing(hanging_class, tmp_path, run_tmp):
    import shutil

    root = tmp_path / "course"
    shutil.copytree(hanging_class, root)
    tmpdir = run_tmp
    owner = _start(
        [sys.executable, "-m", "course_lib.cli", "autograde", A, "--jobs", "2"]
        + ["--no-progress", "--cell-timeout", "600", "--timeout", "900"],
        root,
        tmpdir,
        tmp_path / "run.log",
    )
    paths = [root, tmpdir]
    run: dict = {}
    try:
        run = _wait_for_kernel(paths, (owner.pid,), owner)
        assert any("_warm_template.py" in c for _, c in run.values()), run
        print(f"\nbefore the kill: {len(run)} processes of the run")
        for pid, (_, cmd) in sorted(run.items()):
            print(f"  {pid} {cmd[:150]}")
        print(f"  folders: {sorted(p.name for p in tmpdir.iterdir())}")
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        left = _left_after_kill(run, paths)
        folders = _left_folders([tmpdir])
        print(f"{GONE_WITHIN:g} s after: {len(left)} processes, folders {folders}")
        assert not left, f"still running after the kill: {left}"
        assert not folders, f"left on disk after the kill: {folders}"
    finally:
        _kill_all(run)


def test_sigkill_of_a_dask_worker_leaves_nothing(hanging_class, tmp_path, run_tmp):
    import shutil
    import socket

    if not DASK.exists():
        pytest.fail("the dask command is missing: pip install 'course_lib[grading]'")
    root = tmp_path / "course"
    shutil.copytree(hanging_class, root)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    folder = run_tmp / "worker-dir"  # the sandbox (as `nobody`) passes through it
    folder.mkdir(mode=0o711)
    worker_tmp = run_tmp / "w"
    scheduler = subprocess.Popen(
        [DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port)]
        + ["--no-dashboard"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = subprocess.Popen(
        [DASK, "worker", address, "--name", "w", "--nthreads", "1", "--no-nanny"]
        + ["--no-dashboard", "--local-directory", str(folder)],
        cwd=folder,
        env=_env(worker_tmp),
        stdout=(folder / "worker.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    client = _start(
        [sys.executable, "-m", "course_lib.cli", "autograde", A, "--cluster", address]
        + ["--no-progress", "--cell-timeout", "600", "--timeout", "900"]
        + ["--student", "hangs"],
        root,
        run_tmp / "client",
        tmp_path / "client.log",
    )
    paths = [folder, worker_tmp]
    run: dict = {}
    try:
        try:
            run = _wait_for_kernel(paths, (worker.pid,), client)
        except BaseException:
            print((folder / "worker.log").read_text(errors="replace")[-4000:])
            print(_run_processes(paths, (worker.pid,)))
            raise
        print(f"\nbefore the kill: {len(run)} processes of the worker")
        for pid, (_, cmd) in sorted(run.items()):
            print(f"  {pid} {cmd[:150]}")
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        left = _left_after_kill(run, paths)
        scratch = folder / "course-autograde"
        folders = _left_folders([worker_tmp, scratch])
        print(f"{GONE_WITHIN:g} s after: {len(left)} processes, folders {folders}")
        assert not left, f"still running after the kill: {left}"
        assert not folders, f"left on disk after the kill: {folders}"
    finally:
        _kill_all(run)
        for proc in (client, scheduler, worker):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_sweep_removes_only_folders_whose_owner_is_gone(tmp_path):
    from course_lib.grading.kernels.guard import owner_record, sweep_leftovers

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = owner_record()
    names = {
        f"course-sandbox-{dead.pid}-1-a": False,  # a process that is gone
        "course-sandbox-" + me + "b": True,  # this process: alive
        # this PID with another start time: a process that is gone
        f"course-autograde-{os.getpid()}-1-c": False,
        "course-sandbox-unmarked": True,  # no owner in the name
        f"something-else-{dead.pid}-1-d": True,  # not a run's folder
    }
    for name in names:
        (tmp_path / name / "template-x").mkdir(parents=True)
    assert sweep_leftovers(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for n, stays in names.items() if stays
    )


def test_course_autograde_says_what_it_swept(hanging_class, tmp_path, run_tmp):
    """A folder of a run whose owner (and guard) are gone is removed by the next
    run, which says how many it removed."""
    import shutil

    root = tmp_path / "course"
    shutil.copytree(hanging_class, root)
    tmpdir = run_tmp
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmpdir / f"course-sandbox-{dead.pid}-1-leftover"
    (left / "kernel-1").mkdir(parents=True)
    out = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "autograde", A, "--student"]
        + ["honest", "--no-progress"],
        cwd=root,
        env=_env(tmpdir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "removed 1 temporary folder(s)" in out.stderr
    assert not left.exists()


def test_a_kernel_does_not_outlive_its_wall_time_when_the_grader_hangs(
    hanging_class, tmp_path, run_tmp
):
    """The grading process and its workers stopped (SIGSTOP: their timers stop
    too): the sandbox's own watcher, ``outer``, still ends the kernel at the wall
    time."""
    import shutil

    wall = 20
    root = tmp_path / "course"
    shutil.copytree(hanging_class, root)
    tmpdir = run_tmp
    owner = _start(
        [sys.executable, "-m", "course_lib.cli", "autograde", A, "--jobs", "1"]
        + ["--no-progress", "--cell-timeout", "600", "--timeout", str(wall)]
        + ["--student", "hangs"],
        root,
        tmpdir,
        tmp_path / "run.log",
    )
    paths = [root, tmpdir]
    run: dict = {}
    graders = []
    try:
        run = _wait_for_kernel(paths, (owner.pid,), owner)
        seen = time.monotonic()
        kernel = _kernel_of(run)
        graders = [
            pid for pid, (_, cmd) in run.items() if "course_lib.cli autograde" in cmd
        ]
        assert owner.pid in graders and len(graders) >= 2, run  # owner + worker
        for pid in graders:
            os.kill(pid, signal.SIGSTOP)
        start = _stat(kernel)[2]
        while time.monotonic() < seen + wall + GONE_WITHIN:
            info = _stat(kernel)
            if info is None or info[1] in ("Z", "X") or info[2] != start:
                break
            time.sleep(0.5)
        alive = _stat(kernel)
        assert alive is None or alive[2] != start or alive[1] in ("Z", "X"), (
            f"the kernel still runs {time.monotonic() - seen:.0f} s after it was "
            f"seen, with a wall time of {wall} s"
        )
    finally:
        for pid in graders:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        owner.kill()
        owner.wait()
        _kill_all(run)
