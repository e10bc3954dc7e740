"""The instructor and student tool behind the ``course`` command, built on nbgrader.

Modules, one per step: :mod:`~course_lib.grading.check` (a student's public checks),
:mod:`~course_lib.grading.release`, :mod:`~course_lib.grading.collect`,
:mod:`~course_lib.grading.autograde` (parallel, with limits per submission),
:mod:`~course_lib.grading.feedback`, :mod:`~course_lib.grading.report`;
:mod:`~course_lib.grading.kernel` starts every grading kernel (limits, and the
place where a sandbox plugs in); :mod:`~course_lib.grading.gradebook` holds the
gradebook helpers; :mod:`~course_lib.grading.course` finds the course folder and its
nbgrader configuration.
"""

__all__: list[str] = []
