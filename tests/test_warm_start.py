"""Warm start: sandboxed kernels forked from a template that imported torch once.

Each kernel is still a fresh process in a fresh bubblewrap sandbox (its own
namespaces, tmpfs and limits; tests/test_sandbox.py and tests/test_adversarial.py run
with the warm start on). These tests check what the template adds: a kernel cannot
leave anything behind for the next one (module state, imported modules, files,
environment, random state), the template stays the same process, and the cold path
is taken, and said, when the warm start is switched off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from course_lib.grading.kernels.sandbox import SandboxLauncher, SandboxSettings
from course_lib.grading.kernels.start import (
    GradingKernelManager,
    KernelContext,
    KernelLimits,
    kernel_context,
)

pytestmark = pytest.mark.slow

# What the first submission leaves behind, everywhere it can reach.
_LEAVE = """
import os, random, sys, types
import torch
import course_lib, course_lib.checks._core as core
course_lib.LEFT_BEHIND = "module global"
core.call_student = lambda *a, **k: "forged"
sys.modules["left_behind"] = types.ModuleType("left_behind")
os.environ["LEFT_BEHIND"] = "environment"
for folder in ("/tmp", os.path.expanduser("~"), os.getcwd()):
    try:
        with open(os.path.join(folder, "left_behind.txt"), "w") as f:
            f.write("file")
    except OSError:
        pass
torch.manual_seed(1234)
random.seed(1234)
print("left")
"""

# What the next submission looks for.
_LOOK = """
import json, os, random, sys
import torch
import course_lib, course_lib.checks._core as core
found = {
    "module_global": hasattr(course_lib, "LEFT_BEHIND"),
    "patched_grader": core.call_student.__name__ != "call_student",
    "sys_modules": "left_behind" in sys.modules,
    "environment": "LEFT_BEHIND" in os.environ,
    "files": [
        folder for folder in ("/tmp", os.path.expanduser("~"), os.getcwd())
        if os.path.exists(os.path.join(folder, "left_behind.txt"))
    ],
}
seeded = torch.Generator().manual_seed(1234)
found["torch_seeded_1234"] = bool(
    torch.equal(torch.rand(4), torch.rand(4, generator=seeded))
)
random_state = random.Random(1234).random()
found["random_seeded_1234"] = random.random() == random_state
found["pid"] = os.getpid()
print(json.dumps(found))
"""


def _run(context: KernelContext, work, *sources: str) -> list[str]:
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(src) for src in sources]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    with kernel_context(context):
        NotebookClient(
            nb,
            timeout=60,
            allow_errors=True,
            kernel_manager_class=GradingKernelManager,
            resources={"metadata": {"path": str(work)}},
        ).execute()
    return [
        "".join(o.get("text", "") or o.get("evalue", "") for o in cell.outputs).strip()
        for cell in nb.cells
    ]


@pytest.fixture(scope="module")
def warm_launcher():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    launcher = SandboxLauncher(SandboxSettings(max_processes=40))
    problem = launcher.warm_problem()
    if problem is not None:
        pytest.skip(f"no warm start here: {problem}")
    yield launcher
    launcher.cool_down()


def test_a_kernel_leaves_nothing_for_the_next(warm_launcher, tmp_path):
    context = KernelContext(
        limits=KernelLimits(memory=2 << 30, wall_seconds=120), launcher=warm_launcher
    )
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    assert _run(context, first, _LEAVE) == ["left"]
    template = warm_launcher._template_state
    template_pid = template.process.pid
    found = json.loads(_run(context, second, _LOOK)[0])
    assert found.pop("files") == []
    pid = found.pop("pid")
    assert found == {
        "module_global": False,
        "patched_grader": False,
        "sys_modules": False,
        "environment": False,
        "torch_seeded_1234": False,
        "random_seeded_1234": False,
    }
    # the same template served both kernels, and is still the process it was
    again = warm_launcher._template_state
    assert again.process.pid == template_pid and again.process.poll() is None
    assert pid != template_pid  # a kernel is a child, never the template itself
    # nothing the kernels wrote reached the host's folders
    assert not (first / "left_behind.txt").exists()
    assert not (second / "left_behind.txt").exists()


def test_random_state_is_fresh_in_every_kernel(warm_launcher, tmp_path):
    """Forks share the template's memory: each kernel must reseed, as a new process
    would, so two submissions never draw the same 'random' numbers."""
    context = KernelContext(
        limits=KernelLimits(memory=2 << 30, wall_seconds=120), launcher=warm_launcher
    )
    draw = "import random, torch\nprint(random.random(), torch.rand(1).item())"
    draws = set()
    for i in range(2):
        work = tmp_path / f"k{i}"
        work.mkdir()
        draws.add(_run(context, work, draw)[0])
    assert len(draws) == 2, draws


def test_the_description_says_warm_or_cold(monkeypatch):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    launcher = SandboxLauncher(SandboxSettings())
    if launcher.warm_problem() is None:
        context = KernelContext(KernelLimits(), launcher)
        assert "warm start (each kernel forked" in launcher.describe(context)
    monkeypatch.setenv("COURSE_WARM_START", "0")
    assert launcher.warm_problem() == "warm start switched off by COURSE_WARM_START"
    assert "cold start (warm start switched off by COURSE_WARM_START)" in (
        launcher.describe(KernelContext(KernelLimits(), launcher))
    )
    off = SandboxLauncher(SandboxSettings(warm_start=False))
    assert off.warm_problem() == "warm start switched off"


def test_a_cold_kernel_still_works_when_switched_off(monkeypatch, tmp_path):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    monkeypatch.setenv("COURSE_WARM_START", "off")
    launcher = SandboxLauncher(SandboxSettings(max_processes=40))
    context = KernelContext(
        limits=KernelLimits(memory=2 << 30, wall_seconds=120), launcher=launcher
    )
    out = _run(context, tmp_path, "import torch, os\nprint(torch.ones(3).sum().item())")
    assert out == ["3.0"]
    assert launcher._template_state is None  # no template was started


def test_one_template_per_run_shared_by_forked_workers_and_removed_after(tmp_path):
    """warm_up starts the template in the grading process; a worker forked after it
    uses the same one (one import of torch per run, not per worker); cool_down
    leaves no process, socket or folder behind."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    launcher = SandboxLauncher(SandboxSettings(max_processes=40))
    if launcher.warm_problem() is not None:
        pytest.skip(f"no warm start here: {launcher.warm_problem()}")
    log = tmp_path / "workers.log"
    launcher.warm_up("ex05_alibi", str(log))
    template = launcher._template_state
    assert template is not None and template.owner == os.getpid()
    socket_folder = os.path.dirname(template.socket)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # a grading worker: same template, and it knows it is alive
        os.close(read_end)
        mine = launcher._template()
        ok = mine.socket == template.socket and mine.exit_status() is None
        os.write(write_end, b"1" if ok else b"0")
        os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 1) == b"1"
    os.close(read_end)
    os.waitpid(child, 0)
    launcher.cool_down()
    assert template.process.poll() is not None
    assert launcher._template_state is None
    assert not os.path.exists(socket_folder)
    assert not os.path.exists(os.path.dirname(socket_folder))  # the run's folder


def test_a_dead_template_sends_kernels_cold_at_once(tmp_path):
    """A template that died is noticed: by its owner from its exit status, by a
    forked worker from /proc, and by a kernel's connection (refused: the socket
    exists only while the template listens) without waiting for it."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    from course_lib.grading.kernels._sandbox_exec import _connect, process_gone

    launcher = SandboxLauncher(SandboxSettings(max_processes=40))
    if launcher.warm_problem() is not None:
        pytest.skip(f"no warm start here: {launcher.warm_problem()}")
    template = launcher._template(str(tmp_path / "workers.log"))
    deadline = time.monotonic() + 120
    while not os.path.exists(template.socket) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = template.process.pid
    conn = _connect(template.socket, 1.0, pid)
    assert conn is not None
    conn.close()  # the template's fork for it reads no request, and exits
    children = f"/proc/{pid}/task/{pid}/children"
    while open(children).read().strip() and time.monotonic() < deadline:
        time.sleep(0.01)
    template.process.kill()
    template.process.wait()
    start = time.monotonic()
    assert _connect(template.socket, 60.0, pid) is None
    # refused at once, not after the 60 s wait for a slow import (half of it is
    # a bound no busy machine reaches for a refused connection)
    assert time.monotonic() - start < 30.0
    assert process_gone(pid)
    # a zombie (a dead template its owner has not waited for) counts as gone too
    sleeper = subprocess.Popen(["sleep", "60"])
    assert not process_gone(sleeper.pid)
    sleeper.kill()
    stat = f"/proc/{sleeper.pid}/stat"
    while open(stat).read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    assert process_gone(sleeper.pid)
    sleeper.wait()
    assert launcher._warm_for([sys.executable, "-m", "ipykernel_launcher"], "/") is None
    context = KernelContext(
        limits=KernelLimits(memory=2 << 30, wall_seconds=120), launcher=launcher
    )
    assert _run(context, tmp_path, "print(2 + 3)") == ["5"]  # cold, and it works
    launcher.cool_down()
