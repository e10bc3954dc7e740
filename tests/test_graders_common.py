"""What every grader of exercises 1-9 and 11 must do, whatever its exercise.

Every wrong implementation of the bug zoo (tests/zoo/) is rejected by the hidden
grader, and by the public check where the zoo marks it, with the message that explains
its mistake; a function that only calls course_lib, the untouched stub, a non-tensor
answer and a crash all earn nothing with a message that says why. Nothing is ever
written to stderr (nbgrader scores such a cell 0). The exercise-specific tests are in
test_checks_ex01_05.py, test_checks_ex06_09.py and test_checks_ex11.py.
"""

from __future__ import annotations

import re

import pytest
import torch
from zoo import ex01_permutation as z01
from zoo import ex02_sinusoidal as z02
from zoo import ex03_rotation as z03
from zoo import ex04_rope as z04
from zoo import ex05_alibi as z05
from zoo import ex06_relative as z06
from zoo import ex07_transformer_xl as z07
from zoo import ex08_da as z08
from zoo import ex09_bug_zoo as z09
from zoo import ex11_long_context as z11
from zoo import harness

from course_lib.checks import CheckFailed
from course_lib.checks import ex01_permutation as g01
from course_lib.checks import ex02_sinusoidal as g02
from course_lib.checks import ex03_rotation as g03
from course_lib.checks import ex04_rope as g04
from course_lib.checks import ex05_alibi as g05
from course_lib.checks import ex06_relative as g06
from course_lib.checks import ex07_transformer_xl as g07
from course_lib.checks import ex08_da as g08
from course_lib.checks import ex09_bug_zoo as g09
from course_lib.checks import ex11_long_context as g11

PAIRS = [
    (g01, z01),
    (g02, z02),
    (g03, z03),
    (g04, z04),
    (g05, z05),
    (g06, z06),
    (g07, z07),
    (g08, z08),
    (g09, z09),
    (g11, z11),
]
NAMES = sorted(set(harness.names(PAIRS)))


def _graders(name: str):
    return harness.graders(PAIRS, name)


@pytest.mark.parametrize("name,fn,fragment,public", harness.wrong_params(PAIRS))
def test_wrong_variant_is_rejected(name, fn, fragment, public, capsys) -> None:
    check, grade = _graders(name)
    with pytest.raises(CheckFailed, match=re.escape(fragment)):
        grade(fn)
    if public:
        with pytest.raises(CheckFailed, match=re.escape(fragment)):
            check(fn)
        assert "passed" not in capsys.readouterr().out
    else:  # a bug only the hidden cases find: the public check lets it through
        check(fn)
        assert "all public checks passed" in capsys.readouterr().out
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name,fn", harness.calls_library_params(PAIRS))
def test_calling_the_library_earns_nothing(name, fn, capsys) -> None:
    check, grade = _graders(name)
    for grader in (check, grade):
        with pytest.raises(CheckFailed, match="calls the course_lib reference"):
            grader(fn)
    out, err = capsys.readouterr()
    assert err == "" and out == ""


def _graders_own_answer(grade):
    """(module, name) of the function ``grade`` computes its expected values with."""
    import importlib

    from course_lib.grading.editions.library import PLAN_REFERENCES

    module = importlib.import_module(grade.__module__)
    name = PLAN_REFERENCES.get(grade.__name__, "_ref_" + grade.__name__[6:])
    if name is not None and ":" in name:
        where, name = name.split(":")
        module = importlib.import_module(where)
    return module, name


@pytest.mark.parametrize("name", NAMES)
def test_calling_the_graders_own_answer_earns_nothing(name, capsys) -> None:
    """The grader's reference, looked up on its module at call time (where the
    student edition keeps the public checks' stored answers), is trapped too."""
    check, grade = _graders(name)
    module, reference = _graders_own_answer(grade)
    if reference is None:
        pytest.skip(f"{grade.__name__} judges given values, it has no reference")

    def cheat(*args, **kwargs):
        return getattr(module, reference)(*args, **kwargs)

    for grader in (check, grade):
        with pytest.raises(CheckFailed, match="calls the course_lib reference"):
            grader(cheat)
    assert capsys.readouterr().err == ""


def _stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


@pytest.mark.parametrize("name", NAMES)
def test_stub_fails_with_the_stub_message(name, capsys) -> None:
    check, grade = _graders(name)
    for grader in (check, grade):
        with pytest.raises(CheckFailed, match="still the stub"):
            grader(_stub)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", NAMES)
def test_a_non_tensor_answer_is_explained(name) -> None:
    check, _ = _graders(name)
    with pytest.raises(CheckFailed, match="should (return|be)"):
        check(lambda *args, **kwargs: None)


@pytest.mark.parametrize("name", NAMES)
def test_a_crash_is_reported_with_the_call(name) -> None:
    def crashes(*args, **kwargs):
        return torch.zeros(3) @ torch.zeros(4)

    check, _ = _graders(name)
    with pytest.raises(CheckFailed, match=r"raised RuntimeError"):
        check(crashes)
