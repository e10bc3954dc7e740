"""The error every grader raises, in a module of its own: the grading machinery
(:mod:`~course_lib.checks._core`) and the recorder (:mod:`~course_lib.checks._record`)
both need it, and neither imports the other for it.

A failed check reads at a glance in a notebook. IPython (JupyterLab, Notebook, Colab,
nbgrader's and ``course check``'s kernels) asks an exception for its
``_render_traceback_()`` before formatting it; :class:`CheckFailed` answers with the
message, the student's own frames when the student's function raised, and one line
saying that ``%tb`` shows the rest, instead of the grader's frames. Nothing else
changes: the cell still fails with an error output (``ename`` ``CheckFailed``, the
message as ``evalue``), which is what nbgrader scores and ``course check`` reports,
and the exception and its traceback are the ordinary Python ones outside IPython.
"""

from __future__ import annotations

import os
import sys
import traceback
from types import TracebackType

__all__ = ["CAUSES", "CheckFailed"]

# Why a check failed when the answer is not a wrong value (``CheckFailed.cause``):
# the function is still the stub, it raised, it called the course_lib reference, it
# changed an input in place, it did not return within the time limit.
CAUSES = ("not-attempted", "raised", "calls-library", "changed-input", "time-limit")

# The graders' folder: frames from files in it are the grader's, not the student's.
_CHECKS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message says what and, where known, why.

    Beside the message, for the grading tool's records (set where known, else
    ``None``): ``mistake``, the slug of the known mistake the answer matched
    (:func:`course_lib.checks._core.known_mistake`), and ``explanation``, its
    sentence; ``cause``, one of :data:`CAUSES` when the check failed for another
    reason than a wrong value; ``answer``, a short plain-text preview of the
    student's wrong value (:func:`course_lib.checks._core.preview`).
    """

    mistake: str | None = None
    explanation: str | None = None
    cause: str | None = None
    answer: str | None = None

    def _render_traceback_(self) -> list[str]:
        """IPython's hook for an exception's own traceback: the short form the first
        time the exception is shown (right after the cell fails), the full one when
        it is asked for again (``%tb``) or when the exception mode is ``Verbose``
        (``%xmode Verbose``)."""
        try:
            return _render(self)
        except Exception:  # noqa: BLE001 - never let the renderer hide the failure
            return traceback.format_exception(type(self), self, self.__traceback__)


def _shell():
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return get() if get is not None else None


def _is_grader_frame(tb: TracebackType) -> bool:
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_CHECKS_DIR)


def _student_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading grader frames (``call_student`` catches the
    student's error, so the cause's traceback starts in the grader)."""
    while tb is not None and _is_grader_frame(tb):
        tb = tb.tb_next
    return tb


def _render(exc: CheckFailed) -> list[str]:
    shell = _shell()
    if shell is None:
        return traceback.format_exception(type(exc), exc, exc.__traceback__)
    formatter = shell.InteractiveTB
    shown_before = getattr(exc, "_course_traceback_shown", False)
    exc._course_traceback_shown = True
    if shown_before or str(getattr(formatter, "mode", "")).lower() == "verbose":
        return formatter.structured_traceback(type(exc), exc, exc.__traceback__)
    lines: list[str] = []
    cause = exc.__cause__
    if cause is not None and not isinstance(cause, CheckFailed):
        # the student's function raised: show where, in the student's code
        own = _student_frames(cause.__traceback__)
        if own is not None:
            lines += formatter.structured_traceback(
                type(cause), cause, own, tb_offset=0
            )
            lines.append("")
    shown = formatter.get_exception_only(type(exc), exc)
    lines += [line.rstrip("\n") for line in shown]
    note = "(The grader's own frames are hidden: run %tb in a new cell to see them.)"
    if str(getattr(shell, "colors", "")).lower() != "nocolor":
        note = f"\x1b[2m{note}\x1b[22m"
    lines.append(note)
    return lines
