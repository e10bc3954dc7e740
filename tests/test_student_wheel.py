"""The student wheel, installed as a student installs it: in a fresh virtual
environment outside the repository, with the CPU build of torch and nothing else of
the course venv.

* the wheel holds the student edition only: no reference body of an exercise target,
  no hidden grader or hidden-case input, none of the instructor's grading tool;
* a release notebook's set-up cell does nothing there (course_lib is installed);
* ``course check`` passes that notebook with the instructor's answers filled in and
  fails it as released (the stubs), from the stored public values.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from course_lib.grading.editions import library as edition

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "course_lib"
ASSIGNMENT = "ex05_alibi"
# Everything the instructor's grading tool has that a student never needs.
INSTRUCTOR_MODULES = (
    "autograde.py",
    "cluster.py",
    "collect.py",
    "editions/launch.py",
    "editions/library.py",
    "editions/publish.py",
    "feedback.py",
    "grade.py",
    "gradebook.py",
    "kernels/_sandbox_exec.py",
    "kernels/_warm_template.py",
    "kernels/execute.py",
    "kernels/sandbox.py",
    "notebooks/integrity.py",
    "pool.py",
    "release.py",
    "report.py",
    "synthetic.py",
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # a relative folder, as `course publish OUT` may pass one
    dist = Path(os.path.relpath(tmp_path_factory.mktemp("dist")))
    wheel = edition.build_student_wheel(dist)
    assert wheel.parent == dist.resolve() and wheel.is_file()
    return wheel


def _sources(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode() for n in z.namelist() if n.endswith(".py")}


def _literals(node: ast.AST) -> set[str]:
    """The collection literals of 3+ constants (numbers, strings, nested) in ``node``:
    case tables such as ``(1, 2, 3, 5, 6)`` or ``((12, 9), (1, 4), (2, 1))``."""

    def constant(n: ast.AST) -> bool:
        if isinstance(n, ast.Constant):
            return True
        if isinstance(n, ast.UnaryOp):
            return constant(n.operand)
        return isinstance(n, (ast.Tuple, ast.List)) and all(map(constant, n.elts))

    return {
        ast.unparse(n)
        for n in ast.walk(node)
        if isinstance(n, (ast.Tuple, ast.List)) and len(n.elts) >= 3 and constant(n)
    }


def _hidden_literals() -> set[str]:
    """The literal case tables of every hidden grader that no public part of its
    module has: the hidden cases' inputs."""
    out: set[str] = set()
    for path in sorted((PACKAGE / "checks").glob("ex*_*.py")):
        tree = ast.parse(path.read_text())
        hidden, public = set(), set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("grade_"):
                hidden |= _literals(node)
            else:
                public |= _literals(node)
        out |= hidden - public
    return out


def test_wheel_holds_the_student_edition_only(wheel: Path) -> None:
    sources = _sources(wheel)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    # every data file the package needs ships (the stored public values, the lab's
    # and the language-model experiment's results that chapters 10 and 12 read)
    for data in edition._DATA_FILES:
        assert f"course_lib/{data}" in names, data
    assert not [n for n in names if "__pycache__" in n or n.startswith("solutions")]
    grading = sorted(n.removeprefix("course_lib/grading/") for n in sources
                     if n.startswith("course_lib/grading/"))
    assert grading == sorted(edition.STUDENT_GRADING_MODULES)
    assert not set(grading) & set(INSTRUCTOR_MODULES)
    # no hidden grader has a body, no hidden input is left anywhere
    for name, text in sources.items():
        if name.startswith("course_lib/checks/ex"):
            for node in ast.parse(text).body:
                if isinstance(node, ast.FunctionDef) and node.name.startswith(
                    "grade_"
                ):
                    assert len(node.body) == 1
                    assert isinstance(node.body[0], ast.Raise), node.name
    everything = "\n".join(ast.unparse(ast.parse(t)) for t in sources.values())
    shipped = set().union(*(_literals(ast.parse(t)) for t in sources.values()))
    hidden = _hidden_literals()
    assert len(hidden) >= 10
    assert sorted(hidden & shipped) == []
    # no exercise target's body: its distinctive lines (found once in the whole
    # library: not argument checks it shares with other functions) are nowhere in
    # the wheel
    original = "\n".join(
        ast.unparse(ast.parse(p.read_text())) for p in sorted(PACKAGE.rglob("*.py"))
    )
    checked = 0
    for module, targets in edition.exercise_targets().items():
        rel = "/".join(module.split(".")) + ".py"
        tree = ast.parse((ROOT / rel).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in targets:
                for stmt in node.body[1:]:
                    for line in ast.unparse(stmt).splitlines():
                        line = line.strip()
                        if len(line) > 20 and original.count(line) == 1:
                            assert line not in everything, (node.name, line)
                            checked += 1
    assert checked >= 30


def _run(argv: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, **kw)


def _notebooks(tmp: Path) -> tuple[Path, Path, str]:
    """The release notebook as released, a copy with the instructor's answers in
    its answer cells, and its set-up cell's source."""
    release = json.loads(
        (ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
    )
    solution = json.loads(
        (ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
    )
    answers = {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in solution["cells"]
        if c["metadata"].get("nbgrader", {}).get("solution")
    }
    stub = tmp / "stub.ipynb"
    stub.write_text(json.dumps(release))
    filled = 0
    for cell in release["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            cell["source"] = "\n".join(
                line for line in answers[grade_id].splitlines()
                if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
            )
            filled += 1
    assert filled == 2
    solved = tmp / "solved.ipynb"
    solved.write_text(json.dumps(release))
    setup = [
        "".join(c["source"]) for c in release["cells"]
        if "course-setup" in c["metadata"].get("tags", [])
    ]
    assert len(setup) == 1, "the release notebook has no tagged set-up cell"
    return solved, stub, setup[0]


def test_student_wheel_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)], tmp_path).returncode == 0
    python = venv / "bin" / "python"
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"  # the CPU build
    # --no-compile: pip would byte-compile every module of torch and the other
    # dependencies (two thirds of the install's time); Python compiles what is
    # imported below anyway, and every .py file of the wheel is parsed by
    # test_wheel_holds_the_student_edition_only
    install = _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                    torch_pin, str(wheel)], tmp_path)
    assert install.returncode == 0, install.stderr[-3000:]
    # course_lib is the wheel's, the course venv's tools are absent
    where = _run([str(python), "-c",
                  "import importlib.util as u, course_lib; "
                  "print(course_lib.__file__); "
                  "print(u.find_spec('nbgrader') is None)"], tmp_path)
    assert where.returncode == 0, where.stderr
    path, no_nbgrader = where.stdout.split()
    assert Path(path).is_relative_to(venv) and no_nbgrader == "True"

    solved, stub, setup = _notebooks(tmp_path)
    ran = _run([str(python), "-c", setup], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "Installing" not in ran.stdout  # course_lib is there: nothing to do

    course = venv / "bin" / "course"
    good = _run([str(course), "check", str(solved)], tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "2 of 2 exercises pass their public checks" in good.stdout
    bad = _run([str(course), "check", str(stub)], tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "0 of 2 exercises pass their public checks" in bad.stdout
    assert bad.stdout.count("the function is still the stub") == 2
    release = _run([str(course), "release", ASSIGNMENT], tmp_path)
    assert release.returncode == 2
    assert release.stderr.strip().splitlines() == [
        "course release: error: this command is part of the instructor's tool, "
        "which is not installed here (the student edition of course_lib has "
        "`course check` only; instructors install course_lib[grading])"
    ]
    # the library's own copy of the exercise is a stub that says so
    lib = _run([str(python), "-c", "import course_lib; course_lib.alibi_slopes(8)"],
               tmp_path)
    assert lib.returncode == 1
    assert "alibi_slopes is exercise 5: implement it in your notebook" in lib.stderr
