"""Who the students are, as the LMS knows them: ``course roster`` and the LMS ids of
collected files.

Student ids
-----------
A student's id in the gradebook is the LMS's stable id, never a name, so that two
students with the same name stay two students:

* **Canvas**: the numeric user id (``ID`` in the gradebook export, and the third
  field of every file of *Download Submissions*, ``<name>[_LATE]_<user id>_
  <attachment id>_<file>``).
* **Moodle**: the email address. Moodle's grade export carries no user id (its user
  columns are ``First name, Last name, ID number, Institution, Department, Email
  address``; MoodleDocs "Grade export"), and the number in a submission download's
  folder, ``<full name>_<participant id>_assignsubmission_file_``, is the
  *participant id* of that one assignment: ``assign::get_uniqueid_for_user`` in
  ``mod/assign/locallib.php`` looks it up in the table ``assign_user_mapping``, keyed
  by assignment and user, so the same student has another number in every
  assignment. The bridge between the two is the assignment's *grading worksheet*
  (*Download grading worksheet*, from the offline grading worksheet feedback type),
  whose ``Identifier`` column is ``Participant <participant id>`` beside the
  ``Email address`` (the grading table's ``col_recordid`` in
  ``mod/assign/gradingtable.php`` writes ``get_string('hiddenuser', 'assign')``,
  "Participant ", before the same unique id). ``course roster worksheet.csv
  --assignment ex05`` records that mapping; without it, ``course collect`` finds a
  Moodle download's student on the roster by full name, and refuses a name that two
  roster students share.
* **Blackboard**: the username, which its download names already carry.

``course roster FILE`` reads a Canvas gradebook export, a Moodle grade export, a
Moodle grading worksheet, or a plain ``id,first_name,last_name,email[,lms_user_id]``
file, and adds or updates the students (names, emails, LMS ids). It lists every row
it could not read, with the line number and the reason.

Collected files
---------------
:class:`LmsSource` records, for every file ``course collect`` placed, the LMS it
came from, its path in the download (what the LMS named it) and the LMS's id in it
(table ``course_lms_sources``): the feedback archives give each file back under the
name the LMS matches, and late work is checked against Canvas's ``_LATE`` flag.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from .course import Course, valid_student_id
from .errors import CourseError

__all__ = [
    "LmsSource",
    "RosterReport",
    "RosterRow",
    "format_roster_report",
    "load_roster",
    "participant_students",
    "read_roster",
    "read_sources",
    "record_source",
]

SOURCE_TABLE = "course_lms_sources"
PARTICIPANT_TABLE = "course_lms_participants"
_metadata = sa.MetaData()
_sources = sa.Table(
    SOURCE_TABLE,
    _metadata,
    sa.Column("assignment", sa.String(128), primary_key=True),
    sa.Column("student", sa.String(128), primary_key=True),
    sa.Column("lms", sa.String(16), nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("lms_id", sa.String(128), nullable=False, default=""),
    sa.Column("late", sa.Boolean, nullable=False, default=False),
)
_participants = sa.Table(
    PARTICIPANT_TABLE,
    _metadata,
    sa.Column("assignment", sa.String(128), primary_key=True),
    sa.Column("participant", sa.String(32), primary_key=True),
    sa.Column("student", sa.String(128), nullable=False),
)


@dataclass(frozen=True)
class LmsSource:
    """Where a collected file came from."""

    lms: str  # "canvas", "moodle" or "blackboard"
    path: str  # the file's path inside the download, as the LMS named it
    lms_id: str  # Canvas user id, Moodle participant id, Blackboard username
    late: bool = False  # Canvas's _LATE flag


def _ensure(gb) -> None:
    _metadata.create_all(gb.engine, checkfirst=True)


def record_source(gb, assignment: str, student: str, source: LmsSource | None) -> None:
    """Record (or, with ``None``, forget) where ``student``'s placed file of
    ``assignment`` came from."""
    _ensure(gb)
    gb.db.execute(
        _sources.delete().where(
            (_sources.c.assignment == assignment) & (_sources.c.student == student)
        )
    )
    if source is not None:
        gb.db.execute(
            _sources.insert().values(
                assignment=assignment,
                student=student,
                lms=source.lms,
                path=source.path,
                lms_id=source.lms_id,
                late=source.late,
            )
        )
    gb.db.commit()


def read_sources(gb, assignment: str) -> dict[str, LmsSource]:
    """student -> :class:`LmsSource` of the file placed for ``assignment``."""
    _ensure(gb)
    rows = gb.db.execute(
        sa.select(_sources).where(_sources.c.assignment == assignment)
    ).mappings()
    out = {
        r["student"]: LmsSource(r["lms"], r["path"], r["lms_id"], bool(r["late"]))
        for r in rows
    }
    gb.db.commit()
    return out


def participant_students(gb, assignment: str) -> dict[str, str]:
    """Moodle participant id -> student id for ``assignment``, from its grading
    worksheet (``course roster WORKSHEET --assignment``)."""
    _ensure(gb)
    rows = gb.db.execute(
        sa.select(_participants).where(_participants.c.assignment == assignment)
    ).mappings()
    out = {r["participant"]: r["student"] for r in rows}
    gb.db.commit()
    return out


# --- reading an LMS's export ----------------------------------------------------------


@dataclass
class RosterRow:
    """One student as a roster file gives them; ``participant``: the Moodle
    participant id of a grading worksheet's row."""

    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_user_id: str = ""
    participant: str = ""
    line: int = 0


@dataclass
class RosterReport:
    """What :func:`read_roster` understood and :func:`load_roster` did."""

    kind: str  # "canvas", "moodle", "moodle-worksheet" or "plain"
    rows: list[RosterRow] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    mapped: list[tuple[str, str]] = field(default_factory=list)  # (participant, id)


# Canvas's gradebook export (Canvas Instructor Guide, "How do I export grades in the
# Gradebook?"): the columns Student, ID, SIS User ID, SIS Login ID, (Integration ID,)
# Section, then the assignments; rows such as "Points Possible" and, with manual
# posting, "Manual Posting" hold no student.
_CANVAS_META_ROWS = {"points possible", "manual posting", "read only"}
_PARTICIPANT = re.compile(r"^\D*?(\d+)$")  # "Participant 1234567", in any language


def _norm(header: str) -> str:
    return re.sub(r"\s+", " ", header.replace("\ufeff", "")).strip().lower()


def _kind(header: list[str]) -> str:
    cols = {_norm(h) for h in header}
    if {"student", "id"} <= cols and ("sis user id" in cols or "section" in cols):
        return "canvas"
    if {"identifier", "full name", "email address"} <= cols:
        return "moodle-worksheet"
    if {"first name", "last name", "email address"} <= cols:
        return "moodle"
    if "id" in cols and ({"first_name", "last_name"} <= cols or "email" in cols):
        return "plain"
    raise CourseError(
        "the roster's first line names none of the formats course roster reads: "
        "a Canvas gradebook export (Student, ID, SIS User ID, ...), a Moodle grade "
        "export (First name, Last name, ..., Email address), a Moodle grading "
        "worksheet (Identifier, Full name, Email address, ...) or a plain file "
        f"(id, first_name, last_name, email, lms_user_id); it has: {', '.join(header)}"
    )


def _split_full_name(full: str) -> tuple[str, str]:
    """Moodle's default full name is "First Last": the last word is the last name.
    (A site may order names otherwise; a grade export gives both fields.)"""
    parts = full.split()
    if len(parts) < 2:
        return "", full.strip()
    return " ".join(parts[:-1]), parts[-1]


def _moodle_id(email: str) -> str:
    return email.strip().lower()


def _row(kind: str, cell, line: int) -> tuple[RosterRow | None, str]:
    """One :class:`RosterRow` from a line, or ``None`` with the reason (an empty
    reason: a line that holds no student, skipped silently)."""
    if kind == "canvas":
        name, user = cell("student"), cell("id")
        if name.lower() in _CANVAS_META_ROWS or not (name or user):
            return None, ""
        if not user.isdigit():
            return None, f"{name!r}: Canvas's ID {user!r} is not a numeric user id"
        last, _, first = name.partition(", ")
        return RosterRow(user, first.strip(), last.strip(), "", user, line=line), ""
    if kind in ("moodle", "moodle-worksheet"):
        email = cell("email address")
        if kind == "moodle":
            first, last = cell("first name"), cell("last name")
            who = f"{first} {last}".strip()
        else:
            who = cell("full name")
            first, last = _split_full_name(who)
        if not email:
            return (
                None,
                f"{who or 'a row'}: no email address (the student id in Moodle)",
            )
        student = _moodle_id(email)
        if not valid_student_id(student):
            return None, f"{who}: {email!r} cannot be a student id"
        row = RosterRow(student, first, last, email, cell("id number"), line=line)
        if kind == "moodle-worksheet":
            m = _PARTICIPANT.match(cell("identifier"))
            if not m:
                return None, (
                    f"{who}: Identifier {cell('identifier')!r} is not "
                    "'Participant <number>'"
                )
            row.participant = m.group(1)
        return row, ""
    student = cell("id")
    if not student:
        return None, "no id"
    if not valid_student_id(student):
        return None, f"{student!r} is not a valid student id (no spaces or '/')"
    return (
        RosterRow(
            student,
            cell("first_name"),
            cell("last_name"),
            cell("email"),
            cell("lms_user_id"),
            line=line,
        ),
        "",
    )


def read_roster(path: str | Path) -> RosterReport:
    """The students of a roster file (see the module docstring); rows that cannot be
    read are listed in ``problems`` with their line number."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise CourseError(f"{path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise CourseError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); export "
            "it again as CSV (UTF-8)"
        ) from None
    sample = text[:4096]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    try:
        header = next(reader)
    except StopIteration:
        raise CourseError(f"{path} is empty") from None
    kind = _kind(header)
    index = {_norm(h): i for i, h in enumerate(header)}
    report = RosterReport(kind)
    seen: dict[str, int] = {}
    for line, values in enumerate(reader, start=2):
        if not any(v.strip() for v in values):
            continue

        def cell(name: str, values=values) -> str:
            i = index.get(name)
            return values[i].strip() if i is not None and i < len(values) else ""

        row, why = _row(kind, cell, line)
        if row is None:
            if why:
                report.problems.append((line, why))
            continue
        if row.id in seen:
            report.problems.append(
                (line, f"{row.id} appears again (first on line {seen[row.id]})")
            )
            continue
        seen[row.id] = line
        report.rows.append(row)
    return report


def load_roster(
    course: Course, path: str | Path, *, assignment: str | None = None
) -> RosterReport:
    """Add or update the students of a roster file in the gradebook; a Moodle
    grading worksheet also records its participant ids for ``assignment``."""
    report = read_roster(path)
    if report.kind == "moodle-worksheet" and assignment is None:
        raise CourseError(
            "a Moodle grading worksheet belongs to one assignment (its participant "
            "ids change from one assignment to the next): give --assignment"
        )
    with course.gradebook() as gb:
        if assignment is not None:
            known = [a.name for a in gb.assignments]
            assignment = course.resolve_assignment(
                assignment, known=known + course.source_assignments()
            )
        existing = {s.id: s for s in gb.students}
        for row in report.rows:
            old = existing.get(row.id)
            new = {
                "first_name": row.first_name,
                "last_name": row.last_name,
                "email": row.email,
                "lms_user_id": row.lms_user_id,
            }
            if old is not None:
                # a worksheet's full name never replaces the grade export's fields
                if report.kind == "moodle-worksheet" and (
                    old.first_name or old.last_name
                ):
                    new["first_name"], new["last_name"] = old.first_name, old.last_name
                new = {k: v or (getattr(old, k) or "") for k, v in new.items()}
                if all((getattr(old, k) or "") == v for k, v in new.items()):
                    report.unchanged.append(row.id)
                    continue
                report.updated.append(row.id)
            else:
                report.added.append(row.id)
            gb.update_or_create_student(
                row.id, **{k: v or None for k, v in new.items()}
            )
        if report.kind == "moodle-worksheet":
            _ensure(gb)
            for row in report.rows:
                gb.db.execute(
                    _participants.delete().where(
                        (_participants.c.assignment == assignment)
                        & (_participants.c.participant == row.participant)
                    )
                )
                gb.db.execute(
                    _participants.insert().values(
                        assignment=assignment,
                        participant=row.participant,
                        student=row.id,
                    )
                )
                report.mapped.append((row.participant, row.id))
            gb.db.commit()
    return report


def format_roster_report(report: RosterReport, path: str | Path) -> str:
    """What ``course roster`` prints."""
    labels = {
        "canvas": "a Canvas gradebook export",
        "moodle": "a Moodle grade export",
        "moodle-worksheet": "a Moodle grading worksheet",
        "plain": "a plain roster",
    }
    lines = [
        f"{path}: {labels[report.kind]}, {len(report.rows)} students: "
        f"{len(report.added)} added, {len(report.updated)} updated, "
        f"{len(report.unchanged)} unchanged"
    ]
    if report.mapped:
        lines.append(
            f"  {len(report.mapped)} Moodle participant ids recorded for the assignment"
        )
    if report.problems:
        lines.append(f"Not read ({len(report.problems)}):")
        lines += [f"  line {line}: {why}" for line, why in report.problems]
    return "\n".join(lines)
