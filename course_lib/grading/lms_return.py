"""Feedback back through the LMS: the archives Canvas and Moodle take back.

``course feedback`` writes, for each assignment, one zip per LMS into
``reports/lms/<assignment>/``: ``canvas.zip`` for the students whose notebook came
from a Canvas download and ``moodle.zip`` for those whose notebook came from a
Moodle download (:func:`course_lib.grading.roster.read_sources`: the path of the
file in the download and the LMS's id, recorded by ``course collect``). Each holds
the student's feedback pages (``feedback/<student>/<assignment>/*.html``: nbgrader's
page, or the page of a submission that could not be graded), named so that the
LMS's own upload finds the student. Not under ``feedback/``: nbgrader's
``release_feedback`` takes every ``feedback/<x>/<assignment>/`` folder for a
student's and stops at the first without a ``timestamp.txt``.

Canvas: *Re-Upload Submissions*
    On the assignment's page, *Download Submissions* gives one file per submitted
    file, named by ``ContentZipper#get_filename`` and ``#add_upload_submission``
    (``lib/content_zipper.rb`` of instructure/canvas-lms, commit 05e9653c)::

        <sortable name>[_LATE]_<user id>_<attachment id>_<file name>

    (``anon_<anonymous id>`` in place of the name and user id when grading is
    anonymous). *Re-Upload Submissions* (``GradebooksController#
    submissions_zip_upload``) hands the zip to
    ``AbstractAssignment#generate_comments_from_files``, which reads each file's
    name with ``#infer_comment_context_from_filename`` (``app/models/
    abstract_assignment.rb``, commit 028f76bb): the name without its folders, split
    at ``_``, the pieces ``LATE`` dropped; then the first two pieces made only of
    digits are the user id and the attachment id (or, when the first piece is
    ``anon``, the next two are the anonymous id and the attachment id). A file is
    ignored unless that user has a submission of the assignment *and* the
    attachment id is one of that submission's files. Each accepted file is added
    to the submission as a comment ("See attached file"). So the page keeps the
    download's name and only changes its extension:
    ``smithdave_LATE_12345_678901_ex05_alibi.ipynb`` returns as
    ``smithdave_LATE_12345_678901_ex05_alibi.html`` (instead of the notebook; a
    student with several pages gets ``<download name less .ipynb>_<page>.html``).
    Canvas labels the attached file with the display name of the submitted file
    (``display_name: attachment.display_name`` in the same method), so the
    comment lists ``ex05_alibi.ipynb``: it is the feedback page, to open in a
    web browser. Canvas matches on the user id: the name part is not read.

Moodle: *Upload multiple feedback files in a zip*
    (the grading action of the file feedback plugin, ``assignfeedback_file``;
    its help text: "Feedback files will be assigned to students based on the
    participant id which should be the second part of each filename immediately
    after the users full name", ``lang/en/assignfeedback_file.php``).
    ``assignfeedback_file_zip_importer::is_valid_filename_for_import``
    (``mod/assign/feedback/file/importziplib.php`` of moodle/moodle, commit
    0203d8f2) walks the parts of each file's path; a part split at ``_`` into at
    most five pieces (PHP ``explode('_', $part, 5)``) with at least four, whose
    second piece is numeric and a participant of the assignment, and whose third
    and fourth pieces name a plugin of the assignment (``get_plugin_by_type``),
    gives the student; what follows is the file's name in the feedback area.
    Files whose name starts with ``.`` or ``~`` are skipped. The participant id is
    the one Moodle writes in its submission download (``assign::
    get_uniqueid_for_user``, per assignment), recorded by ``course collect``. Each
    student gets one folder::

        <full name>_<participant id>_assignfeedback_file_/<page>.html

    as Moodle's own download names its folders (``mod_assign\\downloader::
    get_student_prefix`` and ``load_submissionplugin_filelist``,
    ``mod/assign/classes/downloader.php``, commit da545523: ``<full name>_
    <participant id>_<plugin type>_<plugin name>``, with ``_`` in the name made a
    space), except that the plugin named is the one that receives the files, the
    feedback-file plugin (the import stores every matched file as feedback,
    whichever plugin the name gives; ``import_zip_files``), so that the folder says
    what it holds. Uploading the archive again after a regrade replaces each page (a
    feedback file of the same name is replaced). The trailing ``_`` is what Moodle
    before 4.1 wrote and required (the comment in ``is_valid_filename_for_import``;
    4.1 and later accept both). The full name is that of the download (else the
    gradebook's); Moodle does not read it.

A student whose file came from another source (a plain folder, Blackboard), who
has no feedback page yet, or whose recorded name would not lead the LMS back to
them (checked with :func:`canvas_match` and :func:`moodle_match`, this module's
reading of the two rules above), is listed as not included, with the reason.
"""

from __future__ import annotations

import os
import re
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .course import Course
from .roster import LmsSource, read_sources

__all__ = [
    "ARCHIVE_NAMES",
    "LmsArchives",
    "canvas_match",
    "canvas_name",
    "format_lms_archives",
    "lms_archives",
    "moodle_folder",
    "moodle_match",
]

ARCHIVE_NAMES = {"canvas": "canvas.zip", "moodle": "moodle.zip"}
MOODLE_PLUGIN = ("assignfeedback", "file")  # the file feedback plugin
_DIGITS = re.compile(r"[0-9]+")  # Ruby's /^\d+$/ (ASCII digits)
_PHP_NUMERIC = re.compile(  # PHP 8's numeric strings (is_numeric)
    r"[ \t\n\r\v\f]*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t\n\r\v\f]*"
)


@dataclass
class LmsArchives:
    """What :func:`lms_archives` wrote: per LMS the zip and its ``(student, name in
    the zip)`` entries, and the students left out with the reason."""

    assignment: str
    folder: Path
    archives: dict[str, Path] = field(default_factory=dict)
    entries: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    not_included: list[tuple[str, str]] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # stale archives deleted
    sourced: int = 0  # students with an LMS source for the assignment


# --- the two LMSs' rules, as their code reads a name ----------------------------------


def canvas_match(name: str) -> tuple[str, str] | None:
    """``(user id, attachment id)`` Canvas's *Re-Upload Submissions* reads from a
    file's path (for an anonymous name ``anon_<id>``: ``("anon_<id>", attachment
    id)``), or ``None`` when it ignores the file for want of them (see the module
    docstring).

    >>> canvas_match("smithdave_LATE_12345_678901_ex05_alibi.html")
    ('12345', '678901')
    >>> canvas_match("ex05_alibi.html") is None
    True
    """
    base = PurePosixPath(name.replace("\\", "/")).name
    pieces = base.split("_")
    while pieces and not pieces[-1]:  # Ruby's split drops trailing empty fields
        pieces.pop()
    pieces = [p for p in pieces if p != "LATE"]
    if pieces and pieces[0] == "anon":
        ids = pieces[1:3]
        who = f"anon_{ids[0]}" if ids else None
        attachment = ids[1] if len(ids) > 1 else None
    else:
        numbers = [p for p in pieces if _DIGITS.fullmatch(p)][:2]
        who = numbers[0] if numbers else None
        attachment = numbers[1] if len(numbers) > 1 else None
    if (pieces and pieces[-1].startswith("link")) or base.startswith("._"):
        attachment = None
    if who is None or attachment is None:
        return None
    return who, attachment


def moodle_match(path: str) -> tuple[str, str, str, str] | None:
    """``(participant id, plugin type, plugin name, file name)`` Moodle's
    *Upload multiple feedback files in a zip* reads from a path in the zip (the
    first part that fits; whether the participant and the plugin exist is the
    assignment's business), or ``None`` (see the module docstring).

    >>> moodle_match("Dave Smith_42_assignfeedback_file_/ex05_alibi.html")
    ('42', 'assignfeedback', 'file', '/ex05_alibi.html')
    """
    parts = path.split("/")
    if parts[-1].startswith((".", "~")):
        return None
    for i, part in enumerate(parts):
        info = part.split("_", 4)  # PHP explode('_', $part, 5)
        if len(info) < 4 or not _PHP_NUMERIC.fullmatch(info[1]):
            continue
        rest = [info[4] if len(info) == 5 else "", *parts[i + 1 :]]
        return info[1].strip(), info[2], info[3], "/".join(rest)
    return None


# --- the names this module writes ---------------------------------------------------


def canvas_name(source_path: str, page: str, *, several: bool = False) -> str:
    """The name of a feedback page in Canvas's re-upload: the download's file name
    with ``.html`` for its extension (``several``: ``_<page>`` appended instead, one
    per page)."""
    base = PurePosixPath(source_path.replace("\\", "/")).name
    stem = base[: -len(".ipynb")] if base.endswith(".ipynb") else Path(base).stem
    return f"{stem}_{page}" if several else f"{stem}.html"


def _download_name(source_path: str, participant: str) -> str:
    """The full name Moodle's download put before ``_<participant>_``, or ``""``."""
    pattern = rf"(?:^|/)([^/]*?)_{re.escape(participant)}_assign"
    m = re.search(pattern, source_path.replace("\\", "/"))
    return m.group(1) if m else ""


def moodle_folder(participant: str, full_name: str) -> str:
    """The folder of one participant in Moodle's feedback zip: ``<full name>_
    <participant id>_assignfeedback_file_`` (``_`` and slashes in the name made
    spaces, as Moodle's download does; ``Participant`` for no name)."""
    name = re.sub(r"[_/\\]+", " ", full_name)
    name = re.sub(r"\s+", " ", name).strip() or "Participant"
    return f"{name}_{participant}_{MOODLE_PLUGIN[0]}_{MOODLE_PLUGIN[1]}_"


# --- the archives ------------------------------------------------------------------


def _students(
    course: Course, assignment: str
) -> tuple[str, dict[str, LmsSource], dict[str, str]]:
    """The assignment's id, its LMS sources and every student's full name."""
    with course.gradebook(create=False, assignment=assignment) as gb:
        assignment = course.resolve_released(gb, assignment)
        sources = read_sources(gb, assignment)
        names = {
            str(s.id): " ".join(p for p in (s.first_name, s.last_name) if p)
            for s in gb.students
        }
    return assignment, sources, names


def _pages(course: Course, student: str, assignment: str) -> list[Path]:
    return sorted((course.feedback_dir / student / assignment).glob("*.html"))


def _canvas_entries(
    student: str, source: LmsSource, pages: list[Path]
) -> tuple[list[tuple[str, Path]], str]:
    """The ``(name in the zip, page)`` pairs of one Canvas student, or the reason
    why none."""
    several = len(pages) > 1
    names = [canvas_name(source.path, p.name, several=several) for p in pages]
    for name in names:
        found = canvas_match(name)
        if found is None or found[0] != source.lms_id:
            return [], (
                f"Canvas would not find user {source.lms_id!r} in {name!r}, made "
                f"from the download's {source.path!r} (Canvas reads the user id and "
                "the file's id from the first two numbers of the name)"
            )
    return list(zip(names, pages, strict=True)), ""


def _moodle_entries(
    source: LmsSource, pages: list[Path], full_name: str
) -> tuple[list[tuple[str, Path]], str]:
    """The ``(path in the zip, page)`` pairs of one Moodle student, or the reason
    why none."""
    if not _DIGITS.fullmatch(source.lms_id):
        return [], (
            f"Moodle's participant id {source.lms_id!r} (from {source.path!r}) is "
            "not a number"
        )
    name = _download_name(source.path, source.lms_id) or full_name
    folder = moodle_folder(source.lms_id, name)
    out = [(f"{folder}/{p.name}", p) for p in pages]
    for path, _ in out:
        found = moodle_match(path)
        if found is None or found[:3] != (source.lms_id, *MOODLE_PLUGIN):
            return [], f"Moodle would not find participant {source.lms_id} in {path!r}"
    return out, ""


def _why_not(
    source: LmsSource | None, pages: list[Path], folder: str, assignment: str
) -> str:
    """Why a student gets no archive entry before their names are built, or ``""``."""
    if source is None:
        return "no LMS source: not collected from a Canvas or Moodle download"
    if source.lms not in ARCHIVE_NAMES:
        return (
            f"collected from a {source.lms.capitalize()} download (archives: Canvas "
            "and Moodle only); return its page by hand"
        )
    if not pages:
        return (
            f"no feedback page in {folder}/ (not autograded yet? course autograde "
            f"{assignment}, then course feedback again)"
        )
    return ""


def _student_entries(
    course: Course,
    student: str,
    source: LmsSource | None,
    assignment: str,
    full_name: str,
) -> tuple[list[tuple[str, Path]], str]:
    """One student's ``(name in the zip, page)`` pairs, or the reason why none."""
    pages = _pages(course, student, assignment)
    folder = f"{course.feedback_dir.name}/{student}/{assignment}"
    why = _why_not(source, pages, folder, assignment)
    if why:
        return [], why
    if source.lms == "canvas":
        return _canvas_entries(student, source, pages)
    return _moodle_entries(source, pages, full_name)


def _write_zip(path: Path, entries: list[tuple[str, Path]]) -> None:
    """A zip of ``entries`` written beside ``path`` and moved over it, so that a
    reader never sees half an archive; each entry keeps its page's time."""
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, page in sorted(entries):
            stamp = time.localtime(page.stat().st_mtime)[:6]
            info = zipfile.ZipInfo(name, date_time=max(stamp, (1980, 1, 1, 0, 0, 0)))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, page.read_bytes())
    os.replace(tmp, path)


def lms_archives(
    course: Course, assignment: str, out_dir: Path | None = None
) -> LmsArchives:
    """Write ``canvas.zip`` and ``moodle.zip`` of ``assignment`` into ``out_dir``
    (default ``reports/lms/<assignment>/``); an LMS with no student gets no archive
    (and loses one written before). See the module docstring."""
    assignment, sources, names = _students(course, assignment)
    out = Path(out_dir) if out_dir else course.root / "reports" / "lms" / assignment
    result = LmsArchives(assignment, out, sourced=len(sources))
    with_pages = {
        p.parent.name
        for p in course.feedback_dir.glob(f"*/{assignment}")
        if p.is_dir() and _pages(course, p.parent.name, assignment)
    }
    entries: dict[str, list[tuple[str, Path]]] = {lms: [] for lms in ARCHIVE_NAMES}
    for student in sorted(set(sources) | with_pages):
        source = sources.get(student)
        mine, why = _student_entries(
            course, student, source, assignment, names.get(student, "")
        )
        taken = {name for name, _ in entries.get(source.lms if source else "", [])}
        clash = next((name for name, _ in mine if name in taken), None)
        if clash:
            why = f"{clash!r} is already another student's page in the archive"
        if why:
            result.not_included.append((student, why))
            continue
        entries[source.lms] += mine
        result.entries.setdefault(source.lms, []).extend(
            (student, name) for name, _ in mine
        )
    for lms, file_name in ARCHIVE_NAMES.items():
        path = out / file_name
        if entries[lms]:
            out.mkdir(parents=True, exist_ok=True)
            _write_zip(path, entries[lms])
            result.archives[lms] = path
        elif path.is_file():
            path.unlink()
            result.removed.append(path)
    return result


_UPLOAD = {
    "canvas": "Canvas: the assignment's page > Re-Upload Submissions",
    "moodle": "Moodle: the assignment's submissions > Upload multiple feedback files "
    "in a zip",
}


def format_lms_archives(result: LmsArchives, root: Path | None = None) -> list[str]:
    """The lines ``course feedback`` prints about the archives: none for a class
    that collected nothing from an LMS."""
    if not (result.sourced or result.archives or result.removed):
        return []

    def shown(path: Path) -> str:
        try:
            return str(path.relative_to(root)) if root else str(path)
        except ValueError:
            return str(path)

    lines = []
    for lms, path in result.archives.items():
        count = len({s for s, _ in result.entries[lms]})
        lines.append(
            f"wrote {shown(path)}  ({count} student{'s' * (count != 1)}; "
            f"{_UPLOAD[lms]})"
        )
    lines += [
        f"removed {shown(p)} (no student from that LMS now)" for p in result.removed
    ]
    if result.not_included:
        lines.append("Not in an LMS archive:")
        lines += [f"  {student}: {why}" for student, why in result.not_included]
    return lines
