"""Per-cell time limits: derived from each solution's measured cost and from the
slowest honest slow answer, and a time-out is recorded as "ungradable: time limit",
never as a wrong answer.

The table in ``nbgrader_config.py`` (``SOLUTION_COST``, ``SLOWEST_HONEST``,
``CELL_TIME_LIMIT``) is measured by ``python -m benchmarks.solution_cost --variants
--json benchmarks/honest_costs.json``, which runs the solution and every honest
variant of ``benchmarks/honest_variants.py`` cold in the sandboxed grading kernel and
records each variant's cost. These tests check the recorded numbers, never a live
timing (the machine is shared): the table covers every assignment folder of
``solutions/`` and every variant of every graded function (a new one fails here
until it is measured), agrees with the recorded file, and every recorded cost fits
its assignment's limit with the margin. The last tests grade a submission whose
function sleeps past a tiny limit, and build the benchmark's classes.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from benchmarks import honest_variants as hv
from benchmarks.solution_cost import (
    FLOOR_SECONDS,
    MARGIN,
    TRAINING_FLOOR_SECONDS,
    TRAINS,
    assignments,
    derived_limit,
)
from course_lib.grading.grade import cell_time_limit, time_limit_reason

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "honest_costs.json"


def _config() -> Config:
    return PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()


def _tables() -> dict:
    """nbgrader_config.py's module-level names (SLOWEST_HONEST has no trait yet)."""
    return runpy.run_path(str(ROOT / "nbgrader_config.py"),
                          init_globals={"get_config": Config})


def _record() -> dict:
    return json.loads(RECORD.read_text())


def test_the_table_covers_every_assignment():
    config = _config()
    limits = config.CourseTimeLimits.per_cell
    costs = config.CourseTimeLimits.solution_cost
    slowest = _tables()["SLOWEST_HONEST"]
    names = assignments(ROOT)
    assert names, "no assignment under solutions/"
    unmeasured = [a for a in names
                  if a not in costs or a not in limits or a not in slowest]
    assert not unmeasured, (
        f"no measured cost, slowest honest variant or time limit for {unmeasured} in "
        "nbgrader_config.py; run `python -m benchmarks.solution_cost --variants "
        "--json benchmarks/honest_costs.json " + " ".join(unmeasured) + "` and add "
        "them"
    )
    stale = sorted((set(costs) | set(limits) | set(slowest)) - set(names))
    assert not stale, f"nbgrader_config.py lists assignments that do not exist: {stale}"


def test_the_record_covers_every_variant():
    """benchmarks/honest_costs.json holds a cold cost for every honest variant of
    every graded function (a new function or variant fails here until measured),
    measured in the sandbox, with the machine's load beside it."""
    record = _record()
    assert record["sandbox"] is True
    assert len(record["load_average_start"]) == 3
    assert 0 <= record["cpu_busy_share"] <= 1
    for a in assignments(ROOT):
        assert a in record["assignments"], f"{a} was not measured"
        entry = record["assignments"][a]
        assert not entry["errors"], (a, entry["errors"])
        for f in hv.graded_functions(a, ROOT):
            measured = entry["functions"].get(f, {}).get("variants", {})
            missing = sorted(set(hv.VARIANTS[a][f]) - set(measured))
            assert not missing, f"{a}.{f}: variants not measured: {missing}"
            for v, r in measured.items():
                assert r["cell"] in (f"{f}__public", f"{f}__hidden"), (a, f, v, r)
                assert r["seconds"] > 0, (a, f, v, r)


@pytest.mark.parametrize("assignment", assignments(ROOT))
def test_each_limit_has_the_margin(assignment):
    config = _config()
    cost = float(config.CourseTimeLimits.solution_cost[assignment])
    seconds, variant = _tables()["SLOWEST_HONEST"][assignment]
    limit = config.CourseTimeLimits.per_cell[assignment]
    assert cost > 0, f"{assignment}: the measured cost must be a positive time"
    assert seconds > 0 and isinstance(variant, str)
    assert isinstance(limit, int) and limit >= MARGIN * max(cost, seconds), (
        f"{assignment}: limit {limit} s is less than {MARGIN:g}x its slowest cold "
        f"cell ({max(cost, seconds)} s)"
    )
    assert limit == derived_limit(max(cost, seconds), assignment)
    # what `course autograde` uses for this assignment
    assert cell_time_limit(config, assignment) == limit
    # plain `nbgrader autograde` has one limit: it must not cut off any assignment
    assert config.ExecutePreprocessor.timeout >= limit
    assert config.Execute.timeout >= limit


@pytest.mark.parametrize("assignment", assignments(ROOT))
def test_the_table_is_the_record(assignment):
    """SOLUTION_COST and SLOWEST_HONEST are the recorded numbers (to 0.01 s), and
    SLOWEST_HONEST names the variant that recorded them."""
    config = _config()
    entry = _record()["assignments"][assignment]
    cost = config.CourseTimeLimits.solution_cost[assignment]
    assert cost == pytest.approx(entry["solution"]["seconds"], abs=0.011)
    seconds, variant = _tables()["SLOWEST_HONEST"][assignment]
    rows = [
        (r["seconds"], f"{f}: {v}")
        for f, e in entry["functions"].items()
        if f in hv.graded_functions(assignment, ROOT)
        for v, r in e["variants"].items()
    ]
    assert max(rows) == (pytest.approx(seconds, abs=0.011), variant)


@pytest.mark.parametrize("assignment", assignments(ROOT))
def test_every_variant_fits_its_limit_with_the_margin(assignment):
    """Every recorded honest variant, and the solution's every cell, at MARGIN times
    its recorded cost, still fits the per-cell limit."""
    limit = _config().CourseTimeLimits.per_cell[assignment]
    entry = _record()["assignments"][assignment]
    for cell, secs in entry["solution"]["cells"].items():
        assert MARGIN * secs <= limit, (assignment, "solution", cell, secs, limit)
    for f, e in entry["functions"].items():
        for v, r in e["variants"].items():
            assert MARGIN * r["seconds"] <= limit, (assignment, f, v, r, limit)
    for run in entry["rounds"]:  # any cell of a variant notebook (imports too)
        assert MARGIN * run["seconds"] <= limit, (assignment, run, limit)


def test_an_infinite_loop_costs_seconds():
    """Issue 21: no assignment that trains nothing keeps a limit of minutes."""
    limits = _config().CourseTimeLimits.per_cell
    for a, limit in limits.items():
        most = 120 if a in TRAINS else 60
        assert limit < most, f"{a}: {limit} s per cell"


def test_lookup_falls_back_to_the_global_limit():
    config = Config()
    config.Execute.timeout = 77
    config.CourseTimeLimits.per_cell = {"ex05_alibi": 9}
    assert cell_time_limit(config, "ex05_alibi") == 9
    assert cell_time_limit(config, "ex99_other") == 77
    assert cell_time_limit(Config(), "ex05_alibi") is None


def test_derived_limit():
    # MARGIN times the cost, rounded up to a whole second, never under the floor
    assert MARGIN == 5.0 and FLOOR_SECONDS == 10 and TRAINING_FLOOR_SECONDS == 30
    assert derived_limit(0.0) == 10
    assert derived_limit(2.0) == 10
    assert derived_limit(2.01) == 11
    assert derived_limit(2.2) == 11  # 5 * 2.2 is 11.000000000000002 in binary
    assert derived_limit(100.0) == 500
    assert derived_limit(2.0, "ex10_lab") == 30
    assert derived_limit(6.1, "ex10_lab") == 31
    assert derived_limit(2.0, "ex05_alibi") == 10
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
    limit comes from the course's table (10 s here); the public alibi_bias cell is
    cut off by that limit, the hidden one is not run again, both are recorded as
    time limits, never wrong; alibi_slopes keeps its points."""
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
    # the public cell waits for the limit; the hidden one, which calls the same
    # function, is not run again (issue 21: no second wait on a hung function)
    assert outcome.failures["alibi_bias__public"] == (
        f"ungradable: time limit ({SLOW_LIMIT} s per cell, cell "
        "`alibi_bias__public`): `alibi_bias` did not return"
    )
    assert outcome.failures["alibi_bias__hidden"] == (
        "ungradable: time limit: `alibi_bias` did not return in cell "
        "`alibi_bias__public`; not run again"
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


def test_bench_timeouts_spreads_the_loops():
    """benchmarks/bench_timeouts.py: 10 % of a class loops, one in the middle of
    every ten (or the last of every ten, the worst case)."""
    from benchmarks.bench_timeouts import looping_students

    assert looping_students(20, 0.1) == [5, 15]
    assert looping_students(20, 0.1, "end") == [9, 19]
    loops = looping_students(200, 0.1)
    assert len(loops) == 20 and loops[:3] == [5, 15, 25]
    assert all(10 * k <= s < 10 * (k + 1) for k, s in enumerate(loops))
    assert looping_students(3, 0.1) == [1]
    assert looping_students(3, 0.1, "end") == [2]
    assert looping_students(10, 0.0) == []
    assert looping_students(4, 1.0) == [0, 1, 2, 3]
    assert looping_students(4, 1.0, "end") == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="share must lie in"):
        looping_students(10, 1.5)
    with pytest.raises(ValueError, match="placement must be"):
        looping_students(10, 0.1, "first")


@pytest.mark.slow
def test_bench_timeouts_runs_on_a_tiny_class(capsys):
    """The benchmark end to end on a class of two, one of whom loops, with a 5 s
    limit: both gradebooks hold the expected scores (the run raises otherwise) and
    the report gives both wall times and their ratio."""
    from benchmarks import bench_timeouts

    assert bench_timeouts.main(
        ["--submissions", "2", "--loop-share", "0.5", "--cell-limit", "5"]
    ) == 0
    out = capsys.readouterr().out
    assert "Per-cell limit for ex05_alibi: 5 s." in out
    assert "| 2 honest |" in out and "| 1 honest + 1 looping |" in out
    ratio = float(out.split("Ratio looping / honest: **", 1)[1].split("x**", 1)[0])
    # the looping submission waits out at least one 5 s limit the honest one does not
    assert ratio > 1.0
    # and course autograde says what that cost: one 5 s wait (its hidden cell calls
    # the function that hung in the public one: not run again)
    assert "time-outs cost 5 s of grading time" in out
