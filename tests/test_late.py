"""Late work (issue 31 item 4): ``course extend``, the percentage-per-day penalty
(``course_lib.grading.late.PercentPerDay``) and Canvas's ``_LATE`` flag, through the
real pipeline, compared with the real ``nbgrader export``.

The scratch class has one assignment of two notebooks (``part1``: ``add``,
``part2``: ``mul``), each with a public (2 points) and a hidden (1 point) test
and a written answer graded by hand (2 points). The configuration takes 15 % per
started day, at most 50 %. Every expected penalty is worked out here from the
timestamps, the due date, the extension and that rule (:func:`_expected`), with
the scores each answer earns worked out by hand from its source (``AUTO``).
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import shutil
from pathlib import Path

import pytest
from conftest import grading_options

ROOT = Path(__file__).resolve().parents[1]
A = "ex91_late"
DUE = dt.datetime(2026, 11, 20, 12, 0, 0)  # UTC, as nbgrader stores it
PER_DAY, CAP = 15.0, 50.0
NOTEBOOKS = ("part1", "part2")

ADD = {"right": "return a + b", "wrong": "return a - b"}
MUL = {"right": "return a * b", "partial": "return abs(a * b)"}
# student -> (part1 answer, part2 answer, timestamp)
SUBMISSIONS = {
    "ada": ("right", "right", DUE - dt.timedelta(hours=1)),  # on time
    "ben": ("right", "partial", DUE + dt.timedelta(seconds=1)),  # 1 s late
    "cleo": ("right", "right", DUE + dt.timedelta(days=1)),  # exactly a day
    "dan": ("wrong", "right", DUE + dt.timedelta(days=1, seconds=1)),  # a day + 1 s
    "eve": ("right", "right", DUE + dt.timedelta(days=5)),  # past the cap
    "finn": ("right", "right", DUE + dt.timedelta(hours=22)),  # extension: on time
    "gus": ("right", "partial", DUE + dt.timedelta(days=2, hours=3)),  # ext., late
}
# hana has no submission; ivo has an extension and no submission
# points of each notebook's two tests, by hand: add(1, 2) == 3 (2 points) and
# add(-1, 1) == 0 (1 point); mul(2, 3) == 6 (2) and mul(-1, 4) == -4 (1).
# a - b fails both; abs(a * b) passes the first only.
POINTS = {"right": 3.0, "wrong": 0.0, "partial": 2.0}
AUTO = {
    s: {"part1": POINTS[p1], "part2": POINTS[p2]}
    for s, (p1, p2, _) in SUBMISSIONS.items()
}
# extensions given with course extend: before anything was submitted, and after
EXTENSIONS = {"finn": dt.timedelta(days=1), "gus": dt.timedelta(hours=12)}
# hand grades of the written answers, entered after the first autograde
MANUAL = {"part1": 2.0, "part2": 1.5}


def _expected(raw: float, stamp, extension, per_day=PER_DAY, cap=CAP) -> float:
    """The syllabus rule, independently: per_day % of the score per started day
    after the (finn) due date, at most cap %."""
    late = (stamp - (DUE + (extension or dt.timedelta(0)))).total_seconds()
    if late <= 0:
        return 0.0
    return raw * min(cap, per_day * math.ceil(late / 86400)) / 100.0


# the penalty is a sum over two notebooks of score * percent / 100: a few
# roundings of numbers below 20, far below this
TOL = 1e-9


# --------------------------------------------------------------------------------------
# the plugin on its own


def _plugin(**settings):
    from traitlets.config import Config

    from course_lib.grading.late import configured_plugin

    config = Config()
    config.AssignLatePenalties.plugin_class = "course_lib.grading.late.PercentPerDay"
    for key, value in settings.items():
        config.PercentPerDay[key] = value
    return configured_plugin(config)


def test_percent_per_started_day_and_cap():
    plugin = _plugin()  # the defaults: 10 % per day, at most 100 %
    assert (plugin.percent_per_day, plugin.max_percent) == (10.0, 100.0)
    day = 86400.0
    cases = {0.0: 0, 1.0: 1, day: 1, day + 1e-3: 2, 3 * day - 1: 3, 50 * day: 50}
    for seconds, days in cases.items():
        want = 8.0 * min(100.0, 10.0 * days) / 100.0
        got = plugin.late_submission_penalty("s", 8.0, seconds)
        assert abs(got - want) <= TOL, (seconds, got, want)
    plugin = _plugin(percent_per_day=25.0, max_percent=60.0)
    assert abs(plugin.late_submission_penalty("s", 4.0, 1.0) - 1.0) <= TOL
    assert abs(plugin.late_submission_penalty("s", 4.0, 9 * day) - 2.4) <= TOL


def test_bad_settings_are_refused():
    from course_lib.grading.errors import CourseError

    with pytest.raises(CourseError, match="percent_per_day must be between 0 and 100"):
        _plugin(percent_per_day=-5.0)
    with pytest.raises(CourseError, match="max_percent must be between 0 and 100"):
        _plugin(max_percent=120.0)


def test_notebook_penalty_clamps_as_nbgrader_does():
    """AssignLatePenalties._check_late_penalty: below 0 -> 0, above the score ->
    the score; an on-time notebook gets none."""
    from course_lib.grading.late import notebook_penalty

    class Fixed:
        def __init__(self, value):
            self.value = value

        def late_submission_penalty(self, student_id, score, seconds):
            return self.value

    assert notebook_penalty(Fixed(-2.0), "s", 3.0, 10.0) == 0.0
    assert notebook_penalty(Fixed(7.0), "s", 3.0, 10.0) == 3.0
    assert notebook_penalty(Fixed(1.0), "s", 3.0, 10.0) == 1.0
    assert notebook_penalty(Fixed(1.0), "s", 3.0, 0.0) is None
    assert notebook_penalty(Fixed(None), "s", 3.0, 10.0) is None


def test_plugin_settings_are_in_autograde_change_check():
    from traitlets.config import Config

    from course_lib.grading.errors import CourseError
    from course_lib.grading.late import policy_sections

    config = Config()
    assert "PercentPerDay" not in policy_sections(config)
    config.AssignLatePenalties.plugin_class = "course_lib.grading.late.PercentPerDay"
    assert {"PercentPerDay", "LateSubmissionPlugin"} <= set(policy_sections(config))
    # a plugin that cannot be imported stops autograde before it grades anything
    config.AssignLatePenalties.plugin_class = "course_lib.grading.late.Missing"
    with pytest.raises(CourseError, match="could not be imported"):
        policy_sections(config)


# --------------------------------------------------------------------------------------
# the pipeline


def _export(course) -> dict[str, dict[str, str]]:
    from course_lib.grading.synthetic import nbgrader_export

    with nbgrader_export(course).open() as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh) if r["assignment"] == A}


def _report(course, tag: str):
    from course_lib.grading.report import format_report, report

    result = report(course, A, course.root / "reports" / tag)
    with result.files["grades"].open() as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    return rows, format_report(result), result


def _report_all(course, tag: str) -> dict[str, dict[str, str]]:
    from course_lib.grading.lms import term_report

    result = term_report(course, course.root / "reports" / tag)
    with result.files["grades"].open() as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh)}


def _same_as_export(course, tag: str):
    """``course report A`` and ``course report all`` against ``nbgrader export``,
    student by student; both sides read the same stored numbers, so exactly."""
    rows, text, result = _report(course, tag)
    every = _report_all(course, tag + "-all")
    exported = _export(course)
    assert set(rows) == set(exported) == set(every)
    for student, ex in exported.items():
        row, all_row = rows[student], every[student]
        penalty = float(ex["late_submission_penalty"] or 0)
        assert float(row["raw_score"]) == float(ex["raw_score"]), student
        assert float(row["late_penalty"]) == penalty, student
        assert float(row["score"]) == float(ex["score"]), student
        assert float(all_row[f"{A}/raw_score"]) == float(ex["raw_score"]), student
        assert float(all_row[f"{A}/late_penalty"]) == penalty, student
        assert float(all_row[A]) == float(ex["score"]), student
    return rows, text, result


def _submit(course, student: str) -> None:
    import nbformat

    p1, p2, stamp = SUBMISSIONS[student]
    folder = course.submitted_dir / student / A
    folder.mkdir(parents=True)
    for nb_name, answer in (("part1", ADD[p1]), ("part2", MUL[p2])):
        fn = "add" if nb_name == "part1" else "mul"
        nb = nbformat.read(
            str(course.release_dir / A / f"{nb_name}.ipynb"), as_version=4
        )
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == "answer":
                cell.source = f"def {fn}(a, b):\n    {answer}"
        nbformat.write(nb, str(folder / f"{nb_name}.ipynb"))
    (folder / "timestamp.txt").write_text(f"{stamp:%Y-%m-%d %H:%M:%S}.000000 UTC\n")


def _extend(capsys, *args) -> tuple[int, str, str]:
    from course_lib.cli import main

    capsys.readouterr()
    try:
        code = main(["extend", *args])
    except SystemExit as exc:  # argparse's refusals
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    import nbformat

    from course_lib.grading.course import Course
    from course_lib.grading.release import release
    from course_lib.grading.synthetic import tiny_assignment

    root = tmp_path_factory.mktemp("late") / "course"
    (root / "solutions" / A).mkdir(parents=True)
    shutil.copyfile(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    with (root / "nbgrader_config.py").open("a") as fh:
        fh.write(
            '\nc.AssignLatePenalties.plugin_class = "course_lib.grading.late.'
            f'PercentPerDay"\nc.PercentPerDay.percent_per_day = {PER_DAY}\n'
            f"c.PercentPerDay.max_percent = {CAP}\n"
        )
    sources = {
        "part1": tiny_assignment(
            "add", "return a + b", "assert add(1, 2) == 3", "assert add(-1, 1) == 0"
        ),
        "part2": tiny_assignment(
            "mul", "return a * b", "assert mul(2, 3) == 6", "assert mul(-1, 4) == -4"
        ),
    }
    for name, nb in sources.items():
        nbformat.write(nb, str(root / "solutions" / A / f"{name}.ipynb"))
    course = Course(root)
    release(course, A)
    with course.gradebook() as gb:
        for student in [*SUBMISSIONS, "hana", "ivo"]:
            gb.update_or_create_student(student)
    return course


@pytest.mark.slow
def test_late_work_equals_nbgrader_export(course, capsys):
    """One test in steps that share the graded class, in this order."""
    shown: dict[str, str] = {}  # command -> its real output, for the guide
    _refusals(course, capsys)
    _extension_before_submitting(course, capsys, shown)
    _graded_with_percent_penalty(course, capsys, shown)
    _the_guide_shows_this_output(shown)
    _hand_grades(course)
    _new_extension_regrades(course)
    _new_settings_regrade(course)


def _refusals(course, capsys):
    root = ["--root", str(course.root)]
    code, _, err = _extend(capsys, "ada", A, "--days", "1", *root)
    assert code == 2 and f"{A} has no due date" in err and "--duedate" in err
    with course.gradebook() as gb:
        gb.update_or_create_assignment(A, duedate=f"{DUE:%Y-%m-%d %H:%M:%S} UTC")
    code, _, err = _extend(capsys, "adda", A, "--days", "1", *root)
    assert code == 2 and "unknown student 'adda'" in err and "ada" in err
    code, _, err = _extend(capsys, "ada", "ex99", "--days", "1", *root)
    assert code == 2 and "unknown assignment 'ex99'" in err
    code, _, err = _extend(capsys, "ada", A, "--days", "-2", *root)
    assert code == 2 and "--days: must be a positive number, got -2" in err
    code, _, err = _extend(capsys, "ada", A, "--until", "2026-11-19 12:00", *root)
    assert code == 2 and "not after the due date" in err
    code, _, err = _extend(capsys, "ada", A, *root)
    assert code == 2 and "give how long" in err
    with course.gradebook() as gb:  # nothing was written by the refusals
        assert not list(gb.assignment_submissions(A))


def _extension_before_submitting(course, capsys, shown):
    root = ["--root", str(course.root)]
    code, out, _ = _extend(capsys, "finn", A, "--days", "1", *root)
    assert code == 0, out
    shown["course extend finn ex91 --days 1"] = out
    due = DUE + EXTENSIONS["finn"]
    assert f"{A}: finn has an extension of 1 d (was: none)" in out
    assert f"finn's: {due:%Y-%m-%d %H:%M:%S} UTC" in out
    assert "nothing submitted yet" in out
    # a student who never hands anything in, with an extension all the same
    code, out, _ = _extend(capsys, "ivo", A, "--until", f"{due:%Y-%m-%d %H:%M}", *root)
    assert code == 0 and "extension of 1 d" in out
    code, out, _ = _extend(capsys, "--list", A, *root)
    assert code == 0 and "2 extensions" in out
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert set(lines) == {"finn", "ivo"}
    assert f"due {due:%Y-%m-%d %H:%M:%S} UTC" in lines["finn"]
    # no submission yet: 0, and no submission in the reports, as in nbgrader export
    rows, text, _ = _same_as_export(course, "before")
    for student in ("finn", "ivo", "hana"):
        assert rows[student]["status"] == "no submission", student
        assert float(rows[student]["score"]) == 0.0
    assert float(rows["finn"]["extension_seconds"]) == 86400.0
    assert "needs manual grade" not in rows["finn"].values()


def _graded_with_percent_penalty(course, capsys, shown):
    from course_lib.grading.autograde import autograde
    from course_lib.grading.roster import LmsSource, record_source

    for student in SUBMISSIONS:
        _submit(course, student)
    # after collecting, before grading: the extension is on a row nbgrader made
    code, out, _ = _extend(
        capsys, "gus", A, "--hours", "12", "--root", str(course.root)
    )
    assert code == 0 and "extension of 12 h" in out
    assert "collected, not autograded yet" in out
    shown["course extend gus ex91 --hours 12"] = out
    with course.gradebook() as gb:  # what Canvas's download names said
        for student, late in (
            ("ada", True),
            ("ben", False),
            ("dan", True),
            ("finn", True),
        ):
            name = f"{student}{'_LATE' if late else ''}_1_2_{A}.ipynb"
            record_source(gb, A, student, LmsSource("canvas", name, "1", late))
        record_source(gb, A, "cleo", LmsSource("moodle", "x/part1.ipynb", "7"))
    summary = autograde(course, A, grading_options(course, jobs=2, progress=False))
    assert {o.student: o.status for o in summary.outcomes} == dict.fromkeys(
        SUBMISSIONS, "graded"
    )
    rows, text, result = _same_as_export(course, "graded")
    with course.gradebook() as gb:
        stored = {
            s: {
                nb.name: nb.late_submission_penalty
                for nb in gb.find_submission(A, s).notebooks
            }
            for s in SUBMISSIONS
        }
    for student, (_, _, stamp) in SUBMISSIONS.items():
        raw = sum(AUTO[student].values())
        want = _expected(raw, stamp, EXTENSIONS.get(student))
        row = rows[student]
        assert float(row["raw_score"]) == raw, student
        assert abs(float(row["late_penalty"]) - want) <= TOL, (student, row, want)
        # per notebook: the same percentage of each notebook's own score
        for nb_name in NOTEBOOKS:
            part = _expected(AUTO[student][nb_name], stamp, EXTENSIONS.get(student))
            assert abs((stored[student][nb_name] or 0.0) - part) <= TOL, student
    # the boundaries of "per started day", as the rule above counts them
    assert float(rows["ben"]["seconds_late"]) == 1.0
    assert float(rows["cleo"]["seconds_late"]) == 86400.0
    assert float(rows["dan"]["seconds_late"]) == 86401.0
    assert float(rows["finn"]["seconds_late"]) == 0.0
    assert float(rows["gus"]["extension_seconds"]) == 12 * 3600.0
    assert float(rows["ivo"]["score"]) == 0.0
    assert rows["ivo"]["status"] == "no submission"
    assert "gus: 1 d 15 h late" in text and "after a 12 h extension" in text
    # Canvas's flag against the time: three disagree, the Moodle file is not judged
    assert [s for s, _ in result.lms_disagreements] == ["ada", "ben", "finn"]
    section = text.split("Canvas and the timestamp disagree")[1].split("\n\n")[0]
    assert "  ada: Canvas marked ada_LATE_1_2" in section
    assert "  ben: its time 2026-11-20 12:00:01 UTC is 1 s after" in section
    assert "(with a 1 d extension)" in section
    assert "dan" not in section and "cleo" not in section
    assert not result.stale_penalties
    code, out, _ = _extend(capsys, "--list", A, "--root", str(course.root))
    assert "gus" in out and "penalty 1.5" in out
    shown["course extend --list ex91"] = out
    shown["course report ex91"] = text.replace(f"{course.root}/", "")


def _the_guide_shows_this_output(shown):
    """The instructor guide's transcripts of late work are this class's real
    output: each command's block, or for ``course report`` (whose table and file
    list are shown elsewhere) the block's lines, in one piece of the output."""
    guide = (ROOT / "book" / "instructor-guide.md").read_text()
    section = guide.split("### Due dates and late penalties", 1)[1].split("\n## ", 1)[0]
    blocks = {}
    for block in section.split("```console\n")[1:]:
        body = block.split("```", 1)[0]
        for chunk in body.split("$ ")[1:]:
            command, _, output = chunk.partition("\n")
            if command.startswith("course "):  # not nbgrader's own commands
                blocks[command] = output
    assert set(blocks) == set(shown)
    for command, output in blocks.items():
        if command.startswith("course report"):
            assert output.strip("\n") in shown[command], command
        else:
            assert output == shown[command], command


def _hand_grades(course):
    """A hand grade entered after autograding is penalised once graded again."""
    from course_lib.grading.autograde import autograde

    with course.gradebook() as gb:
        for nb_name, score in MANUAL.items():
            grade = gb.find_grade("written", nb_name, A, "ben")
            grade.manual_score = score
            grade.needs_manual_grade = False
        gb.db.commit()
    stamp = SUBMISSIONS["ben"][2]
    raw = sum(AUTO["ben"].values()) + sum(MANUAL.values())
    rows, text, result = _same_as_export(course, "manual")
    old = _expected(sum(AUTO["ben"].values()), stamp, None)
    assert [c.student for c in result.stale_penalties] == ["ben"]
    assert abs(result.stale_penalties[0].rule - _expected(raw, stamp, None)) <= TOL
    assert abs(float(rows["ben"]["late_penalty"]) - old) <= TOL
    assert "Late penalty out of date" in text
    summary = autograde(
        course,
        A,
        grading_options(course, jobs=1, progress=False, force=True, students=["ben"]),
    )
    assert [o.status for o in summary.outcomes] == ["graded"]
    rows, text, result = _same_as_export(course, "manual-regraded")
    assert float(rows["ben"]["raw_score"]) == raw
    assert abs(float(rows["ben"]["late_penalty"]) - _expected(raw, stamp, None)) <= TOL
    assert not result.stale_penalties and "out of date" not in text


def _new_extension_regrades(course):
    """An extension given in the gradebook (nbgrader's own API, not course extend)
    changes the penalty at the next course autograde."""
    from course_lib.grading.autograde import autograde

    same = autograde(course, A, grading_options(course, jobs=2, progress=False))
    assert {o.status for o in same.outcomes} == {"unchanged"}
    with course.gradebook() as gb:
        gb.grant_extension(A, "eve", days=4)
    _, _, result = _report(course, "stale")
    assert [c.student for c in result.stale_penalties] == ["eve"]
    again = autograde(course, A, grading_options(course, jobs=2, progress=False))
    assert {o.student: o.status for o in again.outcomes}["eve"] == "graded"
    rows, _, _ = _same_as_export(course, "finn-eve")
    stamp = SUBMISSIONS["eve"][2]
    want = _expected(6.0, stamp, dt.timedelta(days=4))
    assert abs(float(rows["eve"]["late_penalty"]) - want) <= TOL
    assert want < _expected(6.0, stamp, None)  # the extension did lower it
    # the hand grades of ben are still penalised after the full regrade
    raw = sum(AUTO["ben"].values()) + sum(MANUAL.values())
    assert float(rows["ben"]["raw_score"]) == raw
    stamp = SUBMISSIONS["ben"][2]
    assert abs(float(rows["ben"]["late_penalty"]) - _expected(raw, stamp, None)) <= TOL


def _new_settings_regrade(course):
    from course_lib.grading.autograde import autograde
    from course_lib.grading.course import Course

    config = course.root / "nbgrader_config.py"
    config.write_text(
        config.read_text().replace(
            f"percent_per_day = {PER_DAY}", "percent_per_day = 20.0"
        )
    )
    changed = Course(course.root)
    run = autograde(changed, A, grading_options(changed, jobs=2, progress=False))
    assert {o.status for o in run.outcomes} == {"graded"}
    rows, _, result = _same_as_export(changed, "twenty")
    extensions = dict(EXTENSIONS, eve=dt.timedelta(days=4))
    for student, (_, _, stamp) in SUBMISSIONS.items():
        raw = sum(AUTO[student].values())
        raw += sum(MANUAL.values()) if student == "ben" else 0.0
        assert float(rows[student]["raw_score"]) == raw, student
        want = _expected(raw, stamp, extensions.get(student), per_day=20.0)
        assert abs(float(rows[student]["late_penalty"]) - want) <= TOL, student
    assert not result.stale_penalties
