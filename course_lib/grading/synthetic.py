"""Scratch courses and synthetic submissions, built from the source notebooks.

For a dry run of the grading workflow, for the tests of the pipeline and for the
autograding benchmark: :func:`scratch_course` copies the course configuration and some
assignments into an empty folder (with its own gradebook), :func:`solution_answers`
reads the reference answers out of a source notebook, and :func:`student_notebook`
builds what a student would hand in: the released notebook with some answer cells
filled in, and test cells deleted or edited if wanted. :func:`tiny_assignment` is a
one-function source notebook for tests that need an assignment of their own, and
:func:`nbgrader_export` runs nbgrader's own export, what the course's reports are
compared with.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from .course import CONFIG_FILE, Course

__all__ = [
    "nbgrader_export",
    "scratch_course",
    "solution_answers",
    "student_notebook",
    "tiny_assignment",
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


def tiny_assignment(fn: str, body: str, public: str, hidden: str):
    """A source notebook of one function ``fn(a, b)`` whose solution is ``body``,
    a public (2 points) and a hidden (1 point) test cell, and a written answer
    graded by hand (2 points)."""
    import nbformat

    v4 = nbformat.v4

    def meta(grade_id, *, grade, solution, locked, points=None):
        m = {
            "grade": grade,
            "solution": solution,
            "locked": locked,
            "task": False,
            "grade_id": grade_id,
            "schema_version": 3,
        }
        if points is not None:
            m["points"] = points
        return {"nbgrader": m}

    cells = [
        v4.new_markdown_cell(f"Write `{fn}(a, b)`."),
        v4.new_code_cell(
            f"def {fn}(a, b):\n"
            f"    ### BEGIN SOLUTION\n    {body}\n    ### END SOLUTION",
            metadata=meta("answer", grade=False, solution=True, locked=False),
        ),
        v4.new_code_cell(
            public,
            metadata=meta(
                f"{fn}__public", grade=True, solution=False, locked=True, points=2
            ),
        ),
        v4.new_code_cell(
            hidden,
            metadata=meta(
                f"{fn}__hidden", grade=True, solution=False, locked=True, points=1
            ),
        ),
        v4.new_markdown_cell(
            "Why?",
            metadata=meta("written", grade=True, solution=True, locked=False, points=2),
        ),
    ]
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def nbgrader_export(course: Course) -> Path:
    """Run the real ``nbgrader export`` in ``course``'s folder; the CSV it wrote
    (``RuntimeError`` with nbgrader's message if it failed)."""
    import subprocess
    import sys

    out = course.root / "export.csv"
    exe = Path(sys.executable).parent / "nbgrader"
    run = subprocess.run(
        [
            str(exe),
            "export",
            "--to",
            str(out),
            f"--CourseDirectory.db_url={course.gradebook_url}",
        ],
        cwd=course.root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if run.returncode != 0:
        raise RuntimeError(f"nbgrader export failed: {run.stderr[-3000:]}")
    return out
