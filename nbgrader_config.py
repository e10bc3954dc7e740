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

# Student code runs cell by cell; an infinite loop costs one timeout, then grading goes on.
c.ExecutePreprocessor.timeout = 120
c.Execute.timeout = 120
# A student who deletes a test cell gets it back (and its points counted).
c.OverwriteCells.add_missing_cells = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
