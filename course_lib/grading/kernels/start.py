"""How a grading kernel is started: the one place where each submission's Jupyter
kernel gets its limits (and, later, its sandbox).

nbgrader runs a notebook with ``nbclient``, which asks a ``KernelManager`` for the
kernel's command line (``python -m ipykernel_launcher -f {connection_file}``).
:class:`GradingKernelManager` hands that command to the :class:`KernelLauncher` of the
current :class:`KernelContext`, which returns the command actually run. The default
:class:`RlimitLauncher` prefixes a tiny script that sets ``RLIMIT_AS`` (memory) and
``RLIMIT_CPU`` on the kernel and then ``exec``s it; a sandboxing launcher (bubblewrap,
namespaces) plugs in the same way by wrapping the command further.

The wall-time limit is enforced from outside the kernel: :meth:`KernelContext.kill`
kills every kernel the context started (each kernel leads its own process group, so
its children go too); ``course autograde`` calls it from a timer.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

__all__ = [
    "GradingKernelManager",
    "KernelContext",
    "KernelLauncher",
    "KernelLimits",
    "RlimitLauncher",
    "current_context",
    "format_bytes",
    "kernel_context",
    "parse_bytes",
    "use_private_ipc",
]

_RLIMIT_SCRIPT = Path(__file__).with_name("_rlimit_exec.py")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str | int | None) -> int | None:
    """A size such as ``"4G"``, ``"512M"`` or ``"1000000"`` in bytes; ``None``, ``0``,
    ``"none"`` and ``"0"`` mean no limit.

    >>> parse_bytes("4G"), parse_bytes("512m"), parse_bytes("none")
    (4294967296, 536870912, None)
    """
    if text is None or isinstance(text, int):
        return text or None
    value = str(text).strip().upper().removesuffix("B").removesuffix("I")
    if value in {"", "0", "NONE", "UNLIMITED"}:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)", value)
    if match is None:
        raise ValueError(
            "parse_bytes: size must look like 4G, 512M or a number of bytes, "
            f"got {text!r}"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_bytes(n: int | None) -> str:
    """``4294967296 -> "4.0 GiB"``; ``None`` -> ``"unlimited"``.

    >>> format_bytes(4 << 30), format_bytes(None)
    ('4.0 GiB', 'unlimited')
    """
    if n is None:
        return "unlimited"
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        size = _UNITS[unit[0]]
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class KernelLimits:
    """Limits of one submission's kernel.

    ``memory``: address-space limit in bytes (``RLIMIT_AS``), ``None`` for none.
    ``wall_seconds``: time for the whole submission, enforced by a watchdog.
    ``cpu_seconds``: ``RLIMIT_CPU``, a backstop should the watchdog itself die;
    by default the wall time times the number of CPUs plus a minute.
    ``wall_basis``: how the wall time was arrived at, for the reason a submission
    past it gets (e.g. "10 s per cell x 9 code cells + 60 s").
    """

    memory: int | None = 4 << 30
    wall_seconds: float | None = 600.0
    cpu_seconds: int | None = None
    wall_basis: str = ""

    def wall_text(self) -> str:
        """``"150 s per submission (10 s per cell x 9 code cells + 60 s)"``."""
        basis = f" ({self.wall_basis})" if self.wall_basis else ""
        return f"{self.wall_seconds:g} s per submission{basis}"

    @property
    def effective_cpu_seconds(self) -> int | None:
        if self.cpu_seconds is not None:
            return self.cpu_seconds or None
        if self.wall_seconds is None:
            return None
        return int(self.wall_seconds * (os.cpu_count() or 1)) + 60


class KernelLauncher:
    """Turns the kernel command nbclient would run into the command that is run.

    Subclass and override :meth:`wrap` (and :meth:`describe`) to run kernels
    differently, e.g. inside a sandbox; the base class runs the command unchanged.
    """

    def wrap(self, command: list[str], context: KernelContext) -> list[str]:
        """The command to run for ``command`` under ``context``'s limits."""
        return list(command)

    def describe(self, context: KernelContext) -> str:
        """One line for logs and reports: how kernels are confined."""
        return "no limits"

    # Hooks around one kernel's life (a sandbox needs more of them).

    def prepare(self, manager: GradingKernelManager, context: KernelContext) -> None:
        """Adjust ``manager`` before its connection file is written (transport,
        connection file location). By default: :func:`use_private_ipc`."""
        use_private_ipc(manager)

    def wrap_for(
        self,
        manager: GradingKernelManager,
        command: list[str],
        context: KernelContext,
    ) -> list[str]:
        """:meth:`wrap`, told which manager (and so which working directory,
        ``manager.launch_cwd``) the command is for."""
        return self.wrap(command, context)

    def after_launch(
        self, manager: GradingKernelManager, process: object, context: KernelContext
    ) -> None:
        """Called once the kernel's process is started, before clients connect."""

    def warm_up(self, assignment: str, log_path: str | None = None) -> None:
        """Called once by a grading run before its workers start: begin whatever
        makes this assignment's kernels start faster (the default: nothing).
        ``log_path``: the run's log for messages from helpers started here."""

    def cool_down(self) -> None:
        """Called once when the run is over: release what :meth:`warm_up` began."""

    def cleanup(self, manager: GradingKernelManager, context: KernelContext) -> None:
        """Release what :meth:`prepare` and :meth:`wrap_for` made for ``manager``."""
        folder = getattr(manager, "_private_ipc_folder", None)
        if folder is not None:
            manager._private_ipc_folder = None
            shutil.rmtree(folder, ignore_errors=True)


# A Unix socket's path must fit in sockaddr_un (108 bytes on Linux, 104 on macOS).
_MAX_SOCKET_PATH = 100


def use_private_ipc(manager: GradingKernelManager) -> bool:
    """Have ``manager``'s kernel talk over Unix sockets in a new private folder
    (mode 0700) instead of TCP ports on localhost; ``True`` if it now does.

    With TCP, jupyter_client picks five free ports, closes them and writes them to
    the connection file; the kernel binds them a second later. A kernel started by
    another process in that window (two grading workers, or anything else on the
    machine) can get the same port, and the kernel then dies at start with "Address
    already in use" (exit status 1): a perfect submission reported as ungradable.
    Socket files in a folder of this kernel's own cannot collide, and no other user
    can connect to them. Where Unix sockets are unavailable (Windows) or the
    temporary folder's path is too long for one, TCP stays.
    """
    if os.name != "posix":
        return False
    from .guard import owned_tempdir

    folder = str(owned_tempdir("course-kernel-"))
    if len(os.path.join(folder, "kernel-99999")) > _MAX_SOCKET_PATH:
        shutil.rmtree(folder, ignore_errors=True)
        return False
    manager._private_ipc_folder = folder
    manager.transport = "ipc"
    manager.ip = os.path.join(folder, "kernel")
    manager.connection_file = os.path.join(folder, "connection.json")
    return True


class RlimitLauncher(KernelLauncher):
    """Start the kernel through ``_rlimit_exec.py``: ``RLIMIT_AS`` = the memory limit,
    ``RLIMIT_CPU`` = the CPU backstop, no core dumps; the kernel dies with the process
    that started it."""

    def wrap(self, command: list[str], context: KernelContext) -> list[str]:
        limits = context.limits
        return [
            sys.executable,
            "-I",
            "-S",
            str(_RLIMIT_SCRIPT),
            str(limits.memory or 0),
            str(limits.effective_cpu_seconds or 0),
            str(os.getpid()),
            "--",
            *command,
        ]

    def describe(self, context: KernelContext) -> str:
        limits = context.limits
        wall = "none" if limits.wall_seconds is None else f"{limits.wall_seconds:g} s"
        return (
            f"memory {format_bytes(limits.memory)} (RLIMIT_AS), wall time {wall}, "
            f"CPU time {limits.effective_cpu_seconds or 'unlimited'} s"
        )


@dataclass
class KernelContext:
    """What the kernels started while this context is active get: limits, launcher,
    and a callback told each kernel's process id."""

    limits: KernelLimits = field(default_factory=KernelLimits)
    launcher: KernelLauncher = field(default_factory=RlimitLauncher)
    on_start: Callable[[int], None] | None = None
    pids: list[int] = field(default_factory=list)
    processes: list[object] = field(default_factory=list)
    killed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def register(self, process: object) -> None:
        pid = getattr(process, "pid", None)
        if pid is None:
            return
        with self._lock:
            self.pids.append(pid)
            self.processes.append(process)
        if self.on_start is not None:
            self.on_start(pid)

    def kill(self) -> None:
        """Kill every kernel started in this context, with its process group."""
        with self._lock:
            self.killed = True
            pids = list(self.pids)
        for pid in pids:
            kill_process_group(pid)

    def exit_codes(self) -> list[int | None]:
        """The exit status of each kernel started (``None`` while running; negative:
        killed by that signal)."""
        codes = []
        for process in self.processes:
            poll = getattr(process, "poll", None)
            codes.append(poll() if poll else None)
        return codes


def kill_process_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a kernel), or the process alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


_current: KernelContext | None = None


def current_context() -> KernelContext | None:
    """The active context (``None`` outside :func:`kernel_context`)."""
    return _current


@contextlib.contextmanager
def kernel_context(context: KernelContext) -> Iterator[KernelContext]:
    """Make ``context`` apply to every :class:`GradingKernelManager` started inside."""
    global _current
    previous, _current = _current, context
    try:
        yield context
    finally:
        _current = previous


class GradingKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose kernel command goes through the launcher of the
    current :class:`KernelContext`, and which reports each kernel it starts."""

    _grading_context: KernelContext | None = None
    _private_ipc_folder: str | None = None  # see use_private_ipc

    @property
    def launch_cwd(self) -> str | None:
        """The working directory the kernel is started in (``None``: this one)."""
        return (getattr(self, "_launch_args", None) or {}).get("cwd")

    async def _async_pre_start_kernel(self, **kw):
        context = self._grading_context = _current
        if context is not None:
            context.launcher.prepare(self, context)
        return await super()._async_pre_start_kernel(**kw)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        command = super().format_kernel_cmd(extra_arguments)
        context = _current
        if context is None:
            return command
        return context.launcher.wrap_for(self, command, context)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        await super()._async_launch_kernel(kernel_cmd, **kw)
        context = _current
        process = getattr(self.provisioner, "process", None)
        if context is not None and process is not None:
            context.register(process)
            context.launcher.after_launch(self, process, context)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        context = self._grading_context
        if context is not None and not restart:
            context.launcher.cleanup(self, context)

    # AsyncKernelManager binds the base class's coroutine to this name directly.
    cleanup_resources = _async_cleanup_resources
