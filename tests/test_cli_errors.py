"""Every expected error of ``course`` is one line on stderr, exit status 2, no
traceback, and writes no file (no stray ``gradebook.db``).

Most cases run ``course_lib.cli.main`` in this process (each subprocess pays
``import torch``); two run the installed ``course`` command for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib import cli
from course_lib.grading.synthetic import scratch_course

ROOT = Path(__file__).resolve().parents[1]
A = "ex05_alibi"
COURSE_COMMANDS = ("release", "collect", "autograde", "feedback", "report")


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder below ``folder`` with its size and mtime."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


@pytest.fixture
def place(tmp_path):
    """A scratch course without a gradebook, an empty inbox beside it, and an
    empty folder that is not a course."""
    course = scratch_course(tmp_path / "course", ROOT, [A])
    (tmp_path / "inbox").mkdir()
    (tmp_path / "elsewhere").mkdir()
    return tmp_path, course


def _argv(command: str, assignment: str, inbox: Path) -> list[str]:
    if command == "collect":
        return ["collect", str(inbox), "-a", assignment]
    if command == "autograde":
        return ["autograde", assignment, "--unsafe-no-sandbox", "--no-progress"]
    return [command, assignment]


def _one_line_error(code, capsys, command: str) -> str:
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"course {command}: error: "), err
    assert "Traceback" not in err and "Error:" not in err.split(": error: ", 1)[1]
    assert out == ""
    return lines[0]


def _run_in_process(argv, capsys) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse errors
        return int(exc.code or 0)


@pytest.mark.parametrize("command", COURSE_COMMANDS)
def test_error_paths_write_nothing(command, place, capsys, monkeypatch):
    tmp, course = place
    inbox = tmp / "inbox"
    cases = [
        # (working directory, extra arguments, words the message must hold)
        (tmp / "elsewhere", [], "no course folder here"),
        (tmp, ["--root", str(tmp / "missing")], "does not exist"),
        (tmp, ["--root", str(tmp / "elsewhere")], "not a course folder"),
        (course.root, ["--db", "not a url"], "not an SQLAlchemy URL"),
        (course.root, ["--db", "nosuchdb://u@h/db"], "does not know"),
        (course.root, ["--db", f"sqlite:///{tmp}/no/such/dir/g.db"], "does not exist"),
    ]
    cases.append((course.root, [], "unknown assignment 'ex99'"))
    before = _snapshot(tmp)
    for cwd, extra, words in cases:
        monkeypatch.chdir(cwd)
        name = "ex99" if "unknown" in words else "ex05"
        code = _run_in_process(_argv(command, name, inbox) + extra, capsys)
        line = _one_line_error(code, capsys, command)
        assert words in line, (extra, line)
        assert _snapshot(tmp) == before, (extra, line)
    assert not (course.root / "gradebook.db").exists()


@pytest.mark.parametrize("command", ["autograde", "feedback", "report"])
def test_unreleased_assignment_says_release_first(command, place, capsys):
    tmp, course = place
    before = _snapshot(tmp)
    argv = _argv(command, "ex05", tmp / "inbox") + ["--root", str(course.root)]
    line = _one_line_error(_run_in_process(argv, capsys), capsys, command)
    assert f"release it first: course release {A}" in line
    assert _snapshot(tmp) == before


def test_bad_pattern_is_one_line(place, capsys):
    tmp, course = place
    before = _snapshot(tmp)
    for pattern, words in (
        ("(", "not a regular expression"),
        ("(?P<name>x)", "(?P<student>...)"),
    ):
        argv = ["collect", str(tmp / "inbox"), "-a", "ex05", "--pattern", pattern]
        code = _run_in_process(argv + ["--root", str(course.root)], capsys)
        line = _one_line_error(code, capsys, "collect")
        assert words in line
    assert _snapshot(tmp) == before


def test_missing_sandbox_is_one_line(place, capsys, monkeypatch):
    from course_lib.grading.kernels import sandbox

    tmp, course = place
    monkeypatch.setattr(
        sandbox, "sandbox_problem", lambda launcher: "bubblewrap is not installed"
    )
    with course.gradebook() as gb:  # as if released: the sandbox is the problem
        gb.update_or_create_assignment(A)
    before = _snapshot(tmp)
    code = _run_in_process(["autograde", "ex05", "--root", str(course.root)], capsys)
    line = _one_line_error(code, capsys, "autograde")
    assert "bubblewrap is not installed" in line and "--unsafe-no-sandbox" in line
    assert _snapshot(tmp) == before


def test_check_of_a_missing_notebook_is_one_line(tmp_path, capsys):
    code = _run_in_process(["check", str(tmp_path / "nope.ipynb")], capsys)
    line = _one_line_error(code, capsys, "check")
    assert "does not exist" in line
    assert list(tmp_path.iterdir()) == []


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    from importlib.metadata import version

    assert capsys.readouterr().out.strip() == f"course {version('course_lib')}"


def _course_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "course"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [str(exe), *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.slow
def test_real_processes_end_without_a_traceback(place):
    """The two reported cases as a user meets them: ``course report`` of an unknown
    assignment outside a course folder, and a bad gradebook URL."""
    tmp, course = place
    before = _snapshot(tmp)
    for cwd, argv, words in (
        (tmp / "elsewhere", ["report", "nosuch"], "no course folder here"),
        (course.root, ["report", "nosuch"], "unknown assignment 'nosuch'"),
        (
            course.root,
            ["autograde", "ex05", "--unsafe-no-sandbox", "--db", "postgresql://"],
            "gradebook",
        ),
    ):
        run = _course_cmd(*argv, cwd=cwd)
        assert run.returncode == 2, (argv, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
        assert len(run.stderr.splitlines()) == 1, run.stderr
        assert words in run.stderr, run.stderr
        assert run.stdout == ""
    assert _snapshot(tmp) == before
