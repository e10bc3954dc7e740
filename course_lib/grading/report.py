"""``course report``: grades of one assignment as files an instructor can use.

Writes into ``reports/<assignment>/`` (or another folder):

* ``grades.csv``: one row per student in the gradebook, including students without a
  submission ("no submission", 0) and submissions that could not be graded (score 0,
  with the reason), with the score of every graded cell, the first error of each
  failed test, and the seconds its time-outs cost the run (``timeout_seconds``).
  Scores are those of ``nbgrader export``: ``raw_score`` minus the
  ``late_penalty`` that nbgrader's late-submission plugin gave (from the due date,
  the student's extension and the submission's timestamp), never below zero.
  ``extension_seconds`` is the student's extension (``course extend``); a student
  with an extension and nothing handed in yet is "no submission". The printed
  report lists the penalties that no longer match what the late-submission plugin
  gives on the current score (:func:`.late.stale_penalties`), and the students
  whose Canvas file carried the ``_LATE`` flag while the timestamp is not after
  their due date, or the reverse (:func:`.late.lms_disagreements`).
  A cell that awaits a hand grade reads "needs manual grade" (it is not a failure;
  the score so far counts it as 0, as nbgrader does); once graded by hand in the
  formgrader or through the nbgrader API, its manual score counts.
* ``pass_rates.csv``: for every graded cell (``<fn>__public``, ``<fn>__hidden``, ...)
  the share of the graded submissions that earned its full points, and how many
  still need a manual grade;
* ``histogram.png``: the distribution of total scores, submissions still awaiting a
  manual grade as a separate, hatched bar segment;
* ``mistakes.csv`` and ``mistakes.png``: why each failed test failed, as the graders
  judged it outside the students' kernels: the known mistakes, counted over the class
  (:mod:`course_lib.grading.mistakes`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course
from .grade import time_out_seconds
from .gradebook import read_judgements, read_status
from .mistakes import (
    MistakeCount,
    class_mistakes,
    format_mistakes,
    mistakes_chart,
    write_mistakes_csv,
)

__all__ = ["GradeReport", "report"]


@dataclass
class GradeReport:
    """What :func:`report` found and wrote."""

    assignment: str
    max_score: float
    rows: list[dict[str, object]]
    pass_rates: list[dict[str, object]]
    ungradable: list[tuple[str, str]]
    mistakes: list[MistakeCount] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    # late penalties no longer what the plugin gives on the current score
    stale_penalties: list = field(default_factory=list)
    # (student, what): Canvas's _LATE flag against the timestamp
    lms_disagreements: list[tuple[str, str]] = field(default_factory=list)


def _cell_order(gb, assignment: str) -> list[tuple[str, str, float]]:
    """(notebook, grade id, points) of every graded cell, in notebook order."""
    order = []
    for nb in gb.find_assignment(assignment).notebooks:
        points = {c.name: float(c.max_score) for c in nb.grade_cells}
        points.update({c.name: float(c.max_score) for c in nb.task_cells})
        position = {c.name: i for i, c in enumerate(nb.source_cells)}
        for name in sorted(points, key=lambda n: (position.get(n, 10**6), n)):
            order.append((nb.name, name, points[name]))
    return order


NEEDS_MANUAL = "needs manual grade"


def _cell_value(grade) -> float | str:
    """A grade's points as ``nbgrader export`` counts them (the manual score when
    there is one, else the automatic one), or :data:`NEEDS_MANUAL` for a cell that
    awaits a hand grade (nbgrader flags it and nobody has scored it yet)."""
    if grade.manual_score is None and (
        grade.needs_manual_grade or grade.auto_score is None
    ):
        return NEEDS_MANUAL
    return float(grade.score)


def report(course: Course, assignment: str, out_dir: Path | None = None) -> GradeReport:
    """Write the grade files of ``assignment``; see the module docstring."""
    from .late import lms_disagreements, stale_penalties
    from .roster import read_sources

    with course.gradebook(create=False, assignment=assignment) as gb:
        assignment = course.resolve_released(gb, assignment)
        a = gb.find_assignment(assignment)
        max_score = float(a.max_score)
        duedate = a.duedate.isoformat(sep=" ") if a.duedate else ""
        cells = _cell_order(gb, assignment)
        status = read_status(gb, assignment)
        judged = read_judgements(gb, assignment)
        collected = course.submissions(assignment)
        rows = [
            _finish(
                _student_row(gb, assignment, student, cells, status, collected)
                | {"duedate": duedate},
                max_score,
            )
            for student in sorted(s.id for s in gb.students)
        ]
        stale = stale_penalties(gb, assignment, course.config)
        disagree = lms_disagreements(gb, assignment, read_sources(gb, assignment))
    submitted = [r for r in rows if r["status"] in ("graded", "ungradable")]
    ungradable = [
        (str(r["student_id"]), str(r["reason"]))
        for r in submitted
        if r["status"] == "ungradable"
    ]
    pass_rates = _pass_rates(cells, submitted)
    graded = sum(r["status"] == "graded" for r in rows)
    functions = list(dict.fromkeys(n.rsplit("__", 1)[0] for _, n, _ in cells))
    mistakes = class_mistakes(judged, graded, functions)
    result = GradeReport(assignment, max_score, rows, pass_rates, ungradable, mistakes)
    result.stale_penalties, result.lms_disagreements = stale, disagree
    out = Path(out_dir) if out_dir else course.root / "reports" / assignment
    out.mkdir(parents=True, exist_ok=True)
    result.files["grades"] = _write_csv(
        out / "grades.csv",
        [*_GRADE_COLUMNS[:-1], *[n for _, n, _ in cells], _GRADE_COLUMNS[-1]],
        rows,
    )
    result.files["pass_rates"] = _write_csv(
        out / "pass_rates.csv", _PASS_RATE_COLUMNS, pass_rates
    )
    result.files["histogram"] = _histogram(
        out / "histogram.png",
        [float(r["score"]) for r in submitted if not r["needs_manual_grade"]],
        [float(r["score"]) for r in submitted if r["needs_manual_grade"]],
        max_score,
        assignment,
    )
    result.files["mistakes"] = write_mistakes_csv(out / "mistakes.csv", judged)
    result.files["mistakes_chart"] = mistakes_chart(
        out / "mistakes.png", mistakes, assignment
    )
    return result


# grades.csv: these columns, with one column per graded cell before the last
_GRADE_COLUMNS = (
    "student_id",
    "status",
    "timestamp",
    "duedate",
    "extension_seconds",
    "seconds_late",
    "raw_score",
    "late_penalty",
    "score",
    "max_score",
    "percent",
    "needs_manual_grade",
    "reason",
    "timeout_seconds",
    "failed_checks",
)
_PASS_RATE_COLUMNS = [
    "grade_id",
    "points",
    "passed",
    "graded",
    "needs_manual_grade",
    "submissions",
    "pass_rate",
]


def _student_row(gb, assignment, student, cells, status, collected) -> dict:
    """One student's row of grades.csv (without ``max_score`` and ``percent``)."""
    from nbgrader.api import MissingEntry

    from .late import awaiting_submission

    row: dict[str, object] = {"student_id": student}
    try:
        sub = gb.find_submission(assignment, student)
    except MissingEntry:
        sub = None
    row["extension_seconds"] = (
        sub.extension.total_seconds() if sub and sub.extension else 0.0
    )
    # a row that only carries an extension (course extend) is no submission yet
    if sub is None or awaiting_submission(sub):
        # what nbgrader export writes for a student without a submission; one
        # collected but not autograded yet says so
        waiting = student in collected
        row.update(
            status="not graded yet" if waiting else "no submission",
            raw_score=0.0,
            late_penalty=0.0,
            score=0.0,
            seconds_late=0.0,
            timestamp="",
            reason=(
                f"collected, not autograded yet: course autograde {assignment}"
                if waiting
                else "no submission"
            ),
            needs_manual_grade="",
            timeout_seconds=0.0,
            failed_checks="",
        )
        row.update({name: 0.0 for _, name, _ in cells})
        return row
    values: dict[str, float | str] = {}
    for snb in sub.notebooks:
        for grade in snb.grades:
            values[grade.name] = _cell_value(grade)
    pending = [n for _, n, _ in cells if values.get(n) == NEEDS_MANUAL]
    st = status.get(student)
    raw = float(sub.score)
    penalty = float(sub.late_submission_penalty or 0.0)
    failures = st.failures if st else {}
    row.update(
        status=st.status if st else "graded",
        timestamp=sub.timestamp.isoformat(sep=" ") if sub.timestamp else "",
        seconds_late=float(sub.total_seconds_late),
        raw_score=raw,
        late_penalty=penalty,
        # exactly nbgrader's CsvExportPlugin: max(0, score - penalty)
        score=max(0.0, raw - penalty),
        reason=st.reason if st else "",
        needs_manual_grade=" ".join(pending),
        timeout_seconds=time_out_seconds(st.reason if st else "", failures),
        failed_checks="; ".join(
            f"{k}: {v}" for k, v in sorted(failures.items()) if k not in pending
        ),
    )
    row.update({name: values.get(name, 0.0) for _, name, _ in cells})
    return row


def _pass_rates(cells, submitted: list[dict]) -> list[dict[str, object]]:
    """Per graded cell: how many of the judged submissions earned its points."""
    pass_rates = []
    for _, name, points in cells:
        judged = [r for r in submitted if r[name] != NEEDS_MANUAL]
        passed = sum(float(r[name]) >= points for r in judged)  # type: ignore[arg-type]
        pass_rates.append(
            {
                "grade_id": name,
                "points": points,
                "passed": passed,
                "graded": len(judged),
                "needs_manual_grade": len(submitted) - len(judged),
                "submissions": len(submitted),
                "pass_rate": round(passed / len(judged), 4) if judged else "",
            }
        )
    return pass_rates


def _finish(row: dict[str, object], max_score: float) -> dict[str, object]:
    row["max_score"] = max_score
    score = float(row["score"])  # type: ignore[arg-type]
    row["percent"] = round(100.0 * score / max_score, 1) if max_score else 0.0
    return row


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, object]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in columns})
    return path


def _histogram(
    path: Path,
    scores: list[float],
    pending: list[float],
    max_score: float,
    title: str,
) -> Path:
    """One bar per whole point; submissions still awaiting a manual grade are a
    separate (hatched) bar segment at their score so far."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    top = max(max_score, max(scores + pending, default=0.0))
    edges = np.arange(-0.5, np.floor(top) + 1.5, 1.0)  # one bar per whole point
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    ax.hist(
        [scores, pending],
        bins=edges,
        stacked=True,
        color=["#4c72b0", "#dd8452"],
        hatch=["", "//"],
        edgecolor="white",
        label=["graded", f"{NEEDS_MANUAL} (score so far)"],
    )
    ax.set_xlabel(f"score (out of {max_score:g})")
    ax.set_ylabel("submissions")
    total = len(scores) + len(pending)
    note = f", {len(pending)} awaiting a manual grade" if pending else ""
    ax.set_title(f"{title}: {total} submissions{note}")
    if pending:
        ax.legend(loc="upper left", fontsize="small")
    ax.set_xticks(np.arange(0, np.floor(top) + 1))
    ax.yaxis.get_major_locator().set_params(integer=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def format_report(result: GradeReport) -> str:
    """The text ``course report`` prints."""
    submitted = [r for r in result.rows if r["status"] in ("graded", "ungradable")]
    lines = [
        f"{result.assignment}: {len(result.rows)} students, {len(submitted)} "
        f"submissions, max score {result.max_score:g}",
        "",
        f"  {'grade id':<32} {'points':>6} {'passed':>9} {'rate':>7}  {'manual':>6}",
    ]
    for p in result.pass_rates:
        rate = p["pass_rate"]
        rate_text = f"{100 * rate:>6.1f}%" if rate != "" else f"{'-':>7}"
        manual = p["needs_manual_grade"]
        line = (
            f"  {p['grade_id']:<32} {p['points']:>6g} "
            f"{p['passed']:>4}/{p['graded']:<4} {rate_text}  "
            + (f"{manual} {NEEDS_MANUAL}" if manual else "")
        )
        lines.append(line.rstrip())
    graded = sum(r["status"] == "graded" for r in result.rows)
    if result.mistakes:
        lines += ["", *format_mistakes(result.mistakes, graded)]
    late = [r for r in submitted if float(r["seconds_late"]) > 0]  # type: ignore[arg-type]
    if late:
        lines += ["", "Late (nbgrader's late-submission penalty applied):"]
        lines += [
            f"  {r['student_id']}: {_duration(float(r['seconds_late']))} late, "  # type: ignore[arg-type]
            f"score {float(r['raw_score']):g} - penalty "  # type: ignore[arg-type]
            f"{float(r['late_penalty']):g} = {float(r['score']):g}" + _extension_note(r)  # type: ignore[arg-type]
            for r in late
        ]
    lines += _late_notes(result)
    pending = [r for r in submitted if r["needs_manual_grade"]]
    if pending:
        lines += ["", "Needs manual grade (formgrader, or the nbgrader API):"]
        lines += [f"  {r['student_id']}: {r['needs_manual_grade']}" for r in pending]
    timed_out = [
        r for r in submitted if str(r["reason"]).startswith("ungradable: time")
    ]
    if timed_out:
        lines += ["", "Cut off by the time limit (0 points, not judged wrong):"]
        lines += [f"  {r['student_id']}: {r['reason']}" for r in timed_out]
    waited = [float(r["timeout_seconds"]) for r in submitted]  # type: ignore[arg-type]
    if any(waited):
        lines += [
            "",
            f"Time-outs cost {sum(waited):g} s of grading time "
            f"({sum(w > 0 for w in waited)} submissions; per student: the "
            "timeout_seconds column).",
        ]
    if result.ungradable:
        lines += ["", "Could not be graded (scored 0):"]
        lines += [f"  {student}: {reason}" for student, reason in result.ungradable]
    missing = [r["student_id"] for r in result.rows if r["status"] == "no submission"]
    if missing:
        lines += ["", f"No submission (scored 0): {', '.join(map(str, missing))}"]
    waiting = [r["student_id"] for r in result.rows if r["status"] == "not graded yet"]
    if waiting:
        lines += [
            "",
            f"Collected but not autograded yet (scored 0 until then; run course "
            f"autograde {result.assignment}): {', '.join(map(str, waiting))}",
        ]
    lines += [""] + [f"wrote {path}" for path in result.files.values()]
    return "\n".join(lines)


def _extension_note(row: dict[str, object]) -> str:
    seconds = float(row.get("extension_seconds") or 0.0)  # type: ignore[arg-type]
    return f" (after a {_duration(seconds)} extension)" if seconds else ""


def _late_notes(result: GradeReport) -> list[str]:
    """The lists about late work beside the penalties: a penalty that no longer
    matches the current score, and Canvas's ``_LATE`` flag against the time."""
    lines = []
    if result.stale_penalties:
        lines += [
            "",
            "Late penalty out of date (a hand grade, due date, extension or setting "
            "changed since it was computed; course autograde "
            f"{result.assignment} --force --student ID computes it again):",
        ]
        lines += [
            f"  {c.student}: penalty {c.stored:g}, the rule now gives {c.rule:g}"
            for c in result.stale_penalties
        ]
    if result.lms_disagreements:
        lines += [
            "",
            "Canvas and the timestamp disagree (check the submission time in "
            "Canvas; course collect took the file's time in the download):",
        ]
        lines += [f"  {student}: {text}" for student, text in result.lms_disagreements]
    return lines


def _duration(seconds: float) -> str:
    """``3 d 4 h``, ``2 h 5 min``, ``1 d 1 s``: a lateness in words, every unit
    that is not zero (a day and a second late is two started days, not "1 d")."""
    from .late import format_duration

    return format_duration(seconds)
