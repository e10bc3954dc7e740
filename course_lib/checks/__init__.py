"""Exercise graders: ``check_<name>(fn)`` (public, in the students' notebooks) and
``grade_<name>(fn)`` (hidden, run at grading), one module per assignment."""

from ._core import CheckFailed

__all__ = ["CheckFailed"]
