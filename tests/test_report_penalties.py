"""``course report`` against ``nbgrader export``: late penalties, manual grades, every
student listed; and the due date in autograde's change check.

A scratch course with one tiny assignment (no torch in the kernel, so each graded
submission costs a plain Python kernel): one answer cell, two autograded test cells
(2 + 1 points) and a written answer graded by hand (2 points). The configuration
sets nbgrader's late-submission plugin to ``penalty_method = "zero"``; the gradebook
holds a due date; submissions carry their ``timestamp.txt``.
"""

from __future__ import annotations

import csv
import datetime as dt
import shutil
from pathlib import Path

import pytest
from conftest import grading_options

from course_lib.grading.synthetic import tiny_assignment

ROOT = Path(__file__).resolve().parents[1]
A = "ex90_tiny"
DUE = "2026-11-20 12:00:00"
POINTS = {"add__public": 2.0, "add__hidden": 1.0, "written": 2.0}

ANSWERS = {  # student -> (answer cell source, timestamp)
    "ontime": ("def add(a, b):\n    return a + b", "2026-11-20 11:00:00.000000 UTC"),
    "late": ("def add(a, b):\n    return a + b", "2026-11-20 14:30:00.000000 UTC"),
    "partial": (
        "def add(a, b):\n    return a + b if a > 0 else 99",
        "2026-11-19 09:00:00.000000 UTC",
    ),
    # an hour after the due date, but with a two-hour extension: on time
    "extended": ("def add(a, b):\n    return a + b", "2026-11-20 13:00:00.000000 UTC"),
    "latewrong": ("def add(a, b):\n    return a - b", "2026-11-21 08:00:00.000000 UTC"),
}
# what each answer earns from the two test cells: add(1, 2) == 3 (2 points) and
# add(-1, 1) == 0 (1 point), worked out by hand from the sources above
AUTO = {"ontime": 3.0, "late": 3.0, "partial": 2.0, "extended": 3.0, "latewrong": 0.0}


def _export(course) -> dict[str, dict[str, str]]:
    """Run the real ``nbgrader export`` in the course folder; rows by student."""
    from course_lib.grading.synthetic import nbgrader_export

    out = nbgrader_export(course)
    with out.open() as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh) if r["assignment"] == A}


def _report_rows(course, tag: str):
    from course_lib.grading.report import format_report, report

    result = report(course, A, course.root / "reports" / tag)
    with (course.root / "reports" / tag / "grades.csv").open() as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    with (course.root / "reports" / tag / "pass_rates.csv").open() as fh:
        rates = {r["grade_id"]: r for r in csv.DictReader(fh)}
    return result, rows, rates, format_report(result)


def _assert_same_as_export(rows, exported):
    assert set(rows) == set(exported)
    for student, ex in exported.items():
        row = rows[student]
        # both sides are sums of at most four cell scores (integers and halves,
        # exact in binary floating point), so they must agree exactly
        assert float(row["raw_score"]) == float(ex["raw_score"]), student
        assert float(row["late_penalty"]) == float(ex["late_submission_penalty"] or 0)
        assert float(row["score"]) == float(ex["score"]), student
        assert float(row["max_score"]) == float(ex["max_score"]), student


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    import nbformat

    from course_lib.grading.autograde import autograde
    from course_lib.grading.course import Course
    from course_lib.grading.release import release

    root = tmp_path_factory.mktemp("penalties") / "course"
    (root / "solutions" / A).mkdir(parents=True)
    shutil.copyfile(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    with (root / "nbgrader_config.py").open("a") as fh:
        fh.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    source = tiny_assignment(
        "add", "return a + b", "assert add(1, 2) == 3", "assert add(-1, 1) == 0"
    )
    nbformat.write(source, str(root / "solutions" / A / f"{A}.ipynb"))
    course = Course(root)
    release(course, A)
    with course.gradebook() as gb:
        gb.update_or_create_assignment(A, duedate=DUE)
        for student in [*ANSWERS, "absent"]:
            gb.update_or_create_student(student)
        gb.update_or_create_submission(A, "extended", extension=dt.timedelta(hours=2))
    released = nbformat.read(str(course.release_dir / A / f"{A}.ipynb"), as_version=4)
    for student, (answer, stamp) in ANSWERS.items():
        nb = nbformat.from_dict(released)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid == "answer":
                cell.source = answer
            elif gid == "written":
                cell.source = f"{student}'s written answer"
        folder = course.submitted_dir / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, str(folder / f"{A}.ipynb"))
        (folder / "timestamp.txt").write_text(stamp + "\n")
    first = autograde(course, A, grading_options(course, jobs=2, progress=False))
    return course, first


@pytest.mark.slow
def test_report_equals_nbgrader_export(graded):
    """One test in three steps (they share one graded course, in this order)."""
    _penalties(graded)
    _manual_grades(graded)
    _new_due_date(graded)


def _penalties(graded):
    course, first = graded
    assert {o.student: o.status for o in first.outcomes} == dict.fromkeys(
        ANSWERS, "graded"
    )
    result, rows, rates, text = _report_rows(course, "first")
    exported = _export(course)
    _assert_same_as_export(rows, exported)
    # independent of nbgrader: what the answers and timestamps give by hand
    for student, auto in AUTO.items():
        row = rows[student]
        late = student.startswith("late")
        assert float(row["raw_score"]) == auto
        assert float(row["late_penalty"]) == (auto if late else 0.0)  # "zero" method
        assert float(row["score"]) == (0.0 if late else auto)
        assert (float(row["seconds_late"]) > 0) == late
    assert float(rows["late"]["seconds_late"]) == 2.5 * 3600
    assert rows["absent"]["status"] == "no submission"
    assert float(rows["absent"]["score"]) == 0.0
    assert float(rows["ontime"]["max_score"]) == sum(POINTS.values())
    assert "late: 2 h 30 min late, score 3 - penalty 3 = 0" in text
    assert "No submission (scored 0): absent" in text
    # collected but not graded yet: listed as such (0 points, as in the export)
    folder = course.submitted_dir / "newcomer" / A
    shutil.copytree(course.submitted_dir / "ontime" / A, folder)
    with course.gradebook() as gb:
        gb.update_or_create_student("newcomer")
    _, rows, rates, text = _report_rows(course, "newcomer")
    assert rows["newcomer"]["status"] == "not graded yet"
    assert float(rows["newcomer"]["score"]) == 0.0
    assert f"course autograde {A}" in rows["newcomer"]["reason"]
    assert "Collected but not autograded yet" in text and "newcomer" in text
    assert int(rates["add__public"]["submissions"]) == len(ANSWERS)
    _assert_same_as_export(rows, _export(course))
    shutil.rmtree(course.submitted_dir / "newcomer")


def _manual_grades(graded):
    """Cells awaiting a hand grade are pending, not failed, until graded."""
    course, _ = graded
    result, rows, rates, text = _report_rows(course, "pending")
    for student in ANSWERS:
        assert rows[student]["written"] == "needs manual grade"
        assert rows[student]["needs_manual_grade"] == "written"
        assert "written" not in rows[student]["failed_checks"]
    assert rows["absent"]["needs_manual_grade"] == ""
    assert int(rates["written"]["needs_manual_grade"]) == len(ANSWERS)
    assert int(rates["written"]["graded"]) == 0 and rates["written"]["pass_rate"] == ""
    assert int(rates["add__public"]["passed"]) == 4  # all but latewrong
    assert int(rates["add__hidden"]["passed"]) == 3  # ontime, late, extended
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("written"))
    assert f"{len(ANSWERS)} needs manual grade" in line and "0/0" in line
    assert "Needs manual grade" in text
    assert (course.root / "reports" / "pending" / "histogram.png").read_bytes()[
        :4
    ] == b"\x89PNG"

    # graded by hand through the nbgrader API, as the formgrader does
    with course.gradebook() as gb:
        for student, score in (("ontime", 1.5), ("partial", 2.0)):
            grade = gb.find_grade("written", A, A, student)
            grade.manual_score = score
            grade.needs_manual_grade = False
        gb.db.commit()
    result, rows, rates, text = _report_rows(course, "manual")
    assert float(rows["ontime"]["written"]) == 1.5
    assert float(rows["ontime"]["score"]) == AUTO["ontime"] + 1.5
    assert rows["ontime"]["needs_manual_grade"] == ""
    assert float(rows["partial"]["score"]) == AUTO["partial"] + 2.0
    assert rows["late"]["written"] == "needs manual grade"
    assert int(rates["written"]["graded"]) == 2 and int(rates["written"]["passed"]) == 1
    assert float(rates["written"]["pass_rate"]) == 0.5
    _assert_same_as_export(rows, _export(course))


def _new_due_date(graded):
    """A new due date (and a new penalty method) regrades."""
    from course_lib.grading.autograde import autograde

    course, _ = graded
    same = autograde(course, A, grading_options(course, jobs=2, progress=False))
    assert {o.status for o in same.outcomes} == {"unchanged"}
    with course.gradebook() as gb:  # everyone gets a day more
        gb.update_or_create_assignment(A, duedate="2026-11-21 12:00:00")
    again = autograde(course, A, grading_options(course, jobs=2, progress=False))
    assert {o.status for o in again.outcomes} == {"graded"}
    _, rows, _, _ = _report_rows(course, "moved")
    for student in ANSWERS:
        assert float(rows[student]["seconds_late"]) == 0.0
        assert float(rows[student]["late_penalty"]) == 0.0
    assert float(rows["late"]["raw_score"]) == float(rows["late"]["score"])
    assert float(rows["late"]["raw_score"]) >= AUTO["late"]
    _assert_same_as_export(rows, _export(course))
    # the penalty method is part of the check as well
    (course.root / "nbgrader_config.py").write_text(
        (course.root / "nbgrader_config.py")
        .read_text()
        .replace('penalty_method = "zero"', 'penalty_method = "none"')
    )
    from course_lib.grading.course import Course

    changed = Course(course.root)
    third = autograde(changed, A, grading_options(changed, jobs=2, progress=False))
    assert {o.status for o in third.outcomes} == {"graded"}
