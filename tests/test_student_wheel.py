"""The student wheel, installed as a student installs it: in a fresh virtual
environment outside the repository (no system site-packages, so nothing of the
course venv or of this checkout is importable), with the CPU build of torch and
what the wheel requires, by the command of the instructor guide's hub recipe
("Large classes", step 1: ``pip install dist/course_lib-<version>-py3-none-any.whl``
in the students' environment).

* the wheel holds the student edition only: no reference body of an exercise target,
  no hidden grader or hidden-case input, none of the instructor's grading tool;
* in that environment a student's Python cannot reach what grades them: every
  ``grade_<name>`` of ``course_lib.checks.exNN_*`` is a stub that raises, the
  graders' private references (``_ref_*``, ``_reference_*``) are gone, every
  instructor module of ``course_lib.grading`` (autograde, grade, the sandbox, the
  editions, ...) fails to import, and every library function an exercise grades
  (``alibi_bias``, ``apply_rope``, ... : ``exercise_targets()``) raises "is exercise
  N" and has no body but that;
* the guide's recipe installs exactly this wheel for students, and the full course
  (``'.[grading]'``) only where the instructor grades;
* a release notebook's set-up cell does nothing there (course_lib is installed);
* ``course check`` passes that notebook with the instructor's answers filled in and
  fails it as released (the stubs), from the stored public values.
"""

from __future__ import annotations

import ast
import json
import os
import re
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
    module has: the hidden cases' inputs. A hidden grader's part is the grader and
    every private function that only hidden parts name (a term's cases are drawn by
    such functions, ``_hidden_bias_cases(seed)``, which hold the fixed cases)."""
    out: set[str] = set()
    for path in sorted((PACKAGE / "checks").glob("ex*_*.py")):
        tree = ast.parse(path.read_text())
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        users: dict[str, set[str]] = {name: set() for name in defs}
        for node in tree.body:  # which top-level statements name each function
            named = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            owner = node.name if isinstance(node, ast.FunctionDef) else f"<{id(node)}>"
            for name in named & set(defs) - {owner}:
                users[name].add(owner)
        hidden_parts = {name for name in defs if name.startswith("grade_")}
        while True:
            more = {
                name for name, used_by in users.items()
                if name.startswith("_") and used_by and used_by <= hidden_parts
            } - hidden_parts
            if not more:
                break
            hidden_parts |= more
        hidden, public = set(), set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in hidden_parts:
                hidden |= _literals(node)
            else:
                public |= _literals(node)
        out |= hidden - public
    return out


def test_wheel_holds_the_student_edition_only(student_wheel: Path) -> None:
    sources = _sources(student_wheel)
    with zipfile.ZipFile(student_wheel) as z:
        names = z.namelist()
    # every data file the package needs ships (the stored public values, the lab's
    # and the language-model experiment's results that chapters 10 and 12 read)
    for data in edition._DATA_FILES:
        assert f"course_lib/{data}" in names, data
    assert not [n for n in names if "__pycache__" in n or n.startswith("solutions")]
    grading = sorted(
        n.removeprefix("course_lib/grading/")
        for n in sources
        if n.startswith("course_lib/grading/")
    )
    assert grading == sorted(edition.STUDENT_GRADING_MODULES)
    assert not set(grading) & set(INSTRUCTOR_MODULES)
    # no hidden grader has a body, no hidden input is left anywhere
    for name, text in sources.items():
        if name.startswith("course_lib/checks/ex"):
            for node in ast.parse(text).body:
                if isinstance(node, ast.FunctionDef) and node.name.startswith("grade_"):
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


# What a student's environment does not have: the course venv's paths, and a setting
# of this machine that stops Python writing its bytecode (the venv is installed
# with --no-compile, so without it every process compiled torch's modules again:
# 2.7 s of CPU for `import torch` instead of 1.3)
_NOT_A_STUDENTS = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")


def _run(argv: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _NOT_A_STUDENTS}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw
    )


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
                line
                for line in answers[grade_id].splitlines()
                if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
            )
            filled += 1
    assert filled == 2
    solved = tmp / "solved.ipynb"
    solved.write_text(json.dumps(release))
    setup = [
        "".join(c["source"])
        for c in release["cells"]
        if "course-setup" in c["metadata"].get("tags", [])
    ]
    assert len(setup) == 1, "the release notebook has no tagged set-up cell"
    return solved, stub, setup[0]


def make_student_venv(wheel: Path, tmp: Path, extra: tuple[str, ...] = ()) -> Path:
    """``tmp/venv``: a fresh venv with CPU torch, ``wheel`` and its requirements,
    and the packages ``extra`` (conftest.student_venv adds the kernel a
    notebook server gives, as Colab or a hub has it)."""
    venv = tmp / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)], tmp).returncode == 0
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    python = venv / "bin" / "python"
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"  # the CPU build
    # --no-compile: pip would byte-compile every module of torch and the other
    # dependencies (two thirds of the install's time); Python compiles what is
    # imported below anyway, and every .py file of the wheel is parsed by
    # test_wheel_holds_the_student_edition_only
    install = _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",
            torch_pin,
            str(wheel),
            *extra,
        ],
        tmp,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


def test_student_wheel_in_a_fresh_venv(student_venv: Path, tmp_path: Path) -> None:
    venv = student_venv
    python = venv / "bin" / "python"
    # course_lib is the wheel's, the course venv's tools are absent
    where = _run(
        [
            str(python),
            "-c",
            "import importlib.util as u, course_lib; "
            "print(course_lib.__file__); "
            "print(u.find_spec('nbgrader') is None)",
        ],
        tmp_path,
    )
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
    lib = _run(
        [str(python), "-c", "import course_lib; course_lib.alibi_slopes(8)"], tmp_path
    )
    assert lib.returncode == 1
    assert "alibi_slopes is exercise 5: implement it in your notebook" in lib.stderr


# What a student's kernel on the hub runs: try to reach the graders and the
# references. Prints one JSON object; argv[1] is what to look for (from the full
# package's sources, not from the wheel).
_PROBE = """
import importlib, inspect, json, sys
wanted = json.loads(sys.argv[1])
out = {"graders": {}, "private": {}, "modules": {}, "targets": {}, "files": []}


def call(fn):
    if not callable(fn):
        return "not callable: " + type(fn).__name__
    args = [None] * sum(
        p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in inspect.signature(fn).parameters.values())
    try:
        fn(*args)
        return "returned"
    except NotImplementedError as exc:
        return "raised: " + str(exc)
    except Exception as exc:
        return "other " + type(exc).__name__ + ": " + str(exc)


REFUSED = ("raised: ", "other RuntimeError: ")


def reference(fn, depth=0):
    # what a grader's reference gives: called, or (a wrapper that needs real
    # inputs) what the references it calls give
    verdict = call(fn)
    code = getattr(fn, "__code__", None)
    if verdict.startswith(REFUSED) or code is None or depth > 3:
        return verdict
    inner = [fn.__globals__[n] for n in code.co_names
             if n.startswith(("_lib", "_ref")) and callable(fn.__globals__.get(n))]
    if not inner:
        return verdict
    found = [reference(g, depth + 1) for g in inner]
    bad = [v for v in found if not v.startswith(REFUSED)]
    return bad[0] if bad else found[0]


import course_lib, course_lib.checks
for module, graders in wanted["graders"].items():
    mod = importlib.import_module(module)
    for name in graders:
        fn = getattr(mod, name, None)
        if fn is None:
            out["graders"][module + "." + name] = "absent"
            continue
        args = [None] * len(inspect.signature(fn).parameters)
        try:
            fn(*args)
            out["graders"][module + "." + name] = "returned"
        except NotImplementedError as exc:
            out["graders"][module + "." + name] = "raised: " + str(exc)
        except Exception as exc:
            out["graders"][module + "." + name] = "other " + type(exc).__name__
    for n in dir(mod):
        if n.startswith(("_ref", "_reference")):
            out["private"][module + "." + n] = reference(getattr(mod, n))
for module in wanted["modules"]:
    try:
        importlib.import_module(module)
        out["modules"][module] = "imported"
    except ModuleNotFoundError as exc:
        out["modules"][module] = "missing " + str(exc.name)
for module, names in wanted["targets"].items():
    mod = importlib.import_module(module)
    for name in names:
        fn = getattr(mod, name)
        out["targets"][module + "." + name] = [call(fn), inspect.getsource(fn)]
import pathlib
root = pathlib.Path(course_lib.__file__).parent
out["files"] = sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))
out["where"] = str(root)
print(json.dumps(out))
"""


def _hidden_graders() -> dict[str, list[str]]:
    """``course_lib.checks.exNN_*`` -> its ``grade_*`` functions, from the full
    package's sources."""
    graders = {}
    for path in sorted((PACKAGE / "checks").glob("ex*_*.py")):
        names = [
            n.name
            for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("grade_")
        ]
        if names:
            graders[f"course_lib.checks.{path.stem}"] = names
    return graders


def test_students_cannot_reach_graders_or_references(
    student_venv: Path, tmp_path: Path
) -> None:
    """In the students' environment (the guide's hub recipe) a student's Python
    finds no hidden grader, no grader's reference, no instructor module and no
    reference implementation of an exercise target."""
    graders = _hidden_graders()
    assert sum(map(len, graders.values())) >= 20
    modules = ["course_lib.grading.editions"] + [
        "course_lib.grading." + m.removesuffix(".py").replace("/", ".")
        for m in INSTRUCTOR_MODULES
        if not m.rsplit("/", 1)[-1].startswith("_")
    ]
    targets = {m: sorted(t) for m, t in edition.exercise_targets().items()}
    wanted = {"graders": graders, "modules": modules, "targets": targets}
    run = _run(
        [str(student_venv / "bin" / "python"), "-c", _PROBE, json.dumps(wanted)],
        tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout)
    assert Path(found["where"]).is_relative_to(student_venv)  # the wheel's copy
    # every hidden grader is a stub that says it runs at grading
    for name, verdict in found["graders"].items():
        assert verdict.startswith("raised: "), (name, verdict)
    assert len(found["graders"]) == sum(map(len, graders.values()))
    # the graders' own names for the references (``_ref_alibi_bias``) are the
    # library's stubs, or answer only the public checks' inputs from the stored
    # values (course_lib.checks._stored): on any other input they refuse
    assert len(found["private"]) >= 10
    for name, verdict in found["private"].items():
        assert verdict.startswith(("raised: ", "other RuntimeError: ")), (name, verdict)
        assert "exercise" in verdict, (name, verdict)
    # the instructor's tool is not there to import
    assert set(found["modules"]) == set(modules)
    for module, verdict in found["modules"].items():
        # the module itself, or the package holding it (editions/), is missing
        missing = verdict.removeprefix("missing ")
        assert verdict.startswith("missing course_lib.grading."), (module, verdict)
        assert module == missing or module.startswith(missing + "."), verdict
    for rel in INSTRUCTOR_MODULES:
        assert f"grading/{rel}" not in found["files"], rel
    # every function an exercise grades raises "is exercise N" and holds no more
    numbers = {
        f"{m}.{n}": k
        for m, t in edition.exercise_targets().items()
        for n, k in t.items()
    }
    assert set(found["targets"]) == set(numbers)
    for name, (verdict, source) in found["targets"].items():
        short = name.rsplit(".", 1)[1]
        assert verdict.startswith("raised: "), (name, verdict)
        assert f"is exercise {numbers[name]}" in verdict or (
            f"which is exercise {numbers[name]}" in verdict
        ), (name, verdict)
        (fn,) = [
            n
            for n in ast.parse(source.strip()).body
            if isinstance(n, ast.FunctionDef) and n.name == short
        ]
        body = [
            s
            for s in fn.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        assert len(body) == 1 and isinstance(body[0], ast.Raise), (name, source)


def test_the_guide_installs_this_wheel_for_students(student_wheel: Path) -> None:
    """The guide's hub recipe ("Large classes", step 1) installs, in the students'
    environment, the wheel these tests install, and nothing of the full course; the
    full course is installed only where the instructor grades."""
    guide = (ROOT / "book" / "instructor-guide.md").read_text(encoding="utf-8")
    section = guide.split("## Large classes", 1)[1].split("\n## ", 1)[0]
    step = section.split("\n1. ", 1)[1].split("\n2. ", 1)[0]
    students, grader = step.split("**Where you grade**", 1)
    (block,) = re.findall(r"```bash\n(.*?)```", students, flags=re.S)
    installs = [
        ln.split("#")[0].split()
        for ln in block.splitlines()
        if ln.strip().startswith("pip install")
    ]
    wheels = [w for args in installs for w in args if w.endswith(".whl")]
    assert [Path(w).name for w in wheels] == [student_wheel.name]
    # the folder course publish writes
    assert wheels[0].endswith(f"dist/{student_wheel.name}")
    everything = " ".join(" ".join(args) for args in installs)
    assert "-e" not in everything.split() and "[grading]" not in everything
    assert "'.[grading]'" in grader  # the full course, where grading happens
