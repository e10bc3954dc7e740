"""A function that never returns, as a student meets it (issue 24): the public check
gives it the course's time limit, says in plain words that it did not return, and a
later check of the same function does not wait again; in a notebook (JupyterLab,
Colab) and through ``course check`` alike.

``COURSE_CHECK_TIME_LIMIT`` shortens the table's limit (10 s for ex05) to keep the
tests quick; the message and the mechanism are the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib._time_limits import (
    CELL_TIME_LIMIT,
    SOLUTION_CHECK_SECONDS,
    check_time_limit,
)
from course_lib.checks import CheckFailed, check_alibi_bias
from course_lib.grading.synthetic import solution_answers, student_notebook

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"
LOOP = (
    "def alibi_bias(n_heads, seq_len):\n"
    "    while True:  # never returns\n"
    "        pass\n"
)


def test_the_limit_comes_from_the_course_table(monkeypatch):
    monkeypatch.delenv("COURSE_CHECK_TIME_LIMIT", raising=False)
    assert check_time_limit(A) == CELL_TIME_LIMIT[A]
    assert check_time_limit("no_such_assignment") is None
    monkeypatch.setenv("COURSE_CHECK_TIME_LIMIT", "0")
    assert check_time_limit(A) is None
    monkeypatch.setenv("COURSE_CHECK_TIME_LIMIT", "2.5")
    assert check_time_limit(A) == 2.5
    # every function a message compares with has its assignment in the table
    assert set(SOLUTION_CHECK_SECONDS) <= set(CELL_TIME_LIMIT)


def test_a_loop_is_stopped_named_and_not_waited_for_twice(monkeypatch):
    monkeypatch.setenv("COURSE_CHECK_TIME_LIMIT", "1")
    calls = []

    def alibi_bias(n_heads, seq_len):
        calls.append((n_heads, seq_len))
        while True:
            try:
                time.sleep(0.05)
            except Exception:  # noqa: BLE001 - a student's catch-all cannot keep it
                pass

    with pytest.raises(CheckFailed) as first:
        check_alibi_bias(alibi_bias)
    cost = SOLUTION_CHECK_SECONDS[A]["alibi_bias"]
    assert str(first.value) == (
        f"alibi_bias(4, 5) did not return within 1 s (the course's solution passes "
        f"this whole check in {cost:g} s): look for a loop that never ends, or a "
        "size that grows with every step."
    )
    with pytest.raises(CheckFailed) as second:
        check_alibi_bias(alibi_bias)
    assert str(second.value).startswith(
        "not run: alibi_bias(4, 5) did not return in an earlier check"
    )
    assert calls == [(4, 5)], "the second check called the function again"

    # the student fixes it and runs the cell again: a new function, checked again
    def alibi_bias(n_heads, seq_len):  # noqa: F811 - the student's new version
        raise ValueError("still wrong")

    with pytest.raises(CheckFailed, match="raised ValueError: still wrong"):
        check_alibi_bias(alibi_bias)


def _looping_notebook(tmp_path: Path) -> Path:
    import nbformat

    release = ROOT / "notebooks" / A / f"{A}.ipynb"
    answers = solution_answers(ROOT / "solutions" / A / f"{A}.ipynb")
    nb = student_notebook(
        release,
        {"alibi_slopes__answer": answers["alibi_slopes__answer"]}
        | {"alibi_bias__answer": LOOP},
    )
    path = tmp_path / f"{A}.ipynb"
    nbformat.write(nb, str(path))
    return path


@pytest.mark.slow
def test_course_check_says_which_function_hung(tmp_path):
    path = _looping_notebook(tmp_path)
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COURSE_CHECK_TIME_LIMIT": "3"},
    )
    took = time.monotonic() - start
    print(f"\n$ course check {path.name}   ({took:.1f} s)\n{out.stderr}{out.stdout}")
    assert out.returncode == 1
    assert "checking alibi_slopes ..." in out.stderr
    assert "checking alibi_bias ..." in out.stderr
    assert "alibi_bias(4, 5) did not return within 3 s" in out.stdout
    assert "look for a loop that never ends" in out.stdout
    assert "KeyboardInterrupt" not in out.stdout


@pytest.mark.slow
def test_in_a_notebook_the_public_check_says_it_without_grader_frames(
    tmp_path, monkeypatch
):
    """The cell as JupyterLab runs it: a plain kernel, no grading tool."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("COURSE_CHECK_TIME_LIMIT", "3")
    path = _looping_notebook(tmp_path)
    nb = nbformat.read(str(path), as_version=4)
    NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3").execute(
        cwd=str(tmp_path)
    )
    cells = {
        c.metadata.get("nbgrader", {}).get("grade_id"): c
        for c in nb.cells
        if c.cell_type == "code"
    }
    (error,) = [
        o for o in cells["alibi_bias__public"].outputs if o.output_type == "error"
    ]
    assert error.ename == "CheckFailed"
    assert error.evalue.startswith("alibi_bias(4, 5) did not return within 3 s")
    shown = "\n".join(error.traceback)
    assert "_core.py" not in shown and "ex05_alibi.py" not in shown, shown
    assert not [
        o for o in cells["alibi_slopes__public"].outputs if o.output_type == "error"
    ]


def test_the_solution_costs_quoted_are_the_recorded_ones():
    """SOLUTION_CHECK_SECONDS is the solution's public check cell in the record that
    set the limits (benchmarks/honest_costs.json), function by function."""
    import json

    record = json.loads((ROOT / "benchmarks" / "honest_costs.json").read_text())
    expected = {
        a: {f: entry["solution"]["cells"][f"{f}__public"] for f in entry["functions"]}
        for a, entry in record["assignments"].items()
    }
    assert SOLUTION_CHECK_SECONDS == expected
