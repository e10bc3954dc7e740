"""ex10_lab graded by ``course autograde`` in the sandbox: its answer exists nowhere in
the kernel.

ex10's bias (a logarithmic distance penalty) has no library function: its only
reference is the grader's own ``_reference_bias``. The hidden grader trains the lab's
model with the student's bias; it asks for that bias through ``call_student``, so the
assignment is graded with the grading edition like every other (the replay trains the
model outside the kernel). These submissions try to reach the grader's answer from
inside the kernel; each must lose exactly the ``log_distance_bias`` cells, while the
same notebook's honest ``retained_skill`` keeps its points.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest
from conftest import course_cli

from course_lib.grading.synthetic import (
    scratch_course,
    solution_answers,
    student_notebook,
    write_submission,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
A = "ex10_lab"
BIAS = "log_distance_bias"
AUTO = {  # test cells and their points (ex10's written answer is graded by hand)
    f"{BIAS}__public": 1,
    f"{BIAS}__hidden": 2,
    "retained_skill__public": 1,
    "retained_skill__hidden": 2,
}
HEADER = f"def {BIAS}(n_heads, seq_len):\n"
TRAPPED = "calls the course_lib reference"  # the trap names the grader's function
# a copy escapes the trap, but the kernel's copy of the grader holds only the public
# checks' stored values: the first other input fails
ONLY_PUBLIC = "stores the expected values of the public checks only"
ATTACKS = {
    # the grader's reference, imported by name
    "grader_import": (
        TRAPPED,
        "from course_lib.checks.ex10_lab import _reference_bias\n"
        + HEADER
        + "    return _reference_bias(n_heads, seq_len).float()\n",
    ),
    # the same, through the module attribute, looked up at call time
    "grader_attribute": (
        TRAPPED,
        "import importlib\n"
        + HEADER
        + "    grader = importlib.import_module('course_lib.checks.' + 'ex10_lab')\n"
        + "    return grader._reference_bias(n_heads, seq_len).float()\n",
    ),
    # the grader's functions rebuilt from their code over a copy of its globals
    "grader_clone_code": (
        ONLY_PUBLIC,
        "import types\n"
        "import course_lib.checks.ex10_lab as _g10\n"
        "_g = dict(vars(_g10))\n"
        "for _k, _v in list(_g.items()):\n"
        "    if (isinstance(_v, types.FunctionType)\n"
        "            and _v.__module__ == _g10.__name__):\n"
        "        _g[_k] = types.FunctionType(_v.__code__, _g, _k, _v.__defaults__,\n"
        "                                    _v.__closure__)\n"
        + HEADER
        + "    return _g['_reference_bias'](n_heads, seq_len).float()\n",
    ),
    # the grader's source file, executed afresh
    "grader_exec_source": (
        ONLY_PUBLIC,
        "import course_lib.checks.ex10_lab as _g10\n"
        "_ns = {'__name__': 'course_lib.checks.copied',\n"
        "       '__package__': 'course_lib.checks'}\n"
        "with open(_g10.__file__) as _f:\n"
        "    exec(compile(_f.read(), 'copied', 'exec'), _ns)\n"
        + HEADER
        + "    return _ns['_reference_bias'](n_heads, seq_len).float()\n",
    ),
}


_course = functools.partial(course_cli, timeout=1500)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    tmp = tmp_path_factory.mktemp("adversarial_ex10")
    course = scratch_course(tmp / "course", ROOT, [A])
    out = _course("release", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    answers = solution_answers(course.root / "solutions" / A / f"{A}.ipynb")
    inbox = tmp / "inbox"
    students = {
        "honest": answers[f"{BIAS}__answer"],
        **{name: source for name, (_, source) in ATTACKS.items()},
    }
    for student, bias_source in students.items():
        nb = student_notebook(
            course.release_dir / A / f"{A}.ipynb",
            {**answers, f"{BIAS}__answer": bias_source},
        )
        write_submission(inbox, student, A, nb)
    collected = _course("collect", str(inbox), "--assignment", A, cwd=course.root)
    assert collected.returncode == 0, collected.stderr
    run = _course("autograde", A, "--jobs", "2", "--no-progress", cwd=course.root)
    assert run.returncode == 0, run.stderr[-3000:]
    return course, run


def _scores(course, student: str) -> dict[str, float]:
    with course.gradebook() as gb:
        sub = gb.find_submission(A, student)
        return {g.name: g.score for nb in sub.notebooks for g in nb.grades}


def _status(course):
    from course_lib.grading.gradebook import read_status

    with course.gradebook() as gb:
        return read_status(gb, A)


def test_graded_in_the_sandbox_with_the_grading_edition(graded):
    _, run = graded
    assert "bubblewrap sandbox" in run.stdout, run.stdout


def test_the_solution_earns_every_automatic_point(graded):
    course, _ = graded
    scores = _scores(course, "honest")
    assert {cell: scores[cell] for cell in AUTO} == AUTO, scores


@pytest.mark.parametrize("student", sorted(ATTACKS))
def test_reaching_the_graders_answer_earns_nothing(graded, student):
    course, _ = graded
    scores = _scores(course, student)
    assert {cell: scores[cell] for cell in AUTO} == {
        cell: (0 if cell.startswith(BIAS) else points) for cell, points in AUTO.items()
    }, (student, scores)
    row = _status(course)[student]
    assert row.status == "graded", row
    phrase = ATTACKS[student][0]
    for cell in (f"{BIAS}__public", f"{BIAS}__hidden"):
        assert phrase in row.failures[cell], (student, cell, row.failures[cell])
