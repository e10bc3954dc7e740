"""The course directory: where it is, its nbgrader configuration, its assignments.

Every instructor command works on one :class:`Course`: a root directory holding
``nbgrader_config.py``, the source notebooks (``solutions/``), the releases
(``notebooks/``) and nbgrader's working folders (``submitted/``, ``autograded/``,
``feedback/``), plus a gradebook given by an SQLAlchemy URL (SQLite by default, any
database SQLAlchemy can reach, PostgreSQL included).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CourseError

__all__ = ["Course", "find_course_root", "sqlite_url"]

CONFIG_FILE = "nbgrader_config.py"
_STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")


def find_course_root(start: Path | None = None) -> Path:
    """The nearest directory, from ``start`` (default: the working directory) upwards,
    that holds ``nbgrader_config.py``; ``start`` itself when there is none."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return here


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of an SQLite file (absolute, so it does not depend on the
    working directory)."""
    return f"sqlite:///{Path(path).resolve()}"


def _absolute_db_url(url: str, root: Path) -> str:
    """Resolve a relative SQLite path against the course root; other URLs unchanged."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        rest = url[len(prefix) :]
        if rest and not rest.startswith(":memory:"):
            return sqlite_url(root / rest)
    return url


def _alembic_head() -> str:
    """The alembic revision of the gradebook schema this nbgrader creates, read from
    nbgrader's own migration scripts."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    return ScriptDirectory(ALEMBIC_DIR).get_current_head()


def _stamp_new_gradebooks_in_process() -> None:
    """nbgrader stamps a gradebook it creates with that revision, which it finds by
    running the ``alembic`` command: the one on ``PATH`` (missing without an
    activated venv), a second of CPU for each new gradebook (the course's, and each
    autograde run's private template). Read it in this process instead: the same
    revision, from the same scripts."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = _alembic_head


def valid_student_id(student: str) -> bool:
    """Whether ``student`` can be an nbgrader student id (a folder name without
    separators or spaces)."""
    return bool(_STUDENT_ID.match(student)) and ".." not in student


@dataclass
class Course:
    """A course directory with its nbgrader configuration.

    ``db_url`` overrides the gradebook URL of ``nbgrader_config.py``; extra
    ``overrides`` are ``{"Section": {"trait": value}}`` applied last.
    """

    root: Path
    db_url: str | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if not self.root.is_dir():
            raise CourseError(f"course directory {self.root} does not exist")
        _stamp_new_gradebooks_in_process()
        self._config = self._load_config()

    # --- configuration -------------------------------------------------------------

    def _load_config(self):
        from traitlets.config import Config
        from traitlets.config.loader import PyFileConfigLoader

        config = Config()
        if (self.root / CONFIG_FILE).is_file():
            config.merge(
                PyFileConfigLoader(CONFIG_FILE, path=str(self.root)).load_config()
            )
        cd = config.CourseDirectory
        cd.root = str(self.root)
        url = self.db_url or cd.get("db_url") or "sqlite:///gradebook.db"
        cd.db_url = _absolute_db_url(str(url), self.root)
        for section, values in self.overrides.items():
            for key, value in values.items():
                config[section][key] = value
        return config

    @property
    def config(self):
        """A copy of the traitlets ``Config`` nbgrader runs with (root and gradebook
        made absolute)."""
        return copy.deepcopy(self._config)

    def _dir(self, trait: str, default: str) -> Path:
        name = self._config.CourseDirectory.get(trait) or default
        return (self.root / name).resolve()

    @property
    def source_dir(self) -> Path:
        return self._dir("source_directory", "source")

    @property
    def release_dir(self) -> Path:
        return self._dir("release_directory", "release")

    @property
    def submitted_dir(self) -> Path:
        return self._dir("submitted_directory", "submitted")

    @property
    def autograded_dir(self) -> Path:
        return self._dir("autograded_directory", "autograded")

    @property
    def feedback_dir(self) -> Path:
        return self._dir("feedback_directory", "feedback")

    @property
    def gradebook_url(self) -> str:
        return str(self._config.CourseDirectory.db_url)

    @property
    def course_id(self) -> str:
        return str(self._config.CourseDirectory.get("course_id") or "default_course")

    def max_file_size(self) -> int:
        """The cap on one submitted file, in bytes: nbgrader's
        ``CourseDirectory.max_file_size`` (kilobytes of 1000 bytes, as nbgrader's
        ``ignore_patterns`` counts them; default 100000, 100 MB)."""
        from nbgrader.coursedir import CourseDirectory

        kb = self._config.CourseDirectory.get("max_file_size")
        if kb is None:
            kb = CourseDirectory.max_file_size.default_value
        return int(kb) * 1000

    @property
    def cell_timeout(self) -> int | None:
        """The per-cell execution timeout in seconds from the configuration."""
        for section in ("Execute", "ExecutePreprocessor"):
            value = self._config[section].get("timeout")
            if value is not None:
                return int(value)
        return None

    # --- nbgrader objects ----------------------------------------------------------

    def coursedir(self, config=None):
        """An ``nbgrader.coursedir.CourseDirectory`` for this course."""
        from nbgrader.coursedir import CourseDirectory

        return CourseDirectory(config=config or self.config)

    def api(self, config=None):
        """An ``nbgrader.apps.NbGraderAPI`` bound to this course."""
        from nbgrader.apps import NbGraderAPI

        config = config or self.config
        return NbGraderAPI(coursedir=self.coursedir(config), config=config)

    def check_gradebook_url(self, *, create: bool = True) -> None:
        """A :class:`CourseError` unless the gradebook URL is one SQLAlchemy can use:
        a URL, a database whose driver is installed, and for SQLite an existing
        folder (and, with ``create=False``, an existing file). Nothing is written."""
        import sqlalchemy as sa

        url = self.gradebook_url
        try:
            parsed = sa.engine.make_url(url)
            parsed.get_dialect()  # imports the driver
        except sa.exc.NoSuchModuleError:
            raise CourseError(
                f"the gradebook URL {url!r} names a database SQLAlchemy does not know"
            ) from None
        except (sa.exc.ArgumentError, ValueError):
            raise CourseError(
                f"the gradebook URL {url!r} is not an SQLAlchemy URL "
                "(e.g. sqlite:///gradebook.db or postgresql+psycopg://user@host/db)"
            ) from None
        except ModuleNotFoundError as exc:
            raise CourseError(
                f"the gradebook URL {url!r} needs the Python package {exc.name!r}, "
                "which is not installed"
            ) from None
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (
            None,
            "",
            ":memory:",
        ):
            db_file = Path(parsed.database)
            if not create and not db_file.is_file():
                raise CourseError(
                    f"no gradebook at {db_file}; release an assignment first "
                    "(course release all)"
                )
            if not db_file.parent.is_dir():
                raise CourseError(
                    f"the gradebook's folder {db_file.parent} does not exist"
                )

    def gradebook_exists(self) -> bool:
        """Whether the gradebook is there already (always true for a database
        server; for SQLite, whether the file exists)."""
        try:
            self.check_gradebook_url(create=False)
        except CourseError:
            return False
        return True

    def gradebook(self, *, create: bool = True, assignment: str | None = None):
        """An open ``nbgrader.api.Gradebook`` (a context manager); the database and
        its tables are created when they do not exist, unless ``create=False``: then
        a missing SQLite file is a :class:`CourseError` (and no file is written).
        A gradebook URL that SQLAlchemy cannot use or reach is a :class:`CourseError`.
        With ``assignment`` (a command's argument), a missing gradebook names it:
        unknown, or not released yet.
        """
        import sqlalchemy as sa
        from nbgrader.api import Gradebook

        if assignment is not None and not create and not self.gradebook_exists():
            self.check_gradebook_url(create=True)  # a bad URL says so first
            name = self.resolve_assignment(assignment)
            raise CourseError(
                f"{name} is not in the gradebook yet (there is none); release it "
                f"first: course release {name}"
            )
        self.check_gradebook_url(create=create)
        url = self.gradebook_url
        try:
            return Gradebook(url, self.course_id)
        except sa.exc.OperationalError as exc:
            first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise CourseError(f"cannot open the gradebook {url!r}: {first}") from None

    def resolve_released(self, gb, name: str) -> str:
        """:meth:`resolve_assignment` for a command that needs the assignment in the
        gradebook ``gb`` (autograde, feedback, report): a :class:`CourseError` that
        says to release it first when it is not there."""
        known = [a.name for a in gb.assignments]
        assignment = self.resolve_assignment(
            name, known=known + self.source_assignments()
        )
        if assignment not in known:
            raise CourseError(
                f"{assignment} is not in the gradebook yet; release it first: "
                f"course release {assignment}"
            )
        return assignment

    # --- assignments -----------------------------------------------------------------

    def source_assignments(self) -> list[str]:
        """The assignment folders under the source directory, sorted."""
        if not self.source_dir.is_dir():
            return []
        return sorted(
            p.name
            for p in self.source_dir.iterdir()
            if p.is_dir()
            and not p.name.startswith((".", "_"))
            and any(p.glob("*.ipynb"))
        )

    def resolve_assignment(self, name: str, *, known: list[str] | None = None) -> str:
        """The full assignment id for ``name``: an exact id, or a unique prefix such
        as ``ex05`` for ``ex05_alibi``."""
        candidates = sorted(
            set(known if known is not None else self.source_assignments())
        )
        if name in candidates:
            return name
        matches = [a for a in candidates if a.startswith(name + "_")]
        if len(matches) == 1:
            return matches[0]
        if not candidates:
            raise CourseError(
                f"unknown assignment {name!r}: {self.source_dir} holds no assignments"
            )
        if matches:
            raise CourseError(f"assignment {name!r} is ambiguous: {', '.join(matches)}")
        raise CourseError(
            f"unknown assignment {name!r}; known: {', '.join(candidates)}"
        )

    def submissions(self, assignment: str) -> dict[str, Path]:
        """student id -> ``submitted/<student>/<assignment>`` for every submission."""
        found: dict[str, Path] = {}
        if not self.submitted_dir.is_dir():
            return found
        for student_dir in sorted(self.submitted_dir.iterdir()):
            path = student_dir / assignment
            if student_dir.is_dir() and path.is_dir():
                found[student_dir.name] = path
        return found


def default_course(
    root: str | os.PathLike[str] | None,
    db_url: str | None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> Course:
    """The course at ``root``, or the nearest one above the working directory.

    A folder without ``nbgrader_config.py`` is a :class:`CourseError`, so that a
    command run in the wrong place says so instead of writing a gradebook there."""
    if root:
        base = Path(root)
        if not base.is_dir():
            raise CourseError(f"the course folder {base} does not exist")
        if not (base / CONFIG_FILE).is_file():
            raise CourseError(f"{base} is not a course folder: it has no {CONFIG_FILE}")
    else:
        base = find_course_root()
        if not (base / CONFIG_FILE).is_file():
            raise CourseError(
                f"no course folder here: neither {base} nor a folder above it has "
                f"{CONFIG_FILE}; run it in the course folder or give --root DIR"
            )
    return Course(base, db_url=db_url, overrides=overrides or {})
