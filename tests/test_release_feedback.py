"""Every student who submitted gets feedback through nbgrader's exchange, the
ungradable one included (issue 32, item 3).

The real commands, in a folder of the test: an exchange (``Exchange.root``), the
course id of ``nbgrader_config.py``; two students, each with a home of their own
(``HOME``: nbgrader's cache of their submissions and its secret live there) fetch and
submit with ``nbgrader fetch_assignment`` / ``nbgrader submit``. nbgrader names a
submission by the Unix user unless ``--student`` is given (``exchange/default/
submit.py``, ``init_dest``); the test runs as one user, so each student passes
``--student``, as nbgrader's own exchange tests run every student as the test's user.
Ana submits the right answers, Cem a notebook that is not JSON. A third student, Dan,
handed in by other means (``course collect`` from a folder: no exchange, no secret).
The instructor runs ``nbgrader collect``, ``course autograde``, ``course feedback``
and ``nbgrader release_feedback``; each exchange student runs ``nbgrader
fetch_feedback`` and finds their page.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import course_cli, course_cli_sequence

from course_lib.grading.synthetic import (
    scratch_course,
    solution_answers,
    student_notebook,
    write_submission,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"
NOT_JSON = b'{"cells": [ {"cell_type": "code", '


def _nbgrader(*args: str, cwd: Path, home: Path | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exchange-term")
    exchange = tmp / "exchange"
    exchange.mkdir()
    course = scratch_course(tmp / "course", ROOT, [A])
    course_id = course.course_id
    x = [f"--Exchange.root={exchange}", f"--course={course_id}"]
    out = course_cli("release", "ex05", cwd=course.root)
    assert out.returncode == 0, out.stderr
    got = _nbgrader("release_assignment", A, *x, cwd=course.root)
    assert got.returncode == 0, got.stderr
    src = course.source_dir / A / f"{A}.ipynb"
    rel = course.release_dir / A / f"{A}.ipynb"
    homes = {}
    for student in ("ana", "cem"):
        home = tmp / "home" / student
        home.mkdir(parents=True)
        homes[student] = home
        got = _nbgrader("fetch_assignment", A, *x, cwd=home, home=home)
        assert got.returncode == 0, got.stderr
        fetched = home / A / f"{A}.ipynb"
        assert fetched.is_file(), got.stderr
        if student == "ana":
            import nbformat

            nbformat.write(
                student_notebook(fetched, solution_answers(src)), str(fetched)
            )
        else:
            fetched.write_bytes(NOT_JSON)
        got = _nbgrader("submit", A, *x, f"--student={student}", cwd=home, home=home)
        assert got.returncode == 0, got.stderr
    steps = {"collect": _nbgrader("collect", A, *x, cwd=course.root)}
    inbox = tmp / "inbox"
    write_submission(inbox, "dan", A, student_notebook(rel, solution_answers(src)))
    # the instructor's three course commands, one after another in one process
    # (conftest.course_cli_sequence: the grading tool imported once)
    names = ("course collect", "autograde", "feedback")
    done = course_cli_sequence(
        [
            (course.root, ("collect", str(inbox), "--assignment", A)),
            (course.root, ("autograde", "ex05", "--jobs", "2", "--no-progress")),
            (course.root, ("feedback", "ex05")),
        ],
        tmp,
    )
    # after a command that fails the rest did not run: test_every_step_succeeds
    # names the one that failed
    steps.update(zip(names, done, strict=False))
    steps["release_feedback"] = _nbgrader("release_feedback", A, *x, cwd=course.root)
    fetched = {}
    for student, home in homes.items():
        steps[f"fetch_feedback {student}"] = _nbgrader(
            "fetch_feedback", A, *x, f"--student={student}", cwd=home, home=home
        )
        fetched[student] = sorted((home / A / "feedback").glob(f"*/{A}.html"))
    return course, steps, fetched


def test_every_step_succeeds(term):
    _, steps, _ = term
    for name, proc in steps.items():
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-3000:])
    assert re.search(r"2 graded, 1 ungradable", steps["autograde"].stdout), steps[
        "autograde"
    ].stdout


def test_every_feedback_folder_has_what_release_feedback_opens(term):
    course, _, _ = term
    for student in ("ana", "cem", "dan"):
        folder = course.feedback_dir / student / A
        assert (folder / f"{A}.html").is_file(), student
        for name in ("timestamp.txt", "submission_secret.txt"):
            assert (folder / name).is_file(), (student, name)
        secret = (folder / "submission_secret.txt").read_text()
        submitted = course.submitted_dir / student / A / "submission_secret.txt"
        if student == "dan":  # course collect: no exchange, a fresh random secret
            assert not submitted.exists()
            assert re.fullmatch(r"[0-9a-f]{128}", secret), secret
        else:  # the secret nbgrader submit wrote, so fetch_feedback finds the page
            assert secret == submitted.read_text(), student
        stamp = (folder / "timestamp.txt").read_text()
        assert (
            stamp == (course.submitted_dir / student / A / "timestamp.txt").read_text()
        )


def test_each_exchange_student_fetches_their_own_page(term):
    course, _, fetched = term
    with course.gradebook() as gb:
        max_score = gb.find_assignment(A).max_score
        ana = gb.find_submission(A, "ana").score
    assert ana == max_score > 0
    for student in ("ana", "cem"):
        assert len(fetched[student]) == 1, (student, fetched[student])
        page = fetched[student][0].read_text()
        own = (course.feedback_dir / student / A / f"{A}.html").read_text()
        assert page == own, student
    cem = fetched["cem"][0].read_text()
    assert "could not be graded" in cem and "not a valid notebook" in cem
    ana_page = fetched["ana"][0].read_text()
    assert "could not be graded" not in ana_page
    full = float(max_score)  # nbgrader's heading: "(Score: 6.0 / 6.0)"
    assert f"(Score: {full} / {full})" in ana_page


def test_rerun_keeps_the_written_secret(term):
    course, _, _ = term
    secret = course.feedback_dir / "dan" / A / "submission_secret.txt"
    before = secret.read_text()
    again = course_cli("feedback", "ex05", cwd=course.root)
    assert again.returncode == 0, again.stderr
    assert secret.read_text() == before
