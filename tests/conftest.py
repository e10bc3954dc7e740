"""Shared pytest configuration: deterministic torch, repository paths."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


# The thread pools of the processes the tests start (the book build's kernels,
# `course` commands, notebook servers, hub kernels): one thread each unless the caller
# set them. `make test` runs three workers on two cores, so every core is taken; a
# torch (OpenMP) pool of two threads then spins on a core another process needs.
# Chapter 8's training cell, with two other processes busy: 6.6 s with the default
# two threads, 1.4 s with one (2026-11-28, this machine).
SUBPROCESS_THREADS = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}


def pytest_configure(config: pytest.Config) -> None:
    # The tensors in tests are small: one thread avoids thread start-up and
    # contention on the 2-core machines (about 4x faster here for the grader tests).
    torch.set_num_threads(1)
    for name, value in SUBPROCESS_THREADS.items():
        os.environ.setdefault(name, value)


# The longest files, longest first, with about the seconds each takes in `make test`
# (3 workers on 2 cores; 2026-11-27, from the times one fresh-clone run wrote its
# temporary folders and from each file run alone): under pytest-xdist each worker
# takes the next file when it is done with one, so these start at once and the many
# short files fill in at the end. The book's browser tests (book_visits.FILES, one
# work unit) and tests/test_class_notebooks_run.py wait for the book build (started
# as the run begins: about three minutes on a fresh clone); the browser tests come
# after the files that need nothing, so that no more than one worker waits for it.
LONGEST_FIRST = (
    # the student's venv (about 30), then, once the book is built, 25 notebooks in it
    "test_student_wheel.py",
    "test_class_notebooks_run.py",  # 150-250: the book build, then 25 notebooks
    "test_hub.py",  # 100-135
    "test_cluster.py",  # about 120
    "test_giveaways.py",  # about 100
    "test_e2e_class.py",  # about 100
    "test_late.py",  # about 90
    "test_pipeline.py",  # with test_feedback_pages.py: about 120
    "test_feedback_pages.py",
    "test_accessibility.py",  # the browser tests, once the book is built
    "test_release_feedback.py",  # about 40
)


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """The files of :data:`LONGEST_FIRST` first, in that order, then the other files
    that hold slow tests, then the rest (each file's own order kept): the files that
    take a minute or more start early and the many short ones fill in at the end,
    so the workers finish together instead of one finishing a long file alone."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item) -> tuple[int, int]:
        if item.path.name in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(item.path.name)
        return (1 if item.path in slow else 2), 0

    items.sort(key=rank)


def scheduled_together() -> dict[str, tuple[str, ...]]:
    """Groups of test files that one worker runs together (``make test``)."""
    from book_visits import FILES

    return {
        # they share each page's visit in a browser (book_visits)
        "the book in a browser": FILES,
        # they share the class graded in every assignment (every_assignment_graded)
        "every assignment graded": ("test_pipeline.py", "test_feedback_pages.py"),
        # they share the student's venv (student_venv)
        "the student's environment": (
            "test_student_wheel.py",
            "test_class_notebooks_run.py",
        ),
    }


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` (``make test``), except that the files of each group of
    :func:`scheduled_together` go to one worker together, where they share their
    session fixtures (under pytest-xdist each worker sets up its own) instead of
    paying for them once per file. The files are handed out in the order of the
    collection (the longest first, :func:`pytest_collection_modifyitems`), not by
    their number of tests."""
    if config.getvalue("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False
    from xdist.scheduler import LoadFileScheduling

    together = {
        name: group for group, names in scheduled_together().items() for name in names
    }

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return together.get(Path(scope).name, scope)

    return Scheduling(config, log)


# Writes the grading edition of course_lib into its cache (grading_edition()), or
# finds it there.
_WRITE_GRADING_EDITION = (
    "from course_lib.grading.kernels.sandbox import grading_edition\n"
    "grading_edition()\n"
)
_EDITION_WRITER = pytest.StashKey[subprocess.Popen]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist, the controller writes the grading edition of course_lib
    into the grading user's cache (``course_lib.grading.kernels.sandbox
    .grading_edition``: about 15 s of CPU, once per version of the library) in the
    background while the workers start and collect. Otherwise the first autograde of
    each worker finds no edition in the cache, and two or three workers write the
    same one at the same time. A cached edition is found at once; whoever still
    misses it writes their own, as without this."""
    config = session.config
    if os.environ.get("PYTEST_XDIST_WORKER") or not config.getoption(
        "numprocesses", None
    ):
        return
    if "not slow" in (config.getoption("markexpr", "") or ""):
        return
    config.stash[_EDITION_WRITER] = subprocess.Popen(
        [sys.executable, "-c", _WRITE_GRADING_EDITION],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    proc = session.config.stash.get(_EDITION_WRITER, None)
    if proc is not None:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(autouse=True, scope="module")
def _freeze_what_stays():
    """After each test file, what is still alive (modules it imported, torch's
    compiler once a file compiled, session fixtures) moves out of the garbage
    collector's view (``gc.freeze``): a test process holds hundreds of thousands of
    such objects, and every full collection in a later test would walk them all
    again (the grader tests ran twice as slow after a file that used
    torch.compile). Objects that die later are still freed (reference counting);
    cyclic garbage is collected first."""
    yield
    gc.collect()
    gc.freeze()


def course_cli(
    *args: str, cwd: Path, timeout: float = 900, **kw
) -> subprocess.CompletedProcess:
    """``course ARGS`` as a user runs it: a new process in ``cwd``, its output
    captured (``timeout``: seconds before a hung command fails the test)."""
    return subprocess.run(
        [sys.executable, "-m", "course_lib.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


# One process for a sequence of ``course`` commands: ``course_lib.cli.main`` with each
# command's arguments in turn, in the command's folder, its output captured; the
# results go to the file argv[2] (forked grading workers share this process's
# stdout). It stops at the first command that fails.
_CLI_SEQUENCE = """
import contextlib, io, json, os, sys
from course_lib.cli import main
done = []
for cwd, argv in json.loads(sys.argv[1]):
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's errors
            code = exc.code if isinstance(exc.code, int) else 2
    done.append([argv, code, out.getvalue(), err.getvalue()])
    if code != 0:
        break
with open(sys.argv[2], "w") as f:
    json.dump(done, f)
"""


def course_cli_sequence(
    steps: list[tuple[Path, tuple[str, ...]]], scratch: Path, timeout: float = 1800
) -> list[subprocess.CompletedProcess]:
    """``course ARGS`` for each ``(cwd, ARGS)`` of ``steps`` in order, as
    :func:`course_cli` runs one, but all in one new process: ``course_lib.cli.main``
    per command, so that the interpreter starts and imports the grading tool (torch,
    nbgrader: about 2 s of CPU) once, not once per command. Stops after the first
    command that fails; one result per command run (``scratch``: a folder for the
    results file)."""
    results = scratch / "course-cli-sequence.json"
    plan = [[str(cwd), list(args)] for cwd, args in steps]
    proc = subprocess.run(
        [sys.executable, "-c", _CLI_SEQUENCE, json.dumps(plan), str(results)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0 and results.is_file(), (
        f"the course commands' process failed:\n{proc.stdout[-2000:]}"
        f"\n{proc.stderr[-3000:]}"
    )
    return [
        subprocess.CompletedProcess(["course", *argv], code, out, err)
        for argv, code, out, err in json.loads(results.read_text())
    ]


def grading_options(course, **options):
    """``AutogradeOptions(**options)`` with the launcher ``course autograde`` grades
    ``course`` with: the sandbox, whose kernels fork from a warm template that
    imported torch and the checks once (a kernel started cold imports them itself:
    about 1.5 s of CPU per notebook graded, two thirds of test_late.py's time).
    Where the sandbox cannot be built (``make test-fast`` without bubblewrap), the
    library's default, memory and CPU limits only; ``tests/test_sandbox.py`` and
    ``tests/test_doctor.py`` test the sandbox itself."""
    from course_lib.grading.autograde import AutogradeOptions
    from course_lib.grading.errors import CourseError
    from course_lib.grading.kernels.sandbox import grading_launcher

    with contextlib.suppress(CourseError):
        options.setdefault("launcher", grading_launcher(course)[0])
    return AutogradeOptions(**options)


@pytest.fixture(scope="session")
def every_assignment_graded(tmp_path_factory):
    """A scratch course with every assignment of ``solutions/``, released and graded
    for two students: ``perfect`` (the reference answers) and ``untouched`` (the
    release as is); ``(course, {assignment: [(student, status, reason)]})``.

    Used by ``tests/test_pipeline.py`` (the grades) and ``tests/test_feedback_pages.py``
    (the feedback pages of ``perfect``), which run in one worker
    (:func:`scheduled_together`), so the class is graded once per run: grading every
    assignment costs about 25 s of CPU."""
    from course_lib.grading.autograde import autograde
    from course_lib.grading.collect import collect
    from course_lib.grading.release import release
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    tmp = tmp_path_factory.mktemp("pipeline")
    course = scratch_course(tmp / "course", ROOT)
    release(course, "all")
    for assignment in course.source_assignments():
        inbox = tmp / "inbox" / assignment
        src = course.source_dir / assignment / f"{assignment}.ipynb"
        rel = course.release_dir / assignment / f"{assignment}.ipynb"
        write_submission(
            inbox, "perfect", assignment, student_notebook(rel, solution_answers(src))
        )
        write_submission(inbox, "untouched", assignment, student_notebook(rel))
        report = collect(course, inbox, assignment)
        assert not report.not_placed, report.not_placed
    # graded with the launcher `course autograde` uses (grading_options)
    outcomes = {}
    for assignment in course.source_assignments():
        options = grading_options(course, jobs=2, progress=False)
        done = autograde(course, assignment, options)
        outcomes[assignment] = [(o.student, o.status, o.reason) for o in done.outcomes]
    return course, outcomes


@pytest.fixture(scope="session")
def student_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The student wheel of this checkout (``build_student_wheel``, as ``course
    publish`` builds it), written into a relative folder, as ``course publish OUT``
    may pass one: tests/test_student_wheel.py reads it, :func:`student_venv`
    installs it."""
    from course_lib.grading.editions.library import build_student_wheel

    dist = Path(os.path.relpath(tmp_path_factory.mktemp("dist")))
    wheel = build_student_wheel(dist)
    assert wheel.parent == dist.resolve() and wheel.is_file()
    return wheel


@pytest.fixture(scope="session")
def student_venv(student_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) as a student's machine has it: CPU
    torch, the student wheel and its requirements, installed as the guide's hub
    recipe installs them, and the kernel a notebook server gives (``ipykernel``).

    ``tests/test_student_wheel.py`` probes it; ``tests/test_class_notebooks_run.py``
    installs the published wheel (the same package with the chapters' stored
    outputs) over this one and runs the notebooks in it. The two files run in one
    worker (:func:`scheduled_together`), the wheel's tests first, while the book
    builds: torch is installed once (a venv with torch costs about 15 s of CPU)."""
    from test_student_wheel import make_student_venv

    tmp = tmp_path_factory.mktemp("student-env")
    return make_student_venv(student_wheel, tmp, extra=("ipykernel",))


@pytest.fixture
def root() -> Path:
    """The repository root."""
    return ROOT


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator: tests draw random inputs only through it."""
    return torch.Generator().manual_seed(0)


# --- the built book, served and read in a browser (test_book_site, test_launch_links) -

CHROMIUM = Path("/usr/bin/chromium")


def _book_base(factory: pytest.TempPathFactory) -> Path:
    """Where this run keeps its built book: under pytest-xdist (``make test``) the
    folder all workers of the run share."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _build_under_lock(base: Path) -> tuple[Path, Path]:
    """Build the book into ``base`` unless it is built (or failed) already, holding
    the run's lock; its HTML folder and the failure log."""
    out = base / "built-book"
    html, failure = out / "_build" / "html", out / "build-failed.log"
    with (base / "built-book.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (html / "index.html").is_file() and not failure.is_file():
            _build_book(out, failure)
    return html, failure


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the book at once, in the background of one process, when a
    collected test needs it: the tests that do not run meanwhile, and no worker sits
    idle on the lock for the minute and a half the build takes."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return
    if session.config.option.collectonly:  # nothing runs: no build left behind
        return
    if not any("built_book" in getattr(i, "fixturenames", ()) for i in session.items):
        return
    base = _book_base(session.config._tmp_path_factory)  # the fixture's factory
    threading.Thread(target=_build_under_lock, args=(base,), daemon=True).start()


@pytest.fixture(scope="session")
def built_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The book, built once per test run with warnings as errors (started in the
    background as the run begins, :func:`pytest_collection_finish`). Under
    pytest-xdist the workers share it: whoever asks first waits for the build, the
    others read it (a failed build is reported to each of them, not tried again)."""
    html, failure = _build_under_lock(_book_base(tmp_path_factory))
    assert not failure.is_file(), f"strict book build failed:\n{failure.read_text()}"
    assert (html / "index.html").is_file()
    return html


def _build_book(out: Path, failure: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cache = ROOT / "_build" / ".jupyter_cache"
    if cache.is_dir():
        shutil.copytree(cache, out / "_build" / ".jupyter_cache")
    jb = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run(
        [str(jb), "build", str(ROOT), "--path-output", str(out), "-W", "-n"]
        + ["--keep-going"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        failure.write_text((proc.stdout + proc.stderr)[-6000:])


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def server(built_book: Path):
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


# Playwright waits 30 s by default for a page to load or an element to appear: on a
# busy 2-core machine (load average 10) the API page took longer. A wait for an
# event, not a poll: a page that never loads still fails, after this long.
BROWSER_TIMEOUT_MS = 120_000


class _Browser:
    """A Playwright browser whose every new context waits up to
    :data:`BROWSER_TIMEOUT_MS` (the tests' own timeouts still apply)."""

    def __init__(self, browser) -> None:
        self._browser = browser

    def new_context(self, **kwargs):
        ctx = self._browser.new_context(**kwargs)
        ctx.set_default_timeout(BROWSER_TIMEOUT_MS)
        return ctx

    def new_page(self, **kwargs):
        page = self._browser.new_page(**kwargs)
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        return page

    def __getattr__(self, name: str):
        return getattr(self._browser, name)


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("/usr/bin/chromium is missing: `make test` installs it")
        pytest.skip("Debian chromium is not installed (`make test` installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield _Browser(b)
        b.close()


@contextlib.contextmanager
def jupyter_running(base: Path, root_dir: Path, *args: str, env: dict | None = None):
    """``jupyter ARGS`` (``lab``, ``server``) on 127.0.0.1 without a token, serving
    ``root_dir``, its runtime, settings and workspaces private under ``base``; yields
    its URL once ``/api/status`` answers, and stops it at the end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        **(env or {}),
    }
    log = open(base / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("jupyter")), *args, "--no-browser",
         "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", "--IdentityProvider.token=",
         "--ServerApp.password=", f"--ServerApp.root_dir={root_dir}"],
        cwd=root_dir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(
                        f"jupyter {args[0]} did not start:\n"
                        + (base / "server.log").read_text()[-3000:]
                    )
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
