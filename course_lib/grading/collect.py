"""``course collect``: put downloaded submissions into nbgrader's layout.

Submissions arrive as a folder or a zip file (an LMS download, a shared drive). Each
notebook is placed at ``submitted/<student>/<assignment>/<assignment>.ipynb`` with a
``timestamp.txt`` (the file's modification time), the layout ``nbgrader autograde``
reads. The student id comes from the path:

==========================================================  ==========================
``alice_ex05_alibi.ipynb``                                   ``<student>_<assignment>``
``alice_ex05.ipynb``                                         the short id ``exNN``
``alice/ex05_alibi.ipynb``                                   ``<student>/<assignment>``
``alice/ex05_alibi/ex05_alibi.ipynb``                        nbgrader's own layout
``ex05_alibi/alice.ipynb``                                   ``<assignment>/<student>``
``smithdave_12345_678901_ex05_alibi.ipynb``                  Canvas: ``smithdave``
``smithdave_LATE_12345_678901_ex05_alibi-1.ipynb``           Canvas, late, resubmitted
``Dave Smith_123456_assignsubmission_file_/ex05_alibi.ipynb``  Moodle: ``dave_smith``
``ex05_alibi_dsmith_attempt_2026-11-20-10-15-00_x.ipynb``    Blackboard: ``dsmith``
==========================================================  ==========================

The LMS formats: Canvas names each file ``<name>[_LATE]_<user id>_<submission id>_
<uploaded file name>`` (``<name>`` is the student's sortable name in lower case without
spaces; a re-upload gets ``-1``, ``-2`` before ``.ipynb``). Moodle's "download all
submissions" puts each student's files in a folder ``<full name>_<participant id>_
assignsubmission_file_`` (or, flattened, prefixes the file name with that); the id made
from the full name is lower case with ``_`` between the words. Blackboard names
each file ``<assignment>_<username>_attempt_<yyyy-mm-dd-hh-mm-ss>_<file name>``, and
adds a ``.txt`` receipt per attempt. To take another part as the id (Canvas's numeric
user id, Moodle's participant id), give ``pattern``: a regular expression with a
group ``(?P<student>...)``, matched against the whole path inside the folder or zip,
or else against the file name alone.

Every file is accounted for: placed, unchanged (the same file was placed before), or
not placed with the reason: not a notebook, a system or hidden file (``.DS_Store``,
``__MACOSX/``, ``.ipynb_checkpoints/``), an unsafe path (absolute, or with ``..``,
which is never extracted), a symbolic link (never followed), a name that gives no
student id or names another assignment, an invalid student id, or an older file of a
student who has a newer one. Every placed student is added to the gradebook.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .course import Course, valid_student_id
from .errors import CourseError

__all__ = ["CollectReport", "collect", "name_to_id", "student_from_path"]

_COPY_SUFFIX = re.compile(r" ?\(\d+\)$")  # "alice_ex05_alibi (1).ipynb" from browsers


@dataclass
class CollectReport:
    """What ``collect`` did: placed ``(student, source, destination)`` triples,
    unchanged ones, and files it could not place with the reason."""

    assignment: str
    placed: list[tuple[str, str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    not_placed: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Candidate:
    name: str  # path inside the folder or zip, for messages
    student: str
    mtime: float
    read: object  # () -> bytes


def _system_file(parts: tuple[str, ...]) -> str | None:
    """Why a path is a system or hidden file (no submission), or ``None``."""
    for p in parts:
        if p == "__MACOSX":
            return "macOS archive metadata (__MACOSX)"
        if p == ".ipynb_checkpoints":
            return "a Jupyter checkpoint copy (.ipynb_checkpoints)"
        if p.startswith("."):
            return f"a hidden file ({p})"
    return None


_CANVAS = re.compile(
    r"^(?P<student>[a-z0-9]+)(?:_late)?_(?P<user>\d+)_(?P<sub>\d+)_(?P<file>.+)$",
    re.IGNORECASE,
)
_MOODLE = re.compile(
    r"^(?P<name>.+?)_(?P<participant>\d+)_assignsubmission_(?:file|onlinetext)_"
    r"(?P<file>.*)$"
)
_BLACKBOARD = re.compile(
    r"^(?P<head>.+)_attempt_(?P<when>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2})"
    r"(?:_(?P<file>.+))?$"
)
_RESUBMISSION = re.compile(r"-\d+$")  # Canvas: ex05_alibi-1.ipynb
_EXERCISE = re.compile(r"^(ex\d+)(?:_|$)")


def name_to_id(name: str) -> str:
    """A student id made from a person's name: ASCII, lower case, ``_`` between
    words.

    >>> name_to_id("Zoë  O'Brien-Smith")
    'zoe_o_brien_smith'
    """
    import unicodedata

    ascii_name = (
        unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    )
    return re.sub(r"[^a-z0-9]+", "_", ascii_name.lower()).strip("_")


def _other_assignment(file_stem: str, assignment: str) -> str | None:
    """The exercise another assignment's file name names (``ex04`` in
    ``ex04_rope``), or ``None``."""
    m = _EXERCISE.match(file_stem)
    short = assignment.split("_", 1)[0]
    if m and m.group(1) != short:
        return m.group(1)
    return None


def _lms_student(path: str, assignment: str) -> tuple[str | None, str] | None:
    """The student id of a Canvas, Moodle or Blackboard download name, ``None`` and
    the reason when it names another assignment, or ``None`` when the path is in
    none of those formats."""
    pure = PurePosixPath(path)
    stem = _COPY_SUFFIX.sub("", pure.stem)
    found: tuple[str, str, str] | None = None  # (lms, student, uploaded file stem)
    for folder in pure.parts[:-1]:  # Moodle: one folder per student
        m = _MOODLE.match(folder)
        if m and not m.group("file"):
            found = ("Moodle", name_to_id(m.group("name")), stem)
    if found is None:
        m = _MOODLE.match(stem)
        if m:
            found = ("Moodle", name_to_id(m.group("name")), m.group("file"))
    if found is None:
        m = _BLACKBOARD.match(stem)
        if m:
            head = m.group("head")
            short = assignment.split("_", 1)[0]
            student = head.rsplit("_", 1)[-1]
            for prefix in (assignment, short):  # usernames may hold "_"
                if head.startswith(prefix + "_") and len(head) > len(prefix) + 1:
                    student = head[len(prefix) + 1 :]
                    break
            found = ("Blackboard", student, m.group("file") or "")
    if found is None:
        m = _CANVAS.match(stem)
        if m:
            found = ("Canvas", m.group("student").lower(), m.group("file"))
    if found is None:
        return None
    lms, student, file_stem = found
    other = _other_assignment(_RESUBMISSION.sub("", file_stem), assignment)
    if other:
        return None, f"a {lms} download of another assignment ({other})"
    return student, ""


def student_from_path(
    path: str, assignment: str, pattern: re.Pattern[str] | None = None
) -> tuple[str | None, str]:
    """The student id a submission path names for ``assignment``, or ``None`` and the
    reason; with ``pattern``, its group ``student`` (see the module docstring).

    >>> student_from_path("alice_ex05_alibi.ipynb", "ex05_alibi")
    ('alice', '')
    >>> student_from_path("subs/bob/ex05_alibi.ipynb", "ex05_alibi")
    ('bob', '')
    >>> student_from_path("carol/ex05_alibi/ex05_alibi.ipynb", "ex05_alibi")
    ('carol', '')
    >>> student_from_path("ex05_alibi/dan.ipynb", "ex05_alibi")
    ('dan', '')
    >>> student_from_path("erin-ex05.ipynb", "ex05_alibi")
    ('erin', '')
    >>> student_from_path("frank_ex04_rope.ipynb", "ex05_alibi")[0] is None
    True
    >>> student_from_path("smithdave_12345_678901_ex05_alibi.ipynb", "ex05_alibi")
    ('smithdave', '')
    """
    if pattern is not None:
        m = pattern.fullmatch(path) or pattern.fullmatch(PurePosixPath(path).name)
        if m is None:
            return None, f"the name does not match --pattern {pattern.pattern!r}"
        candidate = m.group("student")
        if not candidate:
            return None, "--pattern matched, but its group 'student' is empty"
        if not valid_student_id(candidate):
            return None, f"{candidate!r} is not a valid student id"
        return candidate, ""
    lms = _lms_student(path, assignment)
    if lms is not None:
        candidate, why = lms
        if candidate is None:
            return None, why
        if not valid_student_id(candidate):
            return None, f"{candidate!r} is not a valid student id"
        return candidate, ""
    parts = PurePosixPath(path).parts
    stem = _COPY_SUFFIX.sub("", PurePosixPath(path).stem)
    short = assignment.split("_", 1)[0]
    parents = parts[:-1]
    names = {assignment, short}
    candidate: str | None = None
    if stem in names:
        if len(parents) >= 2 and parents[-1] == assignment:
            candidate = parents[-2]  # <student>/<assignment>/<assignment>.ipynb
        elif parents and parents[-1] not in names:
            candidate = parents[-1]  # <student>/<assignment>.ipynb
        else:
            return None, "the name gives no student id"
    elif parents and parents[-1] in names:
        candidate = stem  # <assignment>/<student>.ipynb
    else:
        for name in sorted(names, key=len, reverse=True):
            for sep in ("_", "-"):
                if stem.endswith(sep + name) and len(stem) > len(name) + 1:
                    candidate = stem[: -len(name) - 1]
                    break
            if candidate:
                break
        if candidate is None:
            other = _other_assignment(stem.split("_", 1)[-1], assignment)
            if other is None:
                for piece in re.split(r"[_\-/]", stem):
                    if _other_assignment(piece, assignment):
                        other = piece
                        break
            if other:
                return None, f"the name names another assignment ({other})"
            return None, (
                f"the name matches no <student>_{assignment}.ipynb pattern "
                "(give --pattern with a group (?P<student>...))"
            )
    if not valid_student_id(candidate):
        return None, f"{candidate!r} is not a valid student id"
    return candidate, ""


def _unsafe(name: str) -> bool:
    """Whether a path from a zip would land outside the folder it is extracted to:
    absolute, a drive, or a ``..`` part (zip-slip)."""
    pure = PurePosixPath(name.replace("\\", "/"))
    return (
        pure.is_absolute() or ".." in pure.parts or bool(re.match(r"^[A-Za-z]:", name))
    )


def _scan(
    source: Path,
    assignment: str,
    report: CollectReport,
    pattern: re.Pattern[str] | None,
) -> list[_Candidate]:
    found: list[_Candidate] = []

    def consider(name: str, mtime: float, read) -> None:
        if _unsafe(name):
            report.not_placed.append(
                (name, "unsafe path (it points outside the folder); not extracted")
            )
            return
        system = _system_file(PurePosixPath(name).parts)
        if system:
            report.not_placed.append((name, f"{system}; skipped"))
            return
        if not name.endswith(".ipynb"):
            report.not_placed.append((name, "not a notebook (.ipynb)"))
            return
        student, why = student_from_path(name, assignment, pattern)
        if student is None:
            report.not_placed.append((name, why))
            return
        found.append(_Candidate(name, student, mtime, read))

    if source.is_dir():
        for file in sorted(source.rglob("*")):
            rel = file.relative_to(source).as_posix()
            if file.is_symlink():
                report.not_placed.append((rel, "a symbolic link; not followed"))
            elif file.is_file():
                consider(rel, file.stat().st_mtime, file.read_bytes)
            elif not file.is_dir():
                report.not_placed.append((rel, "not a regular file"))
    elif zipfile.is_zipfile(source):
        try:
            archive = zipfile.ZipFile(source)
        except (zipfile.BadZipFile, OSError) as exc:
            raise CourseError(f"{source} is not a readable zip file: {exc}") from None
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            if info.is_dir():
                continue
            if info.flag_bits & 0x1:
                report.not_placed.append(
                    (info.filename, "encrypted in the zip file; not extracted")
                )
                continue
            when = dt.datetime(*info.date_time, tzinfo=dt.UTC).timestamp()
            consider(info.filename, when, lambda n=info.filename: archive.read(n))
    else:
        raise CourseError(f"{source} is neither a folder nor a zip file")
    return found


def collect(
    course: Course,
    source: str | Path,
    assignment: str,
    *,
    pattern: str | re.Pattern[str] | None = None,
) -> CollectReport:
    """Place the submissions in ``source`` (folder or zip) for ``assignment``;
    ``pattern``: a regular expression with a group ``(?P<student>...)`` that takes
    the student id from each path (see the module docstring)."""
    source = Path(source)
    if not source.exists():
        raise CourseError(f"{source} does not exist")
    if isinstance(pattern, str):
        try:
            pattern = re.compile(pattern)
        except re.error as exc:
            raise CourseError(f"--pattern is not a regular expression: {exc}") from None
    if pattern is not None and "student" not in pattern.groupindex:
        raise CourseError(
            "--pattern needs a named group for the student id: (?P<student>...)"
        )
    known: list[str] = []
    if course.gradebook_exists():  # a wrong name must not create a gradebook
        with course.gradebook() as gb:
            known = [a.name for a in gb.assignments]
    assignment = course.resolve_assignment(
        assignment, known=known + course.source_assignments()
    )
    report = CollectReport(assignment)
    chosen: dict[str, _Candidate] = {}
    for cand in _scan(source, assignment, report, pattern):
        other = chosen.get(cand.student)
        if other is None:
            chosen[cand.student] = cand
            continue
        newer, older = (cand, other) if cand.mtime > other.mtime else (other, cand)
        chosen[cand.student] = newer
        report.not_placed.append(
            (older.name, f"{cand.student} has a newer file: {newer.name}")
        )
    for student in sorted(chosen):
        cand = chosen[student]
        folder = course.submitted_dir / student / assignment
        target = folder / f"{assignment}.ipynb"
        data = cand.read()
        stamp = dt.datetime.fromtimestamp(cand.mtime, dt.UTC)
        timestamp = stamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
        stamp_file = folder / "timestamp.txt"
        if (
            target.is_file()
            and target.read_bytes() == data
            and stamp_file.is_file()
            and stamp_file.read_text().strip() == timestamp
        ):
            report.unchanged.append((student, cand.name))
            continue
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        target.write_bytes(data)
        stamp_file.write_text(timestamp + "\n")
        report.placed.append((student, cand.name, str(target.relative_to(course.root))))
    with course.gradebook() as gb:
        for student in chosen:
            gb.update_or_create_student(student)
    return report
