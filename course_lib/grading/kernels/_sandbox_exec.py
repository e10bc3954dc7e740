"""The two small steps around bubblewrap that start a sandboxed grading kernel.

Standard library only (run as ``python -I -S``, so each step starts in milliseconds).
:class:`course_lib.grading.kernels.sandbox.SandboxLauncher` builds the whole command
line; this script only does what bubblewrap cannot:

``outer SPEC``, run by Jupyter in place of the kernel, on the host:

1. When it runs as root, the bind sources (the Python installation may sit in a
   home folder that only root can enter) are first bind-mounted, in a private mount
   namespace that nobody else sees, under one small staging folder; then it drops to
   the unprivileged sandbox user. Running as a user other than root is what makes
   ``RLIMIT_NPROC`` count (the kernel exempts root from it).
2. It opens the file bubblewrap reports the sandbox's process id into, starts a
   reader that passes at most a few KiB of the kernel's raw stdout/stderr on to the
   grading log (the rest is dropped: a student cannot fill the disk through it),
   ignores SIGINT (Jupyter interrupts a cell by signalling the whole process group;
   bubblewrap itself must survive that, only the kernel is meant to get it), and
   becomes ``bwrap``.

``inner AS CPU NPROC FSIZE NOFILE -- COMMAND...``, run by bubblewrap inside the
sandbox: sets the resource limits (``RLIMIT_NPROC`` only now, inside the sandbox's own
user namespace, so that one sandbox's processes never count against another's) and
becomes the kernel.

Nothing here outlives its owner or the kernel's wall time. ``outer`` dies with the
process that started it (a parent-death signal, SIGKILL, set after the last change of
user, which would clear it; checked against the owner's PID, in case the owner died
first) and stays bubblewrap's parent; bubblewrap's ``--die-with-parent`` takes the
sandbox with it, and every process in the sandbox's PID namespace ends with the
sandbox's PID 1. ``outer`` also kills the sandbox once the kernel has run for its
wall time: the limit is kept by a process that lives exactly as long as the kernel,
whatever happens to the grader.

(``die_with_parent`` comes from ``_lifetime.py`` beside this file: see
:mod:`course_lib.grading.kernels.guard`.)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it off
from _lifetime import die_with_parent  # noqa: E402

del sys.path[0]

_CLONE_NEWNS = 0x00020000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18

# Bytes of the kernel's raw stdout/stderr passed on to the grading log.
_LOG_BYTES = 16 << 10


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _stage(stage: dict) -> None:
    """Bind every ``[source, name]`` of ``stage["mounts"]`` at ``stage["root"]/name``
    in a new private mount namespace (a small tmpfs holds the mount points)."""
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    root = stage["root"]
    os.makedirs(root, exist_ok=True)
    _check(
        libc.mount(
            b"tmpfs",
            root.encode(),
            b"tmpfs",
            _MS_NOSUID | _MS_NODEV,
            b"mode=0711,size=1m",
        ),
        f"mount tmpfs on {root}",
    )
    for source, name in stage["mounts"]:
        target = os.path.join(root, name)
        if os.path.isdir(source):
            os.mkdir(target, 0o711)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o600))
        _check(
            libc.mount(
                source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None
            ),
            f"bind {source}",
        )


def _drop(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(f"could not become user {uid}")


def _log_reader() -> int:
    """Fork a process that copies the first bytes written to the returned pipe to
    this process's stderr and discards the rest; return the pipe's write end."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.close(write_end)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        left = _LOG_BYTES
        try:
            while True:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                if left > 0:
                    os.write(2, chunk[:left])
                    left -= len(chunk)
                    if left <= 0:
                        os.write(2, b"\n[kernel output beyond this point dropped]\n")
        finally:
            os._exit(0)
    os.close(read_end)
    return write_end


def outer(spec_path: str) -> None:
    """Stage, drop privileges, and become bubblewrap (see the module docstring);
    with a warm template, start bubblewrap and have the template fork the kernel
    into it (:func:`_warm`)."""
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.umask(0o077)
    if spec.get("stage"):
        _stage(spec["stage"])
    info_fd = os.open(spec["info_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    warm = spec.get("warm")
    conn = (
        _connect(warm["socket"], float(warm["wait"]), int(warm.get("pid", 0)))
        if warm
        else None
    )
    # opened before dropping privileges: the file belongs to the grader
    info_reader = os.open(spec["info_file"], os.O_RDONLY) if conn else -1
    drop = spec.get("drop")
    if drop:
        _drop(int(drop["uid"]), int(drop["gid"]))
    die_with_parent(int(spec["owner"]))
    log_fd = _log_reader()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.set_inheritable(info_fd, True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if warm and conn is None:
        os.write(
            2, b"warm start: no answer from the template; this kernel starts cold\n"
        )
    if conn is not None:
        _warm(spec, warm, conn, info_fd, info_reader)
    argv = [a.replace("{info_fd}", str(info_fd)) for a in spec["argv"]]
    bwrap = os.fork()
    if bwrap == 0:
        os.execv(argv[0], argv)
    os.close(info_fd)
    _watch(bwrap, float(spec.get("wall") or 0))
    while True:
        try:
            _, status = os.waitpid(bwrap, 0)
            break
        except InterruptedError:
            continue
    os._exit(_exit_code(status))


def _watch(bwrap: int, wall: float) -> None:
    """Kill the sandbox (bubblewrap, ``bwrap``), and this process with it, once the
    kernel has run ``wall`` seconds (0: no limit), or when this process is told to
    end (SIGTERM)."""

    def end(signum, frame):
        if signum == signal.SIGALRM:
            os.write(
                2,
                f"wall-time limit: the kernel ran {wall:g} s; its sandbox was "
                "killed\n".encode(),
            )
        with contextlib.suppress(OSError):
            os.kill(bwrap, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, end)
    if wall > 0:
        signal.signal(signal.SIGALRM, end)
        signal.setitimer(signal.ITIMER_REAL, wall)


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (or is a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def _connect(path: str, wait: float, pid: int = 0):
    """A connection to the warm template at ``path``, or ``None``: at once when the
    template (process ``pid``) is gone, else after waiting up to ``wait`` seconds
    for it to finish importing (its socket appears only once it accepts, so a
    refused connection means it has exited)."""
    import socket
    import time

    deadline = time.monotonic() + wait
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except OSError as exc:
            conn.close()
            if isinstance(exc, ConnectionRefusedError) or (pid and process_gone(pid)):
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)


def _warm(spec: dict, warm: dict, conn, info_fd: int, info_reader: int) -> None:
    """Start bubblewrap (holding an empty sandbox), ask the template to fork the
    kernel into it, forward interrupts to the kernel, and exit as bubblewrap would
    have: with the kernel's status, or 128 + the signal that killed it."""
    bwrap, ready_r = _hold_sandbox(warm, conn, info_fd)
    _watch(bwrap, float(spec.get("wall") or 0))
    pidfd, kernel = _fork_from_template(warm, conn, info_reader)

    def interrupt(signum, frame):
        if pidfd is not None:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGINT)
            except OSError:
                pass

    signal.signal(signal.SIGINT, interrupt)
    status = _kernel_status(ready_r, kernel) if kernel is not None else None
    # The kernel is gone: so goes the sandbox (and whatever the kernel left in it).
    os.kill(bwrap, signal.SIGKILL)
    os.waitpid(bwrap, 0)
    os._exit(1 if status is None else _exit_code(status))


def _hold_sandbox(warm: dict, conn, info_fd: int) -> tuple[int, int]:
    """Start bubblewrap with ``hold`` as its command; return its PID and the pipe
    ``hold`` reports on, once the sandbox is ready (else exit as bubblewrap did).
    The sandbox is ready once its command runs: bubblewrap reports the namespaces
    (the info file) before it has finished building the file system, so ``hold``
    writes one byte when it runs."""
    import select

    ready_r, ready_w = os.pipe()
    argv = [a.replace("{info_fd}", str(info_fd)) for a in warm["argv"]]
    argv.append(str(ready_w))
    bwrap = os.fork()
    if bwrap == 0:
        conn.close()
        os.close(ready_r)
        os.set_inheritable(ready_w, True)
        os.execv(argv[0], argv)
    os.close(info_fd)
    os.close(ready_w)
    ready, _, _ = select.select([ready_r], [], [], 60)
    if not ready or not os.read(ready_r, 1):
        done, status = os.waitpid(bwrap, os.WNOHANG)
        if not done:
            os.kill(bwrap, signal.SIGKILL)
            _, status = os.waitpid(bwrap, 0)
        os._exit(_exit_code(status))
    return bwrap, ready_r


def _fork_from_template(warm: dict, conn, info_reader: int):
    """Send the template the request (with the sandbox's namespaces and this
    process's standard streams) and receive the kernel's pidfd and PID; ``(None,
    None)`` when the template did not start it."""
    import socket
    import struct

    info = json.loads(os.pread(info_reader, 1 << 16, 0))
    os.close(info_reader)
    request = dict(warm["request"], info=info)
    data = json.dumps(request).encode()
    socket.send_fds(conn, [struct.pack("!Q", len(data))], [0, 1, 2])
    conn.sendall(data)
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)
    pidfd = kernel = None
    try:
        message, fds, _, _ = socket.recv_fds(conn, 4, 1)
        if fds and len(message) == 4:
            pidfd, (kernel,) = fds[0], struct.unpack("!i", message)
    except OSError:
        pass
    if kernel is None:
        os.write(
            2,
            b"warm start: the template did not start this kernel (why: in the "
            b"template's messages, in the run's workers.log)\n",
        )
    return pidfd, kernel


def _kernel_status(ready_r: int, kernel: int) -> int | None:
    """The kernel's wait status, from ``hold`` (the kernel's parent), which
    reports (pid, wait status) of each child it reaps; ``None`` if ``hold`` ended
    first."""
    import struct

    pending = b""
    while True:
        try:
            chunk = os.read(ready_r, 4096)
        except InterruptedError:
            continue
        if not chunk:
            return None
        pending += chunk
        while len(pending) >= 8:
            pid, code = struct.unpack("!ii", pending[:8])
            pending = pending[8:]
            if pid == kernel:
                return code


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def hold(ready_fd: int) -> None:
    """The first command of a warm sandbox, its PID 1: say it is ready (one byte on
    ``ready_fd``), then adopt the kernel (see ``_warm_template.py``), reap every
    process that ends, and report ``(pid, wait status)`` of each on ``ready_fd``,
    until the sandbox is torn down."""
    import struct

    # No process of the sandbox can kill PID 1, and a signal it ignores is not even
    # delivered: ignore them all. Child ends are taken synchronously.
    for number in range(1, signal.NSIG):
        if number not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    os.write(ready_fd, b"1")
    os.set_blocking(ready_fd, False)  # never wait on the reader: keep reaping
    while True:
        signal.sigwaitinfo({signal.SIGCHLD})
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            with contextlib.suppress(OSError):
                os.write(ready_fd, struct.pack("!ii", pid, status))


def _set(limit: int, value: int) -> None:
    if value > 0:
        resource.setrlimit(limit, (value, value))


def apply_limits(
    address_space: int, cpu: int, nproc: int, fsize: int, nofile: int
) -> None:
    """A grading kernel's resource limits (0 = keep the current one); no core files.
    Used by ``inner`` and by the warm template's kernels alike."""
    _set(resource.RLIMIT_AS, address_space)
    if cpu > 0:
        # SIGXCPU at the soft limit; SIGKILL a second later should it be ignored.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _set(resource.RLIMIT_NPROC, nproc)
    _set(resource.RLIMIT_FSIZE, fsize)
    _set(resource.RLIMIT_NOFILE, nofile)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def inner(argv: list[str]) -> None:
    """Apply ``argv = [AS, CPU, NPROC, FSIZE, NOFILE, "--", *command]`` (0 = keep
    the current limit) and become the command."""
    if len(argv) < 7 or argv[5] != "--":
        sys.exit("usage: _sandbox_exec.py inner AS CPU NPROC FSIZE NOFILE -- CMD...")
    apply_limits(*(int(a) for a in argv[:5]))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    command = argv[6:]
    os.execv(command[0], command)


def main(argv: list[str]) -> None:
    if argv[:1] == ["outer"] and len(argv) == 2:
        outer(argv[1])

    elif argv[:1] == ["inner"]:
        inner(argv[1:])
    elif len(argv) == 2 and argv[0] == "hold":
        hold(int(argv[1]))
    else:
        sys.exit(
            "usage: _sandbox_exec.py outer SPEC | inner AS CPU NPROC ... -- CMD"
            " | hold FD"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
