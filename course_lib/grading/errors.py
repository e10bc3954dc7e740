"""The one error every layer of the grading tool raises for a problem the instructor
(or student) can fix: :class:`CourseError`. It imports nothing, so every module of
:mod:`course_lib.grading` may import it.
"""

__all__ = ["CourseError"]


class CourseError(Exception):
    """A problem the instructor can fix (missing folder, unknown assignment, ...);
    the command line prints its message without a traceback."""
