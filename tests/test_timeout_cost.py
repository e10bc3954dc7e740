"""What an infinite loop costs a class (issue 21, items 3 and 4): the wall time per
submission follows from the per-cell limit and the released notebook's code cells
(and its reason says so), and a run says how much grading time its time-outs cost,
per student in ``grades.csv`` and in all in the summaries.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import course_cli

from course_lib._time_limits import CELL_TIME_LIMIT
from course_lib.grading.autograde import START_SECONDS, derived_limits
from course_lib.grading.grade import time_limit_reason, time_out_seconds
from course_lib.grading.kernels.start import KernelLimits

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"
# A loop that never returns. It sleeps rather than spins: the limit is wall time, so
# it costs the same wait, without a core busy for the whole limit beside the other
# tests (tests/test_time_limits.py grades a spinning `while True: pass`, through
# benchmarks/bench_timeouts.py).
LOOP = (
    "def alibi_bias(n_heads, seq_len):\n"
    "    import time\n"
    "    while True:\n"
    "        time.sleep(0.05)\n"
)


def _code_cells(path: Path) -> int:
    return sum(c["cell_type"] == "code" for c in json.loads(path.read_text())["cells"])


def test_the_wall_time_follows_from_the_cells(tmp_path):
    from course_lib.grading.synthetic import scratch_course

    course = scratch_course(tmp_path / "course", ROOT, [A])
    cells = _code_cells(course.source_dir / A / f"{A}.ipynb")
    assert cells >= 5
    limits = derived_limits(course, A, (A,), 10, KernelLimits(memory=1 << 30))
    assert limits.wall_seconds == 10 * cells + START_SECONDS
    assert limits.memory == 1 << 30
    assert limits.wall_text() == (
        f"{10 * cells + START_SECONDS:g} s per submission (10 s per cell x {cells} "
        f"code cells + {START_SECONDS} s to start and save)"
    )
    # no per-cell limit: the limits as given
    assert derived_limits(course, A, (A,), None, KernelLimits()) == KernelLimits()


def test_time_out_cost_from_the_recorded_reasons():
    public = time_limit_reason(10, "f__public", "`f` did not return")
    later = "ungradable: time limit: `f` did not return in cell `f__public`; not run"
    assert time_out_seconds("", {"f__public": public, "f__hidden": later}) == 10.0
    assert time_out_seconds("", {"g__public": "CheckFailed: wrong"}) == 0.0
    wall = f"exceeded the time limit of {KernelLimits(wall_seconds=150).wall_text()}"
    assert time_out_seconds(wall, {"f__public": public}) == 150.0


@pytest.mark.slow
def test_a_looping_student_costs_one_cell_limit_and_the_run_says_so(tmp_path):
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    course = scratch_course(tmp_path / "course", ROOT, [A])

    def cli(*args):
        out = course_cli(*args, cwd=course.root)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout

    cli("release", A)
    release = course.release_dir / A / f"{A}.ipynb"
    answers = solution_answers(course.source_dir / A / f"{A}.ipynb")
    inbox = tmp_path / "inbox"
    write_submission(inbox, "honest", A, student_notebook(release, answers))
    loops = dict(answers, alibi_bias__answer=LOOP)
    write_submission(inbox, "loops", A, student_notebook(release, loops))
    cli("collect", str(inbox), "--assignment", A)
    out = cli("autograde", A, "--jobs", "1", "--no-progress")
    limit = CELL_TIME_LIMIT[A]
    cells = _code_cells(release)
    print(out)
    assert (
        f"wall time {limit * cells + START_SECONDS:g} s per submission ({limit} s per "
        f"cell x {cells} code cells + {START_SECONDS} s to start and save)"
    ) in out
    assert f"time-outs cost {limit:g} s of grading time (1 submissions)" in out
    report = cli("report", A)
    assert f"Time-outs cost {limit:g} s of grading time" in report
    with (course.root / "reports" / A / "grades.csv").open() as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert float(rows["honest"]["timeout_seconds"]) == 0.0
    assert float(rows["loops"]["timeout_seconds"]) == limit  # one wait, not two
    assert "not run again" in rows["loops"]["failed_checks"]
