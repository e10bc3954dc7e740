"""The instructor and student tool behind the ``course`` command, built on nbgrader.

Subpackages, each owning one concern (their docstrings say what they may import):

- :mod:`~course_lib.grading.kernels`: starting and isolating one grading kernel
  (limits, sandbox, warm template);
- :mod:`~course_lib.grading.notebooks`: reading, repairing and verifying a
  submitted notebook;
- :mod:`~course_lib.grading.editions`: the student, grading and class editions,
  launch links.

Above them, the class workflow, one module per step: :mod:`.check` (a student's
public checks), :mod:`.release`, :mod:`.roster` (the students and their LMS
ids), :mod:`.collect`, :mod:`.autograde` (the
orchestrator) with its backends :mod:`.pool` (local worker processes) and
:mod:`.cluster` (Dask), which both run :mod:`.grade` (grading one submission);
:mod:`.late` (extensions, and late penalties a percentage per day);
:mod:`.feedback` (its page template in ``templates/course_feedback/``; with
:mod:`.lms_return`, the zips that return it through Canvas and Moodle),
:mod:`.report` (with :mod:`.mistakes`, what the class got wrong,
and :mod:`.lms`, ``course report all`` and the files Canvas and Moodle import);
:mod:`.similarity` (``course similarity``: answers far more alike than the class's,
side by side, for a person to judge);
:mod:`.course` (the course folder and its nbgrader
configuration), :mod:`.gradebook`, :mod:`.synthetic` (scratch courses and classes
for tests and benchmarks). :mod:`.errors` holds the one error every layer raises.
"""

__all__: list[str] = []
