"""A term of ex05 on a real JupyterHub (``deploy/hub/``), driven in Chromium.

What runs, as on a class's hub machine: ``jupyterhub`` (pip) with
``configurable-http-proxy`` (npm) on 127.0.0.1, with ``deploy/hub/jupyterhub_config.py``
unchanged: PAM logins of Unix users this test creates (``useradd``, a password set with
``chpasswd``), each server started by ``LocalProcessSpawner`` as its own user, in the
student environment of ``deploy/hub/student-env/`` (the student wheel that
``course publish`` builds, nbgrader's Assignments tab and Validate, the formgrader and
create-assignment disabled, nbgitpuller). nbgrader's exchange is a folder of mode
``ugo+rwx``, as ``deploy/hub/README.md`` makes it. So fetching, validating, submitting
and fetching feedback go through nbgrader's own exchange code as each student's Unix
user, with the file modes and owners a hub has; the instructor's ``nbgrader collect``
and ``release_feedback`` and ``course autograde``/``feedback`` are the commands the
guide gives.

What differs from a real machine (README.md, "What the test replaces"): the student
environment finds its third-party packages (jupyterlab, nbgrader, torch, ...) in the
course venv's site-packages through a path file instead of its own ``pip install``
(the same versions, and never the full course: the venv's ``course_lib`` is an
editable install whose import hook only runs in the venv itself); the instructor's
commands run as the test's user (root) in a course folder of the test, because the
course venv lives under ``/root`` where no other account may run it.

Ana submits the right answers, Ben ``alibi_bias`` with the sign flipped (a known
mistake of ex05, ``positive_bias`` in tests/test_e2e_class.py), Cem a notebook that is
not JSON: every one of them fetches feedback. Each student's kernel fails to import
the hidden graders and the instructor's modules.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import course_cli, course_cli_sequence

from course_lib.grading.synthetic import scratch_course, solution_answers

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "hub"
CHP = ROOT / "_vendor" / "npm-chp" / "node_modules" / ".bin" / "configurable-http-proxy"
SYSTEM_PYTHON = Path("/usr/bin/python3.11")
A = "ex05_alibi"
STUDENTS = ("hubt-ana", "hubt-ben")
BROKEN = "hubt-cem"  # submits a notebook that is not JSON (from the command line)
INSTRUCTOR = "hubt-prof"
GROUP = "hubt-instructors"
MARK = "# edited in the browser by {user}"
# Ben's mistake: the bias without its minus sign (ALiBi, Press et al. 2022, sec. 3:
# the bias is -m * |i - j|)
SIGN = ("return -alibi_slopes", "return alibi_slopes")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*cmd, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert out.returncode == 0, f"{cmd}: {out.stdout}\n{out.stderr}"
    return out


def _as_user(user: str, *cmd: str, env: dict | None = None):
    home = pwd.getpwnam(user).pw_dir
    base = {"HOME": home, "PATH": "/usr/bin:/bin", "USER": user}
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", "-i"]
        + [f"{k}={v}" for k, v in {**base, **(env or {})}.items()]
        + list(cmd),
        capture_output=True,
        text=True,
        cwd=home,
        timeout=120,
    )


def _prerequisites():
    if os.geteuid() != 0:
        pytest.skip("the hub test creates Unix users: run as root (CI does)")
    for tool, why in (
        (CHP, "`make test` installs configurable-http-proxy with npm"),
        (SYSTEM_PYTHON, "the student environment is a venv of /usr/bin/python3.11"),
        (Path(shutil.which("useradd") or "/nonexistent"), "useradd is missing"),
    ):
        if not Path(tool).exists():
            pytest.skip(f"{tool} is missing: {why}")
    pytest.importorskip("jupyterhub", reason="pip install -e '.[hub]'")


def _student_env(tmp: Path) -> tuple[Path, Path]:
    """The students' environment: a venv with only the student wheel of its own,
    deploy/hub/student-env/etc copied in; third-party packages from the course venv
    (see the module docstring)."""
    from course_lib.grading.editions.library import build_student_wheel

    wheel = build_student_wheel(tmp / "dist")
    env = tmp / "student-env"
    _run(str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(env))
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(env / "bin" / "python"),
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        str(wheel),
    )
    site = next((env / "lib").glob("python3.*/site-packages"))
    venv_site = next((Path(sys.prefix) / "lib").glob("python3.*/site-packages"))
    (site / "course-hub-shared.pth").write_text(f"{venv_site}\n")
    # what pip's installs of those packages put into etc/jupyter (notebook, jupyterlab,
    # nbgrader, nbgitpuller enable their server extensions there), then the hub's
    # settings for students over them
    shutil.copytree(Path(sys.prefix) / "etc" / "jupyter", env / "etc" / "jupyter")
    shutil.copytree(DEPLOY / "student-env" / "etc", env / "etc", dirs_exist_ok=True)
    shutil.copy(DEPLOY / "nbgrader_config.py", env / "etc" / "jupyter")
    return env, wheel


def _accounts(password: str):
    subprocess.run(["groupadd", "-f", GROUP], check=True)
    for user in (*STUDENTS, BROKEN, INSTRUCTOR):
        subprocess.run(["userdel", "-r", user], capture_output=True)
        extra = ["-G", GROUP] if user == INSTRUCTOR else []
        _run("useradd", "-m", "-s", "/bin/bash", *extra, user)
        _run("chpasswd", input=f"{user}:{password}\n")


def _drop_accounts():
    for user in (*STUDENTS, BROKEN, INSTRUCTOR):
        subprocess.run(["pkill", "-u", user], capture_output=True)
        subprocess.run(["userdel", "-r", user], capture_output=True)
    subprocess.run(["groupdel", GROUP], capture_output=True)


@pytest.fixture(scope="module")
def hub():
    _prerequisites()
    tmp = Path(tempfile.mkdtemp(prefix="course-hub-"))
    tmp.chmod(0o755)
    password = secrets.token_urlsafe(12)
    proc = None
    try:
        _accounts(password)
        env, wheel = _student_env(tmp)
        exchange = tmp / "exchange"
        exchange.mkdir()
        exchange.chmod(0o777)  # deploy/hub/README.md: chmod ugo+rwx
        course = scratch_course(tmp / "course", ROOT, [A])
        x = f"--Exchange.root={exchange}"
        out = course_cli("release", "ex05", cwd=course.root)
        assert out.returncode == 0, out.stderr
        _run(sys.executable, "-m", "nbgrader", "release_assignment", A, x,
             cwd=course.root)  # fmt: skip
        state = tmp / "state"
        state.mkdir()
        port = _free_port()
        hub_env = {
            **os.environ,
            "COURSE_HUB_IP": "127.0.0.1",
            "COURSE_HUB_PORT": str(port),
            "COURSE_HUB_API_PORT": str(_free_port()),
            "COURSE_HUB_PROXY_API_PORT": str(_free_port()),
            "COURSE_HUB_STATE": str(state),
            "COURSE_HUB_PROXY_COMMAND": str(CHP),
            "COURSE_HUB_USERS": " ".join((*STUDENTS, INSTRUCTOR)),
            "COURSE_HUB_INSTRUCTORS": GROUP,
            "COURSE_HUB_STUDENT_ENV": str(env),
            "COURSE_HUB_INSTRUCTOR_ENV": sys.prefix,
            "COURSE_HUB_EXCHANGE": str(exchange),
            "COURSE_HUB_JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter"),
            "COURSE_HUB_HTTP_TIMEOUT": "60",
        }
        log = open(state / "hub.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterhub",
                "-f",
                str(DEPLOY / "jupyterhub_config.py"),
            ],
            cwd=state,
            env=hub_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/hub/login", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "the hub did not start:\n" + (state / "hub.log").read_text()
                    )
                time.sleep(0.3)
        yield {
            "url": url,
            "password": password,
            "course": course,
            "exchange": exchange,
            "env": env,
            "wheel": wheel,
            "x": x,
            "log": state / "hub.log",
        }
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        _drop_accounts()
        shutil.rmtree(tmp, ignore_errors=True)


def _api(page, base: str, method: str, path: str, body: dict | None = None):
    """The single-user server's REST API with the browser's own session (cookies
    and the ``_xsrf`` token), as the notebook editor saves a notebook."""
    return page.evaluate(
        """async ([url, method, body]) => {
            const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "";
            const r = await fetch(url, {method, headers: {"X-XSRFToken": xsrf,
                "Content-Type": "application/json"},
                body: body === null ? undefined : JSON.stringify(body)});
            return {status: r.status, body: await r.text()};
        }""",
        [f"{base}/api/{path}", method, body],
    )


def _answers(course, user: str) -> dict[str, str]:
    sol = solution_answers(course.source_dir / A / f"{A}.ipynb")
    bias = sol["alibi_bias__answer"]
    if user == STUDENTS[1]:
        assert SIGN[0] in bias, "the ex05 solution changed; update this test's edit"
        bias = bias.replace(*SIGN)
    mark = MARK.format(user=user)
    return {
        "alibi_slopes__answer": f"{mark}\n{sol['alibi_slopes__answer']}",
        "alibi_bias__answer": bias,
    }


def _assignments_tab(page, base: str):
    page.goto(f"{base}/tree")
    page.get_by_text("Nbgrader", exact=True).click()
    page.get_by_text("Assignment List", exact=True).click()
    page.locator("#nbgrader-assignment-list").wait_for()


def _student_session(browser, hub, user: str, shots: Path) -> dict:
    """Ana or Ben: log in, fetch ex05 on the Assignments tab, write the answers into
    the fetched notebook, Validate, Submit. Returns what the page showed."""
    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    base = f"{hub['url']}/user/{user}"
    seen = {}
    try:
        page.goto(f"{hub['url']}/hub/login")
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", hub["password"])
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url(re.compile(rf"/user/{user}/tree"), timeout=90_000)
        _assignments_tab(page, base)
        page.locator("button", has_text=re.compile(r"^\s*Fetch\s*$")).first.click()
        fetched = page.locator("#fetched_assignments_list")
        fetched.locator("button", has_text="Submit").wait_for(timeout=60_000)
        # the instructor's pages are not served to a student
        seen["formgrader"] = page.request.get(f"{base}/formgrader").status
        seen["assignment_list"] = page.request.get(
            f"{base}/assignments?course_id=positional-encodings"
        ).status
        got = _api(page, base, "GET", f"contents/{A}/{A}.ipynb")
        assert got["status"] == 200, got
        nb = json.loads(got["body"])["content"]
        answers = _answers(hub["course"], user)
        for cell in nb["cells"]:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in answers:
                cell["source"] = answers.pop(gid)
        assert not answers, f"answer cells not found: {sorted(answers)}"
        put = _api(
            page,
            base,
            "PUT",
            f"contents/{A}/{A}.ipynb",
            {"type": "notebook", "format": "json", "content": nb},
        )
        assert put["status"] == 200, put
        _assignments_tab(page, base)
        fetched.locator("a.assignment-notebooks-link").first.click()
        fetched.locator("button", has_text="Validate").first.click()
        dialog = page.locator(".validation-success, .validation-failed").first
        dialog.wait_for(timeout=90_000)
        seen["validate"] = dialog.inner_text()
        page.keyboard.press("Escape")
        fetched.locator("button", has_text="Submit").first.click()
        submitted = page.locator("#submitted_assignments_list")
        submitted.get_by_text("Fetch Feedback").first.wait_for(timeout=60_000)
        seen["context"] = (ctx, page, base)
        return seen
    except Exception:
        page.screenshot(path=str(shots / f"{user}.png"))
        (shots / f"{user}.html").write_text(page.content())
        raise


def _broken_submission(hub):
    """Cem fetches and submits from a terminal with nbgrader's own commands, his
    notebook overwritten by text that is not JSON (nbgrader submits it as it is)."""
    py = str(hub["env"] / "bin" / "python")
    env = {"COURSE_HUB_EXCHANGE": str(hub["exchange"])}
    got = _as_user(BROKEN, py, "-m", "nbgrader", "fetch_assignment", A, env=env)
    assert got.returncode == 0, got.stderr
    home = Path(pwd.getpwnam(BROKEN).pw_dir)
    (home / A / f"{A}.ipynb").write_text('{"cells": [ {"cell_type": "code", ')
    got = _as_user(BROKEN, py, "-m", "nbgrader", "submit", A, env=env)
    assert got.returncode == 0, got.stderr


def _instructor(hub) -> dict[str, subprocess.CompletedProcess]:
    """The guide's steps 4 and 5 in the course folder (as the test's user)."""
    root, x = hub["course"].root, hub["x"]
    done = {
        "collect": _run(sys.executable, "-m", "nbgrader", "collect", A, x, cwd=root)
    }
    # course autograde, then course feedback, in one process (the grading tool
    # imported once; it stops after a command that fails)
    ran = course_cli_sequence(
        [(root, ("autograde", "ex05", "--jobs", "2")), (root, ("feedback", "ex05"))],
        root.parent,
    )
    done.update(zip(("autograde", "feedback"), ran, strict=False))
    done["release_feedback"] = subprocess.run(
        [sys.executable, "-m", "nbgrader", "release_feedback", A, x],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return done


def _fetch_feedback(page, base: str) -> str:
    """Fetch Feedback on the Assignments tab, then open the page nbgrader put into
    ~/ex05_alibi/feedback/<timestamp>/."""
    _assignments_tab(page, base)
    page.locator("#submitted_assignments_list").get_by_text(
        "Fetch Feedback"
    ).first.click()
    link = page.locator("a", has_text=re.compile("view feedback", re.I)).first
    link.wait_for(timeout=20_000)
    listing = _api(page, base, "GET", f"contents/{A}/feedback")
    assert listing["status"] == 200, listing
    stamps = [e["name"] for e in json.loads(listing["body"])["content"]]
    assert len(stamps) == 1, stamps
    page.goto(f"{base}/files/{A}/feedback/{stamps[0]}/{A}.html")
    return page.inner_text("body")


@pytest.fixture(scope="module")
def term(hub, browser, tmp_path_factory):
    """The term: Ana and Ben in Chromium, Cem from a terminal, the instructor's
    commands, then each student's feedback (a student whose feedback never comes
    gets the error instead of a page; the tests below say which)."""
    shots = tmp_path_factory.mktemp("hub-shots")
    clock = {"start": time.monotonic()}
    sessions = {}
    for user in STUDENTS:
        sessions[user] = _student_session(browser, hub, user, shots)
        clock[f"{user} submitted"] = time.monotonic()
    _broken_submission(hub)
    steps = _instructor(hub)
    clock["instructor done"] = time.monotonic()
    feedback = {}
    for user in STUDENTS:
        _, page, base = sessions[user]["context"]
        try:
            feedback[user] = _fetch_feedback(page, base)
        except Exception as exc:  # noqa: BLE001 - reported by the tests below
            page.screenshot(path=str(shots / f"{user}-feedback.png"))
            feedback[user] = exc
    py = str(hub["env"] / "bin" / "python")
    env = {"COURSE_HUB_EXCHANGE": str(hub["exchange"])}
    feedback[BROKEN] = _as_user(BROKEN, py, "-m", "nbgrader", "fetch_feedback", A,
                                env=env)  # fmt: skip
    clock["feedback fetched"] = time.monotonic()
    times = {k: round(v - clock["start"], 1) for k, v in clock.items()}
    (shots / "times.json").write_text(json.dumps(times))
    print("hub term, seconds since the first login:", times)
    yield sessions, steps, feedback
    for s in sessions.values():
        s["context"][0].close()


def test_students_validate_and_submit_in_the_browser(term):
    sessions, _, _ = term
    for user in STUDENTS:  # the formgrader is off, the Assignments tab's API is on
        assert sessions[user]["formgrader"] == 404, sessions[user]
        assert sessions[user]["assignment_list"] == 200, sessions[user]
    assert "passes all the tests" in sessions[STUDENTS[0]]["validate"]
    # Ben's public check fails and names his mistake (course_lib/checks/ex05_alibi.py)
    assert "The following cell failed" in sessions[STUDENTS[1]]["validate"]
    assert "the bias is positive" in sessions[STUDENTS[1]]["validate"]


def test_the_submitted_notebook_is_the_one_the_student_edited(hub, term):
    """One copy per exercise: what nbgrader collected for each student is the
    notebook the Assignments tab fetched into ~/ex05_alibi/ and the browser edited."""
    for user in STUDENTS:
        sub = hub["course"].root / "submitted" / user / A / f"{A}.ipynb"
        assert MARK.format(user=user) in sub.read_text(), user
        home = Path(pwd.getpwnam(user).pw_dir)
        assert sub.read_bytes() == (home / A / f"{A}.ipynb").read_bytes()


def test_every_student_gets_feedback_through_the_exchange(hub, term):
    _, steps, feedback = term
    for name, run in steps.items():
        assert run.returncode == 0, (name, run.stdout[-2000:], run.stderr[-2000:])
    right, wrong = (feedback[u] for u in STUDENTS)
    assert isinstance(right, str) and isinstance(wrong, str), (right, wrong)
    release = json.loads(
        (hub["course"].root / "notebooks" / A / f"{A}.ipynb").read_text()
    )
    points = {
        c["metadata"]["nbgrader"]["grade_id"]: float(
            c["metadata"]["nbgrader"]["points"]
        )
        for c in release["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade")
    }
    total = sum(points.values())
    # Ben's slopes are the solution's; both bias cells (public, hidden) fail
    ben = sum(v for k, v in points.items() if k.startswith("alibi_slopes"))
    assert 0 < ben < total
    score = re.compile(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)")
    assert re.search(score, right) and re.search(score, wrong), (right[:500], wrong)
    got_right = re.search(score, right).groups()
    got_wrong = re.search(score, wrong).groups()
    assert float(got_right[0]) == float(got_right[1]) == total
    assert float(got_wrong[1]) == total and float(got_wrong[0]) == ben
    assert "the bias is positive" in wrong
    cem = feedback[BROKEN]
    assert cem.returncode == 0, cem.stderr
    home = Path(pwd.getpwnam(BROKEN).pw_dir)
    pages = list((home / A / "feedback").glob(f"*/{A}.html"))
    assert len(pages) == 1, cem.stderr
    assert "could not be graded" in pages[0].read_text()


def test_students_kernels_cannot_import_the_graders(hub):
    from test_student_wheel import _PROBE, _hidden_graders

    wanted = {
        "graders": _hidden_graders(),
        "modules": ["course_lib.grading.autograde", "course_lib.grading.editions"],
        "targets": {"course_lib": ["alibi_bias", "alibi_slopes"]},
    }
    run = _as_user(
        STUDENTS[0], str(hub["env"] / "bin" / "python"), "-c", _PROBE,
        json.dumps(wanted),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout)
    assert Path(found["where"]).is_relative_to(hub["env"])
    assert found["graders"] and all(
        v.startswith("raised: ") for v in found["graders"].values()
    ), found["graders"]
    assert all(v.startswith("missing ") for v in found["modules"].values())
    for verdict, _ in found["targets"].values():
        assert "is exercise 5" in verdict
