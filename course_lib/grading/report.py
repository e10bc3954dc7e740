"""``course report``: grades of one assignment as files an instructor can use.

Writes into ``reports/<assignment>/`` (or another folder):

* ``grades.csv``: one row per student in the gradebook, including students without a
  submission and submissions that could not be graded (score 0, with the reason),
  with the score of every graded cell and the first error of each failed test;
* ``pass_rates.csv``: for every graded cell (``<fn>__public``, ``<fn>__hidden``, ...)
  the share of submissions that earned its full points;
* ``histogram.png``: the distribution of total scores.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course
from .gradebook import read_status

__all__ = ["GradeReport", "report"]


@dataclass
class GradeReport:
    """What :func:`report` found and wrote."""

    assignment: str
    max_score: float
    rows: list[dict[str, object]]
    pass_rates: list[dict[str, object]]
    ungradable: list[tuple[str, str]]
    files: dict[str, Path] = field(default_factory=dict)


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


def report(course: Course, assignment: str, out_dir: Path | None = None) -> GradeReport:
    """Write the grade files of ``assignment``; see the module docstring."""
    from nbgrader.api import MissingEntry

    with course.gradebook() as gb:
        known = [a.name for a in gb.assignments]
        assignment = course.resolve_assignment(
            assignment, known=known + course.source_assignments()
        )
        a = gb.find_assignment(assignment)
        max_score = float(a.max_score)
        cells = _cell_order(gb, assignment)
        status = read_status(gb, assignment)
        rows: list[dict[str, object]] = []
        for student in sorted(s.id for s in gb.students):
            row: dict[str, object] = {"student_id": student}
            try:
                sub = gb.find_submission(assignment, student)
            except MissingEntry:
                row.update(status="no submission", score=0.0, reason="no submission")
                row.update({name: 0.0 for _, name, _ in cells})
                row["failed_checks"] = ""
                rows.append(_finish(row, max_score))
                continue
            scores = {}
            for snb in sub.notebooks:
                for grade in snb.grades:
                    scores[grade.name] = float(grade.score)
            st = status.get(student)
            row.update(
                status=st.status if st else "graded",
                score=float(sub.score),
                reason=st.reason if st else "",
            )
            row.update({name: scores.get(name, 0.0) for _, name, _ in cells})
            failures = st.failures if st else {}
            row["failed_checks"] = "; ".join(
                f"{k}: {v}" for k, v in sorted(failures.items())
            )
            rows.append(_finish(row, max_score))
    submitted = [r for r in rows if r["status"] != "no submission"]
    pass_rates = []
    for _, name, points in cells:
        passed = sum(float(r[name]) >= points for r in submitted)
        pass_rates.append(
            {
                "grade_id": name,
                "points": points,
                "passed": passed,
                "submissions": len(submitted),
                "pass_rate": round(passed / len(submitted), 4) if submitted else 0.0,
            }
        )
    ungradable = [
        (str(r["student_id"]), str(r["reason"]))
        for r in submitted
        if r["status"] == "ungradable"
    ]
    result = GradeReport(assignment, max_score, rows, pass_rates, ungradable)
    out = Path(out_dir) if out_dir else course.root / "reports" / assignment
    out.mkdir(parents=True, exist_ok=True)
    columns = [
        "student_id",
        "status",
        "score",
        "max_score",
        "percent",
        "reason",
        *[name for _, name, _ in cells],
        "failed_checks",
    ]
    result.files["grades"] = _write_csv(out / "grades.csv", columns, rows)
    result.files["pass_rates"] = _write_csv(
        out / "pass_rates.csv",
        ["grade_id", "points", "passed", "submissions", "pass_rate"],
        pass_rates,
    )
    result.files["histogram"] = _histogram(
        out / "histogram.png",
        [float(r["score"]) for r in submitted],
        max_score,
        assignment,
    )
    return result


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


def _histogram(path: Path, scores: list[float], max_score: float, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    top = max(max_score, max(scores, default=0.0))
    edges = np.arange(-0.5, np.floor(top) + 1.5, 1.0)  # one bar per whole point
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    ax.hist(scores, bins=edges, color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"score (out of {max_score:g})")
    ax.set_ylabel("submissions")
    ax.set_title(f"{title}: {len(scores)} submissions")
    ax.set_xticks(np.arange(0, np.floor(top) + 1))
    ax.yaxis.get_major_locator().set_params(integer=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def format_report(result: GradeReport) -> str:
    """The text ``course report`` prints."""
    submitted = [r for r in result.rows if r["status"] != "no submission"]
    lines = [
        f"{result.assignment}: {len(result.rows)} students, {len(submitted)} "
        f"submissions, max score {result.max_score:g}",
        "",
        f"  {'grade id':<32} {'points':>6} {'passed':>8} {'rate':>7}",
    ]
    for p in result.pass_rates:
        lines.append(
            f"  {p['grade_id']:<32} {p['points']:>6g} "
            f"{p['passed']:>3}/{p['submissions']:<4} {100 * p['pass_rate']:>6.1f}%"
        )
    if result.ungradable:
        lines += ["", "Could not be graded (scored 0):"]
        lines += [f"  {student}: {reason}" for student, reason in result.ungradable]
    missing = [r["student_id"] for r in result.rows if r["status"] == "no submission"]
    if missing:
        lines += ["", f"No submission: {', '.join(map(str, missing))}"]
    lines += [""] + [f"wrote {path}" for path in result.files.values()]
    return "\n".join(lines)
