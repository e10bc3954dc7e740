"""``course report all``: every student across every released assignment, and the
files Canvas and Moodle import.

Writes into ``reports/all/`` (or another folder):

* ``grades.csv``: one row per student in the gradebook, and for every assignment in
  it (released assignments, in nbgrader's order: due date, then name) the score,
  the raw score, the late penalty and a status (``graded``, ``ungradable``, ``no
  submission``, ``not graded yet``); then the total, the maximum, the percentage
  and the cells that still need a manual grade (``assignment/cell``). The numbers
  are those of ``nbgrader export``: a submission scores ``max(0, raw score - late
  penalty)``, a student without one scores 0, and a cell awaiting a hand grade
  counts as 0 until it is graded (the same rule as ``course report ASSIGNMENT``).
* ``canvas.csv``: Canvas's gradebook import layout, from the Canvas Instructor
  Guide, "How do I import grades in the Gradebook?"
  (https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807),
  as Canvas's importer reads it (``GradebookImporter`` in
  ``app/models/gradebook_importer.rb`` of instructure/canvas-lms): the header
  ``Student, ID, SIS User ID, SIS Login ID, Section`` followed by one column per
  assignment; a second row whose first cell is ``Points Possible`` and which holds
  each assignment's maximum; then one row per student. Canvas finds the student by
  ``ID`` (its numeric user id: nbgrader's ``lms_user_id`` when that is a number),
  else by ``SIS User ID``
  or ``SIS Login ID`` (nbgrader keeps neither: left empty), else by the name in
  ``Student`` (its sortable form, "Last, First"). An assignment column is matched
  to the Canvas assignment of the same title, or creates one with the points of
  the second row. No other column is written: Canvas would take any column it does
  not know (a total, say) for a new assignment.
* ``moodle.csv``: Moodle's CSV grade import, MoodleDocs "Grade import"
  (https://docs.moodle.org/en/Grade_import): "the import file format is the same as
  the corresponding export format", so the user columns are those of Moodle's grade
  export with the default ``grade_export_userprofilefields`` (``First name, Last
  name, ID number, Institution, Department, Email address``), followed by one
  column per assignment. On import choose "Map from" ``Email address`` and "Map
  to" ``Email address`` (or ``ID number`` to ``ID number``), and map each
  assignment column to its grade item or to "New grade item". Moodle
  (``gradeimport_csv_load_data`` in ``grade/import/csv/classes/load_data.php``)
  skips a row whose identifier is empty, and stops the whole import at an
  identifier it does not know. ``ID number`` holds nbgrader's ``lms_user_id``.

Both import files hold the scores of ``grades.csv`` (points, not percentages),
written as plain decimals, UTF-8, quoted where a field needs it (RFC 4180, Python's
``csv`` module), so that names with commas or quotes survive.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course
from .errors import CourseError
from .gradebook import read_status
from .report import NEEDS_MANUAL

__all__ = [
    "CANVAS_COLUMNS",
    "MOODLE_COLUMNS",
    "AssignmentResult",
    "StudentInfo",
    "TermReport",
    "format_term_report",
    "points_text",
    "term_report",
]

# the student columns of each LMS's import file (see the module docstring)
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_POINTS_ROW = "Points Possible"
MOODLE_COLUMNS = (
    "First name",
    "Last name",
    "ID number",
    "Institution",
    "Department",
    "Email address",
)

GRADED, UNGRADABLE = "graded", "ungradable"
NO_SUBMISSION, NOT_GRADED_YET = "no submission", "not graded yet"


@dataclass
class StudentInfo:
    """A student as the gradebook knows them."""

    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_user_id: str = ""

    @property
    def canvas_id(self) -> str:
        """``lms_user_id`` when it is a number (Canvas's user ids are), else empty:
        Canvas reads ``ID`` with Ruby's ``to_i``, which turns an LTI id such as
        ``535fa085-...`` into the number 535, another student's id."""
        return self.lms_user_id if self.lms_user_id.isdigit() else ""

    @property
    def sortable_name(self) -> str:
        """Canvas's sortable name, ``Last, First``; the part there is, or the id."""
        parts = [p for p in (self.last_name, self.first_name) if p]
        return ", ".join(parts) if parts else self.id


@dataclass
class AssignmentResult:
    """One student's outcome on one assignment, as ``nbgrader export`` counts it."""

    status: str
    score: float = 0.0
    raw_score: float = 0.0
    late_penalty: float = 0.0
    pending: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass
class TermReport:
    """What :func:`term_report` found and wrote."""

    assignments: list[tuple[str, float]]  # (assignment, max score)
    students: list[StudentInfo]
    results: dict[tuple[str, str], AssignmentResult]  # (student, assignment)
    files: dict[str, Path] = field(default_factory=dict)

    def total(self, student: str) -> float:
        return sum(self.results[student, a].score for a, _ in self.assignments)

    @property
    def max_total(self) -> float:
        return sum(points for _, points in self.assignments)

    def pending(self, student: str) -> list[str]:
        """``assignment/cell`` of every cell of ``student`` awaiting a hand grade."""
        return [
            f"{a}/{cell}"
            for a, _ in self.assignments
            for cell in self.results[student, a].pending
        ]


def term_report(course: Course, out_dir: Path | None = None) -> TermReport:
    """Write ``grades.csv``, ``canvas.csv`` and ``moodle.csv`` of every released
    assignment; see the module docstring."""
    with course.gradebook(create=False) as gb:
        assignments = [(a.name, float(a.max_score)) for a in gb.assignments]
        if not assignments:
            raise CourseError(
                "no assignment in the gradebook yet; release one first "
                "(course release all)"
            )
        students = [_student_info(s) for s in gb.students]
        students.sort(key=lambda s: s.id)
        results = {}
        for name, _ in assignments:
            status = read_status(gb, name)
            collected = course.submissions(name)
            for s in students:
                results[s.id, name] = _result(gb, name, s.id, status, collected)
    report = TermReport(assignments, students, results)
    out = Path(out_dir) if out_dir else course.root / "reports" / "all"
    out.mkdir(parents=True, exist_ok=True)
    report.files["grades"] = _write(out / "grades.csv", _grade_rows(report))
    report.files["canvas"] = _write(out / "canvas.csv", _canvas_rows(report))
    report.files["moodle"] = _write(out / "moodle.csv", _moodle_rows(report))
    return report


def _student_info(student) -> StudentInfo:
    return StudentInfo(
        id=str(student.id),
        first_name=student.first_name or "",
        last_name=student.last_name or "",
        email=student.email or "",
        lms_user_id=str(student.lms_user_id or ""),
    )


def _awaits_manual_grade(grade) -> bool:
    """The rule of ``course report ASSIGNMENT``: no manual score yet, and nbgrader
    flags the cell or has no automatic score for it."""
    return grade.manual_score is None and (
        bool(grade.needs_manual_grade) or grade.auto_score is None
    )


def _result(gb, assignment, student, status, collected) -> AssignmentResult:
    """One student's :class:`AssignmentResult` on ``assignment``."""
    from nbgrader.api import MissingEntry

    from .late import awaiting_submission

    try:
        sub = gb.find_submission(assignment, student)
    except MissingEntry:
        sub = None
    if sub is None or awaiting_submission(sub):  # (an extension only: course extend)
        if student in collected:
            return AssignmentResult(
                NOT_GRADED_YET,
                reason=f"collected, not autograded yet: course autograde {assignment}",
            )
        return AssignmentResult(NO_SUBMISSION, reason=NO_SUBMISSION)
    raw = float(sub.score)
    penalty = float(sub.late_submission_penalty or 0.0)
    pending = [
        grade.name
        for snb in sub.notebooks
        for grade in snb.grades
        if _awaits_manual_grade(grade)
    ]
    st = status.get(student)
    return AssignmentResult(
        st.status if st else GRADED,
        score=max(0.0, raw - penalty),  # nbgrader's CsvExportPlugin
        raw_score=raw,
        late_penalty=penalty,
        pending=sorted(pending),
        reason=st.reason if st else "",
    )


def points_text(value: float) -> str:
    """Points as a plain decimal for an LMS: ``3``, ``2.5``, ``0.3333`` (at most
    four decimals, no exponent, no trailing zeros)."""
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _grade_rows(report: TermReport) -> list[list[str]]:
    header = ["student_id", "last_name", "first_name", "email", "lms_user_id"]
    for a, _ in report.assignments:
        header += [a, f"{a}/raw_score", f"{a}/late_penalty", f"{a}/status"]
    header += ["total", "max_total", "percent", "needs_manual_grade"]
    rows = [header]
    for s in report.students:
        row = [s.id, s.last_name, s.first_name, s.email, s.lms_user_id]
        for a, _ in report.assignments:
            r = report.results[s.id, a]
            row += [repr(r.score), repr(r.raw_score), repr(r.late_penalty), r.status]
        total = report.total(s.id)
        percent = 100.0 * total / report.max_total if report.max_total else 0.0
        row += [
            repr(total),
            repr(report.max_total),
            f"{percent:.1f}",
            " ".join(report.pending(s.id)),
        ]
        rows.append(row)
    return rows


def _canvas_rows(report: TermReport) -> list[list[str]]:
    names = [a for a, _ in report.assignments]
    blanks = [""] * (len(CANVAS_COLUMNS) - 1)
    rows = [
        [*CANVAS_COLUMNS, *names],
        [CANVAS_POINTS_ROW, *blanks, *(points_text(p) for _, p in report.assignments)],
    ]
    for s in report.students:
        scores = [points_text(report.results[s.id, a].score) for a in names]
        rows.append([s.sortable_name, s.canvas_id, "", "", "", *scores])
    return rows


def _moodle_rows(report: TermReport) -> list[list[str]]:
    names = [a for a, _ in report.assignments]
    rows = [[*MOODLE_COLUMNS, *names]]
    for s in report.students:
        scores = [points_text(report.results[s.id, a].score) for a in names]
        user = [s.first_name, s.last_name, s.lms_user_id, "", "", s.email]
        rows.append([*user, *scores])
    return rows


def _write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    return path


# --- the terminal table ---------------------------------------------------------------

_MARKS = {
    "L": "late penalty subtracted",
    "M": f"{NEEDS_MANUAL} (score so far)",
    "U": "could not be graded (0)",
    "?": "collected, not autograded yet (0)",
    "-": "no submission (0)",
}


def _short_names(names: list[str]) -> list[str]:
    """``ex05`` for ``ex05_alibi`` where the prefix is unique, else the full id."""
    prefixes = [n.split("_", 1)[0] for n in names]
    return [
        p if prefixes.count(p) == 1 else n for p, n in zip(prefixes, names, strict=True)
    ]


def _cell_text(r: AssignmentResult) -> str:
    if r.status == NO_SUBMISSION:
        return "-"
    if r.status == NOT_GRADED_YET:
        return "?"
    marks = "U" if r.status == UNGRADABLE else ""
    marks += "L" if r.late_penalty > 0 else ""
    marks += "M" if r.pending else ""
    return f"{r.score:g}{marks}"


def _table(report: TermReport) -> list[str]:
    names = [a for a, _ in report.assignments]
    heads = [*_short_names(names), "total"]
    first = max([len("student"), *(len(s.id) for s in report.students)])
    rows = [
        ["max", *(f"{p:g}" for _, p in report.assignments), f"{report.max_total:g}"]
    ]
    for s in report.students:
        cells = [_cell_text(report.results[s.id, a]) for a in names]
        rows.append([s.id, *cells, f"{report.total(s.id):g}"])
    widths = [max(len(h), *(len(r[i + 1]) for r in rows)) for i, h in enumerate(heads)]
    line = (
        "  "
        + "student".ljust(first)
        + "".join(f"  {h:>{w}}" for h, w in zip(heads, widths, strict=True))
    )
    lines = [line]
    for r in rows:
        cells = "".join(f"  {c:>{w}}" for c, w in zip(r[1:], widths, strict=True))
        lines.append("  " + r[0].ljust(first) + cells)
    return lines


def _details(report: TermReport) -> list[str]:
    """The lists under the table: late penalties, pending manual grades, ungradable
    submissions, missing ones."""
    sections: dict[str, list[str]] = {
        "Late (nbgrader's late-submission penalty subtracted):": [],
        f"{NEEDS_MANUAL.capitalize()} (counted as 0 so far, here and in the import "
        "files; grade it in the formgrader and run this again):": [],
        "Could not be graded (scored 0):": [],
        "Collected but not autograded yet (scored 0 until then):": [],
    }
    late, manual, ungradable, waiting = sections.values()
    missing: dict[str, list[str]] = {a: [] for a, _ in report.assignments}
    for s in report.students:
        for a, _ in report.assignments:
            r = report.results[s.id, a]
            if r.late_penalty > 0:
                late.append(
                    f"  {s.id}, {a}: {r.raw_score:g} - penalty {r.late_penalty:g} "
                    f"= {r.score:g}"
                )
            if r.pending:
                manual.append(f"  {s.id}, {a}: {' '.join(r.pending)}")
            if r.status == UNGRADABLE:
                ungradable.append(f"  {s.id}, {a}: {r.reason}")
            if r.status == NOT_GRADED_YET:
                waiting.append(f"  {s.id}, {a}: {r.reason}")
            if r.status == NO_SUBMISSION:
                missing[a].append(s.id)
    lines = []
    for title, entries in sections.items():
        if entries:
            lines += ["", title, *entries]
    if any(missing.values()):
        lines += ["", "No submission (scored 0):"]
        lines += [f"  {a}: {', '.join(ids)}" for a, ids in missing.items() if ids]
    return lines


def _identity_warnings(report: TermReport) -> list[str]:
    """Students an LMS cannot match without help."""
    canvas = [
        s.id
        for s in report.students
        if not s.canvas_id and not (s.first_name or s.last_name)
    ]
    moodle = [s.id for s in report.students if not s.email and not s.lms_user_id]
    lines = []
    if canvas:
        lines.append(
            "Canvas can match these students only by hand (no numeric lms_user_id "
            f"and no name in the gradebook): {', '.join(canvas)}"
        )
    if moodle:
        lines.append(
            "Moodle skips these students' rows (no email and no lms_user_id in the "
            f"gradebook): {', '.join(moodle)}"
        )
    return [""] + lines if lines else []


def format_term_report(report: TermReport) -> str:
    """The text ``course report all`` prints."""
    names = [a for a, _ in report.assignments]
    lines = [
        f"{len(report.students)} students, {len(names)} assignments, max total "
        f"{report.max_total:g} (totals as nbgrader export: after late penalties, "
        "0 without a submission)",
        "",
        *_table(report),
        "",
        *(f"  {mark}  {text}" for mark, text in _MARKS.items()),
    ]
    lines += _details(report)
    lines += _identity_warnings(report)
    labels = {
        "grades": "every student, every assignment",
        "canvas": "Canvas: Grades > Import",
        "moodle": "Moodle: Grades > Import > CSV file; map Email address or ID number",
    }
    lines += [""] + [
        f"wrote {path}  ({labels[key]})" for key, path in report.files.items()
    ]
    return "\n".join(lines)
