"""One student, one id: LMS downloads take the LMS's id, ``course roster`` reads the
LMS's own exports, and ``course collect`` caps what it extracts.

The roster files are written in the LMS's documented layouts: Canvas's gradebook
export (Canvas Instructor Guide, "How do I export grades in the Gradebook?": Student,
ID, SIS User ID, SIS Login ID, Section, the assignments, a "Points Possible" row),
Moodle's grade export (MoodleDocs "Grade export": First name, Last name, ID number,
Institution, Department, Email address, the grade items) and Moodle's grading
worksheet (Identifier "Participant <n>", Full name, Email address, Status, ...;
``mod/assign/gradingtable.php``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import grading_options

from course_lib import cli
from course_lib.grading.collect import collect
from course_lib.grading.errors import CourseError
from course_lib.grading.roster import load_roster, read_roster, read_sources
from course_lib.grading.synthetic import tiny_assignment

ROOT = Path(__file__).resolve().parents[1]
A = "ex90_add"
TASK = ("add", "return a + b", "assert add(1, 2) == 3", "assert add(-1, 1) == 0")
RIGHT, WRONG = "return a + b", "return a - b"
# public test 2 points, hidden 1, a written answer graded by hand (pending: 0)
FULL, NONE = 3.0, 0.0


def _csv(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def _course(root: Path):
    import nbformat

    from course_lib.grading.course import Course
    from course_lib.grading.release import release

    root.mkdir(parents=True)
    shutil.copyfile(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    (root / "solutions" / A).mkdir(parents=True)
    nbformat.write(tiny_assignment(*TASK), str(root / "solutions" / A / f"{A}.ipynb"))
    course = Course(root)
    release(course, A)
    return course


def _submission(course, body: str) -> bytes:
    import nbformat

    nb = nbformat.read(str(course.release_dir / A / f"{A}.ipynb"), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "answer":
            cell.source = f"def add(a, b):\n    {body}"
    return nbformat.writes(nb).encode()


def _zip(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for i, (name, data) in enumerate(entries.items()):
            zf.writestr(zipfile.ZipInfo(name, (2026, 11, 20, 10, i, 0)), data)
    return path


# Canvas: two different users whose sortable name is "Wei, Li"; a third without a
# submission; the export's "Points Possible" row holds no student.
CANVAS_EXPORT = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ex90_add (4411)"],
    ["    Points Possible", "", "", "", "", "5.00"],
    ["Wei, Li", "111", "S-1", "liwei1", "Lab 1", ""],
    ["Wei, Li", "333", "S-2", "liwei2", "Lab 2", ""],
    ["Ng, Ann", "555", "S-3", "annng", "Lab 1", ""],
    ["Broken, Row", "not-a-number", "", "", "", ""],
]
CANVAS_DOWNLOAD = {  # <name>[_LATE]_<user id>_<submission id>_<file>
    "weili_111_9001_ex90_add.ipynb": RIGHT,
    "weili_LATE_333_9002_ex90_add.ipynb": WRONG,
}
# Moodle: two participants named Li Wei; the download's numbers are this
# assignment's participant ids, which only the grading worksheet ties to a person.
MOODLE_EXPORT = [
    [
        "First name",
        "Last name",
        "ID number",
        "Institution",
        "Department",
        "Email address",
        "Assignment: ex90_add (Real)",
        "Last downloaded from this course",
    ],
    ["Li", "Wei", "2024001", "", "CS", "li.wei@uni.example", "-", "1764000000"],
    ["Li", "Wei", "2024002", "", "CS", "Li.Wei2@uni.example", "-", "1764000000"],
    ["Ann", "Ng", "2024003", "", "CS", "ann.ng@uni.example", "-", "1764000000"],
    ["No", "Mail", "2024004", "", "CS", "", "-", "1764000000"],
]
MOODLE_WORKSHEET = [
    [
        "Identifier",
        "Full name",
        "Email address",
        "Status",
        "Grade",
        "Maximum Grade",
        "Grade can be changed",
        "Last modified (submission)",
        "Last modified (grade)",
        "Feedback comments",
    ],
    ["Participant 7001", "Li Wei", "li.wei@uni.example", "Submitted", "", "5.00"]
    + ["Yes", "Friday, 20 November 2026, 10:00 AM", "-", ""],
    ["Participant 7002", "Li Wei", "Li.Wei2@uni.example", "Submitted", "", "5.00"]
    + ["Yes", "Friday, 20 November 2026, 10:01 AM", "-", ""],
    ["Participant 7003", "Ann Ng", "ann.ng@uni.example", "No submission", "", "5.00"]
    + ["Yes", "-", "-", ""],
]
MOODLE_DOWNLOAD = {  # <full name>_<participant id>_assignsubmission_file_/<file>
    "Li Wei_7001_assignsubmission_file_/ex90_add.ipynb": RIGHT,
    "Li Wei_7002_assignsubmission_file_/ex90_add.ipynb": WRONG,
}


def _run(course, *argv: str) -> str:
    """What ``course ARGV`` prints in the course folder (paths relative to it)."""
    out = io.StringIO()
    with contextlib.chdir(course.root), contextlib.redirect_stdout(out):
        code = cli.main([*argv, "--root", str(course.root)])
    assert code == 0, out.getvalue()
    return out.getvalue().replace(f"{course.root}/", "")


@pytest.fixture(scope="module")
def canvas_class(tmp_path_factory):
    """A class on Canvas, run with the commands of the instructor guide: roster
    from the export, the download collected, graded; what each command printed."""
    from course_lib.grading.autograde import autograde
    from course_lib.grading.roster import read_roster

    tmp = tmp_path_factory.mktemp("canvas")
    course = _course(tmp / "course")
    roster = course.root / "Grades-Course.csv"
    roster.write_text(_csv(CANVAS_EXPORT), encoding="utf-8")
    loaded = read_roster(roster)
    download = _zip(
        course.root / "submissions.zip",
        {k: _submission(course, v) for k, v in CANVAS_DOWNLOAD.items()},
    )
    printed = {"roster": _run(course, "roster", "Grades-Course.csv")}
    printed["collect"] = _run(course, "collect", "submissions.zip", "-a", "ex90")
    collected = collect(course, download, A)  # again: all unchanged
    graded = autograde(course, A, grading_options(course, jobs=2, progress=False))
    return course, loaded, collected, graded, download, printed


@pytest.fixture(scope="module")
def moodle_class(tmp_path_factory):
    """A class on Moodle, run with the guide's commands: grade export, then the
    download refused until the grading worksheet is loaded, then collected and
    graded; what each command printed."""
    from course_lib.grading.autograde import autograde

    tmp = tmp_path_factory.mktemp("moodle")
    course = _course(tmp / "course")
    (course.root / "grades.csv").write_text(_csv(MOODLE_EXPORT), encoding="utf-8")
    download = course.root / "download"
    for name, body in MOODLE_DOWNLOAD.items():
        (download / name).parent.mkdir(parents=True, exist_ok=True)
        (download / name).write_bytes(_submission(course, body))
    printed = {"roster": _run(course, "roster", "grades.csv")}
    loaded = load_roster(course, course.root / "grades.csv")  # again: unchanged
    printed["before"] = _run(course, "collect", "download", "-a", "ex90")
    before = collect(course, download, A)
    sheet = course.root / "worksheet.csv"
    sheet.write_text(_csv(MOODLE_WORKSHEET), encoding="utf-8")
    printed["worksheet"] = _run(course, "roster", "worksheet.csv", "-a", "ex90")
    mapped = load_roster(course, sheet, assignment="ex90")
    printed["after"] = _run(course, "collect", "download", "-a", "ex90")
    after = collect(course, download, A)
    graded = autograde(course, A, grading_options(course, jobs=2, progress=False))
    return course, loaded, before, mapped, after, graded, printed


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_canvas_roster_reads_the_export(canvas_class):
    course, loaded, *_ = canvas_class
    assert loaded.kind == "canvas"
    assert [r.id for r in loaded.rows] == ["111", "333", "555"]
    assert [line for line, _ in loaded.problems] == [6]  # "Points Possible" skipped
    assert "not a numeric user id" in loaded.problems[0][1]
    with course.gradebook() as gb:
        li = gb.find_student("333")
        assert (li.first_name, li.last_name, li.lms_user_id) == ("Li", "Wei", "333")


@pytest.mark.slow
def test_two_canvas_students_of_one_name_are_graded_as_two(canvas_class, tmp_path):
    from course_lib.grading.lms import term_report

    course, _, collected, graded, download, _ = canvas_class
    assert sorted(s for s, _ in collected.unchanged) == ["111", "333"]
    assert collected.not_placed == [] and collected.placed == []
    scores = {o.student: o.score for o in graded.outcomes}
    assert scores == {"111": FULL, "333": NONE}
    with course.gradebook() as gb:
        sources = read_sources(gb, A)
    assert sources["333"].late and not sources["111"].late
    assert sources["111"].path == "weili_111_9001_ex90_add.ipynb"
    # the Canvas import file gives every roster student a row with their user id
    report = term_report(course, tmp_path)
    rows = _read_csv(report.files["canvas"])
    assert rows[0]["Student"] == "Points Possible"
    by_id = {r["ID"]: r[A] for r in rows[1:]}
    assert by_id == {"111": "3", "333": "0", "555": "0"}
    # the rule of earlier versions would merge them: both files are refused instead
    old = collect(course, download, A, ids="names")
    assert old.placed == [] and old.unchanged == []
    reasons = dict(old.not_placed)
    assert sorted(reasons) == sorted(CANVAS_DOWNLOAD)
    assert all(
        "2 different Canvas users (111, 333) give the student id weili" in r
        for r in reasons.values()
    )


@pytest.mark.slow
def test_two_moodle_students_of_one_name_are_graded_as_two(moodle_class, tmp_path):
    from course_lib.grading.lms import term_report

    course, loaded, before, mapped, after, graded, _ = moodle_class
    assert loaded.kind == "moodle"
    assert [r.id for r in loaded.rows] == [
        "li.wei@uni.example",
        "li.wei2@uni.example",
        "ann.ng@uni.example",
    ]
    assert [line for line, _ in loaded.problems] == [5]
    assert "no email address" in loaded.problems[0][1]
    # before the worksheet: the name is ambiguous, nothing placed for either
    assert before.placed == []
    assert all("is ambiguous: 2 roster students" in r for _, r in before.not_placed)
    assert mapped.kind == "moodle-worksheet"
    assert sorted(mapped.mapped) == [
        ("7001", "li.wei@uni.example"),
        ("7002", "li.wei2@uni.example"),
        ("7003", "ann.ng@uni.example"),
    ]
    assert mapped.added == [] and mapped.updated == []  # names kept from the export
    assert sorted(s for s, _ in after.unchanged) == [
        "li.wei2@uni.example",
        "li.wei@uni.example",
    ]
    scores = {o.student: o.score for o in graded.outcomes}
    assert scores == {"li.wei@uni.example": FULL, "li.wei2@uni.example": NONE}
    report = term_report(course, tmp_path)
    rows = _read_csv(report.files["moodle"])
    by_email = {r["Email address"]: (r["ID number"], r[A]) for r in rows}
    assert by_email == {
        "li.wei@uni.example": ("2024001", "3"),
        "Li.Wei2@uni.example": ("2024002", "0"),
        "ann.ng@uni.example": ("2024003", "0"),
    }


def test_a_worksheet_needs_its_assignment(tmp_path):
    course = _course(tmp_path / "course")
    sheet = tmp_path / "worksheet.csv"
    sheet.write_text(_csv(MOODLE_WORKSHEET), encoding="utf-8")
    with pytest.raises(CourseError, match="give --assignment"):
        load_roster(course, sheet)


def test_plain_roster_and_what_cannot_be_read(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(
        _csv(
            [
                ["id", "first_name", "last_name", "email", "lms_user_id"],
                ["s1", "Ada", "Byron", "ada@x.org", "42"],
                ["bad id", "B", "C", "", ""],
                ["s1", "Again", "", "", ""],
                ["", "No", "Id", "", ""],
            ]
        ),
        encoding="utf-8",
    )
    report = read_roster(path)
    assert report.kind == "plain"
    assert [(r.id, r.first_name, r.lms_user_id) for r in report.rows] == [
        ("s1", "Ada", "42")
    ]
    assert [line for line, _ in report.problems] == [3, 4, 5]
    assert "not a valid student id" in report.problems[0][1]
    assert "first on line 2" in report.problems[1][1]
    unknown = tmp_path / "other.csv"
    unknown.write_text("name,score\nx,1\n", encoding="utf-8")
    with pytest.raises(CourseError, match="names none of the formats"):
        read_roster(unknown)


def test_roster_updates_keep_what_the_file_leaves_empty(tmp_path, capsys):
    course = _course(tmp_path / "course")
    first = tmp_path / "a.csv"
    first.write_text(
        _csv([["id", "first_name", "last_name", "email"], ["s1", "Ada", "B", "a@x"]]),
        encoding="utf-8",
    )
    second = tmp_path / "b.csv"
    second.write_text(
        _csv([["id", "first_name", "last_name", "email"], ["s1", "Ada", "Byron", ""]]),
        encoding="utf-8",
    )
    root = ["--root", str(course.root)]
    assert cli.main(["roster", str(first), *root]) == 0
    assert "1 students: 1 added, 0 updated, 0 unchanged" in capsys.readouterr().out
    assert cli.main(["roster", str(second), *root]) == 0
    assert "0 added, 1 updated" in capsys.readouterr().out
    assert cli.main(["roster", str(second), *root]) == 0
    assert "0 added, 0 updated, 1 unchanged" in capsys.readouterr().out
    with course.gradebook() as gb:
        s = gb.find_student("s1")
        assert (s.last_name, s.email) == ("Byron", "a@x")


# --- the size cap ------------------------------------------------------------------


def test_a_zip_bomb_is_refused_before_extraction(tmp_path):
    """An entry whose declared size is over the cap is not read at all."""
    course = _course(tmp_path / "course")
    cap = 1_000_000
    big = tmp_path / "bomb.zip"
    with zipfile.ZipFile(big, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("weili_111_9001_ex90_add.ipynb", "w", force_zip64=True) as fh:
            for _ in range(20):  # 20 MB of zeros: about 20 kB compressed
                fh.write(bytes(1_000_000))
    assert big.stat().st_size < 100_000
    report = collect(course, big, A, max_file_size=cap)
    assert report.placed == []
    (name, why), *rest = report.not_placed
    assert rest == []
    assert "20.0 MB, larger than the cap of 1.0 MB per file" in why
    assert not (course.submitted_dir / "111").exists()


def test_a_lying_zip_header_stops_at_the_cap(tmp_path):
    """An entry that declares a small size but inflates to more: reading stops at
    the cap, and nothing of it is written."""
    course = _course(tmp_path / "course")
    cap = 100_000
    payload = b"{" + bytes(300_000)  # 300 kB, compresses to a few hundred bytes
    path = tmp_path / "liar.zip"
    name = "weili_111_9001_ex90_add.ipynb"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(name, payload)
    # rewrite the uncompressed size in both headers to 10 bytes
    data = bytearray(path.read_bytes())
    true_size = len(payload).to_bytes(4, "little")
    spots = [i for i in range(len(data) - 3) if data[i : i + 4] == true_size]
    assert len(spots) == 2  # local header and central directory
    for i in spots:
        data[i : i + 4] = (10).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo(name).file_size == 10  # the header lies
    report = collect(course, path, A, max_file_size=cap)
    assert report.placed == []
    assert len(report.not_placed) == 1
    assert report.not_placed[0][0] == name
    assert "damaged, or its header lies about its size" in report.not_placed[0][1]
    assert not (course.submitted_dir / "111").exists()


def test_a_large_file_in_a_folder_is_refused(tmp_path):
    course = _course(tmp_path / "course")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "alice_ex90_add.ipynb").write_bytes(_submission(course, RIGHT))
    (inbox / "bob_ex90_add.ipynb").write_bytes(b" " * 3_000_001)
    report = collect(course, inbox, A, max_file_size=3_000_000)
    assert [s for s, _, _ in report.placed] == ["alice"]
    assert dict(report.not_placed) == {
        "bob_ex90_add.ipynb": "3.0 MB, larger than the cap of 3.0 MB per file "
        "(CourseDirectory.max_file_size, or --max-file-size); not extracted"
    }


def test_the_default_cap_is_nbgraders(tmp_path):
    course = _course(tmp_path / "course")
    from nbgrader.coursedir import CourseDirectory

    assert course.max_file_size() == CourseDirectory.max_file_size.default_value * 1000
    with (course.root / "nbgrader_config.py").open("a") as fh:
        fh.write("\nc.CourseDirectory.max_file_size = 5\n")
    from course_lib.grading.course import Course

    assert Course(course.root).max_file_size() == 5000


def _guide_transcripts() -> list[tuple[str, str]]:
    """``(command, output)`` of every console block of the guide's LMS round trip
    (blocks indented inside its numbered list)."""
    import textwrap

    guide = (ROOT / "book" / "instructor-guide.md").read_text()
    section = guide.split("## A class on Canvas or Moodle: the round trip", 1)[1]
    section = section.split("\n## ", 1)[0]
    pairs = []
    for block in section.split("```console\n")[1:]:
        body = textwrap.dedent(block.split("```", 1)[0])
        for chunk in body.split("$ ")[1:]:
            command, _, output = chunk.partition("\n")
            pairs.append((command, output))
    return pairs


@pytest.mark.slow
def test_the_guide_shows_the_real_round_trip(canvas_class, moodle_class):
    from course_lib.grading.lms import term_report

    shown = _guide_transcripts()
    canvas, moodle = canvas_class[-1], moodle_class[-1]
    expected = [
        ("course roster Grades-Course.csv", canvas["roster"]),
        ("course collect submissions.zip -a ex90", canvas["collect"]),
        ("course collect download -a ex90", moodle["before"]),
        ("course roster worksheet.csv -a ex90", moodle["worksheet"]),
        ("course collect download -a ex90", moodle["after"]),
        (
            "cat reports/all/canvas.csv",
            term_report(canvas_class[0]).files["canvas"].read_text(),
        ),
        (
            "cat reports/all/moodle.csv",
            term_report(moodle_class[0]).files["moodle"].read_text(),
        ),
    ]
    assert shown == expected
