"""``course feedback``: nbgrader ``generate_feedback`` for every graded submission,
and a short page for each submission that could not be graded, saying why.

nbgrader writes ``feedback/<student>/<assignment>/<notebook>.html`` from the
autograded notebooks and the gradebook. A submission that could not be graded has no
autograded notebook, so nbgrader skips it; this module writes the same file for it
with the reason and the score of zero, so that every student who submitted gets
feedback through nbgrader's ``release_feedback``.

A submission whose accidents were repaired before grading (a pasted or moved cell,
lost metadata: :mod:`course_lib.grading.notebooks.repair`) carries the list of repairs
as the first cell of its autograded notebook, so nbgrader's page shows it at the top.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from .course import Course
from .errors import CourseError
from .gradebook import read_status
from .notebooks.repair import notes_from_notebook

__all__ = ["FeedbackResult", "feedback"]


@dataclass
class FeedbackResult:
    """The feedback files written, graded and ungradable."""

    assignment: str
    graded: list[str] = field(default_factory=list)
    ungradable: list[str] = field(default_factory=list)
    # student -> the repairs their feedback lists (students without repairs absent)
    repaired: dict[str, list[str]] = field(default_factory=dict)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>
<body>
<h1>{title}</h1>
<p>Your submission could not be graded automatically, so it was recorded with a score
of <strong>0 / {max_score:g}</strong>.</p>
<p>Reason: {reason}</p>
<p>Run <code>course check {notebook}.ipynb</code> on your notebook to see the problem,
and ask your instructor about resubmitting.</p>
</body></html>
"""


def feedback(course: Course, assignment: str) -> FeedbackResult:
    """Generate the feedback of every submission of ``assignment``."""
    with course.gradebook(create=False, assignment=assignment) as gb:
        assignment = course.resolve_released(gb, assignment)
        status = read_status(gb, assignment)
        notebooks = [nb.name for nb in gb.find_assignment(assignment).notebooks]
    result = FeedbackResult(assignment)
    graded = sorted(
        p.parent.name
        for p in course.autograded_dir.glob(f"*/{assignment}")
        if p.is_dir()
    )
    if graded:
        outcome = course.api().generate_feedback(assignment, force=True)
        if not outcome.get("success"):
            detail = (outcome.get("log") or "") + (outcome.get("error") or "")
            raise CourseError(f"nbgrader generate_feedback failed:\n{detail.strip()}")
        for student in graded:
            folder = course.feedback_dir / student / assignment
            result.graded += sorted(
                str(p.relative_to(course.root)) for p in folder.glob("*.html")
            )
            repairs = [
                text
                for nb in notebooks
                for text in notes_from_notebook(
                    course.autograded_dir / student / assignment / f"{nb}.ipynb"
                )
            ]
            if repairs:
                result.repaired[student] = repairs
    for student, row in sorted(status.items()):
        if row.status != "ungradable":
            continue
        folder = course.feedback_dir / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        for nb in notebooks:
            page = folder / f"{nb}.html"
            page.write_text(
                _PAGE.format(
                    title=html.escape(f"{assignment}: feedback for {student}"),
                    max_score=row.max_score,
                    reason=html.escape(row.reason),
                    notebook=html.escape(nb),
                )
            )
            result.ungradable.append(str(page.relative_to(course.root)))
    return result
