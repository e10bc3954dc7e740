"""``course collect``: put downloaded submissions into nbgrader's layout.

Submissions arrive as a folder or a zip file (an LMS download, a shared drive). Each
notebook is placed at ``submitted/<student>/<assignment>/<assignment>.ipynb`` with a
``timestamp.txt`` (the file's modification time), the layout ``nbgrader autograde``
reads. The student id comes from the path:

========================================  ===========================================
``alice_ex05_alibi.ipynb``                ``<student>_<assignment>.ipynb`` (or ``-``)
``alice_ex05.ipynb``                      the same with the short id ``exNN``
``alice/ex05_alibi.ipynb``                ``<student>/<assignment>.ipynb``
``alice/ex05_alibi/ex05_alibi.ipynb``     nbgrader's own layout
``ex05_alibi/alice.ipynb``                ``<assignment>/<student>.ipynb``
========================================  ===========================================

A file that fits none of these, or names another assignment, or an invalid student id,
is not placed and is listed in the report with the reason. When a student has two
files, the newer is kept and the other is reported. Every placed student is added to
the gradebook.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .course import Course, CourseError, valid_student_id

__all__ = ["CollectReport", "collect", "student_from_path"]

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


def _ignored(parts: tuple[str, ...]) -> bool:
    return any(
        p.startswith(".") or p in {"__MACOSX", ".ipynb_checkpoints"} for p in parts
    )


def student_from_path(path: str, assignment: str) -> tuple[str | None, str]:
    """The student id a submission path names for ``assignment``, or ``None`` and the
    reason.

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
    """
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
            return None, f"the name matches no <student>_{assignment}.ipynb pattern"
    if not valid_student_id(candidate):
        return None, f"{candidate!r} is not a valid student id"
    return candidate, ""


def _scan(source: Path, assignment: str, report: CollectReport) -> list[_Candidate]:
    found: list[_Candidate] = []

    def consider(name: str, mtime: float, read) -> None:
        parts = PurePosixPath(name).parts
        if _ignored(parts):
            return
        if not name.endswith(".ipynb"):
            report.not_placed.append((name, "not a notebook (.ipynb)"))
            return
        student, why = student_from_path(name, assignment)
        if student is None:
            report.not_placed.append((name, why))
            return
        found.append(_Candidate(name, student, mtime, read))

    if source.is_dir():
        for file in sorted(source.rglob("*")):
            if file.is_file():
                rel = file.relative_to(source).as_posix()
                consider(rel, file.stat().st_mtime, file.read_bytes)
    elif zipfile.is_zipfile(source):
        archive = zipfile.ZipFile(source)
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            if info.is_dir():
                continue
            when = dt.datetime(*info.date_time, tzinfo=dt.UTC).timestamp()
            consider(info.filename, when, lambda n=info.filename: archive.read(n))
    else:
        raise CourseError(f"{source} is neither a folder nor a zip file")
    return found


def collect(course: Course, source: str | Path, assignment: str) -> CollectReport:
    """Place the submissions in ``source`` (folder or zip) for ``assignment``."""
    source = Path(source)
    if not source.exists():
        raise CourseError(f"{source} does not exist")
    with course.gradebook() as gb:
        known = [a.name for a in gb.assignments]
    assignment = course.resolve_assignment(
        assignment, known=known + course.source_assignments()
    )
    report = CollectReport(assignment)
    chosen: dict[str, _Candidate] = {}
    for cand in _scan(source, assignment, report):
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
