"""The warm template: a process that has imported torch, numpy, IPython, ipykernel
and ``course_lib`` once, and forks one grading kernel per submission into that
submission's own, freshly built bubblewrap sandbox.

Run as a script by :class:`course_lib.grading.kernels.sandbox.SandboxLauncher`
(``python -I _warm_template.py SOCKET PARENT_FD EDITION``), never imported by the
grading tool: the template must hold no reference implementation, so it imports
``course_lib`` from the grading edition folder ``EDITION`` (or, when the launcher
has no edition, from wherever the kernels would find it). See
:mod:`course_lib.grading.kernels.sandbox` for why the kernels it forks are as isolated
as kernels started from scratch.

Protocol (one connection per kernel, from ``_sandbox_exec.py outer``):

1. The template accepts and forks at once (it never reads a request, so nothing of
   one submission is ever in the template's memory). The fork, ``C``, reads one
   JSON request plus three file descriptors (the kernel's stdin, stdout, stderr).
2. ``C`` opens the namespaces of the sandbox's first process (``/proc/PID/ns/*``),
   checks them against the namespace numbers bubblewrap reported (so a reused PID
   cannot send it elsewhere), drops to the sandbox user (when root), joins the user
   namespace that owns them, then mount, IPC, UTS, network, cgroup and PID, then
   the sandbox's own (nested) user namespace, chroots to the sandbox's root, and
   forks ``M``, born inside the sandbox's PID namespace.
3. ``M`` forks the kernel ``K``, sends ``K``'s pidfd and PID (as the sandbox sees
   it) and exits: ``K`` is adopted by the sandbox's PID 1, ``hold``
   (``_sandbox_exec.py``), which nothing in the sandbox can signal, as the cold
   kernel is the child of bubblewrap's PID 1. ``hold`` reaps ``K`` and reports its
   wait status to the kernel's launcher.
4. ``K`` becomes a session leader, takes the three descriptors, closes all others,
   drops every capability (bounding, ambient, permitted, effective, inheritable),
   sets ``no_new_privs``, the environment, the resource limits, the thread count and
   fresh random seeds, and runs ``ipykernel_launcher``: the ZMQ context and sockets
   are created only now, in the sandbox.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import traceback

_USER_FLAG = 0x10000000
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
_NAMESPACES = (
    ("user", _USER_FLAG),
    ("mnt", 0x00020000),
    ("ipc", 0x08000000),
    ("uts", 0x04000000),
    ("net", 0x40000000),
    ("cgroup", 0x02000000),
    ("pid", 0x20000000),
)
# bubblewrap's --info-fd keys for the namespaces it made (no key for "user")
_INFO_KEYS = {
    "mnt": "mnt-namespace",
    "ipc": "ipc-namespace",
    "uts": "uts-namespace",
    "net": "net-namespace",
    "cgroup": "cgroup-namespace",
    "pid": "pid-namespace",
}
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
_MAX_REQUEST = 1 << 20


def _sandbox_exec():
    """``_sandbox_exec.py`` beside this file (its libc checks and the kernel limits:
    one copy for the cold and the warm kernels). Loaded by path: this script runs
    with ``-I``, which leaves its own folder off ``sys.path``."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_exec.py")
    spec = importlib.util.spec_from_file_location("_course_sandbox_exec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_EXEC = _sandbox_exec()
_check = _EXEC._check


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    return libc


# ------------------------------------------------------------------ the template


def _warm_imports(edition: str) -> None:
    """Import what every grading kernel imports. With an ``edition`` folder, the
    ``course_lib`` imported is the one in it, never the installed package."""
    if edition:
        # An editable install puts a finder for course_lib on sys.meta_path; it
        # would load the full package. Drop it, and put the edition first.
        sys.meta_path[:] = [
            f
            for f in sys.meta_path
            if not (
                "__editable__" in getattr(f, "__module__", "")
                and "course_lib" in getattr(f, "__module__", "")
            )
        ]
        sys.path.insert(0, edition)
    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401
    import IPython  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import zmq  # noqa: F401

    import course_lib
    import course_lib.checks

    if edition and not os.path.realpath(course_lib.__file__).startswith(
        os.path.realpath(edition) + os.sep
    ):
        sys.exit(
            f"warm template: course_lib came from {course_lib.__file__}, not from "
            f"the grading edition {edition}; refusing to serve kernels"
        )
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(course_lib.checks.__path__):
        if info.name.startswith("ex"):
            importlib.import_module(f"course_lib.checks.{info.name}")


def serve(socket_path: str, parent_fd: int, edition: str) -> None:
    """Import, listen on ``socket_path``, fork one child per connection; when
    ``parent_fd`` (a pipe from the grading process and its workers) reaches end of
    file, remove the socket and exit."""
    os.chdir("/")
    _warm_imports(edition)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = socket_path + ".new"
    listener.bind(staging)
    os.chmod(staging, 0o600)
    listener.listen(64)
    os.rename(staging, socket_path)  # the socket appears only once it accepts
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    while True:
        ready, _, _ = select.select([listener, parent_fd], [], [])
        if parent_fd in ready:
            _remove(socket_path)
            os._exit(0)
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                listener.close()
                os.close(parent_fd)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = _child(conn)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        conn.close()


def _remove(socket_path: str) -> None:
    """Remove the socket, its folder, and the folder that holds that one if it is
    now empty (the grading process's folder of kernel files)."""
    folder = os.path.dirname(socket_path)
    for remove, path in (
        (os.unlink, socket_path),
        (os.rmdir, folder),
        (os.rmdir, os.path.dirname(folder)),
    ):
        try:
            remove(path)
        except OSError:
            return


# ------------------------------------------------------------------ one submission


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    if len(header) != 8:
        raise OSError("warm template: truncated request")
    (size,) = struct.unpack("!Q", header)
    if size > _MAX_REQUEST:
        raise OSError("warm template: request too large")
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("warm template: truncated request")
        data += chunk
    return json.loads(data), list(fds)


def _child(conn: socket.socket) -> int:
    """``C``: join the sandbox and fork ``M``, which forks the kernel and reports
    its pidfd and PID (steps 2 and 3 of the module docstring)."""
    request, fds = _recv_request(conn)
    if len(fds) != 3:
        raise OSError("warm template: expected the kernel's stdin, stdout, stderr")
    libc = _libc()
    info = request["info"]
    pid = int(info["child-pid"])
    ns_fds = {}
    for name, _flag in _NAMESPACES:
        fd = os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        key = _INFO_KEYS.get(name)
        if key is not None and os.fstat(fd).st_ino != int(info[key]):
            raise OSError(f"warm template: process {pid} is not the sandbox")
        ns_fds[name] = fd
    # setns(mnt) alone leaves this process's root at the namespace's first mount,
    # not where bubblewrap pivoted to: take the sandbox's root as it sees it, and
    # chroot there once inside (as nsenter --root does).
    root_fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    drop = request.get("drop")
    if drop:
        os.setgroups([])
        os.setresgid(int(drop["gid"]), int(drop["gid"]), int(drop["gid"]))
        os.setresuid(int(drop["uid"]), int(drop["uid"]), int(drop["uid"]))
    # bubblewrap's --disable-userns nests a second user namespace inside the one that
    # owns the other namespaces: join the owner first (capabilities there allow the
    # other joins), the sandbox process's own user namespace last (so the kernel,
    # like the cold one, cannot make user namespaces), and only then chroot (a
    # chrooted process may not change user namespace).
    owner = fcntl.ioctl(ns_fds["mnt"], _NS_GET_USERNS)
    inner = ns_fds.pop("user")
    if os.fstat(owner).st_ino == os.fstat(inner).st_ino:
        os.close(inner)
        inner = -1
    _check(libc.setns(owner, _USER_FLAG), "setns(user)")
    os.close(owner)
    for name, flag in _NAMESPACES:
        if name in ns_fds:
            _check(libc.setns(ns_fds[name], flag), f"setns({name})")
            os.close(ns_fds[name])
    if inner >= 0:
        _check(libc.setns(inner, _USER_FLAG), "setns(user, the sandbox's own)")
        os.close(inner)
    os.fchdir(root_fd)
    os.chroot(".")
    os.close(root_fd)
    middle = os.fork()  # born in the sandbox's PID namespace
    if middle == 0:
        # Fork the kernel and leave at once: the kernel is adopted by the sandbox's
        # PID 1 (``hold``), as the cold kernel is the child of bubblewrap's PID 1,
        # so its parent is a process that nothing in the sandbox can signal. hold
        # reaps it and reports its wait status.
        code = 1
        try:
            kernel = os.fork()
            if kernel == 0:
                _run_kernel(conn, request, fds, libc)
            pidfd = os.pidfd_open(kernel)
            socket.send_fds(conn, [struct.pack("!i", kernel)], [pidfd])
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(middle, 0)
    return 0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1


def _run_kernel(conn: socket.socket, request: dict, fds: list[int], libc) -> None:
    """The kernel process: run it, then exit with its code (never returns)."""
    code = 1
    try:
        conn.close()
        code = _kernel(request, fds, libc)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        with _suppress():
            import atexit

            atexit._run_exitfuncs()
        with _suppress():
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], Exception)


def _drop_capabilities(libc) -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; two words
    _check(libc.capset(header, data), "capset")
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")):
                if int(line.split()[1], 16) != 0:
                    raise OSError(f"warm template: capabilities left: {line.strip()}")


def _kernel(request: dict, fds: list[int], libc) -> int:
    """``K``: confine this process like ``_sandbox_exec.py inner``, then run the
    kernel the command line names."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    _drop_capabilities(libc)
    os.chdir(request["cwd"])
    os.umask(0o077)  # as the cold kernel, which inherits it from `outer`
    os.environ.clear()
    os.environ.update(request["env"])
    _EXEC.apply_limits(*(int(v) for v in request["limits"]))
    for name in ("SIGINT", "SIGTERM", "SIGCHLD", "SIGPIPE"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # A fresh process would seed these from the operating system; the template's
    # state is shared by every fork, so seed again.
    import random

    import numpy
    import torch

    random.seed()
    numpy.random.seed()  # noqa: NPY002 (the legacy global state a student may use)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    # No thread pool was started in the template (libgomp does not survive a fork);
    # the count a fresh kernel would use is set here, in the kernel.
    torch.set_num_threads(
        int(threads)
        if threads.isdigit() and int(threads) > 0
        else len(os.sched_getaffinity(0))
    )
    argv = request["argv"]
    import ipykernel_launcher

    sys.argv = [ipykernel_launcher.__file__, *argv]
    sys.path.insert(0, request["cwd"])
    from ipykernel import kernelapp

    if sys.path[0] == request["cwd"]:
        del sys.path[0]  # as ipykernel_launcher does; IPython adds it back
    kernelapp.launch_new_instance()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: _warm_template.py SOCKET PARENT_FD EDITION")
    serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])
