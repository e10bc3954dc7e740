"""Nothing a student's notebook prints runs in someone else's browser (issue 25).

Unit tests of the sanitizer on the known XSS vectors, then a class graded by the
real pipeline: a correct ex05 submission whose cells also display hostile HTML,
JavaScript, SVG and markdown, with a markdown cell of raw HTML. Its grade is that of
the clean solution; its autograded notebook keeps only inert outputs; its feedback
page, opened in Chromium, runs none of it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from conftest import course_cli, jupyter_running

from course_lib.grading.notebooks.safe import clean_html, safe_outputs

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"

# (name, HTML) of the vectors: each sets a window flag if any of it runs
VECTORS = {
    "script": "<script>window.PWNED_SCRIPT=1</script>",
    "img onerror": '<img src=x onerror="window.PWNED_IMG=1">',
    "svg onload": '<svg onload="window.PWNED_SVG=1"><circle r="4"/></svg>',
    "javascript: link": '<a id="jslink" href="javascript:window.PWNED_LINK=1">a</a>',
    "iframe srcdoc": (
        '<iframe srcdoc="<script>parent.PWNED_IFRAME=1</script>"></iframe>'
    ),
    "style hides the grade": "<style>body{display:none !important}</style>",
    "mathml action": (
        '<math><maction actiontype="statusline" '
        'xlink:href="javascript:window.PWNED_MATH=1">x</maction></math>'
    ),
    "div handler": '<div id="hover" onmouseover="window.PWNED_HOVER=1">hover</div>',
    "form": '<form action="javascript:window.PWNED_FORM=1"><button>go</button></form>',
}
FLAGS = ("SCRIPT", "IMG", "SVG", "LINK", "IFRAME", "MATH", "HOVER", "FORM", "JS", "MD")


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_each_vector_comes_out_inert(name: str) -> None:
    cleaned = clean_html(VECTORS[name]).lower()
    for active in (
        "<script",
        "<svg",
        "<math",
        "<iframe",
        "<style",
        "<form",
        "<img",
        " on",
        "javascript:",
        "srcdoc",
        "href",
    ):
        assert active not in cleaned, (name, cleaned)


def test_a_table_and_its_text_stay() -> None:
    table = (
        '<table class="dataframe"><thead><tr><th>head</th></tr></thead>'
        '<tbody><tr><td colspan="2">1.5 &lt; 2</td></tr></tbody></table>'
    )
    assert clean_html(table) == table


def _output(kind: str, data: dict) -> dict:
    return nbformat.v4.new_output(
        kind, data=data, **({"execution_count": 1} if kind == "execute_result" else {})
    )


def test_outputs_are_reduced_to_inert_types() -> None:
    png = "iVBORw0KGgo="
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        _output(
            "display_data",
            {
                "text/html": VECTORS["script"] + "<b>kept</b>",
                "text/plain": "<IPython.core.display.HTML object>",
            },
        ),
        _output(
            "display_data",
            {
                "application/javascript": "window.PWNED_JS=1",
                "text/plain": "<IPython.core.display.Javascript>",
            },
        ),
        _output("display_data", {"image/svg+xml": VECTORS["svg onload"]}),
        _output(
            "execute_result",
            {
                "text/markdown": "<img src=x onerror=alert(1)>",
                "text/latex": "$\\href{javascript:alert(1)}{x}$",
                "text/plain": "md",
            },
        ),
        _output("display_data", {"image/png": png, "text/plain": "<Figure>"}),
        nbformat.v4.new_output("stream", name="stdout", text="<script>plain</script>"),
    ]
    markdown = "## Answer\n\n$x^2$ [a](javascript:alert(1))<script>md</script>"
    locked = nbformat.v4.new_markdown_cell("<b onclick='x()'>released</b>")
    locked.metadata["nbgrader"] = {"locked": True, "grade_id": "task"}
    nb.cells = [cell, nbformat.v4.new_markdown_cell(markdown), locked]
    # html, javascript, svg (gone), markdown+latex; the student's markdown cell
    assert safe_outputs(nb) == 5
    kinds = [sorted(o.get("data", {})) for o in cell.outputs]
    assert kinds == [
        ["text/html", "text/plain"],
        ["text/plain"],
        ["text/plain"],
        ["image/png", "text/plain"],
        [],  # the stream: text, shown escaped
    ]
    assert cell.outputs[0]["data"]["text/html"] == "<b>kept</b>"
    assert cell.outputs[3]["data"]["image/png"] == png
    assert cell.outputs[4]["text"] == "<script>plain</script>"
    text = nb.cells[1].source
    assert "$x^2$" in text and ">a</a>" in text  # math for MathJax, the link's text
    assert "script" not in text and "javascript" not in text and "Answer" in text
    assert nb.cells[2].source == "<b onclick='x()'>released</b>"  # nbgrader restores it
    assert safe_outputs(nb) == 0  # a second pass changes nothing


def _visible_text(html: str) -> str:
    """The text a browser shows for ``html`` (tags dropped, entities read,
    whitespace collapsed), from the standard library's parser."""
    from html.parser import HTMLParser

    parts: list[str] = []
    parser = HTMLParser(convert_charrefs=True)
    parser.handle_data = parts.append
    parser.feed(html)
    return " ".join(" ".join(parts).split())


def _formgrader_page(nb) -> str:
    """``nb`` as nbgrader's formgrader shows a submission: its HTMLExporter with the
    ``formgrade`` template (nbgrader's ``FormgradeExtension.build_extra_config``)
    and the course's ``nbgrader_config.py`` (``sanitize_html``)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config, PyFileConfigLoader

    config = Config(PyFileConfigLoader("nbgrader_config.py", str(ROOT)).load_config())
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {  # what formgrader's SubmissionHandler passes
        "assignment_id": "a", "notebook_id": "a", "submission_id": "s", "index": 0,
        "total": 1, "base_url": "", "student": "s", "last_name": "", "first_name": "",
        "notebook_path": "/a.ipynb",
    }  # fmt: skip
    html, _ = HTMLExporter(config=config).from_notebook_node(nb, resources=resources)
    return html


ESCAPED_TAG = re.compile(r"&lt;/?(?:span|div|pre|code|p|em|strong|a|table)\b")


@pytest.mark.parametrize(
    "release", sorted(p.parent.name for p in (ROOT / "notebooks").glob("ex*/*.ipynb"))
)
def test_the_formgrader_shows_stored_markdown_as_the_notebook_does(release) -> None:
    """The formgrader renders each markdown cell of the autograded notebook as
    markdown again. The cells course autograde stored rendered (every one a student
    can edit) show there as the release notebook itself shows them: the same text,
    and no markup as text (ex05's worked example, a code block with a blank line,
    showed 30 escaped ``<span class="p">`` tags before they were stored as one HTML
    block)."""
    path = ROOT / "notebooks" / release / f"{release}.ipynb"
    original = nbformat.read(str(path), as_version=4)
    stored = nbformat.read(str(path), as_version=4)
    safe_outputs(stored)
    assert safe_outputs(stored) == 0  # a second pass changes nothing
    edited = [
        cell
        for cell in original.cells
        if cell.cell_type == "markdown"
        and not cell.metadata.get("nbgrader", {}).get("locked")
    ]
    assert edited, f"{release}: no markdown cell a student can edit"
    page, reference = _formgrader_page(stored), _formgrader_page(original)
    assert ESCAPED_TAG.findall(page) == ESCAPED_TAG.findall(reference) == []
    assert _visible_text(page) == _visible_text(reference)


# --- a hostile submission through the real pipeline ------------------------------

HOSTILE_CELL = "\n".join(
    [
        "from IPython.display import HTML, SVG, Javascript, Markdown, display",
        *[f"display(HTML({html!r}))" for html in VECTORS.values()],
        "display(Javascript('window.PWNED_JS=1'))",
        f"display(SVG({VECTORS['svg onload']!r}))",
        "display(Markdown('<img src=x onerror=\"window.PWNED_MD=1\">'))",
    ]
)
HOSTILE_MARKDOWN = "A note\n\n" + "".join(VECTORS.values())


_course = course_cli


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    tmp = tmp_path_factory.mktemp("safe-outputs")
    course = scratch_course(tmp / "course", ROOT, [A])
    assert _course("release", A, cwd=course.root).returncode == 0
    release = course.root / "notebooks" / A / f"{A}.ipynb"
    answers = solution_answers(course.root / "solutions" / A / f"{A}.ipynb")
    inbox = tmp / "inbox"
    write_submission(inbox, "clean", A, student_notebook(release, answers))
    hostile = student_notebook(release, answers)
    hostile.cells.append(nbformat.v4.new_code_cell(HOSTILE_CELL))
    hostile.cells.append(nbformat.v4.new_markdown_cell(HOSTILE_MARKDOWN))
    write_submission(inbox, "hostile", A, hostile)
    out = _course("collect", str(inbox), "--assignment", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    graded = _course("autograde", A, "--jobs", "2", "--no-progress", cwd=course.root)
    assert graded.returncode == 0, graded.stdout + graded.stderr[-3000:]
    fed = _course("feedback", A, cwd=course.root)
    assert fed.returncode == 0, fed.stdout + fed.stderr[-3000:]
    return course


@pytest.mark.slow
def test_the_grade_is_that_of_the_clean_solution(hostile_class) -> None:
    with hostile_class.gradebook() as gb:
        scores = {
            s.student.id: (float(s.score), float(s.max_score))
            for s in gb.assignment_submissions(A)
        }
    assert scores["hostile"] == scores["clean"]
    assert scores["clean"][0] == scores["clean"][1] > 0


@pytest.mark.slow
def test_the_autograded_copy_keeps_only_inert_outputs(hostile_class) -> None:
    path = hostile_class.autograded_dir / "hostile" / A / f"{A}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    kinds = {
        kind
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        for kind in output.get("data", {})
    }
    assert kinds <= {"text/plain", "text/html", "image/png"}, kinds
    html = " ".join(
        str(output["data"]["text/html"])
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "text/html" in output.get("data", {})
    ).lower()
    for active in ("<script", "<svg", "<iframe", "<style", "javascript:", " on"):
        assert active not in html
    # the student's hostile display cell ran: its (cleaned) outputs are there
    assert "hover" in html


@pytest.mark.slow
def test_the_feedback_page_runs_none_of_it(hostile_class, browser) -> None:
    page_path = hostile_class.feedback_dir / "hostile" / A / f"{A}.html"
    text = page_path.read_text()
    assert "hover" in text  # the outputs are shown, inert
    page = browser.new_page()
    try:
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        for selector in ("#hover", "#jslink"):
            if page.locator(selector).count():
                page.locator(selector).first.hover()
                page.locator(selector).first.click()
        flags = page.evaluate(
            "names => names.filter(n => window['PWNED_' + n] !== undefined)",
            list(FLAGS),
        )
        assert flags == []
        assert page.locator("body").is_visible()  # no student style hides the page
    finally:
        page.close()


@pytest.fixture(scope="module")
def formgrader(hostile_class, tmp_path_factory):
    """nbgrader's formgrader (a Jupyter server with the nbgrader extension) over the
    graded course, on 127.0.0.1 without a token; settings private."""
    base = tmp_path_factory.mktemp("formgrader")
    with jupyter_running(base, hostile_class.root, "server") as url:
        yield url


@pytest.mark.slow
def test_the_formgrader_page_runs_none_of_it(hostile_class, formgrader, browser):
    with hostile_class.gradebook() as gb:
        notebook_id = gb.find_submission_notebook(A, A, "hostile").id
    page = browser.new_page()
    try:
        response = page.goto(f"{formgrader}/formgrader/submissions/{notebook_id}/")
        assert response is not None and response.ok, response and response.status
        page.wait_for_load_state("load")
        assert "hover" in page.content()  # the student's outputs are on the page
        # and the stored markdown cells as the notebook shows them (ex05's worked
        # example holds a code block with a blank line): no markup shown as text
        shown = page.locator(".text_cell_render").all_inner_texts()
        graded = hostile_class.autograded_dir / "hostile" / A / f"{A}.ipynb"
        markdown = nbformat.read(str(graded), as_version=4).cells
        assert len(shown) == sum(c.cell_type == "markdown" for c in markdown) >= 2
        assert [t for t in shown if re.search(r"</?(?:span|div|pre|code|p)\b", t)] == []
        flags = page.evaluate(
            "names => names.filter(n => window['PWNED_' + n] !== undefined)",
            list(FLAGS),
        )
        assert flags == []
        assert page.locator("body").is_visible()
    finally:
        page.close()
