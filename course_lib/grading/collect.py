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
``smithdave_12345_678901_ex05_alibi.ipynb``                  Canvas: ``12345``
``smithdave_LATE_12345_678901_ex05_alibi-1.ipynb``           Canvas, late, resubmitted
``Dave Smith_123456_assignsubmission_file_/ex05_alibi.ipynb``  Moodle: from the roster
``ex05_alibi_dsmith_attempt_2026-11-20-10-15-00_x.ipynb``    Blackboard: ``dsmith``
==========================================================  ==========================

The LMS formats: Canvas names each file ``<name>[_LATE]_<user id>_<attachment id>_
<uploaded file name>`` (``<name>`` is the student's sortable name in lower case without
spaces; a re-upload gets ``-1``, ``-2`` before ``.ipynb``). Moodle's "download all
submissions" puts each student's files in a folder ``<full name>_<participant id>_
assignsubmission_file_`` (Moodle 4.1 and later: without the last ``_``; or, flattened,
prefixes the file name with that). Blackboard
names each file ``<assignment>_<username>_attempt_<yyyy-mm-dd-hh-mm-ss>_<file name>``,
and adds a ``.txt`` receipt per attempt.

The student id of an LMS download is the LMS's stable id, never a name
(:mod:`.roster` says why each is stable): Canvas's user id; for Moodle, whose
participant id changes from one assignment to the next, the roster student that the
assignment's grading worksheet maps the participant id to, or else the one roster
student of that full name (two roster students of one name: refused as ambiguous,
nothing placed for them); Blackboard's username. The name is kept as the student's
name in the gradebook when the roster gave none, and where each file came from is
recorded (:class:`~.roster.LmsSource`). ``ids="names"`` keeps the name-based ids of
earlier versions (``smithdave``, ``dave_smith``) for a class graded with them; files
of different LMS users that would then share an id are all refused, never merged. To
take another part of the path as the id, give ``pattern``: a regular expression with
a group ``(?P<student>...)``, matched against the whole path inside the folder or zip,
or else against the file name alone.

Every file is accounted for: placed, unchanged (the same file was placed before), or
not placed with the reason: not a notebook, a system or hidden file (``.DS_Store``,
``__MACOSX/``, ``.ipynb_checkpoints/``), an unsafe path (absolute, or with ``..``,
which is never extracted), a symbolic link (never followed), a name that gives no
student id or names another assignment, an invalid student id, an ambiguous one, an
older file of a student who has a newer one, or a file larger than the cap
(nbgrader's ``CourseDirectory.max_file_size``, 100 MB by default: checked on the size
a zip entry declares and again while it is read, so a lying header stops at the cap
and nothing of it is written). Every placed student is added to the gradebook.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .course import Course, valid_student_id
from .errors import CourseError
from .roster import LmsSource, participant_students, record_source

__all__ = [
    "COLLECT_IDS",
    "CollectReport",
    "LmsName",
    "collect",
    "name_to_id",
    "parse_lms_name",
    "size_text",
    "student_from_path",
]

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
    read: Callable[[int], bytes]  # (cap in bytes) -> the file; _TooLarge past it
    source: LmsSource | None = None
    person: str = ""  # the name an LMS download gives (for a new student)


class _TooLarge(Exception):
    """A file turned out larger than the cap while it was read."""


_CHUNK = 1 << 20


def _read_capped(stream, cap: int) -> bytes:
    """Read ``stream`` to its end, or raise :class:`_TooLarge` as soon as more than
    ``cap`` bytes came: never more than ``cap`` plus one chunk in memory."""
    chunks, size = [], 0
    while chunk := stream.read(_CHUNK):
        size += len(chunk)
        if size > cap:
            raise _TooLarge(size)
        chunks.append(chunk)
    return b"".join(chunks)


def size_text(n: int) -> str:
    """``1.5 MB``, ``3.2 GB``: a size in decimal units, as nbgrader's cap counts."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


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
    r"^(?P<student>[a-z0-9]+)(?P<late>_late)?_(?P<user>\d+)_(?P<attachment>\d+)_(?P<file>.+)$",
    re.IGNORECASE,
)
_MOODLE = re.compile(
    r"^(?P<name>.+?)_(?P<participant>\d+)_assignsubmission_(?:file|onlinetext)"
    r"(?:_(?P<file>.*))?$"
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


@dataclass(frozen=True)
class LmsName:
    """What an LMS download's file name says: the LMS, the person's name as the LMS
    wrote it, the LMS's id in it (Canvas user id, Moodle participant id, Blackboard
    username) and Canvas's ``_LATE`` flag."""

    lms: str  # "canvas", "moodle" or "blackboard"
    name: str
    lms_id: str
    late: bool = False


def parse_lms_name(path: str, assignment: str) -> tuple[LmsName | None, str] | None:
    """The :class:`LmsName` of a Canvas, Moodle or Blackboard download path, ``None``
    and the reason when it names another assignment, or ``None`` when the path is
    in none of those formats.

    >>> parse_lms_name("liwei_LATE_111_222_ex05_alibi-1.ipynb", "ex05_alibi")
    (LmsName(lms='canvas', name='liwei', lms_id='111', late=True), '')
    """
    pure = PurePosixPath(path)
    stem = _COPY_SUFFIX.sub("", pure.stem)
    found: tuple[LmsName, str] | None = None  # (what it says, uploaded file stem)
    for folder in pure.parts[:-1]:  # Moodle: one folder per student
        m = _MOODLE.match(folder)
        if m and not m.group("file"):
            found = (LmsName("moodle", m.group("name"), m.group("participant")), stem)
    if found is None:
        m = _MOODLE.match(stem)
        if m:
            name = LmsName("moodle", m.group("name"), m.group("participant"))
            found = (name, m.group("file") or "")
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
            found = (LmsName("blackboard", student, student), m.group("file") or "")
    if found is None:
        m = _CANVAS.match(stem)
        if m:
            name = LmsName(
                "canvas", m.group("student").lower(), m.group("user"), bool(m["late"])
            )
            found = (name, m.group("file"))
    if found is None:
        return None
    lms_name, file_stem = found
    other = _other_assignment(_RESUBMISSION.sub("", file_stem), assignment)
    if other:
        label = {"canvas": "Canvas", "moodle": "Moodle"}.get(lms_name.lms, "Blackboard")
        return None, f"a {label} download of another assignment ({other})"
    return lms_name, ""


# how a Moodle download's (full name, participant id) becomes a student id
MoodleResolver = Callable[[str, str], tuple[str | None, str]]


def _no_roster(full_name: str, participant: str) -> tuple[str | None, str]:
    return None, (
        f"{full_name} (Moodle participant {participant}) is not on the roster: load "
        "it first (course roster <Moodle grade export>), or this assignment's "
        "grading worksheet (course roster <worksheet> --assignment ...)"
    )


def _lms_student(
    lms_name: LmsName, ids: str, moodle: MoodleResolver
) -> tuple[str | None, str]:
    """The student id of an LMS download: the LMS's id (``ids="lms"``), or the
    name-based id of earlier versions (``ids="names"``)."""
    if ids == "names":
        if lms_name.lms == "moodle":
            return name_to_id(lms_name.name), ""
        return lms_name.name, ""
    if lms_name.lms == "moodle":
        return moodle(lms_name.name, lms_name.lms_id)
    return lms_name.lms_id, ""


def student_from_path(
    path: str,
    assignment: str,
    pattern: re.Pattern[str] | None = None,
    *,
    ids: str = "lms",
    moodle: MoodleResolver = _no_roster,
) -> tuple[str | None, str]:
    """The student id a submission path names for ``assignment``, or ``None`` and the
    reason; with ``pattern``, its group ``student`` (see the module docstring). An
    LMS download gives the LMS's id (``ids="lms"``; a Moodle download's student is
    found by ``moodle(full name, participant id)``) or, with ``ids="names"``, the
    name-based id of earlier versions.

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
    ('12345', '')
    >>> student_from_path(
    ...     "smithdave_12345_678901_ex05_alibi.ipynb", "ex05_alibi", ids="names"
    ... )
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
    lms = parse_lms_name(path, assignment)
    if lms is not None:
        lms_name, why = lms
        if lms_name is None:
            return None, why
        candidate, why = _lms_student(lms_name, ids, moodle)
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


def _files(source: Path, report: CollectReport):
    """Every file of a folder or zip: ``(name, mtime, declared size, read)``, where
    ``read(cap)`` returns its bytes; links, special files and encrypted entries go
    to ``report.not_placed``."""
    if source.is_dir():
        for file in sorted(source.rglob("*")):
            rel = file.relative_to(source).as_posix()
            if file.is_symlink():
                report.not_placed.append((rel, "a symbolic link; not followed"))
            elif file.is_file():

                def read(limit: int, file=file) -> bytes:
                    with file.open("rb") as fh:
                        return _read_capped(fh, limit)

                stat = file.stat()
                yield rel, stat.st_mtime, stat.st_size, read
            elif not file.is_dir():
                report.not_placed.append((rel, "not a regular file"))
        return
    if not zipfile.is_zipfile(source):
        raise CourseError(f"{source} is neither a folder nor a zip file")
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

        def read(limit: int, info=info) -> bytes:
            with archive.open(info) as fh:
                return _read_capped(fh, limit)

        when = dt.datetime(*info.date_time, tzinfo=dt.UTC).timestamp()
        yield info.filename, when, info.file_size, read


def _scan(
    source: Path,
    assignment: str,
    report: CollectReport,
    pattern: re.Pattern[str] | None,
    *,
    ids: str,
    moodle: MoodleResolver,
    cap: int,
) -> list[_Candidate]:
    """The files of ``source`` that name a student of ``assignment``; the others
    go to ``report.not_placed`` with the reason."""
    found: list[_Candidate] = []
    for name, mtime, size, read in _files(source, report):
        why = _unsafe_or_skipped(name)
        student = None
        if not why:
            student, why = student_from_path(
                name, assignment, pattern, ids=ids, moodle=moodle
            )
        if student is not None and size > cap:  # declared size; reading is capped
            why = (
                f"{size_text(size)}, larger than the cap of {size_text(cap)} per file "
                "(CourseDirectory.max_file_size, or --max-file-size); not extracted"
            )
        if why:
            report.not_placed.append((name, why))
            continue
        lms = None if pattern is not None else parse_lms_name(name, assignment)
        source_, person = None, ""
        if lms is not None and lms[0] is not None:
            n = lms[0]
            source_, person = LmsSource(n.lms, name, n.lms_id, n.late), n.name
        found.append(_Candidate(name, student, mtime, read, source_, person))
    return found


def _unsafe_or_skipped(name: str) -> str:
    """Why a file of a download is no submission (unsafe, a system file, not a
    notebook), or ``""``."""
    if _unsafe(name):
        return "unsafe path (it points outside the folder); not extracted"
    system = _system_file(PurePosixPath(name).parts)
    if system:
        return f"{system}; skipped"
    if not name.endswith(".ipynb"):
        return "not a notebook (.ipynb)"
    return ""


def _moodle_resolver(gb, assignment: str) -> MoodleResolver:
    """Find a Moodle download's student: by the participant id of this assignment's
    grading worksheet, else by the full name, which must be one roster student's."""
    by_participant = participant_students(gb, assignment)
    by_name: dict[str, list[str]] = {}
    for s in gb.students:
        full = name_to_id(f"{s.first_name or ''} {s.last_name or ''}")
        if full:
            by_name.setdefault(full, []).append(s.id)

    def resolve(full_name: str, participant: str) -> tuple[str | None, str]:
        if participant in by_participant:
            return by_participant[participant], ""
        matches = by_name.get(name_to_id(full_name), [])
        if len(matches) == 1:
            return matches[0], ""
        if len(matches) > 1:
            return None, (
                f"{full_name} (Moodle participant {participant}) is ambiguous: "
                f"{len(matches)} roster students have this name "
                f"({', '.join(matches)}); "
                "load this assignment's grading worksheet (course roster <worksheet> "
                "--assignment ...), which gives each participant id its student"
            )
        return _no_roster(full_name, participant)

    return resolve


def _ambiguous(cands: list[_Candidate]) -> str | None:
    """Why files that give one student id must not be merged: they come from
    different LMS users (possible with ``ids="names"``: two Canvas users named Li
    Wei), or ``None``."""
    users = sorted({c.source.lms_id for c in cands if c.source is not None})
    if len(users) < 2:
        return None
    lms = {"canvas": "Canvas users", "moodle": "Moodle participants"}.get(
        cands[0].source.lms, "LMS users"
    )
    return (
        f"{len(users)} different {lms} ({', '.join(users)}) give the student id "
        f"{cands[0].student}; none of their files is placed: collect with the LMS's "
        "ids (--ids lms, the default) or give --pattern"
    )


COLLECT_IDS = ("lms", "names")


def collect(
    course: Course,
    source: str | Path,
    assignment: str,
    *,
    pattern: str | re.Pattern[str] | None = None,
    ids: str = "lms",
    max_file_size: int | None = None,
) -> CollectReport:
    """Place the submissions in ``source`` (folder or zip) for ``assignment``;
    ``pattern``: a regular expression with a group ``(?P<student>...)`` that takes
    the student id from each path (see the module docstring); ``ids``: ``"lms"``
    (an LMS download's student is the LMS's id) or ``"names"`` (the name-based ids
    of earlier versions, for a class graded with them); ``max_file_size``: the cap
    per file in bytes (default: nbgrader's ``CourseDirectory.max_file_size``)."""
    source = Path(source)
    if not source.exists():
        raise CourseError(f"{source} does not exist")
    if ids not in COLLECT_IDS:
        raise CourseError(f"--ids must be one of {', '.join(COLLECT_IDS)}, not {ids!r}")
    if isinstance(pattern, str):
        try:
            pattern = re.compile(pattern)
        except re.error as exc:
            raise CourseError(f"--pattern is not a regular expression: {exc}") from None
    if pattern is not None and "student" not in pattern.groupindex:
        raise CourseError(
            "--pattern needs a named group for the student id: (?P<student>...)"
        )
    cap = course.max_file_size() if max_file_size is None else max_file_size
    if cap <= 0:
        raise CourseError(f"the file size cap must be positive, not {cap}")
    known: list[str] = []
    if course.gradebook_exists():  # a wrong name must not create a gradebook
        with course.gradebook() as gb:
            known = [a.name for a in gb.assignments]
    assignment = course.resolve_assignment(
        assignment, known=known + course.source_assignments()
    )
    report = CollectReport(assignment)
    moodle: MoodleResolver = _no_roster
    if course.gradebook_exists():
        with course.gradebook() as gb:
            moodle = _moodle_resolver(gb, assignment)
    groups: dict[str, list[_Candidate]] = {}
    for cand in _scan(
        source, assignment, report, pattern, ids=ids, moodle=moodle, cap=cap
    ):
        groups.setdefault(cand.student, []).append(cand)
    chosen = _choose(groups, report)
    placed = _place(course, assignment, chosen, cap, report)
    with course.gradebook() as gb:
        existing = {s.id: s for s in gb.students}
        for student in placed:
            cand = chosen[student]
            gb.update_or_create_student(
                student, **_student_fields(cand, existing.get(student))
            )
            record_source(gb, assignment, student, cand.source)
    return report


def _choose(
    groups: dict[str, list[_Candidate]], report: CollectReport
) -> dict[str, _Candidate]:
    """Each student's newest file; none for a student id that different LMS users'
    files share (:func:`_ambiguous`)."""
    chosen: dict[str, _Candidate] = {}
    for student, cands in groups.items():
        why = _ambiguous(cands)
        if why:
            report.not_placed += [(c.name, why) for c in cands]
            continue
        newest = max(cands, key=lambda c: c.mtime)
        chosen[student] = newest
        for c in cands:
            if c is not newest:
                report.not_placed.append(
                    (c.name, f"{student} has a newer file: {newest.name}")
                )
    return chosen


def _place(
    course: Course,
    assignment: str,
    chosen: dict[str, _Candidate],
    cap: int,
    report: CollectReport,
) -> list[str]:
    """Write each chosen file (read under the cap) and its ``timestamp.txt``; the
    students placed or unchanged."""
    placed: list[str] = []
    for student in sorted(chosen):
        cand = chosen[student]
        try:
            data = cand.read(cap)
        except _TooLarge as exc:
            why = (
                f"larger than its zip entry declares: more than {size_text(cap)} "
                f"(the cap per file) after {size_text(exc.args[0])}; not extracted"
            )
        except zipfile.BadZipFile as exc:
            why = (
                "the zip entry is damaged, or its header lies about its size "
                f"({exc}); not placed"
            )
        except (OSError, EOFError) as exc:
            why = f"could not be read from the download ({exc}); not placed"
        else:
            why = ""
        if why:
            report.not_placed.append((cand.name, why))
            continue
        placed.append(student)
        folder = course.submitted_dir / student / assignment
        target = folder / f"{assignment}.ipynb"
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
    return placed


def _student_fields(cand: _Candidate, old) -> dict[str, str | None]:
    """What an LMS download tells the gradebook of its student: Canvas's user id,
    and the name when the roster gave none (Canvas's file name holds the sortable
    name without spaces; Moodle's folder the full name)."""
    fields: dict[str, str | None] = {}
    if cand.source is None:
        return fields
    named = old is not None and bool(old.first_name or old.last_name)
    if cand.source.lms == "canvas":
        fields["lms_user_id"] = cand.source.lms_id
        if not named:
            fields["last_name"] = cand.person
    elif cand.source.lms == "moodle" and not named:
        first, _, last = cand.person.rpartition(" ")
        fields["first_name"], fields["last_name"] = first or None, last
    return fields
