"""Scratch courses and synthetic submissions, built from the source notebooks.

For a dry run of the grading workflow, for the tests of the pipeline and for the
autograding benchmark: :func:`scratch_course` copies the course configuration and some
assignments into an empty folder (with its own gradebook), :func:`solution_answers`
reads the reference answers out of a source notebook, and :func:`student_notebook`
builds what a student would hand in: the released notebook with some answer cells
filled in, and test cells deleted or edited if wanted.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from .course import CONFIG_FILE, Course

__all__ = [
    "scratch_course",
    "solution_answers",
    "student_notebook",
    "write_submission",
]

_MARKERS = {"### BEGIN SOLUTION", "### END SOLUTION"}


def scratch_course(
    dest: str | Path,
    source_root: str | Path,
    assignments: Iterable[str] | None = None,
) -> Course:
    """A new course folder at ``dest`` with ``source_root``'s ``nbgrader_config.py``
    and source assignments (all, or ``assignments``), and a gradebook of its own
    (SQLite in ``dest``)."""
    dest, source_root = Path(dest), Path(source_root)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source_root / CONFIG_FILE, dest / CONFIG_FILE)
    origin = Course(source_root)
    target_sources = dest / origin.source_dir.relative_to(origin.root)
    target_sources.mkdir(parents=True, exist_ok=True)
    names = (
        list(assignments) if assignments is not None else origin.source_assignments()
    )
    for name in names:
        shutil.copytree(origin.source_dir / name, target_sources / name)
    return Course(dest)


def _grade_id(cell) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") or ""


def solution_answers(source_notebook: str | Path) -> dict[str, str]:
    """grade id -> the cell's source with the solution markers removed, for every
    solution cell of a source notebook (the answers that earn full marks)."""
    import nbformat

    nb = nbformat.read(str(source_notebook), as_version=4)
    answers = {}
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            lines = [
                ln for ln in cell.source.splitlines() if ln.strip() not in _MARKERS
            ]
            answers[_grade_id(cell)] = "\n".join(lines)
    return answers


def student_notebook(
    release_notebook: str | Path,
    answers: Mapping[str, str] | None = None,
    *,
    drop: Iterable[str] = (),
    replace: Mapping[str, str] | None = None,
):
    """The released notebook as a student might submit it.

    ``answers``: grade id -> new source of that answer cell; ``drop``: grade ids of
    cells the student deleted; ``replace``: grade id -> new source of any other cell
    (e.g. a test cell the student edited). Unknown grade ids raise ``KeyError``.
    """
    import nbformat

    nb = nbformat.read(str(release_notebook), as_version=4)
    edits = {**(answers or {}), **(replace or {})}
    drop = set(drop)
    ids = {_grade_id(c) for c in nb.cells}
    unknown = (set(edits) | drop) - ids
    if unknown:
        raise KeyError(f"student_notebook: no cells with grade ids {sorted(unknown)}")
    cells = []
    for cell in nb.cells:
        gid = _grade_id(cell)
        if gid in drop:
            continue
        if gid in edits:
            cell.source = edits[gid]
        cells.append(cell)
    nb.cells = cells
    return nb


def write_submission(folder: str | Path, student: str, assignment: str, nb) -> Path:
    """Write ``nb`` (a notebook, or raw ``bytes`` for a broken file) as
    ``<folder>/<student>_<assignment>.ipynb``, the way an LMS download names it."""
    import nbformat

    path = Path(folder) / f"{student}_{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, bytes):
        path.write_bytes(nb)
    else:
        nbformat.write(nb, str(path))
    return path
