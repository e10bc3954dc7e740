"""The ``course`` command: arguments, collect, check, kernel limits, gradebook merge,
and the delegation to the lab. Every test works in its own temporary course."""

from __future__ import annotations

import datetime as dt
import functools
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import course_cli

from course_lib import cli
from course_lib.grading.collect import collect, student_from_path
from course_lib.grading.course import Course, sqlite_url
from course_lib.grading.errors import CourseError
from course_lib.grading.kernels.start import (
    GradingKernelManager,
    KernelContext,
    KernelLauncher,
    KernelLimits,
    RlimitLauncher,
    kernel_context,
    parse_bytes,
)
from course_lib.grading.synthetic import (
    scratch_course,
    solution_answers,
    student_notebook,
)

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"
COMMANDS = ("check", "release", "collect", "autograde", "feedback", "report", "lab")


_run = functools.partial(course_cli, timeout=600)


# --- arguments ---------------------------------------------------------------------


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"    {command}" in out
    assert "course autograde ex05 --jobs 2" in out


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "lab"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    assert f"usage: course {command}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["autograde", "ex05", "--jobs", "0"], "must be at least 1"),
        (["autograde", "ex05", "--memory", "lots"], "size must look like 4G"),
        (["collect", "x.zip"], "--assignment"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_are_explained(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_parse_bytes():
    assert parse_bytes("4G") == 4 * 1024**3
    assert parse_bytes("1.5M") == int(1.5 * 1024**2)
    assert parse_bytes("2GiB") == 2 * 1024**3
    assert parse_bytes("12345") == 12345
    assert parse_bytes("none") is None and parse_bytes(None) is None
    with pytest.raises(ValueError, match="parse_bytes: size must look like"):
        parse_bytes("four gigs")


def test_cpu_backstop_follows_the_wall_time():
    limits = KernelLimits(memory=None, wall_seconds=10)
    assert limits.effective_cpu_seconds == 10 * (os.cpu_count() or 1) + 60
    assert KernelLimits(wall_seconds=None).effective_cpu_seconds is None
    assert KernelLimits(cpu_seconds=7).effective_cpu_seconds == 7


# --- the course folder -------------------------------------------------------------


@pytest.fixture
def course(tmp_path) -> Course:
    return scratch_course(tmp_path / "course", ROOT, [A])


def test_course_reads_config_and_resolves_assignments(course, tmp_path):
    assert course.source_dir == course.root / "solutions"
    assert course.release_dir == course.root / "notebooks"
    assert course.gradebook_url == sqlite_url(course.root / "gradebook.db")
    assert course.resolve_assignment("ex05") == A
    assert course.resolve_assignment(A) == A
    with pytest.raises(CourseError, match="unknown assignment 'ex99'"):
        course.resolve_assignment("ex99")
    other = Course(course.root, db_url="sqlite:///" + str(tmp_path / "other.db"))
    assert other.gradebook_url.endswith("other.db")


def test_a_new_gradebook_is_stamped_without_running_alembic(
    course, tmp_path, monkeypatch
):
    """nbgrader stamps a gradebook it creates with its schema's alembic revision,
    found by running the ``alembic`` command (on PATH: missing without an activated
    venv; a second of CPU). The course reads it in-process: the same revision as the
    command reports, and no process is started."""
    from nbgrader.dbutil import ALEMBIC_DIR

    ini = tmp_path / "alembic.ini"
    ini.write_text(f"[alembic]\nscript_location = {ALEMBIC_DIR}\n")
    alembic = Path(sys.executable).with_name("alembic")
    heads = subprocess.run(
        [str(alembic), "-c", str(ini), "heads"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert heads[1] == "(head)", heads  # one head: "<revision> (head)"

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setenv("PATH", str(tmp_path))  # no alembic here
    assert not (course.root / "gradebook.db").exists()
    with course.gradebook() as gb:
        gb.add_student("ada")
        stamped = gb.db.execute(sa.text("SELECT version_num FROM alembic_version"))
        assert stamped.scalars().all() == [heads[0]]
    # and any other gradebook nbgrader creates in a course command's process (each
    # autograde run's private template)
    from nbgrader.api import Gradebook

    with Gradebook(sqlite_url(tmp_path / "template.db"), course.course_id) as gb:
        stamped = gb.db.execute(sa.text("SELECT version_num FROM alembic_version"))
        assert stamped.scalars().all() == [heads[0]]


def test_autograde_before_release_says_what_to_do(course, capsys):
    code = cli.main(["autograde", "ex05", "--root", str(course.root)])
    assert code == 2
    assert "release it first: course release ex05_alibi" in capsys.readouterr().err


# --- collect -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, student",
    [
        ("alice_ex05_alibi.ipynb", "alice"),
        ("alice-ex05_alibi.ipynb", "alice"),
        ("alice_ex05.ipynb", "alice"),
        ("download/alice/ex05_alibi.ipynb", "alice"),
        ("alice/ex05_alibi/ex05_alibi.ipynb", "alice"),
        ("ex05_alibi/alice.ipynb", "alice"),
        ("alice_ex05_alibi (1).ipynb", "alice"),
        ("a.b-c_d_ex05_alibi.ipynb", "a.b-c_d"),
    ],
)
def test_student_ids_from_names(path, student):
    assert student_from_path(path, A) == (student, "")


@pytest.mark.parametrize(
    "path, why",
    [
        ("ex05_alibi.ipynb", "no student id"),
        ("ex05_alibi/ex05_alibi.ipynb", "no student id"),
        ("alice_ex04_rope.ipynb", "another assignment (ex04)"),
        ("alice/notes.ipynb", "matches no"),
        ("al ice_ex05_alibi.ipynb", "not a valid student id"),
    ],
)
def test_names_without_a_student_are_refused(path, why):
    student, reason = student_from_path(path, A)
    assert student is None and why in reason


def _nb_bytes(tag: str) -> bytes:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"# {tag}")])
    return nbformat.writes(nb).encode()


def test_collect_from_a_folder(course, tmp_path):
    inbox = tmp_path / "inbox"
    files = {
        "alice_ex05_alibi.ipynb": _nb_bytes("alice"),
        "bob/ex05_alibi.ipynb": _nb_bytes("bob"),
        "carol/ex05_alibi/ex05_alibi.ipynb": _nb_bytes("carol"),
        "dave_ex05_alibi.ipynb": b"not json at all",  # placed: autograde judges it
        "ex05_alibi.ipynb": _nb_bytes("nobody"),
        "erin_ex04_rope.ipynb": _nb_bytes("erin"),
        "readme.txt": b"hello",
        ".ipynb_checkpoints/alice_ex05_alibi-checkpoint.ipynb": b"{}",
        "old/alice_ex05_alibi.ipynb": _nb_bytes("alice-old"),
    }
    for name, data in files.items():
        (inbox / name).parent.mkdir(parents=True, exist_ok=True)
        (inbox / name).write_bytes(data)
    old = inbox / "old/alice_ex05_alibi.ipynb"
    os.utime(old, (1_600_000_000, 1_600_000_000))
    report = collect(course, inbox, "ex05")
    assert sorted(s for s, _, _ in report.placed) == ["alice", "bob", "carol", "dave"]
    reasons = dict(report.not_placed)
    assert set(reasons) == {
        "ex05_alibi.ipynb",
        "erin_ex04_rope.ipynb",
        "readme.txt",
        "old/alice_ex05_alibi.ipynb",
        ".ipynb_checkpoints/alice_ex05_alibi-checkpoint.ipynb",
    }
    assert (
        "checkpoint" in reasons[".ipynb_checkpoints/alice_ex05_alibi-checkpoint.ipynb"]
    )
    assert "newer file: alice_ex05_alibi.ipynb" in reasons["old/alice_ex05_alibi.ipynb"]
    assert "not a notebook" in reasons["readme.txt"]
    for student, data in (
        ("alice", files["alice_ex05_alibi.ipynb"]),
        ("bob", files["bob/ex05_alibi.ipynb"]),
        ("dave", files["dave_ex05_alibi.ipynb"]),
    ):
        folder = course.submitted_dir / student / A
        assert (folder / f"{A}.ipynb").read_bytes() == data
        stamp = (folder / "timestamp.txt").read_text().strip()
        assert stamp.endswith(" UTC")
    bob_mtime = (inbox / "bob/ex05_alibi.ipynb").stat().st_mtime
    stamp = (course.submitted_dir / "bob" / A / "timestamp.txt").read_text().strip()
    expected = dt.datetime.fromtimestamp(bob_mtime, dt.UTC)
    assert stamp == expected.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    with course.gradebook() as gb:
        assert sorted(s.id for s in gb.students) == ["alice", "bob", "carol", "dave"]
    again = collect(course, inbox, "ex05")
    assert not again.placed
    assert sorted(s for s, _ in again.unchanged) == ["alice", "bob", "carol", "dave"]


def test_collect_from_a_zip(course, tmp_path, capsys):
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(
            zipfile.ZipInfo("alice_ex05_alibi.ipynb", (2025, 3, 1, 12, 0, 0)),
            _nb_bytes("alice"),
        )
        zf.writestr("__MACOSX/._alice_ex05_alibi.ipynb", b"junk")
        zf.writestr("bob/ex05_alibi.ipynb", _nb_bytes("bob"))
        zf.writestr("notes/todo.md", b"x")
    code = cli.main(["collect", str(archive), "-a", "ex05", "--root", str(course.root)])
    out = capsys.readouterr().out
    assert code == 0
    assert "2 placed, 0 unchanged, 2 not placed" in out
    assert "notes/todo.md: not a notebook" in out
    assert "__MACOSX/._alice_ex05_alibi.ipynb: macOS archive metadata" in out
    stamp = (course.submitted_dir / "alice" / A / "timestamp.txt").read_text()
    assert stamp.strip() == "2025-03-01 12:00:00.000000 UTC"


def test_collect_missing_source(course, capsys):
    code = cli.main(
        ["collect", "/nonexistent/x.zip", "-a", "ex05", "--root", str(course.root)]
    )
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


# --- kernel limits -----------------------------------------------------------------


def test_rlimit_launcher_limits_the_process():
    context = KernelContext(limits=KernelLimits(memory=512 << 20, wall_seconds=5))
    probe = (
        "import resource\n"
        "print(resource.getrlimit(resource.RLIMIT_AS)[0])\n"
        "print(resource.getrlimit(resource.RLIMIT_CPU)[0])\n"
        "try:\n"
        "    b = bytearray(1 << 30)\n"
        "    print('allocated')\n"
        "except MemoryError:\n"
        "    print('MemoryError')\n"
    )
    cmd = RlimitLauncher().wrap([sys.executable, "-c", probe], context)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        str(512 << 20),
        str(context.limits.effective_cpu_seconds),
        "MemoryError",
    ]


def test_kernel_manager_uses_the_context_launcher(tmp_path):
    class Tagging(KernelLauncher):
        def wrap(self, command, context):
            return ["sandbox-run", "--scratch", str(tmp_path), "--", *command]

    km = GradingKernelManager(kernel_name="python3")
    km.connection_file = str(tmp_path / "kernel.json")
    km._launch_args = {}
    plain = km.format_kernel_cmd()
    assert "{connection_file}" not in " ".join(plain)
    with kernel_context(KernelContext(launcher=Tagging())):
        wrapped = km.format_kernel_cmd()
    assert wrapped == ["sandbox-run", "--scratch", str(tmp_path), "--", *plain]
    assert km.format_kernel_cmd() == plain  # outside the context: unchanged


def test_context_kill_ends_the_process_group():
    context = KernelContext()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    context.register(proc)
    context.kill()
    assert proc.wait(timeout=30) == -9
    assert context.killed and context.exit_codes() == [-9]


# --- gradebook helpers ---------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_merge_keeps_manual_grades_and_flags_them(tmp_path):
    from nbgrader.api import Gradebook

    from course_lib.grading.gradebook import (
        copy_assignment,
        merge_submission,
        read_submission,
        record_ungradable,
    )

    def define(gb):
        gb.add_assignment("hw")
        gb.add_notebook("hw", "hw")
        gb.add_grade_cell("t1", "hw", "hw", max_score=2, cell_type="code")
        gb.add_grade_cell("t2", "hw", "hw", max_score=1, cell_type="code")
        gb.add_source_cell(
            "t1",
            "hw",
            "hw",
            cell_type="code",
            locked=True,
            source="check()",
            checksum="abc",
        )

    with (
        Gradebook(sqlite_url(tmp_path / "main.db")) as main,
        Gradebook(sqlite_url(tmp_path / "private.db")) as private,
    ):
        define(main)
        copy_assignment(main, private, "hw")
        assert private.find_source_cell("t1", "hw", "hw").source == "check()"
        private.add_student("amy")
        private.add_submission("hw", "amy")
        for name, score in (("t1", 2.0), ("t2", 0.0)):
            grade = private.find_grade(name, "hw", "hw", "amy")
            grade.auto_score, grade.needs_manual_grade = score, False
        private.db.commit()
        result = read_submission(private, "hw", "amy")

        main.add_student("amy")
        main.add_submission("hw", "amy")
        manual = main.find_grade("t2", "hw", "hw", "amy")
        manual.manual_score = 0.5
        main.db.commit()
        merge_submission(main, "hw", "amy", result)
        t1 = main.find_grade("t1", "hw", "hw", "amy")
        t2 = main.find_grade("t2", "hw", "hw", "amy")
        assert (t1.auto_score, t1.needs_manual_grade, t1.score) == (2.0, False, 2.0)
        assert (t2.auto_score, t2.needs_manual_grade, t2.score) == (0.0, True, 0.5)
        merge_submission(main, "hw", "amy", result)  # idempotent
        assert main.find_submission("hw", "amy").score == 2.5

        main.add_student("ben")
        record_ungradable(main, "hw", "ben", None)
        sub = main.find_submission("hw", "ben")
        assert sub.score == 0.0 and sub.max_score == 3.0
        assert all(
            g.auto_score == 0.0 and not g.needs_manual_grade
            for nb in sub.notebooks
            for g in nb.grades
        )


# --- the lab -------------------------------------------------------------------------


def test_lab_delegates_to_the_experiments_module(monkeypatch):
    seen = []
    fake = types.ModuleType("course_lib.experiments.__main__")
    fake.main = lambda argv=None: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "course_lib.experiments.__main__", fake)
    assert cli.main(["lab", "--quick", "--steps", "5"]) == 3
    # stderr is not a terminal under pytest: the lab's progress bar is turned off
    assert seen == [["--quick", "--steps", "5", "--no-progress"]]
    assert cli.main(["lab", "--quiet", "--quick"]) == 3
    assert seen[-1] == ["--quick", "--no-progress"]


def test_lab_help_is_the_lab_s_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["lab", "--help"])
    assert exit_.value.code == 0
    assert "--quick" in capsys.readouterr().out


# --- course check (runs a kernel) ----------------------------------------------------


@pytest.fixture(scope="module")
def student_notebooks(tmp_path_factory):
    """A finished and an untouched ex05 notebook, outside any course folder."""
    import nbformat

    tmp = tmp_path_factory.mktemp("student")
    source = ROOT / "solutions" / A / f"{A}.ipynb"
    release = ROOT / "notebooks" / A / f"{A}.ipynb"
    answers = solution_answers(source)
    wrong = dict(answers)
    wrong["alibi_bias__answer"] = answers["alibi_bias__answer"].replace(
        "return -alibi_slopes", "return alibi_slopes"
    )
    paths = {}
    for name, nb in (
        ("done", student_notebook(release, answers)),
        ("untouched", student_notebook(release)),
        ("wrong", student_notebook(release, wrong)),
    ):
        paths[name] = tmp / name / f"{A}.ipynb"
        paths[name].parent.mkdir()
        nbformat.write(nb, str(paths[name]))
    return paths


@pytest.mark.slow
def test_check_passes_a_finished_notebook(student_notebooks, tmp_path):
    path = student_notebooks["done"]
    before = path.read_bytes()
    out = _run("check", str(path), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS  alibi_slopes" in out.stdout and "PASS  alibi_bias" in out.stdout
    assert "2 of 2 exercises pass" in out.stdout
    assert "all public checks passed" in out.stdout
    assert path.read_bytes() == before  # the student's file is not touched


@pytest.mark.slow
def test_check_reports_each_failure_with_the_grader_message(
    student_notebooks, tmp_path
):
    out = _run("check", str(student_notebooks["wrong"]), cwd=tmp_path)
    assert out.returncode == 1
    assert "PASS  alibi_slopes" in out.stdout
    assert "FAIL  alibi_bias" in out.stdout
    assert "the bias is positive" in out.stdout
    assert "1 of 2 exercises pass" in out.stdout
    out = _run("check", str(student_notebooks["untouched"]), cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout.count("still the stub") == 2


def test_check_refuses_a_broken_file(tmp_path):
    bad = tmp_path / "x.ipynb"
    bad.write_text("{ nope")
    assert cli.main(["check", str(bad)]) == 2
    plain = tmp_path / "plain.ipynb"
    plain.write_bytes(_nb_bytes("no checks here"))
    assert cli.main(["check", str(plain)]) == 2


def _record_early_kernels(monkeypatch) -> list:
    """The processes of the kernels `course check` starts before reading the file."""
    from course_lib.grading import check

    started: list = []
    start = check._start_kernel

    def recording(kernel, cwd):
        km = start(kernel, cwd)
        started.append((km, km.provisioner.process))
        return km

    monkeypatch.setattr(check, "_start_kernel", recording)
    return started


def test_check_starts_the_kernel_before_reading_and_ends_it_on_an_error(
    tmp_path, monkeypatch
):
    """The kernel boots while the notebook is read and repaired; a notebook that
    turns out to have no public checks leaves no kernel (nor connection file)."""
    from course_lib.grading import check
    from course_lib.grading.notebooks import repair

    order: list[str] = []
    started = _record_early_kernels(monkeypatch)
    read = repair.read_notebook

    def reading(*args, **kwargs):
        order.append(f"read after {len(started)} kernel(s)")
        return read(*args, **kwargs)

    monkeypatch.setattr(repair, "read_notebook", reading)
    plain = tmp_path / "plain.ipynb"
    plain.write_bytes(_nb_bytes("no checks here"))
    with pytest.raises(CourseError, match="no public checks"):
        check.check_notebook(plain)
    assert order == ["read after 1 kernel(s)"]
    ((km, process),) = started
    assert process.wait(timeout=10) is not None  # ended, not left running
    assert not Path(km.connection_file).exists()


def test_check_starts_no_kernel_for_a_file_that_is_no_notebook(
    tmp_path, monkeypatch, capsys
):
    started = _record_early_kernels(monkeypatch)
    bad = tmp_path / "x.ipynb"
    bad.write_text("{ nope")
    assert cli.main(["check", str(bad)]) == 2
    assert "not a valid notebook" in capsys.readouterr().err
    assert started == []


def test_check_reports_a_kernel_that_does_not_exist(tmp_path):
    """A notebook naming a kernel this machine lacks: the report says the notebook
    could not run (the early start's failure is left to nbclient, as before)."""
    import nbformat

    from course_lib.grading.check import check_notebook

    nb = nbformat.read(str(ROOT / "notebooks" / A / f"{A}.ipynb"), as_version=4)
    nb.metadata["kernelspec"] = {"name": "no-such-kernel", "display_name": "?"}
    path = tmp_path / f"{A}.ipynb"
    nbformat.write(nb, str(path))
    report = check_notebook(path)
    assert not report.ok
    assert any(
        "could not run" in p and "no-such-kernel" in p for p in report.problems
    ), report.problems


def test_check_keeps_the_kernels_own_stderr_out_of_the_report(tmp_path):
    """What the kernel process writes to its own stderr (log lines, a cell writing to
    file descriptor 2) is not shown to the student, with the kernel started early as
    when nbclient started it."""
    import nbformat

    nb = nbformat.read(str(ROOT / "notebooks" / A / f"{A}.ipynb"), as_version=4)
    nb.cells.insert(
        0, nbformat.v4.new_code_cell("import os\nos.write(2, b'RAW-STDERR-LINE\\n')")
    )
    path = tmp_path / f"{A}.ipynb"
    nbformat.write(nb, str(path))
    run = _run("check", str(path), cwd=tmp_path)
    assert run.returncode == 1, run.stderr  # the release's stubs fail their checks
    assert "alibi_slopes" in run.stdout
    assert "RAW-STDERR-LINE" not in run.stdout + run.stderr


def test_regrading_depends_on_the_grader_and_what_it_imports(tmp_path):
    from course_lib.grading.autograde import _grader_files

    pkg = tmp_path / "course_lib"
    files = {
        "__init__.py": "from .alpha import *\nfrom .beta import *\n",
        "_validate.py": "",
        "alpha.py": "from ._validate import fail\n",
        "beta.py": "import torch\n",
        "gamma.py": "",
        "checks/__init__.py": "from .exA import *\nfrom .exB import *\n",
        "checks/_core.py": "from . import _record\nimport course_lib.gamma\n",
        "checks/_record.py": "import json\n",
        "checks/exA.py": "from course_lib.alpha import f\nfrom ._core import g\n",
        "checks/exB.py": "from course_lib import beta\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    rel = lambda paths: {str(p.relative_to(pkg)) for p in paths}  # noqa: E731
    assert rel(_grader_files("exA", pkg)) == {
        "checks/exA.py",
        "checks/_core.py",
        "checks/_record.py",
        "alpha.py",
        "_validate.py",
        "gamma.py",
    }
    assert rel(_grader_files("exB", pkg)) == {"checks/exB.py", "beta.py"}
    assert rel(_grader_files("exZ", pkg)) == set(files)  # no grader: everything
    names = {p.name for p in _grader_files(A)}  # the real one
    assert {"ex05_alibi.py", "_core.py", "alibi.py"} <= names


@pytest.mark.parametrize("command", ["release", "collect", "autograde", "feedback"])
def test_long_commands_take_quiet(command):
    argv = {
        "release": ["release"],
        "collect": ["collect", "x.zip", "-a", "ex05"],
        "autograde": ["autograde", "ex05"],
        "feedback": ["feedback", "ex05"],
    }[command]
    assert cli.build_parser().parse_args([*argv, "--quiet"]).quiet
    assert not cli.build_parser().parse_args(argv).quiet


def test_progress_bar_only_on_a_terminal(monkeypatch):
    import argparse
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    plain = argparse.Namespace(quiet=False, no_progress=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a file or a pipe
    assert not cli._progress_wanted(plain)
    monkeypatch.setattr(sys, "stderr", Tty())
    assert cli._progress_wanted(plain)
    assert not cli._progress_wanted(argparse.Namespace(quiet=True, no_progress=False))
    assert not cli._progress_wanted(argparse.Namespace(quiet=False, no_progress=True))
