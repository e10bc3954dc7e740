"""``course release``: nbgrader ``generate_assignment`` from the source notebooks
(``solutions/``) into the student releases (``notebooks/``).

The gradebook is created when it does not exist and the assignment is added to it:
``nbgrader generate_assignment`` records every graded cell and locked cell there, and
``autograde`` later needs exactly that record.

Before generating, every source notebook of the assignment is made to start with the
set-up cell of :mod:`course_lib.grading.editions.launch` (inserted, or refreshed when
the settings in ``_config.yml`` changed), so each release starts with it too. A course
folder without ``_config.yml`` (a scratch grading folder) keeps its sources as they are.

nbgrader generates from a staged copy of each assignment's folder whose notebooks are
:func:`course_lib.grading.editions.term.term_notebook` of the sources, for the course's term
(``CourseTerm`` in ``nbgrader_config.py``): the chosen variant's task and solution,
the term's variant and seed in the test cells' grader calls, and no variant text left
in any cell's metadata. Without a term the release is the open edition's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .course import Course
from .editions.launch import read_settings, refresh_setup_cells
from .errors import CourseError
from .editions.term import Term, read_term, term_notebook

__all__ = ["ReleaseResult", "release"]


@dataclass
class ReleaseResult:
    """One assignment released: where the student notebooks went, its points, and
    the term it was released for (its variant; the seed of its hidden cases, or
    ``None`` for the fixed ones)."""

    assignment: str
    notebooks: list[str]
    points: float
    variant: str = "default"
    seed: int | None = None


def release(course: Course, which: str = "all") -> list[ReleaseResult]:
    """Generate the student version of ``which`` (an assignment id, a unique prefix
    such as ``ex05``, or ``"all"``), overwriting earlier releases."""
    available = course.source_assignments()
    if which == "all":
        if not available:
            raise CourseError(f"no assignments under {course.source_dir}")
        assignments = available
    else:
        assignments = [course.resolve_assignment(which, known=available)]
    settings = read_settings(course.root)
    term = read_term(course)
    results = []
    with tempfile.TemporaryDirectory(prefix="course-release-") as staging:
        for assignment in assignments:
            if settings is not None:
                sources = sorted((course.source_dir / assignment).glob("*.ipynb"))
                refresh_setup_cells(sources, settings)
            _stage(course, assignment, term, Path(staging))
            result = _generate(course, assignment, Path(staging))
            result.variant, result.seed = term.variant(assignment), term.seed
            results.append(result)
    return results


def _stage(course: Course, assignment: str, term: Term, staging: Path) -> None:
    """Copy ``assignment``'s source folder under ``staging``, its notebooks as the
    term releases them."""
    dest = staging / assignment
    shutil.copytree(course.source_dir / assignment, dest)
    for path in sorted(dest.glob("*.ipynb")):
        notebook = json.loads(path.read_text())
        staged = term_notebook(notebook, assignment, term)
        path.write_text(json.dumps(staged, indent=1, ensure_ascii=False) + "\n")


def _generate(course: Course, assignment: str, staging: Path) -> ReleaseResult:
    """nbgrader ``generate_assignment`` of the staged ``assignment``."""
    config = course.config
    config.CourseDirectory.source_directory = str(staging)
    api = course.api(config)
    outcome = api.generate_assignment(assignment, force=True, create=True)
    if not outcome.get("success"):
        detail = (outcome.get("error") or outcome.get("log") or "").strip()
        raise CourseError(
            f"nbgrader generate_assignment {assignment} failed:\n{detail}"
        )
    with course.gradebook() as gb:
        a = gb.find_assignment(assignment)
        points = float(a.max_score)
    released = course.release_dir / assignment
    return ReleaseResult(
        assignment=assignment,
        notebooks=sorted(
            str(p.relative_to(course.root)) for p in released.glob("*.ipynb")
        ),
        points=points,
    )
