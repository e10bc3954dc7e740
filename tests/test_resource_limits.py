"""Resource exhaustion is named, never called tampering (issue 34, item 4).

A correct ex05_alibi submission whose own cell leaves 52 sleeping child processes
(the sandbox allows 64 processes and threads per kernel) used to score 4 / 6: the
kernel's reply to the grading tool's check of the hidden ``alibi_bias`` test is a
record of ~170 KB, above jupyter_client's ``Session.copy_threshold`` (64 KiB), so
pyzmq sent it without copying and first had to start its garbage-collector thread
(zmq/utils/garbage.py), which a kernel at its process limit cannot start: no reply,
reported as tampering. Here such submissions are graded by the real command, in the
sandbox, and must get what their functions deserve, with a note naming what was
left running.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import nbformat
import pytest
from adversarial.submissions import CELLS, POINTS, A
from conftest import course_cli

from course_lib.grading.notebooks.integrity import _children_note, _limit_named
from course_lib.grading.synthetic import (
    scratch_course,
    solution_answers,
    student_notebook,
    write_submission,
)

ROOT = Path(__file__).resolve().parent.parent
_course = functools.partial(course_cli, timeout=900)
SLEEPERS = 52  # with the kernel's own threads and the sandbox's init: 64 of 64

# (extra cell after the set-up cell, wrong alibi_bias?)
STUDENTS = {
    "sleepers": (
        "import subprocess\n"
        f"_kids = [subprocess.Popen(['sleep', '600']) for _ in range({SLEEPERS})]\n",
        False,
    ),
    "pool_open": (
        "import multiprocessing\n"
        "_pool = multiprocessing.Pool(4)\n"
        "print(_pool.map(abs, [-1, 2]))\n",
        False,
    ),
    "pool_open_wrong_bias": (
        "import multiprocessing\n_pool = multiprocessing.Pool(4)\n",
        True,
    ),
}


def test_limits_are_named_from_the_error():
    assert _limit_named("RuntimeError: can't start new thread") == "processes/threads"
    assert _limit_named("MemoryError: ") == "memory"
    assert _limit_named("OSError: [Errno 24] Too many open files") == "open files"
    assert _limit_named("TimeoutError: no reply in time") == ""
    note = _children_note(["sleep"] * 3)
    assert "3 child processes still running (sleep)" in note
    assert "python x2, sleep x1" in _children_note(["python", "sleep", "python"])
    assert _children_note([]) == _children_note("junk") == ""


@pytest.mark.slow
def test_processes_left_running_are_graded_not_called_tampering(tmp_path):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    course = scratch_course(tmp_path / "course", ROOT, [A])
    out = _course("release", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    sol = solution_answers(course.root / "solutions" / A / f"{A}.ipynb")
    distance = "(pos[:, None] - pos[None, :]).abs()"
    assert distance in sol["alibi_bias__answer"]
    for student, (extra, wrong) in STUDENTS.items():
        bias = sol["alibi_bias__answer"]
        if wrong:  # the honest mistake of the adversarial class: no absolute value
            bias = bias.replace(distance, "(pos[:, None] - pos[None, :])")
        book = student_notebook(
            course.root / "notebooks" / A / f"{A}.ipynb",
            {
                "alibi_slopes__answer": sol["alibi_slopes__answer"],
                "alibi_bias__answer": bias,
            },
        )
        book.cells.insert(2, nbformat.v4.new_code_cell(extra))
        write_submission(tmp_path / "inbox", student, A, book)
    got = _course(
        "collect", str(tmp_path / "inbox"), "--assignment", A, cwd=course.root
    )
    assert got.returncode == 0, got.stderr
    run = _course(
        "autograde", A, "--jobs", "2", "--cell-timeout", "10", "--timeout", "60",
        "--memory", "2G", "--no-progress", cwd=course.root,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "bubblewrap sandbox" in run.stdout

    from course_lib.grading.gradebook import read_status

    with course.gradebook() as gb:
        status = read_status(gb, A)
        scores = {
            s: {g.name: g.score for nb in gb.find_submission(A, s).notebooks
                for g in nb.grades}
            for s in STUDENTS
        }  # fmt: skip
    full = sum(POINTS.values())
    bias_cells = [c for c in CELLS if c.startswith("alibi_bias")]
    for student, (_, wrong) in STUDENTS.items():
        row = status[student]
        assert row.status == "graded", row
        for cell, message in row.failures.items():
            assert "tampering" not in message.lower(), (student, cell, message)
        expected = {c: (0 if wrong and c in bias_cells else POINTS[c]) for c in CELLS}
        assert scores[student] == expected, (student, row)
        assert row.score == (full - sum(POINTS[c] for c in bias_cells) * wrong)
        if wrong:
            assert sorted(row.failures) == sorted(bias_cells)
            assert all("without the absolute value" in m for m in row.failures.values())

    notebook = course.autograded_dir / "sleepers" / A / f"{A}.ipynb"
    text = {
        c.metadata.get("nbgrader", {}).get("grade_id", ""): "".join(
            o.get("text", "") for o in c.get("outputs", [])
        )
        for c in nbformat.read(str(notebook), as_version=4).cells
    }
    note = f"{SLEEPERS} child processes still running (sleep) when the check ran"
    assert note in text["alibi_bias__hidden"], text["alibi_bias__hidden"]
