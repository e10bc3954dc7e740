# /etc/jupyter/nbgrader_config.py on the hub machine: read by every user's server
# (students' Assignments tab, validate) and by the instructor's nbgrader commands.
# The course's own nbgrader_config.py (in the instructor's course folder) adds the
# course's settings; these two lines must agree with it.
import os

c = get_config()  # noqa: F821 - defined by traitlets when the file is loaded

c.CourseDirectory.course_id = os.environ.get(
    "COURSE_HUB_COURSE_ID", "positional-encodings"
)
c.Exchange.root = os.environ.get("COURSE_HUB_EXCHANGE", "/srv/nbgrader/exchange")
