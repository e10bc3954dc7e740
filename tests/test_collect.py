"""``course collect``: LMS download names, ``--pattern``, and every file of a folder
or zip accounted for (placed, unchanged, or not placed with a reason)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from course_lib import cli
from course_lib.grading.collect import collect, name_to_id, student_from_path
from course_lib.grading.synthetic import scratch_course

ROOT = Path(__file__).resolve().parents[1]
A = "ex05_alibi"


@pytest.fixture
def course(tmp_path):
    return scratch_course(tmp_path / "course", ROOT, [A])


def _nb_bytes(tag: str) -> bytes:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"# {tag}")])
    return nbformat.writes(nb).encode()


@pytest.mark.parametrize(
    "path, lms_id, by_name",
    [
        # Canvas: <name>[_LATE]_<user id>_<submission id>_<uploaded file name>
        ("smithdave_12345_678901_ex05_alibi.ipynb", "12345", "smithdave"),
        ("smithdave_LATE_12345_678901_ex05_alibi.ipynb", "12345", "smithdave"),
        ("smithdave_late_12345_678901_ex05_alibi-2.ipynb", "12345", "smithdave"),
        ("smithdave_12345_678901_my homework.ipynb", "12345", "smithdave"),
        # Blackboard: <assignment>_<username>_attempt_<date>_<file name>
        (
            "ex05_alibi_dsmith_attempt_2026-11-20-10-15-00_ex05_alibi.ipynb",
            "dsmith",
            "dsmith",
        ),
        (
            "ex05_alibi_d_smith_attempt_2026-11-20-10-15-00_x.ipynb",
            "d_smith",
            "d_smith",
        ),
        (
            "Exercise5_dsmith_attempt_2026-11-20-10-15-00_ex05.ipynb",
            "dsmith",
            "dsmith",
        ),
    ],
)
def test_lms_download_names(path, lms_id, by_name):
    assert student_from_path(path, A) == (lms_id, "")
    assert student_from_path(path, A, ids="names") == (by_name, "")


@pytest.mark.parametrize(
    "path, full_name, participant, by_name",
    [
        # Moodle: a folder per student, or the same prefix on the file
        (
            "Dave Smith_123456_assignsubmission_file_/ex05_alibi.ipynb",
            "Dave Smith",
            "123456",
            "dave_smith",
        ),
        (
            "Zoë Brontë_42_assignsubmission_file_ex05_alibi.ipynb",
            "Zoë Brontë",
            "42",
            "zoe_bronte",
        ),
        # Moodle 4.1 and later: the folder without its last "_"
        (
            "Ana Gomez_501_assignsubmission_file/ex05_alibi.ipynb",
            "Ana Gomez",
            "501",
            "ana_gomez",
        ),
    ],
)
def test_moodle_download_names(path, full_name, participant, by_name):
    asked = []

    def roster(name, number):
        asked.append((name, number))
        return "someone@example.org", ""

    assert student_from_path(path, A, moodle=roster) == ("someone@example.org", "")
    assert asked == [(full_name, participant)]
    student, why = student_from_path(path, A)  # no roster: refused, with the fix
    assert student is None
    assert f"Moodle participant {participant}) is not on the roster" in why
    assert "course roster" in why
    assert student_from_path(path, A, ids="names") == (by_name, "")


@pytest.mark.parametrize(
    "path",
    [
        "smithdave_12345_678901_ex04_rope.ipynb",
        "Dave Smith_1_assignsubmission_file_/ex04_rope.ipynb",
        "ex04_rope_dsmith_attempt_2026-11-20-10-15-00_ex04_rope.ipynb",
    ],
)
def test_lms_download_of_another_assignment_is_refused(path):
    student, why = student_from_path(path, A)
    assert student is None
    assert "another assignment (ex04)" in why


def test_name_to_id_is_a_valid_student_id():
    assert name_to_id("Anne-Marie  de la Tour") == "anne_marie_de_la_tour"
    assert name_to_id("Åsa Öberg") == "asa_oberg"


def test_pattern_takes_the_named_group():
    canvas_user_id = re.compile(r"[a-z]+_(?:LATE_)?(?P<student>\d+)_\d+_.*\.ipynb")
    assert student_from_path(
        "smithdave_LATE_12345_678901_ex05_alibi.ipynb", A, canvas_user_id
    ) == ("12345", "")
    # matched against the whole path, or else the file name alone
    assert student_from_path(
        "dl/smithdave_12345_1_ex05_alibi.ipynb", A, canvas_user_id
    ) == ("12345", "")
    student, why = student_from_path("alice_ex05_alibi.ipynb", A, canvas_user_id)
    assert student is None and "does not match --pattern" in why
    bad_id = re.compile(r"(?P<student>.+)\.ipynb")
    student, why = student_from_path("a b.ipynb", A, bad_id)
    assert student is None and "not a valid student id" in why


def test_every_file_of_a_zip_is_accounted_for(course, tmp_path, capsys):
    archive = tmp_path / "canvas.zip"
    entries = {
        "smithdave_12345_678901_ex05_alibi.ipynb": _nb_bytes("dave"),
        "jonesann_LATE_222_333_ex05_alibi-1.ipynb": _nb_bytes("ann"),
        "../../x_ex05_alibi.ipynb": _nb_bytes("escape"),
        "/abs/y_ex05_alibi.ipynb": _nb_bytes("absolute"),
        "__MACOSX/._smithdave_12345_678901_ex05_alibi.ipynb": b"junk",
        ".DS_Store": b"junk",
        "smithdave_12345_678901_notes.txt": b"x",
        "ex05_alibi.ipynb": _nb_bytes("nobody"),
        "smithdave_12345_678901_ex04_rope.ipynb": _nb_bytes("wrong"),
    }
    with zipfile.ZipFile(archive, "w") as zf:
        for i, (name, data) in enumerate(entries.items()):
            # ZipInfo keeps the name as given (writestr would strip "../")
            info = zipfile.ZipInfo(name, (2026, 11, 20, 10, i, 0))
            zf.writestr(info, data)
    with zipfile.ZipFile(archive) as zf:  # the zip really holds the unsafe names
        assert "../../x_ex05_alibi.ipynb" in zf.namelist()
    report = collect(course, archive, "ex05")
    placed = {source: student for student, source, _ in report.placed}
    reasons = dict(report.not_placed)
    # every entry exactly once
    assert sorted([*placed, *reasons]) == sorted(entries)
    assert placed == {  # Canvas's user ids
        "smithdave_12345_678901_ex05_alibi.ipynb": "12345",
        "jonesann_LATE_222_333_ex05_alibi-1.ipynb": "222",
    }
    assert "unsafe path" in reasons["../../x_ex05_alibi.ipynb"]
    assert "unsafe path" in reasons["/abs/y_ex05_alibi.ipynb"]
    assert "macOS" in reasons["__MACOSX/._smithdave_12345_678901_ex05_alibi.ipynb"]
    assert "hidden file" in reasons[".DS_Store"]
    assert "not a notebook" in reasons["smithdave_12345_678901_notes.txt"]
    assert "no student id" in reasons["ex05_alibi.ipynb"]
    assert "another assignment" in reasons["smithdave_12345_678901_ex04_rope.ipynb"]
    # nothing was written outside the course's submitted/ folder
    assert not (tmp_path / "x_ex05_alibi.ipynb").exists()
    assert not any(p.name.startswith("x_") for p in tmp_path.rglob("*"))
    assert sorted(p.name for p in course.submitted_dir.iterdir()) == ["12345", "222"]
    again = collect(course, archive, "ex05")
    assert not again.placed and len(again.unchanged) == 2
    assert sorted([*(s for _, s in again.unchanged), *dict(again.not_placed)]) == (
        sorted(entries)
    )


def test_folder_duplicates_and_links_are_listed(course, tmp_path):
    import os

    inbox = tmp_path / "moodle"
    a = inbox / "Ann Jones_7_assignsubmission_file_" / "ex05_alibi.ipynb"
    b = inbox / "Ann Jones_7_assignsubmission_file_" / "ex05_alibi (1).ipynb"
    for path, tag, when in ((a, "new", 1_700_000_000), (b, "old", 1_600_000_000)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_nb_bytes(tag))
        os.utime(path, (when, when))
    (inbox / "link_ex05_alibi.ipynb").symlink_to(a)
    report = collect(course, inbox, "ex05", ids="names")  # the rule before LMS ids
    assert [(s, src) for s, src, _ in report.placed] == [
        ("ann_jones", a.relative_to(inbox).as_posix())
    ]
    reasons = dict(report.not_placed)
    assert "newer file" in reasons[b.relative_to(inbox).as_posix()]
    assert "symbolic link" in reasons["link_ex05_alibi.ipynb"]
    placed = course.submitted_dir / "ann_jones" / A / f"{A}.ipynb"
    assert placed.read_bytes() == a.read_bytes()


def test_cli_pattern(course, tmp_path, capsys):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "hw5-s1234.ipynb").write_bytes(_nb_bytes("s1234"))
    (inbox / "hw5-bad name.ipynb").write_bytes(_nb_bytes("x"))
    root = ["--root", str(course.root)]
    code = cli.main(
        [
            "collect",
            str(inbox),
            "-a",
            "ex05",
            "--pattern",
            r"hw5-(?P<student>.+)\.ipynb",
        ]
        + root
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "1 placed, 0 unchanged, 1 not placed" in out
    assert "hw5-bad name.ipynb: 'bad name' is not a valid student id" in out
    assert (course.submitted_dir / "s1234" / A / f"{A}.ipynb").is_file()
    code = cli.main(
        ["collect", str(inbox), "-a", "ex05", "--quiet"]
        + root
        + ["--pattern", r"hw5-(?P<student>.+)\.ipynb"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].startswith(f"{A}: 0 placed, 1 unchanged, 1 not placed")
    assert "(unchanged)" not in out and "not a valid student id" in out
