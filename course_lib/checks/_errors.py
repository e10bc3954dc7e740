"""The error every grader raises, in a module of its own: the grading machinery
(:mod:`~course_lib.checks._core`) and the recorder (:mod:`~course_lib.checks._record`)
both need it, and neither imports the other for it."""

from __future__ import annotations

__all__ = ["CheckFailed"]


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message says what and, where known, why."""
