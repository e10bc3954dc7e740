"""What is done to a submitted notebook before and while it is graded.

- :mod:`.repair`: reading a submission and repairing a student's accidents
  (duplicated or extra cells, lost metadata), with notes in plain words.
- :mod:`.integrity`: the test cells run as released and judged by the trusted
  graders outside the student's kernel.
- :mod:`.safe`: what a student's notebook shows reaches a browser (feedback,
  formgrader) only as inert content.

May import: :mod:`course_lib.grading.errors`, :mod:`course_lib.grading.kernels`,
:mod:`course_lib.checks`.
"""
