"""nbgrader's ``Execute`` preprocessor, starting kernels through
:class:`~course_lib.grading.kernel.GradingKernelManager`.

nbgrader's ``Execute`` fixes its kernel manager class in ``__init__`` (a keyword
argument, which traitlets lets win over configuration), so the subclass is the clean
way to change how kernels start; :func:`autograde_preprocessors` is nbgrader's own
autograde pipeline with this one step replaced.
"""

from __future__ import annotations

from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute

from .kernel import GradingKernelManager

__all__ = ["GradingExecute", "autograde_preprocessors"]


class GradingExecute(Execute):
    """``Execute`` whose kernels start under the current kernel context's launcher."""

    def __init__(self, *args, **kwargs):
        kwargs["kernel_manager_class"] = GradingKernelManager
        super().__init__(*args, **kwargs)


def autograde_preprocessors(configured: list | None = None) -> list:
    """nbgrader's autograde preprocessors (``configured``, else nbgrader's default)
    with ``Execute`` replaced by :class:`GradingExecute`'s subclass
    :class:`~course_lib.grading.integrity.VerifiedExecute` (test cells judged
    outside the student's kernel, output capped)."""
    from .integrity import VerifiedExecute

    if configured is None:
        configured = Autograde.class_traits()["autograde_preprocessors"].default()
    names = {
        "Execute",
        "nbgrader.preprocessors.Execute",
        "nbgrader.preprocessors.execute.Execute",
    }
    return [
        VerifiedExecute
        if pp is Execute or (isinstance(pp, str) and pp in names)
        else pp
        for pp in configured
    ]
