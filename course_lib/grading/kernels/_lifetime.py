"""Two pieces of :mod:`course_lib.grading.kernels.guard` that the scripts starting a
kernel need before anything else is imported: standard library only, loaded by those
scripts (``_sandbox_exec.py``, ``_rlimit_exec.py``) from this folder, and run as the
guard process (``python -I -S _lifetime.py guard FD``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Have this process killed (SIGKILL) when its parent exits, and at once if the
    parent, process ``parent``, has already gone. Set it after any change of user:
    the kernel clears the setting on one."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def guard(fd: int) -> None:
    """Collect the folder paths written to ``fd`` (one per line) until end of file,
    that is until every process that holds the pipe's other end has exited; then
    remove them, the last registered first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    paths = [line for line in data.decode(errors="replace").split("\n") if line]
    for path in reversed(paths):
        if os.path.isabs(path):
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "guard":
        sys.exit("usage: _lifetime.py guard FD")
    guard(int(sys.argv[2]))
