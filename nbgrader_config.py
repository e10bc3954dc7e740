"""nbgrader configuration for the course (read by `nbgrader` and by `course`).

Source notebooks (with solutions and hidden tests) live in solutions/<assignment>/,
student releases are generated into notebooks/<assignment>/.
"""

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.root = "."
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
c.CourseDirectory.course_id = "positional-encodings"

# Per-cell time limits, per assignment, derived from the solution's measured cost and
# from the slowest honest slow answer (issue 21): the tables, how they were measured
# and how the limits follow, are in course_lib/_time_limits.py, which `course check`
# and the public checks in a student's notebook read too.
from course_lib._time_limits import (  # noqa: E402
    CELL_TIME_LIMIT,
    SLOWEST_HONEST,  # noqa: F401 (no trait yet: kept here beside the limits it sets)
    SOLUTION_COST,
)

# `course autograde` reads the table; a cell past its limit is recorded as
# "ungradable: time limit (N s per cell, cell `<grade_id>`)", never as a wrong answer.
c.CourseTimeLimits.per_cell = CELL_TIME_LIMIT
c.CourseTimeLimits.solution_cost = SOLUTION_COST
# Plain `nbgrader autograde` knows one limit for every assignment: the largest, so it
# cuts off no cell that `course autograde` lets finish.
c.ExecutePreprocessor.timeout = max(CELL_TIME_LIMIT.values())
c.Execute.timeout = max(CELL_TIME_LIMIT.values())
# Every page nbgrader renders from a notebook (feedback, the formgrader's views)
# cleans the HTML of markdown cells and outputs (nbconvert's sanitizer): nothing a
# student's notebook holds runs in a reader's browser. The autograded copies' outputs
# are made inert before that (course_lib/grading/notebooks/safe.py).
c.HTMLExporter.sanitize_html = True
# A student who deletes a test cell gets it back (and its points counted).
c.OverwriteCells.add_missing_cells = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Late work (the instructor guide, "Due dates and late penalties"). A submission is
# late by its timestamp.txt minus the assignment's due date in the gradebook plus the
# student's extension (`course extend STUDENT ASSIGNMENT --days N`); nbgrader's
# AssignLatePenalties then asks the late-submission plugin for a penalty per notebook.
# Default (nothing set here): nbgrader's LateSubmissionPlugin with penalty_method
# "none", no penalty. "zero" takes the whole score of a late notebook:
#   c.LateSubmissionPlugin.penalty_method = "zero"
# A percentage of the score per started day late (from the first second after the
# due date), at most max_percent (course_lib/grading/late.py):
#   c.AssignLatePenalties.plugin_class = "course_lib.grading.late.PercentPerDay"
#   c.PercentPerDay.percent_per_day = 10.0
#   c.PercentPerDay.max_percent = 100.0
# A change to any of these, to a due date or to an extension regrades at the next
# `course autograde`.

# The term (course_lib/grading/editions/term.py; the instructor guide, "Answers that
# change each term"). Nothing set: the open edition, every exercise's default answer
# and the graders' fixed hidden cases. A class that gives credit picks, per term,
# variants whose right answer the public solution does not give, and a seed that
# draws new hidden cases; `course release` writes both into the release and the
# gradebook, `course autograde` grades by them:
#   c.CourseTerm.variants = {"ex05_alibi": "causal"}
#   c.CourseTerm.seed = 20270101
# `course release` refuses an exercise or a variant that is not declared, and lists
# those that are.
