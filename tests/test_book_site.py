"""The book, built strictly and read in a real browser.

One session fixture (``built_book`` in ``conftest.py``, shared with
``test_launch_links.py``) builds the whole book with ``jupyter-book build -W -n
--keep-going`` into a temporary directory (a failing cell, a broken reference or a
missing citation fails the build). It reuses the execution cache of an earlier
``make book`` when there is one, so the notebooks are re-executed only when their
source changed, while every page is still rendered and checked afresh.

The browser test serves the HTML on 127.0.0.1 and reads every page of ``_toc.yml``
as Debian's Chromium driven by Playwright shows it (``book_visits.visit``: one
visit per page, shared with ``test_accessibility.py`` and ``test_launch_links.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from book_visits import visit

ROOT = Path(__file__).resolve().parent.parent
KNOWN_JS_ERROR = "THEBE_JS_URL"  # sphinx-thebe declares it twice on every page

pytestmark = pytest.mark.slow


# The page for course authors, which shows nbgrader's solution markers.
AUTHORING_GUIDE = "book/authoring"

def toc_pages() -> list[str]:
    """Every page of the table of contents, as paths without suffix (book/05-alibi)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return pages


def source_of(page: str) -> Path:
    for suffix in (".md", ".ipynb"):
        path = ROOT / f"{page}{suffix}"
        if path.exists():
            return path
    raise FileNotFoundError(page)


# A fenced block other than ```{math} (code, shell sessions, YAML), and inline code:
# a `$` there is a shell variable or a prompt, not TeX.
# (Fences may be indented, inside a list.)
_CODE = re.compile(
    r"^([ \t]*)(`{3,}|~{3,})(?!\{math\}).*?^\1\2[ \t]*$|`[^`\n]+`", re.M | re.S
)


def has_math(source: str) -> bool:
    """Whether a page's source holds TeX (inline ``$...$``, ``\\(``, a math block
    or role), outside code."""
    prose = _CODE.sub("", source)
    return bool(re.search(r"\$[^$\s]|\\\(|\{math\}", prose))


def test_has_math_reads_prose_only() -> None:
    assert has_math("The angle $m\\theta_i$ grows.")
    assert has_math("```{math}\nx = y\n```\n")
    assert has_math("A role {math}`x^2` here.")
    assert not has_math("Set it:\n\n```bash\n$ course check\nexport A=$TMPDIR\n```\n")
    assert not has_math("Run `echo $HOME` first.")
    assert not has_math("```yaml\nargs: [$(DASK_WORKER_NAME)]\n```\nThen $ 5 costs.")
    assert not has_math("1. Apply:\n\n   ```yaml\n   args: [$(NAME)]\n   ```\n")


def test_every_toc_page_has_a_source() -> None:
    for page in toc_pages():
        assert source_of(page).is_file(), page


def test_every_chapter_is_an_executed_notebook() -> None:
    """A MyST page without the jupytext header is not executed (only a warning)."""
    for page in toc_pages():
        text = source_of(page).read_text()
        if "```{code-cell}" in text:
            assert text.startswith("---\njupytext:"), (
                f"{page}: code cells but no header"
            )


def test_strict_build_renders_every_page(built_book: Path) -> None:
    for page in toc_pages():
        assert (built_book / f"{page}.html").is_file(), page


def test_book_is_self_contained(built_book: Path) -> None:
    """MathJax comes from the local copy; no page loads scripts from a CDN; nothing of
    the solutions reaches the HTML."""
    assert (built_book / "_static/mathjax/es5/tex-mml-chtml.js").is_file()
    with_math = 0
    for page in toc_pages():
        html = (built_book / f"{page}.html").read_text()
        scripts = re.findall(r'<script[^>]+src="([^"]+)"', html)
        for src in scripts:
            assert not src.startswith(("http:", "https:", "//")), (page, src)
        # Sphinx adds MathJax only to pages with math.
        mathjax = [src for src in scripts if "mathjax" in src.lower()]
        assert all("_static/mathjax/es5/tex-mml-chtml.js" in s for s in mathjax), page
        with_math += bool(mathjax)
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS"):
            # a leaked solution or hidden test cell; the authoring guide names
            # nbgrader's markers to teach them (its own example exercise, ex90)
            if page == AUTHORING_GUIDE:
                assert f"### {marker}" in html and "ex90_offsets" in html, marker
            else:
                assert marker not in html, (page, marker)
    assert with_math >= 10, "the chapters' math should load the local MathJax"


@pytest.mark.parametrize("page", toc_pages())
def test_page_in_browser(page: str, server: str, browser) -> None:
    seen = visit(browser, server, page)
    source = source_of(page).read_text()
    if has_math(source):
        assert seen.mathjax, f"{page}: has math but did not load MathJax"
        assert seen.typeset_math > 0, f"{page}: no typeset math"
    assert seen.h1 and seen.h1 in seen.title, (
        f"{page}: title {seen.title!r} lacks heading {seen.h1!r}"
    )
    for raw in ("$$", "\\(", "\\[", "\\begin{"):
        assert raw not in seen.visible_text, f"{page}: raw TeX {raw!r} left in the page"
    broken = [i["src"] for i in seen.images if not i["ok"]]
    assert not broken, f"{page}: images did not load: {broken}"
    if re.search(r"viz\.plot_\w+\(", source):
        assert seen.output_images > 0, (
            f"{page}: uses course_lib.viz but shows no figure image"
        )
    assert "Traceback (most recent call last)" not in seen.outputs_text, page
    assert seen.error_outputs == 0, page
    assert seen.stderr_outputs == 0, (
        f"{page}: a cell wrote to stderr (warnings show up in the book)"
    )
    assert not seen.outside, f"{page}: requests left the machine: {seen.outside}"
    unexpected = [e for e in seen.js_errors if KNOWN_JS_ERROR not in e]
    assert not unexpected, f"{page}: JavaScript errors: {unexpected}"
