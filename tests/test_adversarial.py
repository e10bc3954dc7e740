"""Hostile submissions graded through ``course autograde``: none may do harm.

A class of fifteen ex05_alibi submissions (two honest, thirteen hostile; see
tests/adversarial/submissions.py) is collected and graded by the real command, in
the sandbox, with short limits. For every attack the tests check the three things
the issue asks: the harm did not happen (the file was not read or written, the
server saw no connection, no process survived, the gradebook holds no forged
score), the honest students got exactly their grades, and the attacker's own score
was recorded with the reason.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import socket
import sqlite3
import sysconfig
import threading
import uuid
from pathlib import Path

import nbformat
import pytest
from adversarial.submissions import CELLS, POINTS, A, Targets, build_class
from conftest import course_cli

from course_lib.grading.synthetic import scratch_course, write_submission

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
CELL_TIMEOUT = 10  # seconds per cell
WALL_TIMEOUT = 45  # seconds per submission (CI: two busy cores)
MEMORY = "2G"


class _Listener:
    """A TCP server on the grader's loopback that records every connection."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.connections.append(conn.recv(100))
                except OSError:
                    self.connections.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_course = functools.partial(course_cli, timeout=1200)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make test installs it)")
    tmp = tmp_path_factory.mktemp("adversarial")
    course = scratch_course(tmp / "course", ROOT, [A])
    out = _course("release", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    marker = f"{uuid.uuid4().int % 10**9}.{os.getpid()}"
    listener = _Listener()
    submitted = course.root / "submitted"
    targets = Targets(
        course_root=course.root,
        solution_notebook=course.root / "solutions" / A / f"{A}.ipynb",
        gradebook=course.root / "gradebook.db",
        other_submission=submitted / "honest_correct" / A / f"{A}.ipynb",
        site_packages=Path(sysconfig.get_paths()["purelib"]),
        home=Path.home(),
        host_tmp_file=Path("/tmp") / f"pwned-{marker}.txt",
        port=listener.port,
        sleep_marker=marker,
    )
    cases = build_class(course.root, targets)
    inbox = tmp / "inbox"
    for student, case in cases.items():
        write_submission(inbox, student, A, case.notebook)
    collected = _course("collect", str(inbox), "--assignment", A, cwd=course.root)
    assert collected.returncode == 0, collected.stderr
    before = {
        "solution": _sha(targets.solution_notebook),
        "other_submission": _sha(targets.other_submission),
    }
    try:
        run = _course(
            "autograde",
            A,
            "--jobs",
            "2",
            "--cell-timeout",
            str(CELL_TIMEOUT),
            "--timeout",
            str(WALL_TIMEOUT),
            "--memory",
            MEMORY,
            "--no-progress",
            cwd=course.root,
        )
    finally:
        listener.close()
    yield course, cases, targets, run, listener, before
    for path in targets.write_targets[:-1]:  # clean up, should the sandbox fail
        if path.exists():
            path.unlink()


def _status(course):
    from course_lib.grading.gradebook import read_status

    with course.gradebook() as gb:
        return read_status(gb, A)


def _cell_outputs(course, student: str) -> dict[str, str]:
    """What the graded cells printed in the student's graded notebook (an attack
    that got points prints there what it reached)."""
    path = course.autograded_dir / student / A / f"{A}.ipynb"
    if not path.is_file():
        return {}
    out = {}
    for cell in nbformat.read(str(path), as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type == "code" and grade_id:
            out[grade_id] = "".join(
                o.get("text", "") or f"{o.get('ename')}: {o.get('evalue')}\n"
                for o in cell.get("outputs", [])
            )[-3000:]
    return out


def _cell_scores(course, student: str) -> dict[str, float]:
    with course.gradebook() as gb:
        sub = gb.find_submission(A, student)
        return {g.name: g.score for nb in sub.notebooks for g in nb.grades}


def test_the_run_completes_and_records_everyone(graded):
    course, cases, _, run, _, _ = graded
    assert run.returncode == 0, run.stderr[-3000:]
    assert "bubblewrap sandbox" in run.stdout
    status = _status(course)
    assert set(status) == set(cases)
    for student, row in status.items():
        assert "worker died" not in row.reason, (student, row.reason)


def test_honest_students_get_exactly_their_grades(graded):
    course, cases, _, _, _, _ = graded
    for student in ("honest_correct", "honest_partial"):
        expected = cases[student].cells
        assert _cell_scores(course, student) == {
            c: expected.get(c, 0) for c in CELLS
        }, student
    failures = _status(course)["honest_partial"].failures
    assert sorted(failures) == ["alibi_bias__hidden", "alibi_bias__public"]
    for message in failures.values():
        assert cases["honest_partial"].message in message


@pytest.mark.parametrize(
    "student",
    [
        "read_solutions",
        "gradebook",
        "write_outside",
        "socket",
        "fork_bomb",
        "alloc_30gb",
        "sleeper",
        "kill_parent",
        "tamper_grader",
        "tamper_torch",
        "tamper_trap",
        "tamper_ipython",
        "reference_import",
        "reference_computed_name",
        "reference_clone_code",
        "reference_exec_source",
        "reference_site_packages",
        "sees_only_stubs",
        "big_output",
    ],
)
def test_each_attack_gets_its_score_and_reason(graded, student):
    course, cases, _, _, _, _ = graded
    case = cases[student]
    row = _status(course)[student]
    scores = _cell_scores(course, student)
    assert scores == {c: case.cells.get(c, 0) for c in CELLS}, (
        student,
        row,
        _cell_outputs(course, student),
    )
    assert row.score == sum(case.cells.values())
    assert row.max_score == sum(POINTS.values())
    if case.ungradable:
        assert row.status == "ungradable", row
        assert case.ungradable in row.reason, row.reason
        return
    assert row.status == "graded", row
    failed = [c for c in CELLS if c not in case.cells]
    assert sorted(row.failures) == sorted(failed), row.failures
    phrases = (case.message,) if isinstance(case.message, str) else case.message
    for cell in failed:
        assert any(p in row.failures[cell] for p in phrases), (cell, row.failures[cell])


def test_no_file_was_read_or_written(graded):
    course, _, targets, _, _, before = graded
    assert _sha(targets.solution_notebook) == before["solution"]
    assert _sha(targets.other_submission) == before["other_submission"]
    for path in targets.write_targets[:-1]:
        assert not path.exists(), path
    # Nothing of the solutions reached any notebook the graders wrote.
    for notebook in course.autograded_dir.glob(f"*/{A}/{A}.ipynb"):
        assert "### BEGIN SOLUTION" not in notebook.read_text(), notebook


def test_the_gradebook_holds_no_forged_score(graded):
    course, _, targets, _, _, _ = graded
    with sqlite3.connect(targets.gradebook) as db:
        forged = db.execute(
            "SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL"
        ).fetchone()[0]
    assert forged == 0


def test_no_connection_reached_the_host(graded):
    _, _, _, _, listener, _ = graded
    assert listener.connections == []


def test_no_process_outlives_the_sandbox(graded):
    _, _, targets, _, _, _ = graded
    assert _processes_with(targets.sleep_marker) == []


def test_megabytes_of_output_are_cut(graded):
    course, _, _, _, _, _ = graded
    path = course.autograded_dir / "big_output" / A / f"{A}.ipynb"
    assert path.stat().st_size < 3 << 20
    text = "".join(
        o.get("text", "")
        for c in nbformat.read(str(path), as_version=4).cells
        for o in c.get("outputs", [])
    )
    assert "output truncated by the grader" in text


def test_attacks_are_judged_as_what_they_are(graded):
    """The mistakes table counts only what the grading tool judged outside the
    kernel: every failed cell of a graded attacker has its judgement, a cell that
    failed as tampering is judged tampering, and nothing an attack did makes a
    cell count as one of the exercise's known mistakes unless its failure says so
    in the pristine grader's words."""
    from course_lib.grading.gradebook import read_judgements

    course, _, _, _, _, _ = graded
    status = _status(course)
    with course.gradebook() as gb:
        rows = read_judgements(gb, A)
    judged = {(r["student"], r["grade_id"]): r for r in rows}
    failed = {
        (student, cell): message
        for student, row in status.items()
        if row.status == "graded"
        for cell, message in row.failures.items()
    }
    assert set(judged) == set(failed)
    kinds = {r["kind"] for r in rows}
    assert "tampering" in kinds, kinds
    for key, message in failed.items():
        row = judged[key]
        assert (row["kind"] == "tampering") == ("tampering detected" in message), (
            key,
            row,
            message,
        )
        if row["kind"] == "mistake":
            assert "is wrong in a known way" in message, (key, message)
            assert row["explanation"] in message, (key, row)
