"""The editions of the course and what students get.

- :mod:`.library`: the student edition of ``course_lib`` (exercise targets stubbed,
  public checks on stored values, its wheel) and the grading edition the sandboxed
  kernel imports; :func:`.library.library_fingerprint`, which names the installed
  code.
- :mod:`.publish`: the class edition (``course publish``).
- :mod:`.launch`: the launch links and the set-up cell of every notebook.
- :mod:`.term`: the term's exercise variants and hidden-case seed (``CourseTerm``),
  and the source notebook as a term releases it.
- :mod:`.chapter_runtime`: what a class-edition chapter notebook runs in a
  student's kernel (the student's own answers, or the build's stored output).

May import: :mod:`course_lib.grading.errors`, :mod:`course_lib.grading.notebooks`,
:mod:`course_lib.checks`.
"""
