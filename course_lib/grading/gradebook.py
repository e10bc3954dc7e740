"""Gradebook helpers on top of ``nbgrader.api.Gradebook``.

* :func:`copy_assignment` copies an assignment's definition (notebooks, graded cells,
  locked source cells) from one gradebook to another: each grading worker gets a
  private SQLite gradebook, so parallel workers never write to the same database.
* :func:`read_submission` and :func:`merge_submission` move one student's autograde
  results from a private gradebook into the course gradebook, as nbgrader's own
  ``SaveAutoGrades`` would have written them.
* :func:`record_ungradable` gives a submission that could not be graded a score of
  zero on every cell.
* A table of our own, ``course_autograde_status``, in the same database records for
  every submission whether it was graded, why not, its fingerprint (so a re-run skips
  unchanged work) and its wall time.
* Another, ``course_judgements``, records why each failed test cell failed (the known
  mistake that matched, or ``unrecognised`` with an example, ...): what the grading
  tool judged outside the student's kernel
  (:class:`~course_lib.grading.notebooks.integrity.Judgement`), for ``course report``.
"""

from __future__ import annotations

import datetime as dt
import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

__all__ = [
    "JUDGEMENT_FIELDS",
    "JUDGEMENT_TABLE",
    "STATUS_TABLE",
    "StatusRow",
    "copy_assignment",
    "merge_submission",
    "read_judgements",
    "read_status",
    "late_policy_parts",
    "read_submission",
    "record_ungradable",
    "write_judgements",
    "write_status",
]

# nbgrader's add_submission builds related rows before adding them to the session;
# SQLAlchemy 2 warns on each autoflush in between, and the rows are added right after.
warnings.filterwarnings(
    "ignore", message=".*not in session, add operation along", category=sa.exc.SAWarning
)

STATUS_TABLE = "course_autograde_status"
_metadata = sa.MetaData()
_status = sa.Table(
    STATUS_TABLE,
    _metadata,
    sa.Column("assignment", sa.String(128), primary_key=True),
    sa.Column("student", sa.String(128), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("score", sa.Float, nullable=False, default=0.0),
    sa.Column("max_score", sa.Float, nullable=False, default=0.0),
    sa.Column("fingerprint", sa.String(64), nullable=False, default=""),
    sa.Column("wall_seconds", sa.Float, nullable=False, default=0.0),
    sa.Column("failures", sa.Text, nullable=False, default="{}"),
    sa.Column("graded_at", sa.String(40), nullable=False, default=""),
)


JUDGEMENT_TABLE = "course_judgements"
_judgements = sa.Table(
    JUDGEMENT_TABLE,
    _metadata,
    sa.Column("assignment", sa.String(128), primary_key=True),
    sa.Column("student", sa.String(128), primary_key=True),
    sa.Column("notebook", sa.String(128), primary_key=True),
    sa.Column("grade_id", sa.String(128), primary_key=True),
    sa.Column("function", sa.String(128), nullable=False, default=""),
    sa.Column("kind", sa.String(32), nullable=False, default=""),
    sa.Column("mistake", sa.String(256), nullable=False, default=""),
    sa.Column("explanation", sa.Text, nullable=False, default=""),
    sa.Column("example", sa.Text, nullable=False, default=""),
)
# what course_judgements holds of each failed cell, beside assignment and student
JUDGEMENT_FIELDS = (
    "notebook",
    "grade_id",
    "function",
    "kind",
    "mistake",
    "explanation",
    "example",
)


@dataclass
class StatusRow:
    """One submission's outcome in ``course_autograde_status``.

    ``status`` is ``"graded"`` or ``"ungradable"``; ``reason`` says why a submission
    could not be graded; ``failures`` maps a test cell's grade id to the first line
    of its error (why points were lost).
    """

    assignment: str
    student: str
    status: str
    reason: str = ""
    score: float = 0.0
    max_score: float = 0.0
    fingerprint: str = ""
    wall_seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)
    graded_at: str = ""


def _ensure_tables(gb) -> None:
    _metadata.create_all(gb.engine, checkfirst=True)


def read_status(gb, assignment: str) -> dict[str, StatusRow]:
    """student -> :class:`StatusRow` for every recorded submission of ``assignment``."""
    _ensure_tables(gb)
    rows = gb.db.execute(
        sa.select(_status).where(_status.c.assignment == assignment)
    ).mappings()
    out = {}
    for row in rows:
        values = dict(row)
        values["failures"] = json.loads(values["failures"] or "{}")
        out[row["student"]] = StatusRow(**values)
    gb.db.commit()
    return out


def write_status(gb, row: StatusRow) -> None:
    """Insert or replace one submission's status row."""
    _ensure_tables(gb)
    values = dict(row.__dict__)
    values["failures"] = json.dumps(row.failures, sort_keys=True)
    values["graded_at"] = row.graded_at or dt.datetime.now(dt.UTC).isoformat(
        timespec="seconds"
    )
    gb.db.execute(
        _status.delete().where(
            (_status.c.assignment == row.assignment)
            & (_status.c.student == row.student)
        )
    )
    gb.db.execute(_status.insert().values(**values))
    gb.db.commit()


def write_judgements(
    gb, assignment: str, student: str, rows: list[dict[str, str]]
) -> None:
    """Replace the judgements of one submission (``rows``: the keys of
    :data:`JUDGEMENT_FIELDS`; none for a submission that passed everything or
    could not be graded)."""
    _ensure_tables(gb)
    gb.db.execute(
        _judgements.delete().where(
            (_judgements.c.assignment == assignment)
            & (_judgements.c.student == student)
        )
    )
    for row in rows:
        values = {f: str(row.get(f) or "") for f in JUDGEMENT_FIELDS}
        gb.db.execute(
            _judgements.insert().values(
                assignment=assignment, student=student, **values
            )
        )
    gb.db.commit()


def read_judgements(gb, assignment: str) -> list[dict[str, str]]:
    """Every recorded judgement of ``assignment``: dicts with ``student`` and the
    keys of :data:`JUDGEMENT_FIELDS`, by student, notebook and cell."""
    _ensure_tables(gb)
    rows = gb.db.execute(
        sa.select(_judgements)
        .where(_judgements.c.assignment == assignment)
        .order_by(_judgements.c.student, _judgements.c.notebook, _judgements.c.grade_id)
    ).mappings()
    out = [{k: v for k, v in dict(r).items() if k != "assignment"} for r in rows]
    gb.db.commit()
    return out


def copy_assignment(src, dst, assignment: str) -> None:
    """Copy ``assignment``'s definition from gradebook ``src`` into ``dst``: what
    ``nbgrader autograde`` needs to restore locked cells and score test cells."""
    a = src.find_assignment(assignment)
    dst.update_or_create_assignment(a.name, duedate=a.duedate)
    for nb in a.notebooks:
        dst.update_or_create_notebook(nb.name, a.name, kernelspec=nb.kernelspec)
        for cell in nb.grade_cells:
            dst.update_or_create_grade_cell(
                cell.name,
                nb.name,
                a.name,
                max_score=cell.max_score,
                cell_type=cell.cell_type,
            )
        for cell in nb.solution_cells:
            dst.update_or_create_solution_cell(cell.name, nb.name, a.name)
        for cell in nb.task_cells:
            dst.update_or_create_task_cell(
                cell.name,
                nb.name,
                a.name,
                max_score=cell.max_score,
                cell_type=cell.cell_type,
            )
        for cell in nb.source_cells:
            dst.update_or_create_source_cell(
                cell.name,
                nb.name,
                a.name,
                cell_type=cell.cell_type,
                locked=cell.locked,
                source=cell.source,
                checksum=cell.checksum,
            )


def assignment_fingerprint_parts(gb, assignment: str) -> list[str]:
    """What the grading of ``assignment`` depends on in the gradebook: every graded
    cell's points and every locked source cell's checksum."""
    a = gb.find_assignment(assignment)
    parts = []
    for nb in a.notebooks:
        parts += [f"{nb.name}/grade/{c.name}/{c.max_score}" for c in nb.grade_cells]
        parts += [f"{nb.name}/task/{c.name}/{c.max_score}" for c in nb.task_cells]
        parts += [f"{nb.name}/source/{c.name}/{c.checksum}" for c in nb.source_cells]
    return sorted(parts)


def late_policy_parts(gb, assignment: str, config) -> list[str]:
    """What nbgrader's late penalty of ``assignment`` depends on, besides each
    submission's timestamp: the due date in the gradebook, every student's extension,
    and the late-submission settings of the configuration: the sections of
    ``AssignLatePenalties`` and of every class its plugin is built from
    (``LateSubmissionPlugin``, ``PercentPerDay``, ...: see
    :func:`.late.policy_sections`)."""
    from .late import policy_sections

    a = gb.find_assignment(assignment)
    parts = [f"duedate/{a.duedate.isoformat() if a.duedate else None}"]
    for sub in gb.assignment_submissions(assignment):
        if sub.extension is not None:
            parts.append(f"extension/{sub.student_id}/{sub.extension.total_seconds()}")
    for section in policy_sections(config):
        values = config[section] if section in config else {}
        parts += [f"{section}.{k}={values[k]!r}" for k in sorted(values)]
    return sorted(parts)


def _grade_key(grade) -> str:
    return f"{grade.cell.type}:{grade.name}"


def read_submission(gb, assignment: str, student: str) -> dict[str, Any]:
    """One student's autograde results from a gradebook, as plain data."""
    sub = gb.find_submission(assignment, student)
    notebooks = {}
    for nb in sub.notebooks:
        notebooks[nb.name] = {
            "late_submission_penalty": nb.late_submission_penalty,
            "grades": {
                _grade_key(g): {"auto_score": g.auto_score, "max_score": g.max_score}
                for g in nb.grades
            },
            "comments": {
                f"{c.cell.type}:{c.name}": c.auto_comment for c in nb.comments
            },
        }
    timestamp = sub.timestamp.isoformat() if sub.timestamp else None
    return {"timestamp": timestamp, "notebooks": notebooks}


def _submission(gb, assignment: str, student: str, timestamp: str | None):
    gb.update_or_create_student(student)
    if timestamp:
        return gb.update_or_create_submission(assignment, student, timestamp=timestamp)
    return gb.update_or_create_submission(assignment, student)


def merge_submission(gb, assignment: str, student: str, result: dict[str, Any]) -> None:
    """Write results from :func:`read_submission` into ``gb``, the way nbgrader's
    ``SaveAutoGrades`` does: a cell already graded by hand keeps its manual score and
    is flagged for review."""
    _submission(gb, assignment, student, result.get("timestamp"))
    for nb_name, nb_result in result["notebooks"].items():
        snb = gb.find_submission_notebook(nb_name, assignment, student)
        for grade in snb.grades:
            entry = nb_result["grades"].get(_grade_key(grade))
            auto = None if entry is None else entry["auto_score"]
            grade.auto_score = auto
            grade.needs_manual_grade = grade.manual_score is not None or auto is None
        for comment in snb.comments:
            key = f"{comment.cell.type}:{comment.name}"
            comment.auto_comment = nb_result["comments"].get(key)
        snb.late_submission_penalty = nb_result.get("late_submission_penalty")
    gb.db.commit()


def record_ungradable(gb, assignment: str, student: str, timestamp: str | None) -> None:
    """Give every cell of the submission an automatic score of zero (what nbgrader
    does for a missing notebook), so the student appears with 0 in every export."""
    sub = _submission(gb, assignment, student, timestamp)
    for snb in sub.notebooks:
        for grade in snb.grades:
            grade.auto_score = 0.0
            grade.needs_manual_grade = grade.manual_score is not None
        for comment in snb.comments:
            comment.auto_comment = None
        snb.late_submission_penalty = None
    gb.db.commit()


def submission_scores(gb, assignment: str, student: str) -> tuple[float, float]:
    """(score, max score) of one submission as nbgrader computes them."""
    sub = gb.find_submission(assignment, student)
    return float(sub.score), float(sub.max_score)
