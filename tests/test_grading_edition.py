"""The grading edition: the ``course_lib`` a sandboxed grading kernel sees.

Its hidden graders hold no reference and no expected value: they make the calls the
pristine graders make, on planned inputs, and the grading tool's replay judges the
record (course_lib/grading/editions/library.py, course_lib/checks/_record.py). These
tests check, in this process, that a plan replays to the pristine verdict for every
hidden grader: a right answer passes, a wrong one fails with the grader's own message.
tests/test_adversarial.py grades through the sandbox with it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
import torch

from course_lib.checks import _core, _record
from course_lib.checks._errors import CheckFailed
from course_lib.grading.editions.library import (
    _plan_reference,
    exercise_targets,
    plan_hidden_graders,
    write_grading_edition,
)
from course_lib.grading.notebooks.integrity import pristine_graders

pytestmark = pytest.mark.slow

# Assignments whose kernel keeps the full library: none. (ex10's hidden grader
# trains the lab's model with the student's bias, and asks for that bias through
# call_student, so the training run is replayed outside the kernel too.)
EXCEPTED: set[str] = set()


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> tuple[Path, set[str]]:
    return write_grading_edition(tmp_path_factory.mktemp("grading"))


@pytest.fixture(scope="module")
def plans() -> dict:
    return plan_hidden_graders()[0]


def _graders() -> list[tuple[str, str]]:
    return sorted(
        (module, name)
        for name, modules in pristine_graders().items()
        if name.startswith("grade_")
        for module in modules
    )


def test_no_assignment_keeps_the_full_library(edition) -> None:
    _, full = edition
    assert full == EXCEPTED


def test_no_reference_and_no_expected_value_in_the_edition(edition) -> None:
    out, _ = edition
    for module, names in exercise_targets().items():
        path = out.joinpath(*module.split(".")[1:]).with_suffix(".py")
        tree = ast.parse(path.read_text())
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for name in names:
            body = [
                s for s in defs[name].body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            ]
            assert len(body) == 1 and isinstance(body[0], ast.Raise), (module, name)
    # the hidden graders of the plannable modules only make the planned calls
    for path in sorted((out / "checks").glob("ex[0-9]*_*.py")):
        if path.stem in EXCEPTED:
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("grade_"):
                called = {
                    n.func.id for n in ast.walk(node)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                }
                assert called == {"deferred_grade"}, (path.name, node.name, called)
    stored = torch.load(out / "checks" / "_plans.pt", weights_only=False)
    assert set(stored) == {"float32", "float64"}
    for dtype, graders in stored.items():
        for grader, plan in graders.items():
            for position, call, args, kwargs in plan:
                # inputs only: which argument, the call's text, its inputs
                assert type(position) is int and type(call) is str, (dtype, grader)
                assert type(args) is tuple and type(kwargs) is dict, (dtype, grader)


class _NoTrap:
    """The reference trap switched off: here the references themselves stand for a
    right answer (the trap has its own tests)."""

    def __init__(self, fn) -> None:
        self.called: list[str] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def _wrong(*args, **kwargs):
    return torch.full((2, 3), 7.0)


def _record_and_replay(grader_module: str, name: str, student, dtype) -> None:
    """Run the edition's deferred grader on ``student`` under a recorder, then the
    pristine grader on the record; raises what the replay raises."""
    grader = getattr(importlib.import_module(grader_module), name)
    n_params = len(inspect.signature(grader).parameters)
    previous_dtype, previous_session = torch.get_default_dtype(), _record._session
    torch.set_default_dtype(dtype)
    try:
        recorder = _record._Recorder()
        _record._session = recorder
        _core.deferred_grade(name, (student,) + (None,) * (n_params - 1))
        _record._session = previous_session
        assert recorder.deferred == {name}
        events = list(recorder.events)
        stand_in = _record.StudentFunction(name.removeprefix("grade_"))
        with _record.replaying(events, str(dtype).removeprefix("torch.")):
            grader(stand_in, *(None,) * (n_params - 1))
    finally:
        _record._session = previous_session
        torch.set_default_dtype(previous_dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_plan_replays_to_the_pristine_verdict(plans, monkeypatch, dtype) -> None:
    monkeypatch.setattr(_core, "_plans", plans)
    monkeypatch.setattr(_core, "reference_trap", _NoTrap)
    key = str(dtype).removeprefix("torch.")
    judged = 0
    for module_name, name in _graders():
        if name not in plans[key]:
            continue  # not plannable at float64: the float32 plan serves
        reference = _plan_reference(importlib.import_module(module_name), name)
        if reference is None:
            assert plans[key][name] == []  # judges the values it is given
            continue
        assert plans[key][name], name
        # a right answer: the pristine grader passes on the record
        _record_and_replay(module_name, name, reference, dtype)
        # a wrong one: the pristine grader's own failure, not "tampering"
        with pytest.raises(CheckFailed):
            _record_and_replay(module_name, name, _wrong, dtype)
        judged += 1
    # every hidden grader but grade_hand_computation (no student function), at
    # float32
    if dtype == torch.float32:
        assert judged == len(_graders()) - 1


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_the_edition_is_written_once_then_copied_from_the_cache(
    tmp_path, monkeypatch
) -> None:
    """Planning takes seconds and depends only on the library: a second run copies
    the first run's edition from the grading user's cache, file for file."""
    import time

    from course_lib.grading.kernels import sandbox

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COURSE_EDITION_CACHE", raising=False)
    cache = sandbox._edition_cache()
    assert cache is not None and not cache.exists()
    assert (cache.parent.stat().st_mode & 0o777) == 0o700
    first, full = sandbox.grading_edition()
    assert (cache / "edition.json").is_file() and full == ()
    start = time.perf_counter()
    second, again = sandbox.grading_edition()
    copied = time.perf_counter() - start
    assert second != first and again == full
    assert _tree(Path(second)) == _tree(Path(first)) == _tree(cache / "course_lib")
    assert (Path(second) / "checks" / "_plans.pt").is_file()
    print(f"edition copied from the cache in {copied:.2f} s")
    monkeypatch.setenv("COURSE_EDITION_CACHE", "0")
    assert sandbox._edition_cache() is None
