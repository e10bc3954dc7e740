"""What a grading run leaves behind goes with it, however the run ends.

A run makes temporary folders (its scratch, the sandboxes' host-side files, the
grading edition) and processes (grading workers, the warm template, and per kernel
``outer``, bubblewrap, ``hold`` and the kernel). Clean-up code in the run covers a
normal end and an exception; it cannot run when the process is killed with SIGKILL
(``kill -9``, the out-of-memory killer, ``scancel``, a Dask nanny restarting its
worker). So each piece ends through a mechanism of the kernel instead:

* **processes**: each one the run starts dies with the process that started it: a
  parent-death signal (:func:`die_with_parent`, for the grading workers, ``outer`` and
  the unsafe launcher's kernel; bubblewrap's ``--die-with-parent`` for the sandbox),
  or a pipe whose end of file means "owner gone" (the warm template).
* **folders**: :func:`owned_tempdir` makes a folder and tells this process's *guard*
  about it: a small process (``_lifetime.py guard``) that holds the read end of a
  pipe whose write end only this process and its forks hold. When all of them have
  exited, however they exited, the pipe reaches end of file and the guard removes
  the folders.
* **leftovers** of a machine that lost even its guards (a reboot, ``kill -9`` of
  everything): each folder's name carries its owner (``PREFIX<PID>-<start time>-``,
  so a reused PID is not mistaken for it), and :func:`sweep_leftovers` removes the
  folders whose owner is gone.

May import: the standard library and :mod:`._lifetime`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ._lifetime import die_with_parent

__all__ = [
    "RUN_PREFIXES",
    "die_with_parent",
    "owned_tempdir",
    "owner_alive",
    "owner_record",
    "sweep_leftovers",
]

_LIFETIME = Path(__file__).with_name("_lifetime.py")
_OWNER = re.compile(r"(\d+)-(\d+)-")
# the temporary folders a grading run makes (in the system's temporary folder)
RUN_PREFIXES = (
    "course-autograde-",
    "course-sandbox-",
    "course-grading-edition-",
    "course-kernel-",
)

_guard: tuple[int, int] | None = None  # the write end of its pipe, and its inode
_guard_process: subprocess.Popen | None = None  # kept: the guard outlives this process
_lock = threading.Lock()


def _start_time(pid: int) -> str | None:
    """Process ``pid``'s start time in clock ticks since boot (field 22 of
    ``/proc/PID/stat``), ``None`` when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19].decode() if len(fields) > 19 else None


def owner_record(pid: int | None = None) -> str:
    """``"PID-START-"`` of this process (or ``pid``), which :func:`owned_tempdir`
    puts in a folder's name and :func:`owner_alive` checks."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_time(pid)}-"


def owner_alive(pid: int, start: str) -> bool:
    """Whether process ``pid``, started at ``start`` (clock ticks since boot), still
    runs (the same process, not a later one that got its PID)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in (b"Z", b"X") and fields[19].decode() == start


def _guard_fd() -> int:
    """The write end of this process's guard's pipe (a fork shares its parent's)."""
    global _guard, _guard_process
    with _lock:
        if _guard is not None:
            with contextlib.suppress(OSError):
                if os.fstat(_guard[0]).st_ino == _guard[1]:
                    return _guard[0]
        read_end, write_end = os.pipe()
        try:
            _guard_process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_LIFETIME), "guard", str(read_end)],
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,  # a Ctrl-C of the run does not reach it
            )
        finally:
            os.close(read_end)
        _guard = (write_end, os.fstat(write_end).st_ino)
        return write_end


def owned_tempdir(prefix: str, folder: str | Path | None = None) -> Path:
    """A new temporary folder (as :func:`tempfile.mkdtemp`), its owner in its name,
    removed by this process's guard once this process and its forks are gone (its
    normal clean-up may remove it before)."""
    path = Path(tempfile.mkdtemp(prefix=prefix + owner_record(), dir=folder))
    line = f"{path}\n".encode()
    if line.count(b"\n") == 1 and len(line) < 4096:  # one atomic write to the pipe
        os.write(_guard_fd(), line)
    return path


def sweep_leftovers(
    folder: str | Path | None = None, prefixes: tuple[str, ...] = RUN_PREFIXES
) -> int:
    """Remove the folders in ``folder`` (the temporary folder by default) whose name
    is one of ``prefixes`` and an owner (:func:`owned_tempdir`) that is gone; the
    number removed. Folders of other users, and without an owner, stay."""
    base = Path(folder or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    for entry in entries:
        prefix = next((p for p in prefixes if entry.name.startswith(p)), None)
        owner = prefix and _OWNER.match(entry.name, len(prefix))
        if not owner:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
        except OSError:
            continue
        if owner_alive(int(owner[1]), owner[2]):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed += 1
    return removed
