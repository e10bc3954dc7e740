"""Run every grading kernel in a sandbox built from bubblewrap and Linux namespaces.

nbgrader runs a student's notebook in a Jupyter kernel with the grader's permissions,
next to the solutions, the gradebook and the other students' work. With
:class:`SandboxLauncher` each kernel runs instead in a ``bwrap`` sandbox:

* **own namespaces**: user, mount, PID, network, IPC, UTS and cgroup. The network
  namespace has only its own loopback: no connection reaches the host or anything
  else. In the PID namespace the kernel sees only its own processes: it can neither
  signal the grader nor survive the sandbox (when the sandbox's first process dies,
  the kernel kills every process left in the namespace).
* **file system**: read-only binds of what Python needs and nothing else (``/usr``,
  the Python installation, the virtual environment, the ``course_lib`` package);
  writable, size-limited tmpfs mounts for ``/tmp``, ``/dev/shm`` and the working
  directory (where the submission's files are bound read-only); a generated
  ``/etc/passwd``. The course folder, the solutions, the gradebook, the other
  submissions and the home folder do not exist inside. Nothing the kernel writes
  reaches the host's disk.
* **no reference implementation**: ``course autograde`` binds the *grading edition*
  of ``course_lib`` over the package folder (written once per run,
  :func:`course_lib.grading.editions.library.write_grading_edition`): the exercise
  targets are stubs, the public checks use stored values, and the hidden graders only
  make their planned calls; the grading process judges them
  (:mod:`course_lib.grading.notebooks.integrity`). Importing, cloning or re-reading the
  library's code in the kernel finds only the stubs. (An assignment whose hidden
  grader could not be planned would keep the full package; none does: ex10's
  training run gets the student's bias through the recorded calls.)
* **Jupyter's sockets**: the kernel listens on Unix sockets (``transport="ipc"``) in
  a tmpfs inside the sandbox, which the grader reaches through
  ``/proc/<pid>/root/...``; TCP would need the host's network.
* **limits**: memory (``RLIMIT_AS``), CPU time (``RLIMIT_CPU``), processes and
  threads (``RLIMIT_NPROC``, set inside the sandbox's user namespace, so sandboxes
  never count against each other), file size, open files; the wall time is enforced
  from outside by :class:`~course_lib.grading.kernels.start.KernelContext`. When the
  grader runs as root, the sandbox runs as an unprivileged user (``nobody`` by default):
  Linux does not apply ``RLIMIT_NPROC`` to root.
* the environment is cleared (no instructor variables, tokens or database URLs
  reach the kernel).
* **warm start**: a new Python that imports torch costs seconds, more than most
  submissions. So a grading run starts one *template* (``_warm_template.py``,
  :meth:`SandboxLauncher.warm_up`; the grading workers, forked after, share it)
  that imports torch, numpy, IPython, ipykernel and the grading edition once, and
  each kernel is forked from it. The sandbox is built
  exactly as for a cold kernel, with a placeholder command (``hold``, its PID 1);
  once that runs, a fork of the template joins its namespaces (checked against the
  ones bubblewrap reported), chroots to its root, and forks the kernel there, which
  is adopted by ``hold``. The kernel then drops every capability, sets
  ``no_new_privs``, the limits, the environment and fresh random seeds, and only
  then creates its ZMQ sockets. Why this isolates as well as a cold start: the
  template never reads a request or runs student code (only its forks do), so
  nothing of a submission is ever in its memory; a fork's writes go to its own
  copy of memory (copy-on-write), never back to the template or to the next fork;
  the kernel runs in the same namespaces, file system, limits and user as a cold
  kernel, with no file descriptor of the template left open; and whatever it
  writes lives in its sandbox's tmpfs, which goes with the sandbox. Where the
  template cannot be used (no ``fork`` or pidfd, a bubblewrap without
  ``--as-pid-1``, ``COURSE_WARM_START=0``), kernels start cold, and the run says so
  in one line.

:func:`sandbox_problem` says in one sentence why the sandbox cannot be built on this
machine (``None`` when it can); ``course autograde`` refuses to grade without the
sandbox unless told ``--unsafe-no-sandbox``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .guard import owned_tempdir
from .start import KernelContext, KernelLauncher, KernelLimits, format_bytes

__all__ = [
    "SandboxError",
    "SandboxLauncher",
    "SandboxSettings",
    "grading_edition",
    "grading_launcher",
    "sandbox_problem",
    "with_grading_edition",
]

_EXEC_SCRIPT = Path(__file__).with_name("_sandbox_exec.py")
_TEMPLATE_SCRIPT = Path(__file__).with_name("_warm_template.py")
# How long a kernel waits for the template to finish importing.
_TEMPLATE_WAIT = 90.0
_OFF_VALUES = {"0", "no", "off", "false"}
# Inside the sandbox: Jupyter's Unix sockets and the connection file.
_RUN_DIR = "/run/kernel"
_IPC_PREFIX = f"{_RUN_DIR}/ipc"
_CONNECTION_FILE = f"{_RUN_DIR}/connection.json"
_HOME = "/tmp/home"
_NOBODY = 65534
# Variables passed from the grader's environment to the kernel (all others are
# cleared): thread counts and plotting set-up, nothing secret.
_PASSED_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MPLBACKEND",
    "PYDEVD_DISABLE_FILE_VALIDATION",
    "PYTHONHASHSEED",
    "TZ",
    # set by nbgrader while it autogrades (validates): a notebook may skip optional
    # work then (ex10's "Try it" training run)
    "NBGRADER_EXECUTION",
)


_BWRAP_OPTIONS: dict[str, frozenset[str]] = {}


class SandboxError(RuntimeError):
    """The sandbox cannot be built here; the message says why and what to do."""


@dataclass(frozen=True)
class SandboxSettings:
    """What a sandboxed kernel gets besides the :class:`KernelLimits`.

    ``max_processes``: processes and threads of the whole sandbox (``RLIMIT_NPROC``;
    a Python kernel with torch uses about 15). ``scratch_bytes``: size of each
    writable tmpfs (``/tmp`` and the working directory; also the largest file).
    ``shm_bytes``: size of ``/dev/shm``. ``user``: the (uid, gid) the sandbox runs as
    when the grader is root. ``bwrap``: the bubblewrap program (default: found on
    ``PATH``). ``protected``: folders that must never be visible inside (the course
    folder); building a sandbox that would bind one of them or a folder above one
    fails. ``extra_ro_binds``: more host paths to bind read-only (data sets).
    ``library_edition``: a folder bound over the ``course_lib`` package, so that the
    kernel sees it instead (the grading edition, written by
    :func:`course_lib.grading.editions.library.write_grading_edition`: no reference
    implementation, no hidden expected value); ``full_library_assignments``: the
    assignments (the kernel's folder, or a notebook in it, has the name) whose
    kernels see the full package all the same. ``term``: the course's term
    (:meth:`course_lib.grading.editions.term.Term.to_json`; empty for none), whose variants'
    and seed's hidden calls the grading edition is planned for too.
    """

    max_processes: int = 64
    scratch_bytes: int = 256 << 20
    shm_bytes: int = 64 << 20
    max_open_files: int = 1024
    user: tuple[int, int] = (_NOBODY, _NOBODY)
    bwrap: str | None = None
    protected: tuple[str, ...] = ()
    extra_ro_binds: tuple[str, ...] = ()
    library_edition: str | None = None
    full_library_assignments: tuple[str, ...] = ()
    warm_start: bool = True
    term: str = ""


@dataclass
class _Template:
    """A warm template (see :mod:`._warm_template`): started by one process, used by
    it and by the grading workers forked from it after."""

    process: subprocess.Popen
    socket: str
    pipe: int  # write end; the template exits once every copy of it is closed
    owner: int  # the process that started it (and alone can wait for it)

    def exit_status(self) -> int | None:
        """The template's exit status once it has exited (``-1`` where this process
        cannot wait for it: a worker forked after it started), else ``None``."""
        if self.owner == os.getpid():
            return self.process.poll()
        from ._sandbox_exec import process_gone

        return -1 if process_gone(self.process.pid) else None


@dataclass
class _Kernel:
    """The host-side state of one sandboxed kernel."""

    folder: Path
    info_file: Path
    launched: bool = False


def _is_root() -> bool:
    return os.geteuid() == 0


def _within(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _python_roots() -> list[str]:
    """The folders the kernel's Python needs: installation, environment, the
    ``course_lib`` package (an editable install lives outside the environment)."""
    import course_lib

    roots = {
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
        os.path.dirname(os.path.realpath(course_lib.__file__)),
    }
    out: list[str] = []
    for root in sorted(os.path.realpath(r) for r in roots):
        if root == "/" or not os.path.isdir(root):
            continue
        if _within(root, "/usr") or any(_within(root, kept) for kept in out):
            continue
        out.append(root)
    # The environment's own path (a symlink, or a copy that `python -m venv` links
    # back to the installation) must exist too, as the kernel is started through it.
    for path in (sys.prefix, os.path.dirname(sys.executable)):
        if not any(_within(os.path.realpath(path), r) for r in out + ["/usr"]):
            out.append(os.path.realpath(path))
    return out


def _etc_files(folder: Path, uid: int, gid: int) -> dict[str, Path]:
    """A minimal ``/etc``: the sandbox user, its group, localhost."""
    files = {
        "passwd": f"root:x:0:0::/root:/usr/sbin/nologin\n"
        f"student:x:{uid}:{gid}::{_HOME}:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nstudent:x:{gid}:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    }
    out = {}
    for name, text in files.items():
        path = folder / f"etc-{name}"
        path.write_text(text)
        path.chmod(0o644)
        out[f"/etc/{name}"] = path
    return out


class _Binds:
    """Where bubblewrap binds each host path from. As root (``stage`` is a folder),
    each path is staged first: ``_sandbox_exec.py outer`` copies or links it to a
    numbered name under ``stage`` that the unprivileged user can read."""

    def __init__(self, stage: Path | None) -> None:
        self.root = stage
        self.mounts: list[list[str]] = []

    def source(self, path: str | Path) -> str:
        if self.root is None:
            return str(path)
        name = str(len(self.mounts))
        self.mounts.append([str(path), name])
        return str(self.root / name)

    def stage(self) -> dict | None:
        """What ``outer`` stages before it starts bubblewrap (``None``: nothing)."""
        if self.root is None:
            return None
        return {"root": str(self.root), "mounts": self.mounts}


class SandboxLauncher(KernelLauncher):
    """Start each grading kernel inside a bubblewrap sandbox (see the module
    docstring); the :class:`~course_lib.grading.kernels.start.KernelLimits` of the
    context apply inside, plus :class:`SandboxSettings`."""

    def __init__(self, settings: SandboxSettings | None = None) -> None:
        self.settings = settings or SandboxSettings()
        self._kernels: dict[int, _Kernel] = {}
        self._base: dict[int, Path] = {}
        self._template_state: _Template | None = None
        self._template_lock = threading.Lock()
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"settings": self.settings}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["settings"])

    # ---------------------------------------------------------------- set-up

    def bwrap_path(self) -> str:
        path = self.settings.bwrap or shutil.which("bwrap")
        if not path or not os.access(path, os.X_OK):
            raise SandboxError(
                "bubblewrap (the `bwrap` program) is not installed; install it with "
                "`apt-get install bubblewrap` (Debian/Ubuntu) or `dnf install "
                "bubblewrap` (Fedora)"
            )
        return path

    def bwrap_options(self) -> frozenset[str]:
        """The options this bubblewrap knows (``--disable-userns`` came in 0.8,
        ``--size`` in 0.7); older ones still sandbox, without those extras."""
        path = self.bwrap_path()
        known = _BWRAP_OPTIONS.get(path)
        if known is None:
            try:
                text = subprocess.run(
                    [path, "--help"], capture_output=True, text=True, timeout=30
                ).stdout
            except (OSError, subprocess.SubprocessError):
                text = ""
            known = frozenset(re.findall(r"^\s*(--[a-z0-9-]+)", text, flags=re.M))
            _BWRAP_OPTIONS[path] = known
        return known

    def _uid_gid(self) -> tuple[int, int]:
        return self.settings.user if _is_root() else (os.getuid(), os.getgid())

    def _base_dir(self) -> Path:
        """A folder of this process for the kernels' host-side files; others may
        pass through it (mode 0711) but not list it."""
        pid = os.getpid()
        with self._lock:
            base = self._base.get(pid)
            if base is None or not base.is_dir():
                base = owned_tempdir("course-sandbox-")
                base.chmod(0o711)
                self._base[pid] = base
            return base

    def ro_binds(self) -> list[str]:
        """Host paths bound read-only (besides ``/usr`` and the files made for the
        kernel), after checking that none of them exposes a protected folder."""
        binds = _python_roots() + [
            os.path.realpath(p) for p in self.settings.extra_ro_binds
        ]
        for path in binds:
            for protected in self.settings.protected:
                if _within(protected, path):
                    raise SandboxError(
                        f"the sandbox would have to show {path} to student code, "
                        f"and that contains {protected}; move the Python environment "
                        "or course_lib out of the course folder's parents"
                    )
        return binds

    # ------------------------------------------------------ the kernel hooks

    def prepare(self, manager, context: KernelContext) -> None:
        folder = Path(tempfile.mkdtemp(prefix="kernel-", dir=self._base_dir()))
        folder.chmod(0o711)
        state = _Kernel(folder=folder, info_file=folder / "bwrap-info.json")
        with self._lock:
            self._kernels[id(manager)] = state
        manager.transport = "ipc"
        manager.ip = _IPC_PREFIX
        manager.connection_file = str(folder / "connection.json")

    def wrap_for(
        self, manager, command: list[str], context: KernelContext
    ) -> list[str]:
        state = self._kernels.get(id(manager))
        if state is None:  # started outside prepare(): nothing to confine it with
            raise SandboxError("the sandbox was not prepared for this kernel")
        connection = Path(manager.connection_file)
        command = [_CONNECTION_FILE if a == str(connection) else a for a in command]
        uid, gid = self._uid_gid()
        if _is_root():
            os.chown(connection, uid, gid)
        connection.chmod(0o400)
        cwd = os.path.realpath(manager.launch_cwd or os.getcwd())
        spec = self._spec(state, command, context, cwd, connection)
        spec_path = state.folder / "spec.json"
        spec_path.write_text(json.dumps(spec))
        spec_path.chmod(0o600)
        return [sys.executable, "-I", "-S", str(_EXEC_SCRIPT), "outer", str(spec_path)]

    def after_launch(self, manager, process, context: KernelContext) -> None:
        state = self._kernels.get(id(manager))
        if state is None:
            return
        pid = self._sandbox_pid(state, process)
        if pid is not None:
            # The kernel's sockets live in the sandbox's own /run; its first process
            # shows that file system under /proc/<pid>/root.
            manager.ip = f"/proc/{pid}/root{_IPC_PREFIX}"
        state.launched = True

    def cleanup(self, manager, context: KernelContext) -> None:
        with self._lock:
            state = self._kernels.pop(id(manager), None)
        if state is not None:
            shutil.rmtree(state.folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                state.folder.parent.rmdir()  # only when no other kernel uses it

    def describe(self, context: KernelContext) -> str:
        limits, s = context.limits, self.settings
        wall = "none" if limits.wall_seconds is None else f"{limits.wall_seconds:g} s"
        who = f"uid {self._uid_gid()[0]}"
        try:
            sized = "--size" in self.bwrap_options()
        except SandboxError:
            sized = True
        scratch = format_bytes(s.scratch_bytes) if sized else "unlimited size"
        problem = self.warm_problem()
        start = (
            "warm start (each kernel forked from a template that imported torch once)"
            if problem is None
            else f"cold start ({problem})"
        )
        return (
            f"bubblewrap sandbox ({who}, no network, read-only Python, private "
            f"tmpfs of {scratch}), memory "
            f"{format_bytes(limits.memory)} (RLIMIT_AS), wall time {wall}, CPU time "
            f"{limits.effective_cpu_seconds or 'unlimited'} s, at most "
            f"{s.max_processes} processes, {start}"
        )

    # ------------------------------------------------------------ warm start

    def warm_problem(self) -> str | None:
        """Why kernels cannot be forked from a warm template here (``None``: they
        can); the kernels then start cold, as a fresh Python each."""
        if not self.settings.warm_start:
            return "warm start switched off"
        if os.environ.get("COURSE_WARM_START", "").strip().lower() in _OFF_VALUES:
            return "warm start switched off by COURSE_WARM_START"
        import socket

        if not sys.platform.startswith("linux") or not all(
            hasattr(mod, name)
            for mod, name in (
                (os, "fork"),
                (os, "pidfd_open"),
                (socket, "send_fds"),
                (__import__("signal"), "pidfd_send_signal"),
            )
        ):
            return "this platform has no fork, pidfd or descriptor passing"
        try:
            if "--as-pid-1" not in self.bwrap_options():
                return "this bubblewrap has no --as-pid-1 (0.5 or later has)"
        except SandboxError as exc:
            return str(exc)
        return None

    def _warm_for(self, command: list[str], cwd: str) -> str | None:
        """The socket of the template that can serve this kernel, or ``None`` (then
        it starts cold; a reason is said once per process)."""
        if command[1:3] != ["-m", "ipykernel_launcher"]:
            return None  # not a Jupyter kernel (the sandbox probe): nothing to warm
        problem = self.warm_problem()
        if (
            problem is None
            and self.settings.library_edition
            and not self._edition_for(cwd)
        ):
            problem = "this assignment's kernels use the full library"
        template = None
        if problem is None:
            try:
                template = self._template()
            except OSError as exc:
                problem = f"the template could not be started: {exc}"
        status = None if template is None else template.exit_status()
        if problem is None and status is not None:
            problem = "the template exited" + (
                f" with status {status}" if status >= 0 else ""
            )
        if problem is not None:
            if problem not in self._said:
                self._said.add(problem)
                print(f"kernels start cold: {problem}", file=sys.stderr)
            return None
        return template.socket

    def warm_up(self, assignment: str, log_path: str | None = None) -> None:
        """Start the template now, if this assignment's kernels can be forked from
        it, so that its imports overlap the rest of the run's start; the grading
        workers forked after this share it. ``log_path``: where its errors go (the
        run's workers.log); else this process's standard error."""
        if self.warm_problem() is not None or (
            self.settings.library_edition
            and assignment in self.settings.full_library_assignments
        ):
            return
        with contextlib.suppress(OSError):
            self._template(log_path)

    def _template(self, log_path: str | None = None) -> _Template:
        """The template of this process, or the one inherited from the process
        that forked it; started on first use."""
        with self._template_lock:  # not self._lock: _base_dir takes that one
            if self._template_state is None:
                self._template_state = self._start_template(log_path)
            return self._template_state

    def _start_template(self, log_path: str | None) -> _Template:
        # short names: a Unix socket's path has at most 107 bytes
        folder = Path(tempfile.mkdtemp(prefix="tpl-", dir=self._base_dir()))
        folder.chmod(0o700)
        sock = str(folder / "sock")
        read_end, write_end = os.pipe()
        edition = self.settings.library_edition
        log = None
        try:
            # The template's messages (a kernel it could not start) go to the run's
            # log; it removes its socket and folder when it exits.
            if log_path is not None:
                log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-B",
                    str(_TEMPLATE_SCRIPT),
                    sock,
                    str(read_end),
                    os.path.dirname(os.path.realpath(edition)) if edition else "",
                ],
                env=self._kernel_env(),
                cwd="/",
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,
                stdout=log if log is not None else 2,
                stderr=log,
                start_new_session=True,
            )
        except OSError:
            os.close(write_end)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            os.close(read_end)
            if log is not None:
                os.close(log)
        return _Template(
            process=process, socket=sock, pipe=write_end, owner=os.getpid()
        )

    def cool_down(self) -> None:
        """Let go of the template: it exits once no process holds it (its owner
        waits for that, up to 10 s, then kills it); it also exits by itself when
        the processes holding it exit."""
        with self._template_lock:
            template, self._template_state = self._template_state, None
        if template is None:
            return
        with contextlib.suppress(OSError):
            os.close(template.pipe)
        if template.owner != os.getpid():
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            template.process.wait(timeout=10)
        if template.process.poll() is None:
            template.process.kill()
            template.process.wait()
        shutil.rmtree(os.path.dirname(template.socket), ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(os.path.dirname(template.socket)))

    # ------------------------------------------------------------ internals

    def _edition_for(self, cwd: str) -> bool:
        """Whether the kernel started in ``cwd`` sees the library edition."""
        s = self.settings
        if not s.library_edition:
            return False
        names = {os.path.basename(cwd.rstrip("/"))}
        with contextlib.suppress(OSError), os.scandir(cwd) as entries:
            names |= {os.path.splitext(e.name)[0] for e in entries}
        return not names & set(s.full_library_assignments)

    @staticmethod
    def _sandbox_pid(state: _Kernel, process, timeout: float = 30.0) -> int | None:
        """The host PID of the sandbox's first process, from bubblewrap's
        ``--info-fd`` report (``None`` if bubblewrap exited before writing it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(state.info_file.read_text())
                return int(info["child-pid"])
            poll = getattr(process, "poll", None)
            if poll is not None and poll() is not None:
                return None
            time.sleep(0.005)
        return None

    def _spec(
        self,
        state: _Kernel,
        command: list[str],
        context: KernelContext,
        cwd: str,
        connection: Path,
    ) -> dict:
        """What ``_sandbox_exec.py outer`` needs to start one kernel: bubblewrap's
        command line (cold start), the template's request (warm start), and as
        root, the files to stage and the user to drop to."""
        s = self.settings
        uid, gid = self._uid_gid()
        root = _is_root()
        binds = _Binds(state.folder / "stage" if root else None)
        argv = self._system_args()
        argv += self._bind_args(binds, state, cwd, connection, uid, gid)
        warm = self._warm_for(command, cwd)
        if warm and s.library_edition:
            # The template imported the edition from its own folder: the kernels
            # forked from it find its modules' files there.
            edition = os.path.realpath(s.library_edition)
            argv += ["--ro-bind", binds.source(edition), edition]
        argv += ["--remount-ro", "/", "--remount-ro", "/dev"]
        argv += ["--clearenv"]
        env = self._kernel_env()
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["--chdir", cwd, "--"]
        head = list(argv)
        limits = self._limit_values(context.limits)
        argv += [sys.executable, "-I", "-S", str(_EXEC_SCRIPT), "inner"]
        argv += [str(v) for v in limits] + ["--", *command]
        drop = {"uid": uid, "gid": gid} if root else None
        warm_spec = None
        if warm:
            warm_spec = {
                "socket": warm,
                "pid": self._template_state.process.pid,
                "wait": _TEMPLATE_WAIT,
                # hold is the sandbox's PID 1 (no reaper of bubblewrap's): a
                # process of the sandbox cannot signal it, as in the cold sandbox,
                # where PID 1 is bubblewrap's reaper and the kernel PID 2
                "argv": [head[0], "--as-pid-1", *head[1:]]
                + [sys.executable, "-I", "-S", str(_EXEC_SCRIPT), "hold"],
                "request": {
                    "cwd": cwd,
                    "env": env,
                    "argv": command[3:],
                    "limits": limits,
                    "drop": drop,
                },
            }
        return {
            "argv": argv,
            "warm": warm_spec,
            "info_file": str(state.info_file),
            "stage": binds.stage(),
            "drop": drop,
            # `outer` dies with this process, and kills the sandbox at the wall time
            "owner": os.getpid(),
            "wall": context.limits.wall_seconds or 0,
        }

    def _limit_values(self, limits: KernelLimits) -> list[int]:
        """The limits ``_sandbox_exec.py`` sets inside the sandbox, in its order:
        memory, CPU seconds, processes, scratch bytes, open files (0: none)."""
        s = self.settings
        return [
            limits.memory or 0,
            limits.effective_cpu_seconds or 0,
            s.max_processes,
            s.scratch_bytes,
            s.max_open_files,
        ]

    def _system_args(self) -> list[str]:
        """bubblewrap's namespaces and the system the kernel sees: /usr and its
        links read-only, fresh /proc and /dev, and the in-memory /tmp, /dev/shm,
        home and /run."""
        s = self.settings
        options = self.bwrap_options()

        def sized(size: int) -> list[str]:
            return ["--size", str(size)] if "--size" in options else []

        argv = [
            self.bwrap_path(),
            "--unshare-all",
            "--unshare-user",
            *(["--disable-userns"] if "--disable-userns" in options else []),
            "--die-with-parent",
            "--info-fd",
            "{info_fd}",
            "--hostname",
            "grading",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = f"/{name}"
            if os.path.islink(host):
                argv += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                argv += ["--ro-bind", host, host]
        # The writable in-memory mounts come first: the read-only binds after them
        # may lie under /tmp (a course, and its .venv, cloned into /tmp) and must
        # stay visible on top of the fresh /tmp.
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += [*sized(s.shm_bytes), "--tmpfs", "/dev/shm"]
        argv += [*sized(s.scratch_bytes), "--tmpfs", "/tmp", "--dir", _HOME]
        argv += [*sized(1 << 20), "--tmpfs", "/run", "--dir", _RUN_DIR]
        return argv

    def _bind_args(
        self, binds: _Binds, state: _Kernel, cwd: str, connection: Path, uid, gid
    ) -> list[str]:
        """The read-only binds: Python and its packages, the library (or its
        grading edition), the kernel's /etc files and connection file, and the
        working directory: a private tmpfs showing the submission's files read-only
        (whatever the kernel writes there stays in memory)."""
        s = self.settings
        argv: list[str] = []
        for path in self.ro_binds():
            argv += ["--ro-bind", binds.source(path), path]
        if self._edition_for(cwd):
            package = os.path.dirname(os.path.realpath(_course_lib_file()))
            argv += ["--ro-bind", binds.source(s.library_edition), package]
        for dest, path in _etc_files(state.folder, uid, gid).items():
            argv += ["--ro-bind", binds.source(path), dest]
        argv += ["--ro-bind", binds.source(connection), _CONNECTION_FILE]
        if "--size" in self.bwrap_options():
            argv += ["--size", str(s.scratch_bytes)]
        argv += ["--tmpfs", cwd]
        with os.scandir(cwd) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = os.path.join(cwd, entry.name)
                if entry.is_symlink():
                    # Recreated as a link, resolved inside the sandbox: binding it
                    # would show the file it points to on the host.
                    argv += ["--symlink", os.readlink(path), path]
                elif entry.is_file() or entry.is_dir():
                    argv += ["--ro-bind", binds.source(path), path]
        return argv

    @staticmethod
    def _kernel_env() -> dict[str, str]:
        """The whole environment of a sandboxed kernel."""
        env = {
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": _HOME,
            "USER": "student",
            "LOGNAME": "student",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": f"{_HOME}/.config/matplotlib",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update({k: os.environ[k] for k in _PASSED_ENV if k in os.environ})
        return env


# --------------------------------------------------------------------------------------
# can the sandbox be built here?

_PROBE = """\
import os, socket, sys
problems = []
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    problems.append("it reached the host's network")
except OSError:
    pass
if os.path.exists(sys.argv[2]):
    problems.append("it could see " + sys.argv[2])
if problems:
    sys.exit("; ".join(problems))
"""


@dataclass
class _ProbeResult:
    problem: str | None
    checked: float = field(default_factory=time.monotonic)


_probe_cache: dict[tuple, _ProbeResult] = {}


def sandbox_problem(launcher: SandboxLauncher | None = None) -> str | None:
    """Why no sandbox can be built on this machine, or ``None`` when one works.

    Starts a tiny sandbox the way grading does (same binds, user and namespaces)
    and checks from inside that the host's loopback network and a file of the host
    are out of reach. The answer is cached per process and settings.
    """
    launcher = launcher or SandboxLauncher()
    key = (launcher.settings, _is_root())
    cached = _probe_cache.get(key)
    if cached is not None:
        return cached.problem
    problem = _probe(launcher)
    _probe_cache[key] = _ProbeResult(problem)
    return problem


def _probe(launcher: SandboxLauncher) -> str | None:
    import socket

    try:
        launcher.bwrap_path()
        launcher.ro_binds()
    except SandboxError as exc:
        return str(exc)
    context = KernelContext(limits=KernelLimits(memory=None, wall_seconds=60.0))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    with tempfile.TemporaryDirectory(prefix="course-sandbox-probe-") as tmp:
        secret = Path(tmp) / "secret"
        secret.write_text("not for the sandbox")
        script = Path(tmp) / "work" / "probe.py"
        script.parent.mkdir()
        script.write_text(_PROBE)
        script.chmod(0o644)
        script.parent.chmod(0o755)

        class _Manager:  # what the hooks read from a kernel manager
            transport = "tcp"
            ip = ""
            connection_file = ""
            launch_cwd = str(script.parent)

        manager = _Manager()
        launcher.prepare(manager, context)
        Path(manager.connection_file).write_text("{}")
        try:
            command = launcher.wrap_for(
                manager,
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(script),
                    str(server.getsockname()[1]),
                    str(secret),
                ],
                context,
            )
            try:
                out = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    start_new_session=True,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return f"bubblewrap could not be started: {exc}"
        finally:
            launcher.cleanup(manager, context)
            server.close()
    # The kernel's output reaches the grader only through stderr (see
    # _sandbox_exec.py); the probe exits non-zero, saying why, when it is not safe.
    text = (out.stdout + out.stderr).strip()
    if out.returncode != 0:
        last = text.splitlines()[-1] if text else f"exit status {out.returncode}"
        hint = ""
        if "namespace" in text.lower() or "permission" in text.lower():
            hint = (
                " (unprivileged user namespaces may be disabled: "
                "sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu "
                "kernel.apparmor_restrict_unprivileged_userns=0)"
            )
        return f"a test sandbox failed: {last}{hint}"
    return None


def _course_lib_file() -> str:
    import course_lib

    return course_lib.__file__


def grading_edition(term: str = "") -> tuple[str, tuple[str, ...]]:
    """Write the grading edition of ``course_lib`` (see
    :func:`course_lib.grading.editions.library.write_grading_edition`) to a temporary
    folder, removed when this process exits; its path and the assignments it cannot
    serve.

    Writing it plans every hidden grader (about 10 s); the result depends only on the
    library's files and the Python and torch versions, so it is kept in the grading
    user's cache (:func:`_edition_cache`) and copied from there by later runs."""
    import atexit

    folder = str(owned_tempdir("course-grading-edition-"))
    atexit.register(shutil.rmtree, folder, True)
    os.chmod(folder, 0o755)  # the sandbox may run as another user
    cache = _edition_cache(term)
    if cache is not None and (cache / "edition.json").is_file():
        with contextlib.suppress(OSError, ValueError, KeyError):
            full = json.loads((cache / "edition.json").read_text())["full"]
            out = Path(folder) / "course_lib"
            shutil.copytree(cache / "course_lib", out)
            return str(out), tuple(full)
    # In a child process: planning runs the hidden graders, and torch's OpenMP
    # threads started here would deadlock the grading workers forked from this
    # process later (libgomp is not fork-safe; seen as a hang in ex01's replay).
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from course_lib.grading.editions.library import write_grading_edition\n"
        "from course_lib.grading.editions.term import Term\n"
        "term = Term.from_json(sys.argv[2]) if sys.argv[2] else None\n"
        "out, full = write_grading_edition(Path(sys.argv[1]), term=term)\n"
        "print(json.dumps([str(out), sorted(full)]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, folder, term], capture_output=True, text=True
    )
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SandboxError(f"writing the grading edition of course_lib failed: {last}")
    out, full = json.loads(run.stdout.strip().splitlines()[-1])
    if cache is not None:
        # a complete copy appears under its final name at once, or not at all
        with contextlib.suppress(OSError):
            staging = Path(tempfile.mkdtemp(prefix="new-", dir=cache.parent))
            shutil.copytree(out, staging / "course_lib")
            (staging / "edition.json").write_text(json.dumps({"full": full}))
            try:
                staging.rename(cache)
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)  # another run was first
    return out, tuple(full)


def _edition_cache(term: str = "") -> Path | None:
    """Where the grading edition of this ``course_lib`` is kept between runs:
    ``$XDG_CACHE_HOME/course_lib/grading-edition/<key>`` (``~/.cache`` by default),
    the key a hash of the library's files and the Python and torch versions; the
    folders above it are private to the grading user. ``None`` when that cannot be
    made, or with ``COURSE_EDITION_CACHE=0``: then every run writes its own."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    if os.environ.get("COURSE_EDITION_CACHE", "").strip().lower() in _OFF_VALUES:
        return None
    from ..editions.library import library_fingerprint

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "?"
    key = hashlib.sha256(
        f"{library_fingerprint()}\0{sys.version}\0{torch_version}"
        f"{chr(0) + term if term else ''}".encode()
    ).hexdigest()[:24]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    parent = root / "course_lib" / "grading-edition"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for folder in (parent.parent, parent):
            os.chmod(folder, 0o700)
    except OSError:
        return None
    return parent / key


def with_grading_edition(launcher: SandboxLauncher) -> SandboxLauncher:
    """``launcher`` whose kernels see the grading edition of this process's
    ``course_lib`` (no reference implementation of an exercise and no hidden
    expected value to delegate to or read), its bytecode written beforehand."""
    _precompile()
    edition, full = grading_edition(launcher.settings.term)
    return SandboxLauncher(
        dataclasses.replace(
            launcher.settings,
            library_edition=edition,
            full_library_assignments=full,
        )
    )


def _precompile() -> None:
    """Write the bytecode of ``course_lib`` now: inside the sandbox its folder is
    read-only, and every kernel would otherwise compile it again."""
    import compileall

    import course_lib

    with contextlib.suppress(OSError):
        compileall.compile_dir(
            os.path.dirname(os.path.realpath(course_lib.__file__)), quiet=2
        )


UNSAFE_WARNING = (
    "grading WITHOUT a sandbox (--unsafe-no-sandbox): student code runs with your "
    "permissions and can read the solutions, change the gradebook, use the network "
    "and see other students' work"
)


def grading_launcher(
    course, *, unsafe: bool = False, max_processes: int = 64
) -> tuple[KernelLauncher, str | None]:
    """The launcher ``course autograde`` grades with, and a warning to show.

    The sandbox unless ``unsafe``; when the sandbox cannot be built on this machine,
    a :class:`~course_lib.grading.course.CourseError` that says why and names the
    flag that grades without it.
    """
    from ..errors import CourseError
    from .start import RlimitLauncher

    if unsafe:
        return RlimitLauncher(), UNSAFE_WARNING
    protected = [str(course.root)]
    url = str(course.gradebook_url)
    if url.startswith("sqlite:///"):
        protected.append(url.removeprefix("sqlite:///"))
    from ..editions.term import read_term

    term = read_term(course)
    launcher = SandboxLauncher(
        SandboxSettings(
            max_processes=max_processes,
            protected=tuple(protected),
            term="" if term.is_default else term.to_json(),
        )
    )
    problem = sandbox_problem(launcher)
    if problem is None:
        launcher = with_grading_edition(launcher)
    else:
        raise CourseError(
            f"cannot build the sandbox that keeps student code away from the "
            f"solutions, the gradebook and the network: {problem}. Fix that, or "
            "grade without it with --unsafe-no-sandbox (student code then runs "
            "with your permissions)"
        )
    return launcher, None
