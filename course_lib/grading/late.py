"""Late work: a student's extension, and a penalty of a percentage per started day,
both on nbgrader's own mechanism, so that ``nbgrader export`` counts them as
``course report`` does.

How nbgrader penalises late work (nbgrader 0.9.6, ``nbgrader/api.py`` and
``nbgrader/preprocessors/latesubmissions.py``):

* ``SubmittedAssignment.extension`` (an interval) moves one student's due date:
  ``SubmittedAssignment.duedate`` is the assignment's due date plus the extension,
  and ``total_seconds_late`` is ``max(0, timestamp - that due date)`` in seconds.
  The extension lives on the submission row; ``Gradebook.grant_extension`` needs
  that row to exist. A student who asks before handing anything in has no row yet:
  :func:`grant_extension` then creates one with no timestamp and no scores (what
  ``Gradebook.update_or_create_submission`` makes), which ``course autograde``
  fills in when the work arrives, keeping the extension. Until then the row is a
  placeholder (:func:`awaiting_submission`): the course's reports count it as "no
  submission", and ``nbgrader export`` gives it 0 points, as it does a student
  without a row.
* At autograding, the preprocessor ``AssignLatePenalties`` takes every notebook
  of a late submission in turn, calls the plugin named by
  ``c.AssignLatePenalties.plugin_class`` (default ``LateSubmissionPlugin``, with
  ``penalty_method`` ``"none"`` or ``"zero"``) with that *notebook's* score, and
  stores the returned points, clamped to ``[0, notebook score]``, in
  ``SubmittedNotebook.late_submission_penalty``. The submission's penalty is the
  sum over its notebooks, and ``nbgrader export`` writes
  ``max(0, score - penalty)``. A percentage of each notebook's score therefore sums
  to the same percentage of the whole assignment, however many notebooks it has.
* The penalty is a number of points fixed when the plugin runs: a hand grade
  entered afterwards (formgrader) is not penalised until the plugin runs again.
  ``course autograde`` runs it after merging each graded submission into the course
  gradebook (:func:`apply_penalties`), on the score there, hand grades included, as
  ``nbgrader autograde`` does on its gradebook; ``course extend`` runs it for the
  student whose due date it moved. ``course report`` lists a submission whose stored
  penalty is no longer what the plugin gives on its current score
  (:func:`stale_penalties`).

:class:`PercentPerDay` is the plugin most syllabi describe: ``percent_per_day``
(default 10) of the score for every *started* day late, counted from the first
second after the (extended) due date, so 1 second late and 24 hours late both cost
one day, 24 h and 1 s two days; at most ``max_percent`` (default 100). A day is
86 400 seconds of elapsed time (nbgrader's timestamps and due dates are UTC), not a
calendar day. In ``nbgrader_config.py``::

    c.AssignLatePenalties.plugin_class = "course_lib.grading.late.PercentPerDay"
    c.PercentPerDay.percent_per_day = 10.0
    c.PercentPerDay.max_percent = 100.0
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import math
import warnings

import sqlalchemy as sa
from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float, TraitError, validate

from .errors import CourseError

__all__ = [
    "DAY_SECONDS",
    "ExtensionResult",
    "PenaltyChange",
    "PercentPerDay",
    "StudentLateness",
    "apply_penalties",
    "awaiting_submission",
    "configured_plugin",
    "format_duration",
    "format_extensions",
    "format_grant",
    "grant_extension",
    "list_extensions",
    "lms_disagreements",
    "notebook_penalty",
    "policy_sections",
    "stale_penalties",
]

DAY_SECONDS = 86400.0


class PercentPerDay(LateSubmissionPlugin):
    """``percent_per_day`` % of the notebook's score per started day late, at most
    ``max_percent`` % (see the module docstring). ``penalty_method``, inherited
    from ``LateSubmissionPlugin``, is not used."""

    percent_per_day = Float(
        10.0, help="Percent of the score taken for every started day late."
    ).tag(config=True)
    max_percent = Float(
        100.0, help="The most, in percent of the score, that lateness can cost."
    ).tag(config=True)

    @validate("percent_per_day")
    def _valid_per_day(self, proposal):
        value = proposal["value"]
        if not 0.0 <= value <= 100.0:
            raise TraitError(
                f"PercentPerDay.percent_per_day must be between 0 and 100, got {value}"
            )
        return value

    @validate("max_percent")
    def _valid_max(self, proposal):
        value = proposal["value"]
        if not 0.0 <= value <= 100.0:
            raise TraitError(
                f"PercentPerDay.max_percent must be between 0 and 100, got {value}"
            )
        return value

    def percent(self, total_seconds_late: float) -> float:
        """The percentage taken for a submission ``total_seconds_late`` late."""
        if total_seconds_late <= 0:
            return 0.0
        days = math.ceil(total_seconds_late / DAY_SECONDS)
        return min(self.max_percent, self.percent_per_day * days)

    def late_submission_penalty(
        self, student_id: str, score: float, total_seconds_late: float
    ) -> float:
        """Points taken from a notebook that scored ``score``."""
        return score * self.percent(total_seconds_late) / 100.0


# --------------------------------------------------------------------------------------
# the configured plugin, as nbgrader's AssignLatePenalties runs it


def configured_plugin(config):
    """The late-submission plugin nbgrader's ``AssignLatePenalties`` builds from
    ``config`` (its ``plugin_class``, configured by the same sections). A plugin
    class that cannot be imported is a :class:`CourseError`."""
    from nbgrader.preprocessors import AssignLatePenalties

    try:
        pre = AssignLatePenalties(config=config)
        pre.init_plugin()
    except (ImportError, TraitError) as exc:
        raise CourseError(
            f"the late-submission plugin of nbgrader_config.py cannot be used "
            f"(c.AssignLatePenalties.plugin_class and its settings): {exc}"
        ) from None
    return pre.plugin_inst


def policy_sections(config) -> list[str]:
    """The configuration sections the late penalty depends on: ``AssignLatePenalties``
    and every configurable class the plugin is built from (``LateSubmissionPlugin``,
    ``PercentPerDay``, a plugin of the course's own), for autograde's change check;
    a plugin that cannot be built is a :class:`CourseError`, before anything is
    graded."""
    from traitlets.config import Configurable

    plugin = type(configured_plugin(config))
    sections = {"AssignLatePenalties", "LateSubmissionPlugin"} | {
        c.__name__
        for c in plugin.mro()
        if isinstance(c, type) and issubclass(c, Configurable) and c is not Configurable
    }
    return sorted(sections)


def notebook_penalty(
    plugin, student: str, score: float, seconds_late: float
) -> float | None:
    """What ``AssignLatePenalties`` stores for one notebook that scored ``score``
    in a submission ``seconds_late`` late: ``None`` when it is on time or the plugin
    gives none, else the plugin's points clamped to ``[0, score]``."""
    if seconds_late <= 0:
        return None
    penalty = plugin.late_submission_penalty(student, score, seconds_late)
    if penalty is None:
        return None
    return min(max(0.0, float(penalty)), float(score))


def awaiting_submission(sub) -> bool:
    """Whether a gradebook submission row is a placeholder that only carries an
    extension: no timestamp, and no cell with an automatic or a manual score (a
    graded submission, even one that could not be run, has automatic scores)."""
    if sub.timestamp is not None:
        return False
    return all(
        g.auto_score is None and g.manual_score is None
        for nb in sub.notebooks
        for g in nb.grades
    )


@dataclasses.dataclass
class PenaltyChange:
    """A submission whose stored penalty differs from the plugin's on its current
    score: ``stored`` and ``rule`` in points (summed over its notebooks)."""

    student: str
    stored: float
    rule: float
    seconds_late: float


def _penalties(gb, assignment: str, config, students=None):
    """(submission, [(notebook, stored, rule)]) of every real submission."""
    plugin = configured_plugin(config)
    for sub in gb.assignment_submissions(assignment):
        if students is not None and sub.student_id not in students:
            continue
        if awaiting_submission(sub):
            continue
        late = float(sub.total_seconds_late)
        yield (
            sub,
            [
                (
                    nb,
                    nb.late_submission_penalty,
                    notebook_penalty(plugin, sub.student_id, float(nb.score), late),
                )
                for nb in sub.notebooks
            ],
        )


# stored penalties and the rule's agree to rounding: both are the same arithmetic
# on the same scores, stored as a double (SQLite) or at worst a single-precision
# float, whose relative error is below 1e-7 of the notebook's points
_TOLERANCE = 1e-6


def _differs(stored, rule, points: float) -> bool:
    return abs((stored or 0.0) - (rule or 0.0)) > _TOLERANCE * max(1.0, points)


def stale_penalties(gb, assignment: str, config) -> list[PenaltyChange]:
    """The submissions whose stored late penalty is not what the configured plugin
    gives on their current score (a hand grade entered since, or a changed due
    date, extension or setting not graded again yet), by student."""
    out = []
    for sub, rows in _penalties(gb, assignment, config):
        if any(_differs(s, r, float(nb.max_score)) for nb, s, r in rows):
            out.append(
                PenaltyChange(
                    sub.student_id,
                    sum(s or 0.0 for _, s, _ in rows),
                    sum(r or 0.0 for _, _, r in rows),
                    float(sub.total_seconds_late),
                )
            )
    return sorted(out, key=lambda c: c.student)


def apply_penalties(
    gb, assignment: str, config, students: list[str] | None = None
) -> list[PenaltyChange]:
    """Store, for every notebook of the submissions of ``students`` (default: all),
    the penalty the configured plugin gives on its current score, as
    ``AssignLatePenalties`` does; the submissions whose penalty changed."""
    changes = []
    for sub, rows in _penalties(gb, assignment, config, students):
        stored = sum(s or 0.0 for _, s, _ in rows)
        for nb, _, rule in rows:
            nb.late_submission_penalty = rule
        rule_total = sum(r or 0.0 for _, _, r in rows)
        if _differs(stored, rule_total, float(sub.max_score)):
            changes.append(
                PenaltyChange(
                    sub.student_id, stored, rule_total, float(sub.total_seconds_late)
                )
            )
    gb.db.commit()
    return changes


def lms_disagreements(gb, assignment: str, sources: dict) -> list[tuple[str, str]]:
    """``(student, what disagrees)`` for every submission whose Canvas file carried
    the ``_LATE`` flag while its timestamp is not after the student's due date
    (with the extension), or the reverse. ``sources``: student ->
    ``roster.LmsSource`` (what ``course collect`` recorded). Canvas judged against
    its own due date and overrides; the timestamp is the file's time in the
    download, so either may be the wrong one: the instructor checks."""
    a = gb.find_assignment(assignment)
    if a.duedate is None:
        return []
    out = []
    for sub in gb.assignment_submissions(assignment):
        source = sources.get(sub.student_id)
        if source is None or source.lms != "canvas" or sub.timestamp is None:
            continue
        late = sub.total_seconds_late > 0
        if late == bool(source.late):
            continue
        due = f"the due date {_utc(sub.duedate)}"
        if sub.extension is not None:
            due += f" (with a {format_duration(sub.extension)} extension)"
        when = f"its time {_utc(sub.timestamp)}"
        if source.late:
            text = f"Canvas marked {source.path} late, but {when} is not after {due}"
        else:
            text = (
                f"{when} is {format_duration(sub.total_seconds_late)} after {due}, "
                f"but Canvas did not mark {source.path} late"
            )
        out.append((sub.student_id, text))
    return sorted(out)


# --------------------------------------------------------------------------------------
# course extend


@dataclasses.dataclass
class StudentLateness:
    """One student's due date and lateness on an assignment."""

    student: str
    extension: dt.timedelta | None
    duedate: dt.datetime  # with the extension
    timestamp: dt.datetime | None = None  # None: nothing submitted yet
    seconds_late: float = 0.0
    penalty: float = 0.0
    collected: bool = False  # in submitted/ (maybe not autograded yet)


@dataclasses.dataclass
class ExtensionResult:
    """What :func:`grant_extension` recorded."""

    assignment: str
    duedate: dt.datetime  # the assignment's
    before: StudentLateness
    after: StudentLateness
    changes: list[PenaltyChange] = dataclasses.field(default_factory=list)
    created: bool = False  # a placeholder row was made (nothing submitted yet)


def _lateness(sub, collected=()) -> StudentLateness:
    placeholder = awaiting_submission(sub)
    return StudentLateness(
        student=sub.student_id,
        extension=sub.extension,
        duedate=sub.duedate,
        timestamp=None if placeholder else sub.timestamp,
        seconds_late=0.0 if placeholder else float(sub.total_seconds_late),
        penalty=0.0 if placeholder else float(sub.late_submission_penalty or 0.0),
        collected=sub.student_id in collected,
    )


def _check_student(gb, student: str) -> None:
    from nbgrader.api import MissingEntry

    try:
        gb.find_student(student)
    except MissingEntry:
        known = [s.id for s in gb.students]
        close = difflib.get_close_matches(student, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise CourseError(
            f"unknown student {student!r}{hint}: not in the gradebook; students "
            "are added by course collect or course roster"
        ) from None


def _extension(duedate, days, hours, until) -> dt.timedelta | None:
    """The extension asked for: ``days`` + ``hours``, or up to ``until``; ``None``
    (no amount at all) removes it."""
    from nbgrader.utils import parse_utc

    if until is not None:
        if days or hours:
            raise CourseError("give either --until or --days/--hours, not both")
        try:
            moved = parse_utc(until)
        except (ValueError, OverflowError) as exc:
            raise CourseError(
                f"--until: not a date and time: {until!r} ({exc})"
            ) from None
        if moved <= duedate:
            raise CourseError(
                f"--until {until} is not after the due date "
                f"{_utc(duedate)}: an extension can only move it later"
            )
        return moved - duedate
    for name, value in (("--days", days), ("--hours", hours)):
        if value is not None and (value < 0 or not math.isfinite(value)):
            raise CourseError(f"{name} must be a positive number, got {value:g}")
    total = dt.timedelta(days=days or 0.0, hours=hours or 0.0)
    return total if total > dt.timedelta(0) else None


def grant_extension(
    course,
    student: str,
    assignment: str,
    *,
    days: float | None = None,
    hours: float | None = None,
    until: str | None = None,
) -> ExtensionResult:
    """Give ``student`` an extension on ``assignment``: ``days`` and/or ``hours``
    after the due date, or up to ``until`` (a date and time, UTC unless it names a
    zone, read as nbgrader reads due dates). It replaces any earlier extension, as
    nbgrader's ``grant_extension`` does; no amount (or zero) removes it. The stored
    late penalty of a graded submission is computed again at once."""
    with course.gradebook(create=False, assignment=assignment) as gb:
        assignment = course.resolve_released(gb, assignment)
        a = gb.find_assignment(assignment)
        if a.duedate is None:
            raise CourseError(
                f"{assignment} has no due date, so there is nothing to extend; set "
                f'one first: nbgrader db assignment add {assignment} --duedate="'
                f'2026-11-20 12:00:00 UTC"'
            )
        _check_student(gb, student)
        extension = _extension(a.duedate, days, hours, until)
        created = student not in {s.student_id for s in a.submissions}
        with warnings.catch_warnings():
            # nbgrader builds the new row's notebooks before adding them to the
            # session; SQLAlchemy warns at each autoflush in between
            warnings.simplefilter("ignore", sa.exc.SAWarning)
            sub = gb.update_or_create_submission(assignment, student)
        before = _lateness(sub, course.submissions(assignment))
        if extension is None and awaiting_submission(sub):
            # no extension left on a row that only carried one: no row at all
            gb.remove_submission(assignment, student)
            after = dataclasses.replace(before, extension=None, duedate=a.duedate)
            return ExtensionResult(assignment, a.duedate, before, after)
        sub.extension = extension
        gb.db.commit()
        changes = apply_penalties(gb, assignment, course.config, [student])
        after = _lateness(
            gb.find_submission(assignment, student), course.submissions(assignment)
        )
        return ExtensionResult(assignment, a.duedate, before, after, changes, created)


def list_extensions(course, assignment: str) -> tuple[str, dt.datetime | None, list]:
    """(assignment, its due date, [:class:`StudentLateness`]) of every student with
    an extension, by student."""
    with course.gradebook(create=False, assignment=assignment) as gb:
        assignment = course.resolve_released(gb, assignment)
        a = gb.find_assignment(assignment)
        collected = course.submissions(assignment)
        rows = [
            _lateness(s, collected)
            for s in gb.assignment_submissions(assignment)
            if s.extension is not None
        ]
        return assignment, a.duedate, sorted(rows, key=lambda r: r.student)


def _utc(moment: dt.datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def format_duration(delta: dt.timedelta | float | None) -> str:
    """``2 d``, ``1 d 6 h``, ``3 h 30 min``, ``45 s``: an extension or a lateness."""
    if delta is None:
        return "none"
    seconds = delta.total_seconds() if isinstance(delta, dt.timedelta) else delta
    s = int(round(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else ""]
    parts += [f"{minutes} min" if minutes else "", f"{s} s" if s else ""]
    return " ".join(p for p in parts if p) or "0 s"


def _status(row: StudentLateness) -> str:
    if row.timestamp is None:
        if row.collected:
            return "collected, not autograded yet"
        return "nothing submitted yet"
    when = f"submitted {_utc(row.timestamp)}"
    if row.seconds_late > 0:
        return f"{when}, {format_duration(row.seconds_late)} late"
    return f"{when}, on time"


def format_grant(result: ExtensionResult) -> str:
    """What ``course extend STUDENT ASSIGNMENT`` prints."""
    b, a = result.before, result.after
    if a.extension is None:
        head = f"{result.assignment}: {a.student} has no extension now"
    else:
        head = (
            f"{result.assignment}: {a.student} has an extension of "
            f"{format_duration(a.extension)}"
        )
    lines = [
        f"{head} (was: {format_duration(b.extension)})",
        f"  due date {_utc(result.duedate)}, {a.student}'s: {_utc(a.duedate)}",
        f"  {_status(a)}",
    ]
    if result.created:
        lines.append(
            "  nbgrader keeps an extension on the submission: the gradebook now has "
            f"one for {a.student} with no grades yet, which course autograde fills in"
        )
    elif a.timestamp is not None:
        lines.append(f"  late penalty: {b.penalty:g} -> {a.penalty:g} points")
    return "\n".join(lines)


def format_extensions(assignment: str, duedate, rows: list[StudentLateness]) -> str:
    """What ``course extend --list ASSIGNMENT`` prints."""
    if duedate is None:
        return f"{assignment}: no due date, so no extensions"
    lines = [
        f"{assignment}: due {_utc(duedate)}; "
        f"{len(rows)} extension{'s' if len(rows) != 1 else ''}"
    ]
    width = max([len(r.student) for r in rows] + [7])
    for r in rows:
        text = f"  {r.student:<{width}}  +{format_duration(r.extension):<10} "
        text += f"due {_utc(r.duedate)}  {_status(r)}"
        if r.penalty:
            text += f", penalty {r.penalty:g}"
        lines.append(text)
    return "\n".join(lines)
