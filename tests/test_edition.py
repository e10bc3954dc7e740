"""The student edition of course_lib (course_lib/grading/editions/library.py) and the
stored expected values its public checks use (course_lib/checks/_stored.py).

* the stored values are what the references give today (regenerated and compared);
* the written tree has no reference body of any exercise target, no hidden grader,
  none of the private helpers that only hidden graders used, and only the part of
  grading/ that `course check` needs;
* in that tree (a separate Python process, where it is the only course_lib), every
  public check passes the bug zoo's correct implementations and the instructor's
  solutions, rejects the stub, and names each known mistake the zoo marks public
  with the same message as the full library;
* the two former import circles stay broken.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.checks import _stored
from course_lib.grading.editions import library as edition

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "course_lib"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("edition")
    edition.write_student_edition(dest)
    return dest / "course_lib"


def _close(a, b) -> bool:
    # The references run float32/float64 kernels (exp, sin, pow, matmul) whose last
    # bits may differ between CPUs (vectorised paths): a relative 1e-5 (~80 float32
    # ulps) absorbs that and is far below any difference between two public cases.
    if isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype):
            return False
        if a.is_floating_point():
            return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
        return bool(torch.equal(a, b))
    if isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in b)
    if isinstance(b, float):
        if b != b:  # nan (ex10's answer for a method at chance): stored as nan
            return isinstance(a, float) and a != a
        return abs(a - b) <= 1e-6 + 1e-5 * abs(b)
    return a == b


def test_stored_values_are_what_the_references_give() -> None:
    stored = torch.load(_stored.DATA, weights_only=True)
    fresh = _stored.generate(ROOT)
    stale = (
        "course_lib/checks/public_expected.pt is out of date with the public checks "
        "or the references: run `python -m course_lib.checks._stored` and commit it"
    )
    assert sorted(stored) == sorted(fresh), stale
    for name, entries in fresh.items():
        assert len(stored[name]) == len(entries), (name, stale)
        for got, want in zip(stored[name], entries, strict=True):
            assert _close(got["args"], want["args"]), (name, stale)
            assert _close(got["kwargs"], want["kwargs"]), (name, stale)
            assert _close(got["result"], want["result"]), (name, stale)


def test_stored_values_cover_every_exercise_target() -> None:
    stored = torch.load(_stored.DATA, weights_only=True)
    targets = {n for names in edition.exercise_targets().values() for n in names}
    assert targets <= set(stored)
    assert len(targets) >= 16  # ex01-ex08: two or three functions each


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    return {
        n.name: n
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.FunctionDef)
    }


def _is_stub(node: ast.FunctionDef, message: str) -> bool:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value,
                                                            ast.Constant):
        body = body[1:]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Raise)
        and message in ast.unparse(body[0])
    )


def test_exercise_targets_are_stubs(tree: Path) -> None:
    targets = edition.exercise_targets()
    assert targets["course_lib.alibi"] == {"alibi_bias": 5, "alibi_slopes": 5}
    assert targets["course_lib.sinusoidal"]["sinusoidal_encoding"] == 2
    for module, names in targets.items():
        rel = Path(*module.split(".")[1:]).with_suffix(".py")
        full, student = _functions(PACKAGE / rel), _functions(tree / rel)
        for name, number in names.items():
            assert _is_stub(student[name],
                            f"{name} is exercise {number}: implement it in your "
                            "notebook"), name
            # the signature is the library's
            assert ast.unparse(student[name].args) == ast.unparse(full[name].args)
            # no line of the reference's code survives anywhere in the module
            code = [
                ast.unparse(stmt) for stmt in full[name].body
                if not (isinstance(stmt, ast.Expr)
                        and isinstance(stmt.value, ast.Constant))
            ]
            text = ast.unparse(ast.parse((tree / rel).read_text()))
            original = ast.unparse(ast.parse((PACKAGE / rel).read_text()))
            # the reference's distinctive lines: found nowhere else in its module
            # (argument validation shared with other functions is not the answer)
            distinctive = [
                piece.strip()
                for line in code
                for piece in line.splitlines()
                if len(piece.strip()) > 20 and original.count(piece.strip()) == 1
            ]
            assert distinctive, name
            for piece in distinctive:
                assert piece not in text, (name, piece)


def test_hidden_graders_and_their_inputs_are_gone(tree: Path) -> None:
    for path in sorted((PACKAGE / "checks").glob("ex*_*.py")):
        full_tree = ast.parse(path.read_text())
        full = {n.name: n for n in full_tree.body if isinstance(n, ast.FunctionDef)}
        student = _functions(tree / "checks" / path.name)
        hidden = [n for n in full if n.startswith("grade_")]
        assert hidden, path.name
        for name in hidden:
            assert _is_stub(student[name], f"{name} is a hidden test"), name
            assert ast.get_docstring(student[name]) is None
        # private helpers referred to by hidden graders only are gone
        public_uses: set[str] = set()
        for node in full_tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name in hidden):
                public_uses |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        hidden_only = {
            n.id
            for name in hidden
            for n in ast.walk(full[name])
            if isinstance(n, ast.Name) and n.id.startswith("_")
            and n.id not in public_uses and n.id in full
        }
        for helper in hidden_only:
            others = list((tree / "checks").glob("*.py"))
            assert not any(f"def {helper}(" in p.read_text() for p in others), helper


def test_only_the_student_part_of_grading_ships(tree: Path) -> None:
    shipped = sorted(p.relative_to(tree / "grading").as_posix()
                     for p in (tree / "grading").rglob("*.py"))
    assert shipped == sorted(edition.STUDENT_GRADING_MODULES)
    for name in ("autograde.py", "kernels/sandbox.py", "notebooks/integrity.py",
                 "editions/library.py", "release.py", "feedback.py"):
        assert not (tree / "grading" / name).exists()
    assert (tree / "checks" / "public_expected.pt").is_file()
    assert not list(tree.rglob("__pycache__"))


_IN_EDITION = r"""
import contextlib, inspect, io, json, re, sys
from pathlib import Path
root, tree = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(root / "tests"))
import course_lib
assert Path(course_lib.__file__).parent == tree, course_lib.__file__
from course_lib.checks import CheckFailed
from course_lib.checks import _stored
import course_lib.checks as C
from zoo import (ex01_permutation, ex02_sinusoidal, ex03_rotation, ex04_rope,
                 ex05_alibi, ex06_relative, ex07_transformer_xl, ex08_da,
                 ex09_bug_zoo, ex11_long_context)
report = {"correct": 0, "wrong": 0, "solutions": 0, "stub": 0, "messages": []}
quiet = lambda: contextlib.redirect_stdout(io.StringIO())
def check_of(name):
    for mod in C.__dict__.values():
        if hasattr(mod, f"check_{name}"):
            return getattr(mod, f"check_{name}")
for zoo in (ex01_permutation, ex02_sinusoidal, ex03_rotation, ex04_rope, ex05_alibi,
            ex06_relative, ex07_transformer_xl, ex08_da, ex09_bug_zoo,
            ex11_long_context):
    for name, fns in zoo.CORRECT.items():
        for fn in fns:
            with quiet():
                check_of(name)(fn)
            report["correct"] += 1
    for name, entries in zoo.WRONG.items():
        for fn, fragment, public in entries:
            if not public:
                continue
            try:
                with quiet():
                    check_of(name)(fn)
            except CheckFailed as exc:
                if fragment not in str(exc):
                    report["messages"].append([name, fn.__name__, str(exc)[:300]])
                report["wrong"] += 1
            else:
                report["messages"].append([name, fn.__name__, "accepted"])
# exercise 3's hand computation grades three numbers: its zoo is a table of values
for values, fragment, public in ex03_rotation.HAND_WRONG:
    if not public:
        continue
    try:
        with quiet():
            C.ex03_rotation.check_hand_computation(*values)
    except CheckFailed as exc:
        if fragment not in str(exc):
            report["messages"].append(["hand_computation", fragment, str(exc)[:300]])
        report["wrong"] += 1
    else:
        report["messages"].append(["hand_computation", fragment, "accepted"])
for values in ex03_rotation.HAND_CORRECT:
    with quiet():
        C.ex03_rotation.check_hand_computation(*values)
for mod in [m for n, m in vars(C).items() if n.startswith("ex")]:
    ns = _stored._solution_namespace(root, mod.__name__.rsplit(".", 1)[1])
    for name in [n for n in mod.__all__ if n.startswith("check_")]:
        check = getattr(mod, name)
        params = [p for p in inspect.signature(check).parameters
                  if p not in ("variant", "seed")]  # a term's (default: None)
        target = name.removeprefix("check_")
        with quiet():
            check(*[ns[target if len(params) == 1 else p] for p in params])
        report["solutions"] += 1
        def stub(*a, **k):
            raise NotImplementedError()
        try:
            with quiet():
                check(*([stub] if len(params) == 1 else [None] * len(params)))
        except CheckFailed:
            report["stub"] += 1
try:
    course_lib.alibi_bias(2, 3)
except NotImplementedError as exc:
    report["library"] = str(exc)
print(json.dumps(report))
"""


@pytest.mark.slow
def test_public_checks_work_in_the_student_edition(tree: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree.parent)
    run = subprocess.run(
        [sys.executable, "-c", _IN_EDITION, str(ROOT), str(tree)],
        capture_output=True, text=True, env=env, cwd=tree.parent, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["messages"] == []
    assert report["correct"] >= 30 and report["wrong"] >= 30
    import course_lib.checks as checks  # noqa: PLC0415
    n_checks = sum(  # check_* functions of ex01-ex11
        name.startswith("check_")
        for module in vars(checks).values()
        if getattr(module, "__name__", "").startswith("course_lib.checks.ex")
        for name in getattr(module, "__all__", ())
    )
    assert report["solutions"] == n_checks and report["stub"] == n_checks
    assert report["library"] == (
        "alibi_bias is exercise 5: implement it in your notebook"
    )


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports too),
    relative imports resolved against the file's package."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            out.add(module)
            out |= {f"{module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


@pytest.mark.parametrize(
    "low,high",
    [("checks/_record.py", "checks/_core.py"),
     ("grading/kernels/execute.py", "grading/notebooks/integrity.py")],
)
def test_no_import_circle(low: str, high: str) -> None:
    high_module = "course_lib." + high.removesuffix(".py").replace("/", ".")
    low_module = "course_lib." + low.removesuffix(".py").replace("/", ".")
    assert low_module in _imports(PACKAGE / high)  # the one direction kept
    assert high_module not in _imports(PACKAGE / low)


def test_code_built_on_a_target_is_stubbed_and_its_helpers_gone(tree: Path) -> None:
    stubbed = 0
    for module, targets in edition.exercise_targets().items():
        rel = Path(*module.split(".")[1:]).with_suffix(".py")
        full = ast.parse((PACKAGE / rel).read_text())
        student = {
            n.name: n for n in ast.parse((tree / rel).read_text()).body
            if isinstance(n, ast.FunctionDef | ast.ClassDef)
        }
        for node in full.body:
            if not isinstance(node, ast.FunctionDef | ast.ClassDef):
                continue
            code = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            direct = sorted((code - {node.name}) & set(targets))
            if node.name in targets or not direct:
                continue
            if node.name.startswith("_") and node.name not in student:
                continue  # a private helper built on a target: gone altogether
            methods = (
                [student[node.name]] if isinstance(node, ast.FunctionDef)
                else [m for m in student[node.name].body
                      if isinstance(m, ast.FunctionDef)]
            )
            assert methods, node.name
            for method in methods:
                assert _is_stub(method, f"{node.name} uses "), (module, method.name)
            stubbed += 1
    assert stubbed >= 5  # RotaryEmbedding, ALiBi, T5RelativeBias, DAAttention, ...
    rope = ast.parse((tree / "rope.py").read_text())
    assert "_rotate" not in {
        n.name for n in rope.body if isinstance(n, ast.FunctionDef)
    }


def test_alternates_compute_their_target_and_are_stubbed(tree: Path) -> None:
    import importlib

    stored = torch.load(_stored.DATA, weights_only=True)
    for module, alternates in edition.ALTERNATES.items():
        library = importlib.import_module(module)
        rel = Path(*module.split(".")[1:]).with_suffix(".py")
        student = _functions(tree / rel)
        for name, target in alternates.items():
            cases = stored[target]
            assert cases, target
            for case in cases:  # the public checks' inputs, the references' answers
                got = getattr(library, name)(*case["args"], **case["kwargs"])
                assert _close(got, case["result"]), (name, target)
            assert _is_stub(student[name], f"{name} computes {target}, which is "
                                           "exercise ")


# A line that only names parts of shapes or indexes (``q_len, k_len = q.shape[2],
# k.shape[2]``) says nothing about the answer; every other line of a solution does.
_PLAIN = re.compile(r"[\w, *]+ = [\w\[\]., ]+")


def test_no_solution_line_is_in_the_student_edition(tree: Path) -> None:
    text = "\n".join(p.read_text() for p in tree.rglob("*.py"))
    searched, found = 0, []
    for notebook in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            if "### BEGIN SOLUTION" not in source:
                continue
            body = source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            for line in body.splitlines():
                line = line.strip()
                if (len(line) > 25 and not line.startswith(("#", '"""'))
                        and not _PLAIN.fullmatch(line)):
                    searched += 1
                    if line in text:
                        found.append((notebook.parent.name, line))
    assert searched >= 100
    assert found == []
