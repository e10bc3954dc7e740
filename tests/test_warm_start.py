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
import shutil

import nbformat
import pytest

from course_lib.grading.kernel import (
    GradingKernelManager,
    KernelContext,
    KernelLimits,
    kernel_context,
)
from course_lib.grading.sandbox import SandboxLauncher, SandboxSettings

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
    launcher.stop_templates()


def test_a_kernel_leaves_nothing_for_the_next(warm_launcher, tmp_path):
    context = KernelContext(
        limits=KernelLimits(memory=2 << 30, wall_seconds=120), launcher=warm_launcher
    )
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    assert _run(context, first, _LEAVE) == ["left"]
    (template,) = warm_launcher._templates.values()
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
    (again,) = warm_launcher._templates.values()
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
        assert "warm start" in launcher.describe(KernelContext(KernelLimits(), launcher))
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
    assert launcher._templates == {}  # no template was started
