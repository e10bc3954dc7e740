"""JupyterHub for one course on one machine: students and instructors in two
environments, nbgrader's exchange in a shared folder.

Each setting below can be changed through an environment variable (named beside it),
so the same file serves a real machine (the defaults, README.md) and
``tests/test_hub.py`` (temporary folders, ports on 127.0.0.1).

* Accounts are the machine's Unix users (PAM), each server runs as its user
  (``LocalProcessSpawner``), so nbgrader's exchange sees real owners and modes.
* A member of the Unix group ``COURSE_HUB_INSTRUCTORS`` (default
  ``course-instructors``) gets the instructor environment (the full course, the
  formgrader, ``course``); every other user gets the student environment (the student
  wheel of ``course publish``, nbgrader's Assignments tab and Validate, nbgitpuller).
"""

import grp
import os
import pwd

c = get_config()  # noqa: F821 - defined by traitlets when the file is loaded

env = os.environ.get
STUDENT_ENV = env("COURSE_HUB_STUDENT_ENV", "/opt/course/student-env")
INSTRUCTOR_ENV = env("COURSE_HUB_INSTRUCTOR_ENV", "/opt/course/instructor-env")
INSTRUCTORS = env("COURSE_HUB_INSTRUCTORS", "course-instructors")

c.JupyterHub.ip = env("COURSE_HUB_IP", "")
c.JupyterHub.port = int(env("COURSE_HUB_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env("COURSE_HUB_API_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = (
    f"http://127.0.0.1:{int(env('COURSE_HUB_PROXY_API_PORT', '8001'))}"
)
state = env("COURSE_HUB_STATE", "/srv/jupyterhub")
c.JupyterHub.db_url = f"sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = f"{state}/jupyterhub-proxy.pid"
if env("COURSE_HUB_PROXY_COMMAND"):
    c.ConfigurableHTTPProxy.command = [env("COURSE_HUB_PROXY_COMMAND")]

c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(env("COURSE_HUB_USERS", "").split()) or set()
c.Authenticator.allow_all = not c.Authenticator.allowed_users
c.Authenticator.admin_users = set(env("COURSE_HUB_ADMINS", "").split())

c.JupyterHub.spawner_class = "localprocess"
c.Spawner.default_url = "/tree"  # Notebook 7's file list with its Assignments tab
c.Spawner.notebook_dir = "~"
c.Spawner.http_timeout = int(env("COURSE_HUB_HTTP_TIMEOUT", "60"))
c.Spawner.start_timeout = int(env("COURSE_HUB_HTTP_TIMEOUT", "60"))


def _is_instructor(name: str) -> bool:
    try:
        group = grp.getgrnam(INSTRUCTORS)
    except KeyError:
        return False
    primary = pwd.getpwnam(name).pw_gid
    return name in group.gr_mem or primary == group.gr_gid


def _choose_environment(spawner):
    """The user's server runs from its environment: its python, its jupyter
    configuration (``etc/jupyter`` of the environment)."""
    prefix = INSTRUCTOR_ENV if _is_instructor(spawner.user.name) else STUDENT_ENV
    spawner.cmd = [f"{prefix}/bin/python", "-m", "jupyterhub.singleuser"]
    spawner.environment["PATH"] = f"{prefix}/bin:/usr/local/bin:/usr/bin:/bin"
    for name in ("COURSE_HUB_EXCHANGE", "COURSE_HUB_COURSE_ID"):  # nbgrader_config.py
        if env(name):
            spawner.environment[name] = env(name)
    extra = env("COURSE_HUB_JUPYTER_PATH")
    if extra:  # the test's student environment shares the data files (see README)
        spawner.environment["JUPYTER_PATH"] = extra


c.Spawner.pre_spawn_hook = _choose_environment
