"""A failed check reads at a glance: the message (with its hint) in a few lines, no
grader frames, the full traceback one ``%tb`` away.

:class:`course_lib.checks.CheckFailed` renders itself through IPython's
``_render_traceback_`` hook, so every front end that shows a kernel's error output
(JupyterLab, Notebook, Colab, nbgrader's feedback, ``course check``) gets the short
form. The first tests execute a small notebook in a real kernel (nbclient) and read
the error outputs; the browser tests open the same notebook in JupyterLab and in
Notebook 7, run the check cell and read what the student sees.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from conftest import jupyter_running

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# A wrong alibi_bias with the sign mistake the ex05 graders name (+m|i - j|), a
# function that raises inside the student's own code, and a check of a right answer
# after a failure (the kernel is still usable).
WRONG = '''\
import torch
from course_lib.checks.ex05_alibi import check_alibi_bias

def slopes(n):
    return torch.tensor([2.0 ** (-8.0 * h / n) for h in range(1, n + 1)])

def alibi_bias(n_heads, seq_len):
    i = torch.arange(seq_len)
    return slopes(n_heads)[:, None, None] * (i[:, None] - i[None, :]).abs()'''

CHECK = "check_alibi_bias(alibi_bias)"

RAISES = '''\
def broken_bias(n_heads, seq_len):
    x = torch.zeros(3)
    return x[seq_len]  # the student's own bug

check_alibi_bias(broken_bias)'''

# Frames of the graders that the short form must not show.
GRADER_FILES = ("_core.py", "ex05_alibi.py", "_errors.py", "checks/")


def _notebook(*sources: str, check_metadata: bool = True) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    if check_metadata:
        # as in a release notebook: the public test cell is a graded cell
        nb.cells[1].metadata["nbgrader"] = {
            "grade": True,
            "grade_id": "alibi_bias__public",
            "locked": True,
            "points": 1,
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
    return nb


def _error(cell) -> dict:
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1, cell.outputs
    return errors[0]


def _text(output) -> list[str]:
    return ANSI.sub("", "\n".join(output["traceback"])).splitlines()


@pytest.fixture(scope="module")
def executed() -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = _notebook(WRONG, CHECK, "%tb", RAISES, "%xmode Verbose\n" + CHECK)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=300).execute(
        cwd=str(ROOT), env=env
    )
    return nb


def test_failed_check_is_the_message_in_a_few_lines(executed) -> None:
    error = _error(executed.cells[1])
    assert error["ename"] == "CheckFailed"
    message = error["evalue"]
    # the message names the call and the known mistake (the hint)
    assert "alibi_bias(" in message and "positive" in message, message
    lines = _text(error)
    assert len(lines) <= 3, "\n".join(lines)
    assert lines[0] == f"CheckFailed: {message}"
    assert "%tb" in lines[-1]
    for line in lines:
        assert "Traceback" not in line, line
        for name in GRADER_FILES:
            assert name not in line, (name, line)


def test_full_traceback_stays_available(executed) -> None:
    """``%tb`` after the failed cell shows every frame, the graders' included."""
    full = "\n".join(_text(_error(executed.cells[2])))
    assert "Traceback (most recent call last)" in full
    assert "ex05_alibi.py" in full
    assert "check_alibi_bias(alibi_bias)" in full
    assert len(full.splitlines()) > 10


def test_student_error_shows_the_students_frames_only(executed) -> None:
    """When the student's function raises, the short form shows where, in the
    student's code, and still no grader frame."""
    error = _error(executed.cells[3])
    assert error["ename"] == "CheckFailed"
    assert "IndexError" in error["evalue"]
    text = "\n".join(_text(error))
    assert "return x[seq_len]  # the student's own bug" in text
    assert "in broken_bias" in text
    assert text.splitlines()[-2] == f"CheckFailed: {error['evalue']}"
    for name in GRADER_FILES:
        assert name not in text, (name, text)
    assert len(text.splitlines()) <= 15, text


def test_verbose_mode_shows_everything(executed) -> None:
    """``%xmode Verbose`` (an instructor debugging a grader) gets the full form."""
    text = "\n".join(_text(_error(executed.cells[4])))
    assert "ex05_alibi.py" in text and "Traceback" in text


def test_nbgrader_scores_the_failed_cell_zero(executed) -> None:
    from nbgrader.utils import determine_grade

    assert determine_grade(executed.cells[1]) == (0, 1.0)


def test_short_form_outside_ipython_is_the_ordinary_one() -> None:
    """No IPython: the hook falls back to Python's own formatting, every frame."""
    from course_lib.checks._errors import CheckFailed

    def grader() -> None:
        raise CheckFailed("f(2) is wrong")

    try:
        grader()
    except CheckFailed as exc:
        text = "".join(exc._render_traceback_())
    assert "Traceback (most recent call last)" in text
    assert "in grader" in text and "CheckFailed: f(2) is wrong" in text


# --------------------------------------------------------------------------------------
# in the browser: what the student sees in JupyterLab and Notebook 7


# The notebook each front end opens (JupyterLab, Notebook 7).
_NOTEBOOK_OF = {"lab/tree": "check-lab.ipynb", "notebooks": "check-notebook.ipynb"}


@pytest.fixture(scope="module")
def jupyter_server(tmp_path_factory: pytest.TempPathFactory):
    """A Jupyter server (JupyterLab and Notebook 7) on 127.0.0.1 without a token,
    over a folder holding the failing notebook; settings and workspaces private."""
    base = tmp_path_factory.mktemp("jupyter")
    work = base / "work"
    work.mkdir()
    # one copy per front end: the two tests share this server, and a notebook that
    # one front end has run (its kernel session, its saved outputs) must not be what
    # the other one opens (a JupyterLab dialog then blocked the cells in CI)
    for name in _NOTEBOOK_OF.values():
        nbformat.write(_notebook(WRONG, CHECK, check_metadata=False), work / name)
    env = {
        "OMP_NUM_THREADS": "1",
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "PYTHONPATH": str(ROOT),
    }
    with jupyter_running(
        base, work, "lab", "--ServerApp.disable_check_xsrf=True",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", env=env,
    ) as url:  # fmt: skip
        yield url


_KERNEL_IDLE = """() => Array.from(
  document.querySelectorAll('.jp-Notebook-ExecutionIndicator')
).some(e => /idle/i.test(e.className + ' ' + e.textContent))"""

# The cell's prompt shows its execution count once it has run ("[1]:", not "[*]:").
_HAS_RUN = """(index) => {
  const cells = document.querySelectorAll('.jp-Notebook .jp-CodeCell');
  const prompt = cells[index] && cells[index].querySelector('.jp-InputPrompt');
  return !!prompt && /\\[\\d+\\]/.test(prompt.textContent);
}"""


def _accept_dialog(tab) -> None:
    """Accept a JupyterLab dialog that covers the notebook (in CI one blocked every
    click for 120 s; which one is printed, for the log): the notebook's cells are
    what this test is about, and a dialog's default answer keeps them."""
    dialog = tab.locator(".jp-Dialog")
    if dialog.count() and dialog.first.is_visible():
        print("dialog over the notebook:", dialog.first.inner_text()[:300])
        dialog.first.locator(".jp-Dialog-button.jp-mod-accept").first.click()
        dialog.first.wait_for(state="detached")


@pytest.mark.slow
@pytest.mark.parametrize("front_end", list(_NOTEBOOK_OF))
def test_failed_check_in_the_browser(front_end: str, jupyter_server: str, browser):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = ctx.new_page()
    tab.set_default_timeout(120_000)
    try:
        tab.goto(f"{jupyter_server}/{front_end}/{_NOTEBOOK_OF[front_end]}")
        cells = tab.locator(".jp-Notebook .jp-CodeCell")
        cells.nth(1).wait_for()
        # the kernel is ready when the toolbar says so; a cell run while it still
        # connects can be dropped, so the definitions cell is run until it has run
        tab.wait_for_function(_KERNEL_IDLE, timeout=180_000)
        for attempt in range(4):
            _accept_dialog(tab)
            cells.nth(0).locator(".jp-InputArea-editor").click()
            tab.keyboard.press("Control+Enter")
            try:
                tab.wait_for_function(_HAS_RUN, arg=0, timeout=45_000)
                break
            except PlaywrightTimeout:
                if attempt == 3:
                    raise
        _accept_dialog(tab)
        cells.nth(1).locator(".jp-InputArea-editor").click()
        tab.keyboard.press("Control+Enter")
        tab.wait_for_function(_HAS_RUN, arg=1, timeout=180_000)
        error = cells.nth(1).locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        )
        error.first.wait_for()
        text = error.first.inner_text().strip()
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines[0].startswith("CheckFailed: alibi_bias("), text
        assert "positive" in lines[0], text
        assert len(lines) <= 3, text
        assert "%tb" in lines[-1], text
        for name in (*GRADER_FILES, "Traceback"):
            assert name not in text, (name, text)
    finally:
        ctx.close()
