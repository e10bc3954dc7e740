"""Feedback pages read anywhere (issue 32, item 9): each exercise's page, opened
from the file alone in Chromium with the network off, shows its math typeset by
MathJax and every markdown cell rendered, with no markup or ``$`` left as text.

One scratch course holds every assignment of ``solutions/``; a student hands in the
reference answers of each (collected and graded once for this file and
``tests/test_pipeline.py``: conftest.every_assignment_graded), and
``course feedback`` writes the pages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import course_cli_sequence

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
ASSIGNMENTS = sorted(
    p.name for p in SOLUTIONS.iterdir() if p.is_dir() and any(p.glob("*.ipynb"))
)
STUDENT = "perfect"


@pytest.fixture(scope="module")
def pages(every_assignment_graded, tmp_path_factory) -> dict[str, Path]:
    """``course feedback`` for every assignment of the class that
    ``tests/test_pipeline.py`` grades (conftest.every_assignment_graded: released,
    collected and autograded once for both files), one command after another as a
    user runs them, in one process (the grading tool imported once, not 11 times);
    the page of the student who handed in the reference answers, per assignment."""
    course, _ = every_assignment_graded
    steps = [(course.root, ("feedback", a)) for a in ASSIGNMENTS]
    done = course_cli_sequence(steps, tmp_path_factory.mktemp("feedback-pages"))
    for got in done:
        assert got.returncode == 0, (got.args, got.stdout[-2000:], got.stderr[-3000:])
    assert [tuple(got.args[1:]) for got in done] == [args for _, args in steps]
    return {a: course.feedback_dir / STUDENT / a / f"{a}.html" for a in ASSIGNMENTS}


def _visit(browser, page_file: Path) -> dict:
    """The page from its file in a context with the network off; what it shows."""
    ctx = browser.new_context(offline=True)
    requests = []
    ctx.on("request", lambda r: requests.append(r.url))
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_function(
        "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
    )
    page.evaluate("() => MathJax.startup.promise")
    shown = {
        "text": page.inner_text("body"),
        "math": page.locator("mjx-container").count(),
        "math errors": page.locator("mjx-merror").count(),
        "requests": [u for u in requests if not u.startswith(("file:", "data:"))],
        "errors": errors,
    }
    ctx.close()
    return shown


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_page_renders_offline(pages, browser, assignment):
    page_file = pages[assignment]
    assert page_file.is_file()
    html = page_file.read_text()
    # no script from elsewhere (MathJax's own code names CDN addresses, unused)
    assert not re.search(r"<script[^>]*\bsrc=", html), "a script loaded from a URL"
    assert "cdnjs" not in html  # nbgrader's MathJax 2
    # the formulas the page holds: $-delimited TeX in its source
    assert "$" in html, "no math on the page: the test would prove nothing"
    shown = _visit(browser, page_file)
    assert shown["requests"] == [], shown["requests"]
    assert shown["errors"] == [], shown["errors"]
    assert shown["math"] > 0, "no formula typeset (no mjx-container)"
    assert shown["math errors"] == 0
    text = shown["text"]
    assert "<span class=" not in text, re.findall(r".{60}<span class=.{20}", text)[:3]
    left = re.findall(r".{0,40}\$.{0,40}", text)
    # a dollar sign left is TeX MathJax did not typeset
    assert not left, left[:5]
