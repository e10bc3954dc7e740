"""Per-cell time limits: derived from each solution's measured cost, and a time-out is
recorded as "ungradable: time limit", never as a wrong answer.

The table in ``nbgrader_config.py`` (``SOLUTION_COST``, ``CELL_TIME_LIMIT``) is
measured by ``python -m benchmarks.solution_cost``; these tests check it covers every
assignment folder of ``solutions/`` (a new one fails here until it is measured) with
the margin the course promises, and grade a submission whose function sleeps past a
tiny limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from benchmarks.solution_cost import MARGIN, assignments, derived_limit
from course_lib.grading.grade import cell_time_limit, time_limit_reason

ROOT = Path(__file__).resolve().parent.parent


def _config() -> Config:
    return PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()


def test_the_table_covers_every_assignment():
    config = _config()
    limits = config.CourseTimeLimits.per_cell
    costs = config.CourseTimeLimits.solution_cost
    names = assignments(ROOT)
    assert names, "no assignment under solutions/"
    unmeasured = [a for a in names if a not in costs or a not in limits]
    assert not unmeasured, (
        f"no measured cost or time limit for {unmeasured} in nbgrader_config.py; run "
        "`python -m benchmarks.solution_cost " + " ".join(unmeasured) + "` and add them"
    )
    stale = sorted((set(costs) | set(limits)) - set(names))
    assert not stale, f"nbgrader_config.py lists assignments that do not exist: {stale}"


@pytest.mark.parametrize("assignment", assignments(ROOT))
def test_each_limit_has_the_margin(assignment):
    config = _config()
    cost = float(config.CourseTimeLimits.solution_cost[assignment])
    limit = config.CourseTimeLimits.per_cell[assignment]
    assert cost > 0, f"{assignment}: the measured cost must be a positive time"
    assert isinstance(limit, int) and limit >= MARGIN * cost, (
        f"{assignment}: limit {limit} s is less than {MARGIN:g}x its cold cost {cost} s"
    )
    assert limit >= derived_limit(cost)
    # what `course autograde` uses for this assignment
    assert cell_time_limit(config, assignment) == limit
    # plain `nbgrader autograde` has one limit: it must not cut off any assignment
    assert config.ExecutePreprocessor.timeout >= limit
    assert config.Execute.timeout >= limit


def test_lookup_falls_back_to_the_global_limit():
    config = Config()
    config.Execute.timeout = 77
    config.CourseTimeLimits.per_cell = {"ex05_alibi": 9}
    assert cell_time_limit(config, "ex05_alibi") == 9
    assert cell_time_limit(config, "ex99_other") == 77
    assert cell_time_limit(Config(), "ex05_alibi") is None


def test_derived_limit():
    # 5x rounded up to 30 s steps, never under the floor of 120 s
    assert derived_limit(0.0) == 120
    assert derived_limit(24.0) == 120
    assert derived_limit(24.1) == 150
    assert derived_limit(100.0) == 510
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="must be a number >= 0"):
            derived_limit(bad)


def test_reason_names_the_limit_and_the_cell():
    assert time_limit_reason(10, "alibi_bias__public") == (
        "ungradable: time limit (10 s per cell, cell `alibi_bias__public`)"
    )
    assert "wrong" not in time_limit_reason(None, "x")


SLOW_LIMIT = 10  # seconds per cell, for the test course only
SLOW_WRAPPER = """

_alibi_bias_itself = alibi_bias


def alibi_bias(*args, **kwargs):
    import time
    time.sleep(3600)  # far past any limit: the cell is cut off, never finishes
    return _alibi_bias_itself(*args, **kwargs)
"""


@pytest.mark.slow
def test_a_slow_cell_is_ungradable_by_time_limit_not_wrong(tmp_path):
    """ex05 with a correct alibi_slopes and a correct alibi_bias that sleeps: the
    limit comes from the course's table (10 s here); both alibi_bias test cells are
    recorded as cut off by that limit, alibi_slopes keeps its points."""
    import json

    from course_lib.grading.autograde import AutogradeOptions, autograde
    from course_lib.grading.collect import collect
    from course_lib.grading.course import Course
    from course_lib.grading.gradebook import read_status
    from course_lib.grading.release import release
    from course_lib.grading.report import format_report, report
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    a = "ex05_alibi"
    course = scratch_course(tmp_path / "course", ROOT, [a])
    config_file = course.root / "nbgrader_config.py"
    config_file.write_text(
        config_file.read_text()
        + "\nc.CourseTimeLimits.per_cell = "
        + f"{{**CELL_TIME_LIMIT, {a!r}: {SLOW_LIMIT}}}\n"
    )
    course = Course(course.root)
    release(course, a)
    src = course.source_dir / a / f"{a}.ipynb"
    answers = solution_answers(src)
    answers["alibi_bias__answer"] += SLOW_WRAPPER
    rel = course.release_dir / a / f"{a}.ipynb"
    write_submission(tmp_path / "inbox", "slow", a, student_notebook(rel, answers))
    assert not collect(course, tmp_path / "inbox", a).not_placed

    summary = autograde(course, a, AutogradeOptions(jobs=1, progress=False))
    (outcome,) = summary.outcomes
    assert outcome.status == "graded", outcome
    slow_cells = ["alibi_bias__public", "alibi_bias__hidden"]
    for gid in slow_cells:
        assert outcome.failures[gid] == (
            f"ungradable: time limit ({SLOW_LIMIT} s per cell, cell `{gid}`)"
        )
    assert outcome.reason == "; ".join(outcome.failures[g] for g in slow_cells)
    assert "wrong" not in outcome.reason
    # the other function's cells are judged as usual: full points
    cells = json.loads(src.read_text())["cells"]
    graded = [
        c["metadata"]["nbgrader"]
        for c in cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
    ]
    points = {m["grade_id"]: float(m["points"]) for m in graded}
    assert set(outcome.failures) == set(slow_cells)
    assert outcome.max_score == sum(points.values())
    assert outcome.score == sum(p for g, p in points.items() if g not in slow_cells)
    # the reason is what the gradebook keeps, and what `course report` shows
    with course.gradebook() as gb:
        row = read_status(gb, a)["slow"]
    assert row.reason == outcome.reason
    result = report(course, a, tmp_path / "report")
    (csv_row,) = [r for r in result.rows if r["student_id"] == "slow"]
    assert csv_row["reason"] == outcome.reason
    text = format_report(result)
    heading = "Cut off by the time limit (0 points, not judged wrong):"
    assert f"{heading}\n  slow: {outcome.reason}" in text


def test_ex10_hidden_training_runs_on_one_thread(monkeypatch):
    """The hidden grade of ex10 trains a tiny model: on one thread, so a busy machine
    cannot make it wait on a descheduled second thread (issue 10's 102 s), and the
    caller's thread count comes back afterwards."""
    import torch

    import course_lib.experiments as experiments
    from course_lib.checks.ex10_lab import grade_log_distance_bias

    seen = []
    train_run = experiments.train_run

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return train_run(*args, **kwargs)

    monkeypatch.setattr(experiments, "train_run", spy)

    def log_distance_bias(n_heads, seq_len):
        h = torch.arange(1, n_heads + 1, dtype=torch.float32)  # (H,)
        slopes = (2.0 ** (-8.0 * h / n_heads))[:, None, None]  # (H, 1, 1): m_h
        pos = torch.arange(seq_len)
        back = pos[:, None] - pos[None, :]  # (S, S): i - j
        bias = -slopes * torch.log1p(back.clamp(min=0).float())  # (H, S, S)
        return bias.masked_fill(back < 0, float("-inf"))

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grade_log_distance_bias(log_distance_bias)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
