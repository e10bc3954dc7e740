"""``course report all``: every student across every assignment, equal to ``nbgrader
export``; the Canvas and Moodle import files.

Two kinds of course: one whose gradebook is written directly through nbgrader's API
(fast: the layouts, the statuses, CSV quoting), and a scratch course with two tiny
assignments (no torch in the kernel) graded by the real pipeline, with a due date,
late students, a written answer awaiting a hand grade and students without a
submission, compared with the real ``nbgrader export``.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
from conftest import grading_options

from course_lib.grading.synthetic import tiny_assignment

ROOT = Path(__file__).resolve().parents[1]

CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_HEADER = [
    "First name",
    "Last name",
    "ID number",
    "Institution",
    "Department",
    "Email address",
]
# a name with a comma, quotes, an apostrophe, a non-ASCII letter and a semicolon
ODD_LAST, ODD_FIRST = 'O\'Brien, "Jr."', "Zoë; Ann"


def _read(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


# --- a gradebook written through nbgrader's API ---------------------------------------


@pytest.fixture
def api_course(tmp_path):
    """Two assignments (ex01_a: 2 + 3 points, the 3 graded by hand; ex02_b: 4 points)
    and four students: full marks and on time; late (penalty 1 on ex02_b) with the
    written cell still ungraded; ex01_a only, odd name; nothing at all."""
    import course_lib.grading.gradebook  # noqa: F401  (its filter of nbgrader's warning)
    from course_lib.grading.course import Course

    shutil.copyfile(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    course = Course(tmp_path)
    with course.gradebook() as gb:
        for a, cells in (
            ("ex01_a", {"f__public": 2, "written": 3}),
            ("ex02_b", {"g": 4}),
        ):
            gb.update_or_create_assignment(a)
            gb.update_or_create_notebook(a, a)
            for name, points in cells.items():
                gb.update_or_create_grade_cell(
                    name, a, a, max_score=points, cell_type="code"
                )
        gb.update_or_create_student(
            "alice",
            first_name="Alice",
            last_name="Ash",
            email="a@x.org",
            lms_user_id="101",
        )
        # an LTI-style id: Canvas would read it as the number 535
        gb.update_or_create_student(
            "bob", first_name="Bob", last_name="Birch", lms_user_id="535fa085-99"
        )
        gb.update_or_create_student(
            "odd", first_name=ODD_FIRST, last_name=ODD_LAST, email="odd@x.org"
        )
        gb.update_or_create_student("zed")
        scores = {  # (student, assignment): {cell: auto score or None}, penalty
            ("alice", "ex01_a"): ({"f__public": 2.0, "written": None}, 0.0),
            ("alice", "ex02_b"): ({"g": 4.0}, 0.0),
            ("bob", "ex01_a"): ({"f__public": 1.0, "written": None}, 0.0),
            ("bob", "ex02_b"): ({"g": 3.5}, 1.0),
            ("odd", "ex01_a"): ({"f__public": 2.0, "written": None}, 0.0),
        }
        for (student, a), (cells, penalty) in scores.items():
            gb.add_submission(a, student)
            snb = gb.find_submission_notebook(a, a, student)
            for grade in snb.grades:
                grade.auto_score = cells[grade.name]
                grade.needs_manual_grade = cells[grade.name] is None
            snb.late_submission_penalty = penalty
        # alice's written answer graded by hand (3 of 3)
        grade = gb.find_grade("written", a := "ex01_a", a, "alice")
        grade.manual_score = 3.0
        grade.needs_manual_grade = False
        gb.db.commit()
    return course


def test_term_report_layouts_and_statuses(api_course, tmp_path):
    from course_lib.grading.lms import format_term_report, term_report

    report = term_report(api_course, tmp_path / "out")
    assert [a for a, _ in report.assignments] == ["ex01_a", "ex02_b"]
    assert report.max_total == 2 + 3 + 4
    # totals worked out by hand from the fixture
    expected = {"alice": 2 + 3 + 4, "bob": 1 + (3.5 - 1), "odd": 2, "zed": 0}
    assert {s.id: report.total(s.id) for s in report.students} == expected
    assert report.results["zed", "ex01_a"].status == "no submission"
    assert report.results["odd", "ex02_b"].status == "no submission"
    assert report.results["bob", "ex02_b"].late_penalty == 1.0
    assert report.pending("bob") == ["ex01_a/written"]
    assert report.pending("alice") == []  # graded by hand

    grades = _read(report.files["grades"])
    assert grades[0][:5] == [
        "student_id",
        "last_name",
        "first_name",
        "email",
        "lms_user_id",
    ]
    assert grades[0][-4:] == ["total", "max_total", "percent", "needs_manual_grade"]
    rows = {r[0]: dict(zip(grades[0], r, strict=True)) for r in grades[1:]}
    assert sorted(rows) == ["alice", "bob", "odd", "zed"]
    assert float(rows["bob"]["total"]) == expected["bob"]
    assert rows["bob"]["ex02_b/late_penalty"] == "1.0"
    assert rows["bob"]["needs_manual_grade"] == "ex01_a/written"
    assert rows["zed"]["ex01_a/status"] == "no submission"
    assert float(rows["zed"]["ex01_a"]) == 0.0

    canvas = _read(report.files["canvas"])
    assert canvas[0] == [*CANVAS_HEADER, "ex01_a", "ex02_b"]
    assert canvas[1] == ["Points Possible", "", "", "", "", "5", "4"]
    assert len(canvas) == 2 + 4  # header, points, one row per student
    by_name = {r[0]: r for r in canvas[2:]}
    assert by_name["Ash, Alice"] == ["Ash, Alice", "101", "", "", "", "5", "4"]
    assert by_name["Birch, Bob"][1:] == ["", "", "", "", "1", "2.5"]  # no ID
    assert by_name["zed"][5:] == ["0", "0"]  # no name: the id; no submission: 0

    moodle = _read(report.files["moodle"])
    assert moodle[0] == [*MOODLE_HEADER, "ex01_a", "ex02_b"]
    assert len(moodle) == 1 + 4
    assert ["Alice", "Ash", "101", "", "", "a@x.org", "5", "4"] in moodle
    assert ["Bob", "Birch", "535fa085-99", "", "", "", "1", "2.5"] in moodle

    text = format_term_report(report)
    table = text.splitlines()
    assert any(ln.split() == ["bob", "1M", "2.5L", "3.5"] for ln in table)
    assert any(ln.split() == ["zed", "-", "-", "0"] for ln in table)
    assert any(ln.split() == ["max", "5", "4", "9"] for ln in table)
    assert "bob, ex02_b: 3.5 - penalty 1 = 2.5" in text
    assert "bob, ex01_a: written" in text
    assert "ex02_b: odd, zed" in text
    # zed has no name, no email, no lms id: both LMSs are warned about
    assert "Canvas can match these students only by hand" in text and "zed" in text
    assert "Moodle skips these students' rows" in text
    for path in report.files.values():
        assert f"wrote {path}" in text


def test_the_instructor_guide_shows_this_output(api_course):
    """The transcript in the instructor guide is this fixture's real output."""
    from course_lib.grading.lms import format_term_report, term_report

    text = format_term_report(term_report(api_course))
    text = text.replace(f"{api_course.root}/", "")
    guide = (ROOT / "book" / "instructor-guide.md").read_text()
    block = guide.split("$ course report all\n", 1)[1].split("```", 1)[0]
    assert block == text + "\n"


def test_odd_names_are_quoted_and_survive(api_course, tmp_path):
    """A comma, quotes, a semicolon and a non-ASCII letter in a name: every file
    still has one field per column, and the name reads back unchanged."""
    from course_lib.grading.lms import term_report

    report = term_report(api_course, tmp_path / "out")
    raw = report.files["canvas"].read_text(encoding="utf-8")
    # RFC 4180: the field is quoted and its quotes doubled
    assert '"O\'Brien, ""Jr."", Zoë; Ann"' in raw
    for key, width in (("canvas", 7), ("moodle", 8)):
        rows = _read(report.files[key])
        assert {len(r) for r in rows} == {width}, key
    canvas = _read(report.files["canvas"])
    assert [r for r in canvas if r[0] == f"{ODD_LAST}, {ODD_FIRST}"][0][5:] == [
        "2",
        "0",
    ]
    moodle = _read(report.files["moodle"])
    odd = [r for r in moodle if r[5] == "odd@x.org"][0]
    assert odd[:2] == [ODD_FIRST, ODD_LAST]
    grades = _read(report.files["grades"])
    assert [r for r in grades if r[0] == "odd"][0][1:3] == [ODD_LAST, ODD_FIRST]


def test_points_text():
    from course_lib.grading.lms import points_text

    assert [points_text(x) for x in (0.0, 3.0, 2.5, 1 / 3, 100.0, -0.0)] == [
        "0",
        "3",
        "2.5",
        "0.3333",
        "100",
        "0",
    ]


def test_cli_report_all(api_course, capsys):
    from course_lib.cli import main

    assert main(["report", "all", "--root", str(api_course.root)]) == 0
    out = capsys.readouterr().out
    folder = api_course.root / "reports" / "all"
    for name in ("grades.csv", "canvas.csv", "moodle.csv"):
        assert (folder / name).is_file()
        assert str(folder / name) in out
    assert "4 students, 2 assignments, max total 9" in out


def test_report_all_without_assignments(tmp_path):
    from course_lib.grading.course import Course
    from course_lib.grading.errors import CourseError
    from course_lib.grading.lms import term_report

    shutil.copyfile(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    course = Course(tmp_path)
    with pytest.raises(CourseError, match="no gradebook"):
        term_report(course)
    with course.gradebook():
        pass
    with pytest.raises(CourseError, match="release one first"):
        term_report(course)


# --- graded by the real pipeline, against nbgrader export ----------------------------

DUE = "2026-11-20 12:00:00"
TASKS = {  # assignment -> (function, reference body, public test, hidden test)
    "ex90_add": (
        "add",
        "return a + b",
        "assert add(1, 2) == 3",
        "assert add(-1, 1) == 0",
    ),
    "ex91_mul": (
        "mul",
        "return a * b",
        "assert mul(2, 3) == 6",
        "assert mul(-1, 4) == -4",
    ),
}
ON_TIME, LATE = "2026-11-20 11:00:00.000000 UTC", "2026-11-20 14:30:00.000000 UTC"
SUBMISSIONS = {  # (student, assignment) -> (function body, timestamp)
    ("ontime", "ex90_add"): ("return a + b", ON_TIME),
    ("ontime", "ex91_mul"): ("return a * b", ON_TIME),
    ("late", "ex90_add"): ("return a + b", LATE),
    ("late", "ex91_mul"): ("return a * b if a > 0 else 0", ON_TIME),
    ("odd", "ex90_add"): ("return a + b if a > 0 else 99", ON_TIME),
}
STUDENTS = {  # id -> (first name, last name, email); "absent" submits nothing
    "ontime": ("Olga", "Ontime", "olga@x.org"),
    "late": ("Lars", "Late", "lars@x.org"),
    "odd": (ODD_FIRST, ODD_LAST, "odd@x.org"),
    "absent": ("Abe", "Absent", ""),
}


def _nbgrader_export(course) -> dict[tuple[str, str], dict[str, float]]:
    """The real ``nbgrader export``; (student, assignment) -> its numbers.

    nbgrader writes its CSV without quoting, so a name with a comma adds fields: the
    first four columns and the last four are read by position."""
    from course_lib.grading.synthetic import nbgrader_export

    out = nbgrader_export(course)
    lines = out.read_text().splitlines()
    assert lines[0].split(",")[:4] == [
        "assignment",
        "duedate",
        "timestamp",
        "student_id",
    ]
    rows = {}
    for line in lines[1:]:
        fields = line.split(",")
        assignment, _, _, student = fields[:4]
        raw, penalty, score, top = fields[-4:]
        rows[student, assignment] = {
            "raw_score": float(raw),
            "late_penalty": float(penalty or 0),
            "score": float(score),
            "max_score": float(top),
        }
    return rows


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    import nbformat

    from course_lib.grading.autograde import autograde
    from course_lib.grading.course import Course
    from course_lib.grading.release import release

    root = tmp_path_factory.mktemp("report_all") / "course"
    root.mkdir(parents=True)
    shutil.copyfile(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    with (root / "nbgrader_config.py").open("a") as fh:
        fh.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    for a, task in TASKS.items():
        (root / "solutions" / a).mkdir(parents=True)
        nbformat.write(
            tiny_assignment(*task), str(root / "solutions" / a / f"{a}.ipynb")
        )
    course = Course(root)
    for a in TASKS:
        release(course, a)
    with course.gradebook() as gb:
        for a in TASKS:
            gb.update_or_create_assignment(a, duedate=DUE)
        for student, (first, last, email) in STUDENTS.items():
            gb.update_or_create_student(
                student, first_name=first, last_name=last, email=email or None
            )
    for (student, a), (body, stamp) in SUBMISSIONS.items():
        nb = nbformat.read(str(course.release_dir / a / f"{a}.ipynb"), as_version=4)
        fn = TASKS[a][0]
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid == "answer":
                cell.source = f"def {fn}(a, b):\n    {body}"
            elif gid == "written":
                cell.source = f"{student}'s written answer"
        folder = course.submitted_dir / student / a
        folder.mkdir(parents=True)
        nbformat.write(nb, str(folder / f"{a}.ipynb"))
        (folder / "timestamp.txt").write_text(stamp + "\n")
    for a in TASKS:
        done = autograde(course, a, grading_options(course, jobs=2, progress=False))
        assert {o.status for o in done.outcomes} == {"graded"}, a
    return course


@pytest.mark.slow
def test_report_all_equals_nbgrader_export(graded, tmp_path):
    from course_lib.grading.lms import term_report
    from course_lib.grading.report import report

    course = graded
    result = term_report(course, tmp_path / "all")
    exported = _nbgrader_export(course)
    students = sorted(STUDENTS)
    assert sorted(s.id for s in result.students) == students
    assert set(exported) == {(s, a) for s in students for a in TASKS}
    # cell by cell, and the totals student by student: sums of at most four cell
    # scores (whole points), exact in binary floating point
    for (student, a), ex in exported.items():
        mine = result.results[student, a]
        assert mine.score == ex["score"], (student, a)
        assert mine.raw_score == ex["raw_score"], (student, a)
        assert mine.late_penalty == ex["late_penalty"], (student, a)
    for student in students:
        export_total = sum(
            ex["score"] for (s, _), ex in exported.items() if s == student
        )
        assert result.total(student) == export_total, student
    grades = {r[0]: r for r in _read(result.files["grades"])[1:]}
    header = _read(result.files["grades"])[0]
    for student in students:
        row = dict(zip(header, grades[student], strict=True))
        assert float(row["total"]) == result.total(student)
    # independent of nbgrader: what the answers and timestamps give by hand
    # (public test 2 points, hidden 1, written answer pending: 0 so far)
    by_hand = {"ontime": 3 + 3, "late": 0 + 2, "odd": 2 + 0, "absent": 0}
    assert {s: result.total(s) for s in students} == by_hand
    assert result.results["late", "ex90_add"].late_penalty == 3.0  # "zero" method
    assert result.results["absent", "ex90_add"].status == "no submission"
    assert result.results["odd", "ex91_mul"].status == "no submission"
    # pending hand grades: the same as the per-assignment report says
    for a in TASKS:
        per_assignment = report(course, a, tmp_path / a)
        for row in per_assignment.rows:
            student = str(row["student_id"])
            assert (
                " ".join(result.results[student, a].pending)
                == row["needs_manual_grade"]
            ), (student, a)
    assert result.pending("ontime") == ["ex90_add/written", "ex91_mul/written"]
    # the import files: one row per student, the export's scores
    canvas = _read(result.files["canvas"])
    assert canvas[0] == [*CANVAS_HEADER, *TASKS] and len(canvas) == 2 + len(students)
    assert canvas[1][5:] == ["5", "5"]
    moodle = _read(result.files["moodle"])
    assert moodle[0] == [*MOODLE_HEADER, *TASKS] and len(moodle) == 1 + len(students)
    for row in moodle[1:]:
        student = next(s for s, v in STUDENTS.items() if v[0] == row[0])
        assert [float(x) for x in row[6:]] == [
            exported[student, a]["score"] for a in TASKS
        ]
