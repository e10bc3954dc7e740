"""Every page of the built book passes axe-core's WCAG 2.1 A and AA rules.

axe-core (Deque's accessibility engine) is installed by ``make test`` with npm into
``_vendor/axe/`` (the Makefile's ``$(AXE)`` rule, like MathJax for the book); it is
not part of the book. The book is the one ``test_book_site.py`` builds (the shared
``built_book`` fixture), or an already built one named by ``COURSE_BOOK_HTML`` (the
``_build/html`` folder), so that the check can be run alone on a build at hand.

A page fails on any violation, and the message lists every violation of the page:
the rule, its impact, the help text and the first elements it found.

axe-core accepts any alt text, a file name too; a second test asks that every figure
says what it shows: an image's alt text, or an interactive figure's name, in words
(book/_ext/accessibility.py gives a captioned figure's image its caption as alt text).
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import threading
import urllib.request
from pathlib import Path

import pytest
from book_visits import AXE, visit
from test_book_site import toc_pages

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def book_pages() -> list[str]:
    """The table of contents' pages and Sphinx's own (index, search)."""
    return [*toc_pages(), "genindex", "search"]


@pytest.fixture(scope="module")
def book_url(request: pytest.FixtureRequest):
    prebuilt = os.environ.get("COURSE_BOOK_HTML")
    if not prebuilt:
        yield request.getfixturevalue("server")
        return
    html = Path(prebuilt)
    assert (html / "index.html").is_file(), f"COURSE_BOOK_HTML={prebuilt}: no book"

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(html))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{AXE} is missing: `make test` installs axe-core")
        pytest.skip("axe-core is not installed (`make test` installs it with npm)")
    return AXE.read_text(encoding="utf-8")


def _describe(page: str, violations: list[dict]) -> str:
    lines = [f"{page}: {len(violations)} axe-core violation(s) (WCAG 2.1 A/AA)"]
    for v in violations:
        count = len(v["nodes"])
        lines.append(f"  {v['id']} ({v['impact']}, {count} nodes): {v['help']}")
        lines += [f"    - {n}" for n in v["nodes"][:5]]
    return "\n".join(lines)


@pytest.mark.parametrize("page", book_pages())
def test_page_has_no_wcag21_violation(
    page: str, book_url: str, axe_source: str, browser
) -> None:
    """axe-core runs on the page as a reader meets it: math typeset, interactive
    figures drawn (``book_visits``)."""
    violations = visit(browser, book_url, page).axe_violations
    assert violations is not None, "axe-core did not run"
    assert not violations, _describe(page, violations)


class _Figures(html.parser.HTMLParser):
    """The ``alt`` of every ``<img>`` in the page's article, the ``aria-label`` and
    ``aria-describedby`` of every interactive plot, and every element id."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # inside <article> (the launch buttons' logos are outside)
        self.images: list[tuple[str, str | None]] = []
        self.plots: list[tuple[str | None, str | None]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "article":
            self.depth += 1
        elif tag == "img" and self.depth:
            self.images.append((a.get("src") or "", a.get("alt")))
        elif tag == "svg" and "pe-plot" in (a.get("class") or "").split():
            self.plots.append((a.get("aria-label"), a.get("aria-describedby")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self.depth -= 1


def _says_something(text: str | None) -> bool:
    """Words, not a file name: at least three words and no image path."""
    if not text:
        return False
    if re.search(r"_images/|\.(png|svg|jpe?g)\b", text):
        return False
    return len(re.findall(r"[A-Za-z]{2,}", text)) >= 3


@pytest.mark.parametrize("page", book_pages())
def test_every_figure_says_what_it_shows(page: str, book_url: str) -> None:
    with urllib.request.urlopen(f"{book_url}/{page}.html", timeout=60) as response:
        parser = _Figures()
        parser.feed(response.read().decode("utf-8"))
    mute = [src for src, alt in parser.images if not _says_something(alt)]
    assert not mute, f"{page}: images without alt text that says what they show: {mute}"
    for label, described_by in parser.plots:
        assert label and label.startswith("Interactive figure: "), (page, label)
        words = label.removeprefix("Interactive figure: ")
        assert _says_something(words), (page, label)
        assert described_by in parser.ids, (page, described_by)
