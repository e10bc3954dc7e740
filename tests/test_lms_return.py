"""Feedback back through the LMS (issue 31, item 3): ``canvas.zip`` and ``moodle.zip``
of ``course feedback``.

Each archive's names are read here the way the LMS's own code reads them, with a
small re-implementation written from that code (not from the module under test):

* Canvas, *Re-Upload Submissions*: ``AbstractAssignment#
  infer_comment_context_from_filename`` (``app/models/abstract_assignment.rb`` of
  instructure/canvas-lms): the base name, split at ``_`` (Ruby's ``split``, which
  drops trailing empty fields), the pieces ``LATE`` removed; ``anon`` first: the next
  two pieces are the anonymous id and the attachment id; else the first two pieces of
  ASCII digits (``/^\\d+$/``) are the user id and the attachment id; no attachment
  when the last piece starts with ``link`` or the name with ``._``. The file is kept
  only when that user has a submission holding that attachment.
* Moodle, *Upload multiple feedback files in a zip*:
  ``assignfeedback_file_zip_importer::is_valid_filename_for_import``
  (``mod/assign/feedback/file/importziplib.php`` of moodle/moodle): files whose name
  starts with ``.`` or ``~`` are skipped; the zip is extracted under ``/import/``;
  each part of the path is split with ``explode('_', $part, 5)``; the first part of
  at least four pieces whose second piece ``is_numeric`` and, as a number, is a
  participant of the assignment, and whose third and fourth pieces name a plugin of
  the assignment, gives the user; the rest of the path is the file's name.

Both re-implementations are first checked against the cases of the LMS's own tests
(the "generate comments from submissions" cases of canvas-lms's assignment model
spec, Moodle's ``importziplib_test.php``).
Then a scratch course with feedback pages written by hand, and a class through the
real pipeline (collect from a Canvas and a Moodle download, autograde, ``course
feedback``).
"""

from __future__ import annotations

import io
import re
import shutil
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from conftest import grading_options

ROOT = Path(__file__).resolve().parents[1]
A = "ex05_alibi"

# --- Canvas's reading of a re-uploaded file's name ------------------------------------


def _ruby_split(text: str, sep: str) -> list[str]:
    """Ruby's ``String#split(sep)``: trailing empty fields are dropped."""
    pieces = text.split(sep)
    while pieces and pieces[-1] == "":
        pieces.pop()
    return pieces


def canvas_reads(fullpath: str) -> tuple[str | None, str | None]:
    """``(user or anonymous id, attachment id)`` as Canvas reads a path in the
    re-uploaded zip (``None`` where it finds none)."""
    filename = fullpath.rsplit("/", 1)[-1]  # File.basename
    split = [p for p in _ruby_split(filename, "_") if p != "LATE"]
    if split and split[0] == "anon":
        ids = split[1:3] + [None, None]
        who, attachment = ids[0], ids[1]
    else:
        digits = [p for p in split if re.fullmatch(r"[0-9]+", p)] + [None, None]
        who, attachment = digits[0], digits[1]
    if (split and re.match(r"link", split[-1])) or filename.startswith("._"):
        attachment = None
    return who, attachment


def canvas_accepts(fullpath: str, submissions: dict[str, set[str]]) -> str | None:
    """The user whose submission gets the file as a comment, or ``None`` (ignored):
    ``submissions`` maps each user id to the attachment ids of their submission."""
    who, attachment = canvas_reads(fullpath)
    if who is None or attachment is None:
        return None
    return who if attachment in submissions.get(who, set()) else None


# --- Moodle's reading of a feedback zip's path ----------------------------------------

_PHP_WS = " \t\n\r\v\f"


def php_is_numeric(text: str) -> bool:
    """PHP 8's ``is_numeric`` for a string: an integer or float literal, with
    whitespace allowed around it."""
    body = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    return re.fullmatch(rf"[{_PHP_WS}]*{body}[{_PHP_WS}]*", text) is not None


def moodle_reads(
    zip_path: str,
    participants: dict[int, str],
    plugins: set[tuple[str, str]],
    *,
    min_pieces: int = 4,
) -> tuple[str, tuple[str, str], str] | None:
    """``(user, plugin, file name)`` as Moodle reads a path of the uploaded zip, or
    ``None`` (skipped). ``min_pieces=5``: the rule of Moodle before 4.1, which the
    comment in ``is_valid_filename_for_import`` says wrote (and read) a trailing
    ``_``."""
    filepath, _, filename = ("/import/" + zip_path).rpartition("/")
    if filename.startswith(".") or filename.startswith("~"):
        return None
    parts = (filepath + "/" + filename).split("/")
    while parts:
        part = parts.pop(0)
        info = part.split("_", 4)  # explode('_', $part, 5)
        if len(info) < min_pieces:
            continue
        if not php_is_numeric(info[1]):
            continue
        number = float(info[1])
        key = int(number) if number.is_integer() else number
        if key not in participants:
            continue
        plugin = (info[2], info[3])
        if plugin not in plugins:
            continue
        rest = info[4] if len(info) == 5 else ""
        return participants[key], plugin, "/".join([rest, *parts])
    return None


# what an assignment with file submissions and feedback files has (get_plugin_by_type
# finds installed plugins, enabled or not)
MOODLE_PLUGINS = {
    ("assignsubmission", "file"),
    ("assignsubmission", "onlinetext"),
    ("assignsubmission", "comments"),
    ("assignfeedback", "file"),
    ("assignfeedback", "comments"),
    ("assignfeedback", "offline"),
    ("assignfeedback", "editpdf"),
}


# --- the re-implementations against the LMSs' own test cases -------------------------


def test_canvas_reading_matches_canvas_spec():
    """canvas-lms's assignment model spec, "generate comments from submissions":
    ``[last_name_first, user.id, attachment.id, display_name].join("_")`` is read
    as that user and attachment; a macOS ``._`` file is ignored."""
    name = "_".join(["user, some", "17", "4242", "homework.doc"])
    assert canvas_reads(name) == ("17", "4242")
    assert canvas_accepts(name, {"17": {"4242"}}) == "17"
    # "should ignore when assignment.id does not belong to the user"
    assert canvas_accepts(name, {"17": {"9999"}, "18": {"4242"}}) is None
    assert canvas_reads("/tmp/._why_macos_why.txt")[1] is None
    # the download's own names (lib/content_zipper.rb): late, anonymous, text entry
    assert canvas_reads("x/smithdave_LATE_12_34_ex05_alibi.ipynb") == ("12", "34")
    assert canvas_reads("LATE_anon_k3x9q_77_ex05.ipynb") == ("k3x9q", "77")
    assert canvas_reads("smithdave_12_text.html") == ("12", None)
    assert canvas_reads("smithdave_12_34_link.html") == ("12", None)


def test_moodle_reading_matches_moodle_tests():
    """mod/assign/feedback/file/tests/importziplib_test.php, case by case."""
    participants = {4711: "student"}
    read = lambda path: moodle_reads(path, participants, MOODLE_PLUGINS)  # noqa: E731
    assert read(".hiddenfile") is None
    assert read("~hiddenfile") is None
    assert read("some_path_here/RandomFile.txt") is None
    assert (
        read("Student Name_StringID_assignsubmission_file_My_cool_filename.txt") is None
    )
    assert read("Student Name_4811_assignsubmission_file_My_cool_filename.txt") is None
    assert (
        read("Student Name_4711_assignsubmission_noplugin_My_cool_filename.txt") is None
    )
    good = "Student Name_4711_assignsubmission_file_"
    assert read(good + "My_cool_filename.txt") == (
        "student",
        ("assignsubmission", "file"),
        "My_cool_filename.txt",
    )
    assert read(f"some_path_here/{good}/some_path/My File.txt") == (
        "student",
        ("assignsubmission", "file"),
        "/some_path/My File.txt",
    )
    # Moodle 4.1+ folders have no trailing "_"; older readers skip them
    newer = "Student Name_4711_assignsubmission_file/My File.txt"
    assert read(newer)[0] == "student"
    assert moodle_reads(newer, participants, MOODLE_PLUGINS, min_pieces=5) is None
    assert php_is_numeric(" 12") and php_is_numeric("1e3") and not php_is_numeric("x1")


def test_the_modules_own_reading_agrees():
    """lms_return checks its names with its own reading of the two rules: the same
    answers as the re-implementations above."""
    from course_lib.grading.lms_return import canvas_match, moodle_match

    for name in [
        "liwei_111_9001_ex05_alibi.html",
        "liwei_LATE_333_9002_ex05_alibi-1.html",
        "anon_k3x9q_77_ex05.html",
        "LATE_anon_k3x9q_77_ex05.html",
        "smithdave_12_34_link.html",
        "._smithdave_12_34_x.html",
        "ex05_alibi.html",
        "a_1_",
    ]:
        who, attachment = canvas_reads(name)
        anonymous = [p for p in _ruby_split(name, "_") if p != "LATE"][0] == "anon"
        if who is None or attachment is None:
            assert canvas_match(name) is None, name
        else:
            assert canvas_match(name) == (
                f"anon_{who}" if anonymous else who,
                attachment,
            ), name
    for path in [
        "Ana Gomez_501_assignfeedback_file_/ex05_alibi.html",
        "Ana Gomez_501_assignfeedback_file/ex05_alibi.html",
        "x_y/Ana Gomez_501_assignsubmission_file_ex05_alibi.html",
        "Ana Gomez_501_assignfeedback_file_/.hidden.html",
    ]:
        got = moodle_reads(path, {501: "501"}, MOODLE_PLUGINS)
        mine = moodle_match(path)
        if got is None:
            assert mine is None, path
        else:
            assert (mine[0], (mine[1], mine[2]), mine[3]) == got, path


# --- a scratch course with pages written by hand ------------------------------------

# student (the Canvas user id) -> (download path, attachment id, late)
CANVAS = {
    "111": ("liwei_111_9001_ex05_alibi.ipynb", "9001", False),
    "333": ("liwei_LATE_333_9002_ex05_alibi-1.ipynb", "9002", True),
    "444": (
        "ex05 submissions 2026_11/smithdave_444_9003_ex05_alibi.ipynb",
        "9003",
        False,
    ),
    "555": ("brownjo_555_9004_ex05_alibi.ipynb", "9004", False),  # no page
}
MOODLE = {  # student -> (download path in Moodle's download, participant id)
    "ana@x.org": ("Ana Gomez_501_assignsubmission_file/ex05_alibi.ipynb", "501"),
    "ana@y.org": ("Ana Gomez_502_assignsubmission_file_/ex05_alibi.ipynb", "502"),
    "zoe@x.org": ("Zoë O Brien_503_assignsubmission_file_ex05_alibi.ipynb", "503"),
    "jo@x.org": ("moodle/ex05_alibi.ipynb", "504"),  # the name: the gradebook's
}
NAMES = {"jo@x.org": ("Jo_Ann", "Lee/Smith"), "ana@x.org": ("Ana", "Gomez")}
NO_PAGE = {"555"}


def _page(student: str) -> bytes:
    return f"<html><body>feedback of {student}</body></html>".encode()


@pytest.fixture
def scratch(tmp_path):
    import course_lib.grading.gradebook  # noqa: F401  (its filter of nbgrader's warning)
    from course_lib.grading.course import Course
    from course_lib.grading.roster import LmsSource, record_source

    shutil.copyfile(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    course = Course(tmp_path)
    students = [*CANVAS, *MOODLE, "carol", "dsmith", "777"]
    with course.gradebook() as gb:
        gb.update_or_create_assignment(A)
        gb.update_or_create_notebook(A, A)
        for s in students:
            first, last = NAMES.get(s, ("", ""))
            gb.update_or_create_student(s, first_name=first, last_name=last)
        for s, (path, _, late) in CANVAS.items():
            record_source(gb, A, s, LmsSource("canvas", path, s, late))
        for s, (path, participant) in MOODLE.items():
            record_source(gb, A, s, LmsSource("moodle", path, participant))
        bb = f"{A}_dsmith_attempt_2026-11-20-10-15-00_{A}.ipynb"
        record_source(gb, A, "dsmith", LmsSource("blackboard", bb, "dsmith"))
        # a Canvas file renamed after the download: its name carries no ids
        record_source(gb, A, "777", LmsSource("canvas", f"{A}.ipynb", "777"))
    for s in students:
        if s not in NO_PAGE:
            folder = course.feedback_dir / s / A
            folder.mkdir(parents=True)
            (folder / f"{A}.html").write_bytes(_page(s))
    return course


def _entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        return {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}


def test_canvas_archive_is_read_back_as_each_user(scratch):
    from course_lib.grading.lms_return import lms_archives

    result = lms_archives(scratch, "ex05")
    assert result.archives["canvas"] == scratch.root / "reports/lms" / A / "canvas.zip"
    entries = _entries(result.archives["canvas"])
    # what Canvas holds: each user's submission and its attachment (from the names)
    submissions = {s: {attachment} for s, (_, attachment, _) in CANVAS.items()}
    got = {}
    for name, data in entries.items():
        user = canvas_accepts(name, submissions)
        assert user is not None, f"Canvas would ignore {name}"
        assert canvas_reads(name)[1] == CANVAS[user][1]
        assert data == _page(user), name
        got[user] = name
    # the two Li Weis stay two; the one without a page is not there
    assert sorted(got) == sorted(set(CANVAS) - NO_PAGE)
    for user, name in got.items():  # the download's name, the page for the notebook
        download = PurePosixPath(CANVAS[user][0]).name
        assert name == download.removesuffix(".ipynb") + ".html"
    assert "LATE" in got["333"].split("_")


def test_moodle_archive_is_read_back_as_each_participant(scratch):
    from course_lib.grading.lms_return import lms_archives

    result = lms_archives(scratch, A)
    entries = _entries(result.archives["moodle"])
    participants = {int(p): s for s, (_, p) in MOODLE.items()}
    folders = {}
    for path, data in entries.items():
        for rule in (4, 5):  # Moodle 4.1 and later; and before
            read = moodle_reads(path, participants, MOODLE_PLUGINS, min_pieces=rule)
            assert read is not None, f"Moodle would skip {path}"
            student, plugin, filename = read
            assert plugin == ("assignfeedback", "file")
            assert filename.rsplit("/", 1)[-1] == f"{A}.html"
        assert data == _page(student), path
        folder, _, _ = path.partition("/")
        folders.setdefault(student, set()).add(folder)
    assert sorted(folders) == sorted(MOODLE)  # one folder per participant
    assert all(len(f) == 1 for f in folders.values())
    names = {s: next(iter(f)).split("_")[0] for s, f in folders.items()}
    assert names["ana@x.org"] == names["ana@y.org"] == "Ana Gomez"  # the download's
    assert names["zoe@x.org"] == "Zoë O Brien"
    assert names["jo@x.org"] == "Jo Ann Lee Smith"  # the gradebook's, "_" and "/" gone


def test_who_is_left_out_and_why(scratch):
    from course_lib.grading.lms_return import format_lms_archives, lms_archives

    result = lms_archives(scratch, A)
    why = dict(result.not_included)
    assert sorted(why) == ["555", "777", "carol", "dsmith"]
    assert "no feedback page" in why["555"]
    assert "no LMS source" in why["carol"]
    assert "Blackboard" in why["dsmith"]
    assert "Canvas would not find user '777'" in why["777"]
    lines = format_lms_archives(result, scratch.root)
    assert f"wrote reports/lms/{A}/canvas.zip  (3 students;" in lines[0]
    assert f"wrote reports/lms/{A}/moodle.zip  (4 students;" in lines[1]
    assert "  carol: no LMS source" in "\n".join(lines)


def test_the_instructor_guide_shows_this_output(scratch):
    """The transcript of "Feedback back through Canvas or Moodle" is this course's
    real output, and the names the guide quotes are in its archives."""
    from course_lib.grading.lms_return import format_lms_archives, lms_archives

    result = lms_archives(scratch, "ex05")
    guide = (ROOT / "book" / "instructor-guide.md").read_text()
    section = guide.split("### Feedback back through Canvas or Moodle\n", 1)[1]
    block = section.split("$ course feedback ex05\n...\n", 1)[1].split("```", 1)[0]
    assert block == "\n".join(format_lms_archives(result, scratch.root)) + "\n"
    canvas = _entries(result.archives["canvas"])
    moodle = _entries(result.archives["moodle"])
    assert "`liwei_111_9001_ex05_alibi.html`" in section
    assert "liwei_111_9001_ex05_alibi.html" in canvas
    assert "`Ana Gomez_501_assignfeedback_file_/`" in section
    assert any(p.startswith("Ana Gomez_501_assignfeedback_file_/") for p in moodle)


def test_several_pages_and_a_stale_archive(scratch):
    from course_lib.grading.lms_return import lms_archives
    from course_lib.grading.roster import record_source

    (scratch.feedback_dir / "111" / A / "extra.html").write_bytes(b"<p>two</p>")
    names = sorted(n for n in _entries(lms_archives(scratch, A).archives["canvas"]))
    mine = [n for n in names if canvas_reads(n)[0] == "111"]
    assert len(mine) == 2 and len(set(mine)) == 2
    assert all(canvas_reads(n) == ("111", "9001") for n in mine)
    with scratch.gradebook() as gb:
        for s in [*CANVAS, "777"]:
            record_source(gb, A, s, None)
    again = lms_archives(scratch, A)
    assert "canvas" not in again.archives
    assert again.removed == [scratch.root / "reports/lms" / A / "canvas.zip"]
    assert not again.removed[0].exists()
    assert (scratch.root / "reports/lms" / A / "moodle.zip").is_file()


def test_one_download_file_recorded_for_two_students(scratch):
    """Two students whose recorded source is the same Canvas file (an old
    name-based id beside the new one, say): one page per name in the zip, the
    second student listed with the reason."""
    from course_lib.grading.lms_return import lms_archives
    from course_lib.grading.roster import LmsSource, record_source

    with scratch.gradebook() as gb:
        gb.update_or_create_student("liwei")
        record_source(gb, A, "liwei", LmsSource("canvas", CANVAS["111"][0], "111"))
    (scratch.feedback_dir / "liwei" / A).mkdir(parents=True)
    (scratch.feedback_dir / "liwei" / A / f"{A}.html").write_bytes(_page("liwei"))
    result = lms_archives(scratch, A)
    names = list(_entries(result.archives["canvas"]))
    assert len(names) == len(set(names)) == 3
    assert "already another student's page" in dict(result.not_included)["liwei"]
    assert _entries(result.archives["canvas"])[
        "liwei_111_9001_ex05_alibi.html"
    ] == _page("111")


def test_a_class_without_lms_prints_nothing(tmp_path):
    import course_lib.grading.gradebook  # noqa: F401
    from course_lib.grading.course import Course
    from course_lib.grading.lms_return import format_lms_archives, lms_archives

    shutil.copyfile(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    course = Course(tmp_path)
    with course.gradebook() as gb:
        gb.update_or_create_assignment(A)
    (course.feedback_dir / "alice" / A).mkdir(parents=True)
    (course.feedback_dir / "alice" / A / f"{A}.html").write_bytes(_page("alice"))
    result = lms_archives(course, A)
    assert result.archives == {} and format_lms_archives(result) == []
    assert not (tmp_path / "reports").exists()


# --- through the real pipeline ----------------------------------------------------

TASK = ("add", "return a + b", "assert add(1, 2) == 3", "assert add(-1, 1) == 0")
E = "ex90_add"


@pytest.fixture(scope="module")
def piped(tmp_path_factory):
    """Collect a Canvas download (two students named Li Wei, one notebook that is
    not JSON), a Moodle download (Ana Gomez, on the roster) and a plain folder;
    autograde; then ``course feedback`` as the command line runs it."""
    import contextlib

    import nbformat

    from course_lib.cli import main
    from course_lib.grading.autograde import autograde
    from course_lib.grading.collect import collect
    from course_lib.grading.course import Course
    from course_lib.grading.release import release
    from course_lib.grading.synthetic import tiny_assignment

    tmp = tmp_path_factory.mktemp("lms_return")
    root = tmp / "course"
    (root / "solutions" / E).mkdir(parents=True)
    shutil.copyfile(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    nbformat.write(tiny_assignment(*TASK), str(root / "solutions" / E / f"{E}.ipynb"))
    course = Course(root)
    release(course, E)
    with course.gradebook() as gb:
        gb.update_or_create_student("ana@x.org", first_name="Ana", last_name="Gomez")
    good = nbformat.writes(
        nbformat.read(str(course.release_dir / E / f"{E}.ipynb"), as_version=4)
    ).encode()
    downloads = {
        "canvas.zip": {
            f"liwei_111_9001_{E}.ipynb": good,
            f"liwei_LATE_333_9002_{E}.ipynb": b'{"cells": [',
        },
        # the folder as Moodle before 4.1 names it (course collect reads that form)
        "moodle.zip": {f"Ana Gomez_501_assignsubmission_file_/{E}.ipynb": good},
    }
    for zip_name, files in downloads.items():
        with zipfile.ZipFile(tmp / zip_name, "w") as zf:
            for name, data in files.items():
                zf.writestr(name, data)
        collect(course, tmp / zip_name, E)
    (tmp / "plain" / "plain").mkdir(parents=True)
    (tmp / "plain" / "plain" / f"{E}.ipynb").write_bytes(good)
    collect(course, tmp / "plain", E)
    autograde(course, E, grading_options(course, jobs=2, progress=False))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["feedback", "ex90", "--root", str(root)])
    assert code == 0
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        assert main(["feedback", "ex90", "--root", str(root), "--quiet"]) == 0
    return course, out.getvalue(), quiet.getvalue()


@pytest.mark.slow
def test_course_feedback_writes_the_archives(piped):
    course, printed, quiet = piped
    # --quiet: the archives and a count, no list of pages or of who is left out
    assert quiet.splitlines()[1:] == [
        line for line in printed.splitlines() if line.startswith("wrote")
    ] + ["1 student not in an LMS archive (without --quiet: who and why)"]
    folder = course.root / "reports" / "lms" / E
    assert f"wrote reports/lms/{E}/canvas.zip  (2 students;" in printed
    assert f"wrote reports/lms/{E}/moodle.zip  (1 student;" in printed
    assert "  plain: no LMS source" in printed
    canvas = _entries(folder / "canvas.zip")
    users = {canvas_accepts(n, {"111": {"9001"}, "333": {"9002"}}): n for n in canvas}
    assert sorted(users) == ["111", "333"]  # two Li Weis, two pages
    # each page is the one course feedback wrote for that student
    for user, name in users.items():
        page = course.feedback_dir / user / E / f"{E}.html"
        assert canvas[name] == page.read_bytes()
    assert b"could not be graded" in canvas[users["333"]]  # the ungradable one
    assert b"could not be graded" not in canvas[users["111"]]
    moodle = _entries(folder / "moodle.zip")
    [(path, data)] = moodle.items()
    read = moodle_reads(path, {501: "ana@x.org"}, MOODLE_PLUGINS)
    assert read is not None and read[0] == "ana@x.org"
    assert data == (course.feedback_dir / "ana@x.org" / E / f"{E}.html").read_bytes()
    # the gradebook's own record of where each file came from
    from course_lib.grading.roster import read_sources

    with course.gradebook() as gb:
        sources = read_sources(gb, E)
    assert {s: (v.lms, v.lms_id) for s, v in sources.items()} == {
        "111": ("canvas", "111"),
        "333": ("canvas", "333"),
        "ana@x.org": ("moodle", "501"),
    }
