"""The book, built strictly and read in a real browser.

One session fixture (``built_book`` in ``conftest.py``, shared with
``test_launch_links.py``) builds the whole book with ``jupyter-book build -W -n
--keep-going`` into a temporary directory (a failing cell, a broken reference or a
missing citation fails the build). It reuses the execution cache of an earlier
``make book`` when there is one, so the notebooks are re-executed only when their
source changed, while every page is still rendered and checked afresh.

The browser test serves the HTML on 127.0.0.1 and visits every page of ``_toc.yml``
in Debian's Chromium driven by Playwright.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KNOWN_JS_ERROR = "THEBE_JS_URL"  # sphinx-thebe declares it twice on every page

pytestmark = pytest.mark.slow


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
            assert marker not in html, (page, marker)
    assert with_math >= 10, "the chapters' math should load the local MathJax"


# Text outside code that still holds TeX delimiters means MathJax did not typeset it.
_VISIBLE_TEXT = """() => {
  const body = document.querySelector('main') || document.body;
  const copy = body.cloneNode(true);
  copy.querySelectorAll('pre, code, script, style, mjx-container, .MathJax')
      .forEach(e => e.remove());
  return copy.textContent;
}"""

_IMAGES = """() => Array.from(document.images).map(
  i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0}))"""


@pytest.mark.parametrize("page", toc_pages())
def test_page_in_browser(page: str, server: str, browser) -> None:
    ctx = browser.new_context()
    tab = ctx.new_page()
    js_errors: list[str] = []
    outside: list[str] = []
    tab.on("pageerror", lambda e: js_errors.append(str(e)))
    tab.on(
        "console",
        lambda m: js_errors.append(m.text) if m.type == "error" else None,
    )

    def route(r):
        url = urlparse(r.request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.hostname != "127.0.0.1":
            outside.append(r.request.url)
            return r.abort()
        return r.continue_()

    tab.route("**/*", route)
    try:
        tab.goto(f"{server}/{page}.html", wait_until="load")
        # not "networkidle" (no request for 500 ms): in two of five fresh-clone runs one
        # request stayed open past 30 s and then 120 s after the load event; what the
        # checks read is waited for explicitly (MathJax's promise, figures' data-ready)
        source = source_of(page).read_text()
        if has_math(source):
            tab.wait_for_function(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
            )
            tab.evaluate("() => MathJax.startup.promise")
            assert tab.locator("mjx-container").count() > 0, f"{page}: no typeset math"
        title = tab.title()
        h1 = tab.locator("h1").first.inner_text().strip().rstrip("#").strip()
        assert h1 and h1 in title, f"{page}: title {title!r} lacks heading {h1!r}"
        text = tab.evaluate(_VISIBLE_TEXT)
        for raw in ("$$", "\\(", "\\[", "\\begin{"):
            assert raw not in text, f"{page}: raw TeX {raw!r} left in the page"
        images = tab.evaluate(_IMAGES)
        broken = [i["src"] for i in images if not i["ok"]]
        assert not broken, f"{page}: images did not load: {broken}"
        if re.search(r"viz\.plot_\w+\(", source):
            figures = tab.locator(".cell_output img").count()
            assert figures > 0, f"{page}: uses course_lib.viz but shows no figure image"
        outputs = " ".join(tab.locator(".cell_output").all_inner_texts())
        assert "Traceback (most recent call last)" not in outputs, page
        assert tab.locator(".cell_output .output.error, .output.traceback").count() == 0
        assert tab.locator(".cell_output .output.stderr").count() == 0, (
            f"{page}: a cell wrote to stderr (warnings show up in the book)"
        )
        assert not outside, f"{page}: requests left the machine: {outside}"
        unexpected = [e for e in js_errors if KNOWN_JS_ERROR not in e]
        assert not unexpected, f"{page}: JavaScript errors: {unexpected}"
    finally:
        ctx.close()
