"""A synthetic class of ex05_alibi submissions graded end to end by ``course``.

Sixteen students hand in every kind of submission an instructor meets: right, partly
right, a wrong convention, untouched, broken, hostile or slow. They are collected from
LMS-style file names, graded by ``course autograde --jobs 2`` with short limits, and
reported. Each student's expected score per test cell is derived from what their code
does against the exercise's graders (written next to each case); totals and pass rates
are computed from that table, never typed in.
"""

from __future__ import annotations

import csv
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
A = "ex05_alibi"
CELLS = (
    "alibi_slopes__public",
    "alibi_slopes__hidden",
    "alibi_bias__public",
    "alibi_bias__hidden",
)
POINTS = {
    "alibi_slopes__public": 1,
    "alibi_slopes__hidden": 2,
    "alibi_bias__public": 1,
    "alibi_bias__hidden": 2,
}
CELL_TIMEOUT = 15  # seconds per cell (generous: CI has 2 busy cores)
WALL_TIMEOUT = 45  # seconds per submission
MEMORY = "2G"

SLOPES_OK = {"alibi_slopes__public": 1, "alibi_slopes__hidden": 2}
ALL_OK = {**SLOPES_OK, "alibi_bias__public": 1, "alibi_bias__hidden": 2}


_course_cmd = course_cli


def _build_class(course_root: Path, inbox: Path) -> dict[str, dict]:
    """Write every submission into ``inbox``; return student -> expectation:
    ``cells`` (points earned per test cell) or ``ungradable`` (a phrase of the
    reason), and ``message`` (a phrase the failure report must contain)."""
    source = course_root / "solutions" / A / f"{A}.ipynb"
    release = course_root / "notebooks" / A / f"{A}.ipynb"
    sol = solution_answers(source)
    slopes, bias = sol["alibi_slopes__answer"], sol["alibi_bias__answer"]
    distance = "(pos[:, None] - pos[None, :]).abs()"
    assert distance in bias, "the ex05 solution changed; update this test's edits"
    body = '"""\n'
    assert body in bias and body in slopes

    def nb(slopes_src=slopes, bias_src=bias, **kw):
        answers = {"alibi_slopes__answer": slopes_src, "alibi_bias__answer": bias_src}
        return student_notebook(release, answers, **kw)

    pow2 = (
        "def alibi_slopes(n_heads):\n"
        "    h = torch.arange(1, n_heads + 1, dtype=torch.float64)\n"
        "    return (2.0 ** (-8.0 * h / n_heads)).float()\n"
    )
    spin = (
        "import time\n"
        "while True:  # swallows the interrupt nbgrader sends at the cell timeout\n"
        "    try:\n"
        "        time.sleep(0.05)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
    )
    slow = student_notebook(
        release, {"alibi_slopes__answer": slopes, "alibi_bias__answer": bias}
    )
    import nbformat

    for _ in range(6):  # each cell stays under the cell limit, together past the wall
        slow.cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(10)"))

    lib_bias = (
        "from course_lib import alibi_bias as _lib_alibi_bias\n\n\n"
        "def alibi_bias(n_heads, seq_len):\n"
        "    return _lib_alibi_bias(n_heads, seq_len)\n"
    )
    cases = {
        # every answer right: full marks
        "correct": (nb(), {"cells": ALL_OK}),
        # slopes right, bias without |.|: keys after the query get a positive bias
        "partial": (
            nb(bias_src=bias.replace(distance, "(pos[:, None] - pos[None, :])")),
            {"cells": SLOPES_OK, "message": "without the absolute value"},
        ),
        # wrong sign convention: +m|i-j|
        "positive_bias": (
            nb(bias_src=bias.replace("return -alibi_slopes", "return alibi_slopes")),
            {"cells": SLOPES_OK, "message": "the bias is positive"},
        ),
        # slopes 2^(-8h/n): right for power-of-two head counts only; the public
        # checks use 6 heads (and the bias one head over 20 positions), so the
        # mistake is named there and every cell is lost
        "pow2_slopes": (
            nb(slopes_src=pow2),
            {"cells": {}, "message": "power of two"},
        ),
        # the released notebook, untouched
        "stub": (student_notebook(release), {"cells": {}, "message": "still the stub"}),
        # the bias cell does not parse: its function is never defined
        "syntax_error": (
            nb(
                bias_src=bias.replace(
                    "def alibi_bias(n_heads, seq_len):",
                    "def alibi_bias(n_heads, seq_len)",
                )
            ),
            {"cells": SLOPES_OK, "message": "NameError"},
        ),
        # an infinite loop before the bias is defined: one cell timeout, then on
        # (it sleeps: the limit is wall time, and a spinning `while True: pass` is
        # graded by tests/test_time_limits.py, through benchmarks/bench_timeouts.py)
        "loop": (
            nb(bias_src="import time\nwhile True:\n    time.sleep(0.05)\n\n" + bias),
            {"cells": SLOPES_OK, "message": "NameError"},
        ),
        # a loop that ignores the interrupt: nbgrader gives up on the notebook
        "spin": (
            nb(slopes_src=slopes + "\n\n" + spin),
            {"ungradable": "could not be interrupted"},
        ),
        # many slow cells: the whole submission runs past its wall time
        "slow": (slow, {"ungradable": f"time limit of {WALL_TIMEOUT} s"}),
        # the kernel process exits
        "exit": (
            nb(bias_src="import os\nos._exit(1)\n" + bias),
            {"ungradable": "exited with status 1"},
        ),
        # 200 GB tensor inside alibi_slopes: the allocation fails under the limit
        "hog_torch": (
            nb(
                slopes_src=slopes.replace(
                    body, body + "    torch.empty(50_000_000_000)  # 200 GB\n", 1
                )
            ),
            {"cells": {}, "message": "alibi_slopes(8) raised RuntimeError"},
        ),
        # a list growing until the memory limit stops it (MemoryError), before the
        # bias is defined
        "hog_list": (
            nb(
                bias_src="blob = []\nwhile True:\n"
                "    blob.append(bytearray(50 * 2**20))\n" + bias
            ),
            {"cells": SLOPES_OK, "message": "NameError"},
        ),
        # test cells deleted: nbgrader puts them back (add_missing_cells)
        "deleted_tests": (
            nb(drop=["alibi_slopes__public", "alibi_bias__hidden"]),
            {"cells": ALL_OK},
        ),
        # test cells replaced by `pass` over stub answers: restored from the gradebook
        "edited_tests": (
            student_notebook(release, replace={c: "pass" for c in CELLS}),
            {"cells": {}, "message": "still the stub"},
        ),
        # not a notebook at all
        "not_json": (
            b'{"cells": [ {"cell_type": "code", "source": ',
            {"ungradable": "not a valid notebook"},
        ),
        # alibi_bias merely calls the library: no points for it
        "uses_reference": (
            nb(bias_src=lib_bias),
            {"cells": SLOPES_OK, "message": "course_lib reference"},
        ),
    }
    for student, (notebook, _) in cases.items():
        write_submission(inbox, student, A, notebook)
    return {student: expect for student, (_, expect) in cases.items()}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    course = scratch_course(tmp / "course", ROOT, [A])
    out = _course_cmd("release", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    inbox = tmp / "inbox"
    expected = _build_class(course.root, inbox)
    (inbox / "notes.txt").write_text("not a submission")
    collected = _course_cmd(
        "collect", str(inbox), "--assignment", "ex05", cwd=course.root
    )
    assert collected.returncode == 0, collected.stderr
    with course.gradebook() as gb:  # on the roster, never submitted
        gb.update_or_create_student("zoe")
    run = _course_cmd(
        "autograde",
        "ex05",
        "--jobs",
        "2",
        "--cell-timeout",
        str(CELL_TIMEOUT),
        "--timeout",
        str(WALL_TIMEOUT),
        "--memory",
        MEMORY,
        cwd=course.root,
    )
    return course, expected, collected, run


def _expected_total(expect: dict) -> int:
    return sum(expect.get("cells", {}).values())


def test_collect_places_every_submission(graded_class):
    course, expected, collected, _ = graded_class
    assert f"{len(expected)} placed" in collected.stdout
    assert "notes.txt: not a notebook" in collected.stdout
    placed = sorted(
        p.parent.parent.name for p in course.submitted_dir.glob(f"*/{A}/{A}.ipynb")
    )
    assert placed == sorted(expected)


def test_every_student_gets_the_expected_score(graded_class):
    course, expected, _, run = graded_class
    assert run.returncode == 0, run.stderr[-3000:]
    from course_lib.grading.gradebook import read_status

    with course.gradebook() as gb:
        status = read_status(gb, A)
        for student, expect in expected.items():
            sub = gb.find_submission(A, student)
            assert float(sub.score) == _expected_total(expect), (
                student,
                status[student],
            )
            assert float(sub.max_score) == sum(POINTS.values())
            grades = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
            for cell in CELLS:
                assert grades[cell] == expect.get("cells", {}).get(cell, 0), (
                    student,
                    cell,
                    status[student].failures,
                )
    assert set(status) == set(expected)
    for student, expect in expected.items():
        row = status[student]
        if "ungradable" in expect:
            assert row.status == "ungradable", (student, row)
            assert expect["ungradable"] in row.reason, (student, row.reason)
        else:
            assert row.status == "graded", (student, row)
            failed = " ".join(row.failures.values())
            if "message" in expect:
                assert expect["message"] in failed, (student, row.failures)
            missed = [c for c in CELLS if c not in expect["cells"]]
            assert sorted(row.failures) == sorted(missed), (student, row.failures)


def test_report_lists_every_student_with_reasons(graded_class):
    course, expected, _, _ = graded_class
    out = _course_cmd("report", "ex05", cwd=course.root)
    assert out.returncode == 0, out.stderr
    folder = course.root / "reports" / A
    rows = {r["student_id"]: r for r in csv.DictReader((folder / "grades.csv").open())}
    assert set(rows) == set(expected) | {"zoe"}
    assert rows["zoe"]["status"] == "no submission"
    assert float(rows["zoe"]["score"]) == 0
    for student, expect in expected.items():
        row = rows[student]
        assert float(row["score"]) == _expected_total(expect)
        for cell in CELLS:
            assert float(row[cell]) == expect.get("cells", {}).get(cell, 0)
        if "ungradable" in expect:
            assert row["status"] == "ungradable"
            assert expect["ungradable"] in row["reason"]
            assert f"{student}: " in out.stdout  # listed under "could not be graded"
        else:
            assert row["status"] == "graded" and row["reason"] == ""
    rates = {
        r["grade_id"]: r for r in csv.DictReader((folder / "pass_rates.csv").open())
    }
    assert list(rates) == list(CELLS)
    for cell in CELLS:
        passed = sum(
            e.get("cells", {}).get(cell, 0) == POINTS[cell] for e in expected.values()
        )
        assert int(rates[cell]["passed"]) == passed
        assert int(rates[cell]["submissions"]) == len(expected)
    png = (folder / "histogram.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_feedback_for_graded_and_ungradable(graded_class):
    course, expected, _, _ = graded_class
    out = _course_cmd("feedback", "ex05", cwd=course.root)
    assert out.returncode == 0, out.stderr
    for student, expect in expected.items():
        page = course.feedback_dir / student / A / f"{A}.html"
        assert page.is_file(), student
        text = page.read_text()
        if "ungradable" in expect:
            assert "could not be graded" in text
        else:
            assert "could not be graded" not in text
        # what nbgrader release_feedback opens in every feedback folder (it stops
        # at the first folder without it): the submission's timestamp, graded or not
        stamp = course.submitted_dir / student / A / "timestamp.txt"
        copied = course.feedback_dir / student / A / "timestamp.txt"
        assert copied.read_text() == stamp.read_text(), student
    hidden = (course.feedback_dir / "correct" / A / f"{A}.html").read_text()
    assert "grade_alibi_bias" in hidden  # nbgrader's own feedback page


def test_rerun_is_idempotent(graded_class):
    course, expected, _, _ = graded_class

    def snapshot():
        with course.gradebook() as gb:
            subs = gb.assignment_submissions(A)
            return sorted(
                (s.student.id, g.name, g.auto_score, g.needs_manual_grade)
                for s in subs
                for nb in s.notebooks
                for g in nb.grades
            ), len(subs)

    before = snapshot()
    again = _course_cmd(
        "autograde",
        "ex05",
        "--jobs",
        "2",
        "--no-progress",
        "--cell-timeout",
        str(CELL_TIMEOUT),
        "--timeout",
        str(WALL_TIMEOUT),
        "--memory",
        MEMORY,
        cwd=course.root,
    )
    assert again.returncode == 0, again.stderr
    assert f"{len(expected)} unchanged" in again.stdout
    assert snapshot() == before
    forced = _course_cmd(
        "autograde",
        "ex05",
        "--student",
        "correct",
        "--student",
        "not_json",
        "--force",
        "--no-progress",
        "--cell-timeout",
        str(CELL_TIMEOUT),
        "--timeout",
        str(WALL_TIMEOUT),
        "--memory",
        MEMORY,
        cwd=course.root,
    )
    assert forced.returncode == 0, forced.stderr
    assert "1 graded, 1 ungradable" in forced.stdout
    assert snapshot() == before
    assert before[1] == len(expected)
