"""Starting and isolating one grading kernel.

- :mod:`.start`: the kernel manager every grading kernel starts through, its limits
  (memory, CPU, wall time) and launchers; the rlimit launcher (``_rlimit_exec.py``).
- :mod:`.sandbox`: the bubblewrap sandbox (no network, a read-only file system,
  its own namespaces) and its warm template (``_warm_template.py``), with the
  script that runs inside (``_sandbox_exec.py``).
- :mod:`.execute`: nbgrader's Execute preprocessor on that kernel manager.
- :mod:`.doctor`: ``course doctor``: whether this machine can build the sandbox and
  has the grading packages, and the one-line fix of each thing missing.
- :mod:`.guard`: what a grading run leaves behind (processes, temporary folders)
  goes with it, however the run ends, even killed; its standard-library part for
  the scripts above (``_lifetime.py``).

May import: :mod:`course_lib.grading.errors` and, for the grading edition the
sandbox runs, :mod:`course_lib.grading.editions`. Nothing here knows assignments,
gradebooks or submissions.
"""
