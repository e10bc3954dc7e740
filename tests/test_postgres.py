"""The gradebook on a real PostgreSQL server.

The test starts its own server (Debian's ``postgresql`` binaries: ``initdb`` and
``pg_ctl``) on 127.0.0.1 at a free port, in a temporary folder, as the ``postgres``
user when it runs as root, and points every ``course`` command at it with ``--db``.
Without the binaries it is skipped, except in CI (``CI`` set), where ``make test``
installs them and their absence is a failure.
"""

from __future__ import annotations

import csv
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import course_cli

from course_lib.grading.synthetic import (
    scratch_course,
    solution_answers,
    student_notebook,
    write_submission,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"


def _pg_bin() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    bindir = _pg_bin()
    if bindir is None:
        message = (
            "PostgreSQL server binaries (initdb, pg_ctl) are not installed: "
            "apt-get install postgresql"
        )
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set, so this is an error)")
        pytest.skip(message)
    as_user: list[str] = []
    data = Path(tempfile.mkdtemp(prefix="course-pg-"))
    if os.geteuid() == 0:  # the server refuses to run as root
        user = pwd.getpwnam("postgres")
        os.chown(data, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    cluster, log = data / "cluster", data / "server.log"

    def run(*cmd: str) -> None:
        out = subprocess.run(
            [*as_user, *cmd], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, f"{cmd[0]} failed:\n{out.stdout}\n{out.stderr}"

    run(
        str(bindir / "initdb"),
        "-D",
        str(cluster),
        "-U",
        "postgres",
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-sync",
    )
    run(
        str(bindir / "pg_ctl"),
        "-D",
        str(cluster),
        "-l",
        str(log),
        "-w",
        "-t",
        "60",
        "-o",
        f"-h 127.0.0.1 -p {port} -k {data} -F",
        "start",
    )
    try:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute("CREATE DATABASE gradebook")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/gradebook"
    finally:
        subprocess.run(
            [
                *as_user,
                str(bindir / "pg_ctl"),
                "-D",
                str(cluster),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(data, ignore_errors=True)


def _course(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    out = course_cli(*args, cwd=cwd, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_autograde_with_a_postgresql_gradebook(postgres_url, tmp_path):
    course = scratch_course(tmp_path / "course", ROOT, [A])
    root = course.root
    _course("release", "ex05", "--db", postgres_url, cwd=root)

    src = root / "solutions" / A / f"{A}.ipynb"
    rel = root / "notebooks" / A / f"{A}.ipynb"
    answers = solution_answers(src)
    positive = dict(answers)
    positive["alibi_bias__answer"] = answers["alibi_bias__answer"].replace(
        "return -alibi_slopes", "return alibi_slopes"
    )
    assert positive != answers
    inbox = tmp_path / "inbox"
    write_submission(inbox, "ada", A, student_notebook(rel, answers))  # 3 + 3
    write_submission(inbox, "bea", A, student_notebook(rel, positive))  # slopes only
    write_submission(inbox, "cy", A, b"\x00not a notebook")
    _course("collect", str(inbox), "-a", "ex05", "--db", postgres_url, cwd=root)
    first = _course(
        "autograde",
        "ex05",
        "--jobs",
        "2",
        "--no-progress",
        "--db",
        postgres_url,
        cwd=root,
    )
    assert "3 submissions, 2 graded, 1 ungradable" in first.stdout

    from nbgrader.api import Gradebook

    from course_lib.grading.gradebook import read_status

    with Gradebook(postgres_url, course.course_id) as gb:
        assert gb.engine.dialect.name == "postgresql"
        scores = {s.student.id: s.score for s in gb.assignment_submissions(A)}
        status = read_status(gb, A)
    assert scores == {"ada": 6.0, "bea": 3.0, "cy": 0.0}
    assert status["cy"].status == "ungradable"
    assert "not a valid notebook" in status["cy"].reason
    assert "the bias is positive" in status["bea"].failures["alibi_bias__public"]
    assert not (root / "gradebook.db").exists()  # nothing went to the SQLite default

    again = _course(
        "autograde", "ex05", "--no-progress", "--db", postgres_url, cwd=root
    )
    assert "3 unchanged" in again.stdout
    _course("report", "ex05", "--db", postgres_url, cwd=root)
    with (root / "reports" / A / "grades.csv").open() as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    assert {s: float(r["score"]) for s, r in rows.items()} == scores
    assert rows["cy"]["status"] == "ungradable"
