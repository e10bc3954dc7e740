"""``course release``: nbgrader ``generate_assignment`` from the source notebooks
(``solutions/``) into the student releases (``notebooks/``).

The gradebook is created when it does not exist and the assignment is added to it:
``nbgrader generate_assignment`` records every graded cell and locked cell there, and
``autograde`` later needs exactly that record.

Before generating, every source notebook of the assignment is made to start with the
set-up cell of :mod:`course_lib.grading.editions.launch` (inserted, or refreshed when
the settings in ``_config.yml`` changed), so each release starts with it too. A course
folder without ``_config.yml`` (a scratch grading folder) keeps its sources as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from .course import Course
from .editions.launch import read_settings, refresh_setup_cells
from .errors import CourseError

__all__ = ["ReleaseResult", "release"]


@dataclass
class ReleaseResult:
    """One assignment released: where the student notebooks went, its points."""

    assignment: str
    notebooks: list[str]
    points: float


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
    api = course.api()
    results = []
    for assignment in assignments:
        if settings is not None:
            sources = sorted((course.source_dir / assignment).glob("*.ipynb"))
            refresh_setup_cells(sources, settings)
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
        results.append(
            ReleaseResult(
                assignment=assignment,
                notebooks=sorted(
                    str(p.relative_to(course.root)) for p in released.glob("*.ipynb")
                ),
                points=points,
            )
        )
    return results
