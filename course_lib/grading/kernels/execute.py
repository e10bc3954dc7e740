"""nbgrader's ``Execute`` preprocessor, starting kernels through
:class:`~course_lib.grading.kernels.start.GradingKernelManager`.

nbgrader's ``Execute`` fixes its kernel manager class in ``__init__`` (a keyword
argument, which traitlets lets win over configuration), so the subclass is the clean
way to change how kernels start. Its subclass
:class:`~course_lib.grading.notebooks.integrity.VerifiedExecute`, and the autograde
pipeline that uses it
(:func:`~course_lib.grading.notebooks.integrity.autograde_preprocessors`), live in
:mod:`~course_lib.grading.notebooks.integrity`, which imports this module (never the
reverse).
"""

from __future__ import annotations

from nbgrader.preprocessors import Execute

from .start import GradingKernelManager

__all__ = ["GradingExecute"]


class GradingExecute(Execute):
    """``Execute`` whose kernels start under the current kernel context's launcher."""

    def __init__(self, *args, **kwargs):
        kwargs["kernel_manager_class"] = GradingKernelManager
        super().__init__(*args, **kwargs)
