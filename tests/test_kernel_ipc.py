"""Grading kernels talk over Unix sockets in a private folder, not TCP ports.

With TCP, jupyter_client picks free ports, closes them, and the kernel binds them a
moment later; a kernel started by another process in between can take the same
port, and the kernel then dies at start ("Address already in use", exit status 1).
Two grading workers start kernels side by side, so with TCP a perfect submission
was, now and then, "ungradable: the kernel exited with status 1".
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.provisioning import local_provisioner
from nbclient import NotebookClient

from course_lib.grading.kernels.start import (
    GradingKernelManager,
    KernelContext,
    KernelLauncher,
    RlimitLauncher,
    kernel_context,
)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="Unix sockets")
ROOT = Path(__file__).resolve().parent.parent


class _Watching(RlimitLauncher):
    """RlimitLauncher that records the manager's transport and folder at launch."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []

    def after_launch(self, manager, process, context) -> None:
        folder = os.path.dirname(manager.connection_file)
        mode = stat.S_IMODE(os.stat(folder).st_mode) & 0o777  # jupyter adds +t
        self.seen.append((manager.transport, folder, mode))


def _run(launcher: KernelLauncher, source: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(source))
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        kernel_manager_class=GradingKernelManager,
        shutdown_kernel="immediate",
    )
    with kernel_context(KernelContext(launcher=launcher)):
        client.execute()
    return nb


def test_kernel_uses_unix_sockets_in_a_private_folder_removed_after():
    launcher = _Watching()
    nb = _run(launcher, "print(6 * 7)")
    assert nb.cells[0].outputs[0]["text"] == "42\n"
    [(transport, folder, mode)] = launcher.seen
    assert transport == "ipc"
    assert mode == 0o700
    assert not os.path.exists(folder)  # cleaned up with the kernel


def test_a_port_taken_by_another_process_cannot_kill_the_kernel(monkeypatch):
    """The race made certain: every port jupyter_client would pick is already bound
    by someone else. Over TCP the kernel dies at start; over Unix sockets no port is
    picked at all."""
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    asked = []

    def busy_port(self, ip):
        asked.append(ip)
        return port

    monkeypatch.setattr(
        local_provisioner.LocalPortCache, "find_available_port", busy_port
    )
    try:
        nb = _run(RlimitLauncher(), "print('alive')")
    finally:
        taken.close()
    assert nb.cells[0].outputs[0]["text"] == "alive\n"
    assert asked == []


class _DiesAtStart(KernelLauncher):
    """A kernel that exits with status 1 before it answers (as one did when another
    process took its port)."""

    def wrap(self, command, context):
        return [sys.executable, "-c", "import sys; sys.exit(1)"]


def test_a_kernel_that_dies_at_start_is_reported_as_such(tmp_path):
    from course_lib.grading.autograde import AutogradeOptions, autograde
    from course_lib.grading.collect import collect
    from course_lib.grading.release import release
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    a = "ex05_alibi"
    course = scratch_course(tmp_path / "course", ROOT, [a])
    release(course, a)
    src = course.source_dir / a / f"{a}.ipynb"
    rel = course.release_dir / a / f"{a}.ipynb"
    write_submission(
        tmp_path / "inbox", "perfect", a, student_notebook(rel, solution_answers(src))
    )
    collect(course, tmp_path / "inbox", a)
    summary = autograde(
        course, a, AutogradeOptions(launcher=_DiesAtStart(), progress=False)
    )
    [outcome] = summary.outcomes
    assert (outcome.student, outcome.status) == ("perfect", "ungradable")
    assert outcome.reason == (
        "the kernel exited with status 1 as it started, before any cell ran"
    )
