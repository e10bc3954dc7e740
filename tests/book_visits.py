"""One browser visit per page of the built book, shared by the tests that read the
book's pages in Chromium (``test_book_site``, ``test_accessibility``,
``test_launch_links``).

Each of those files used to load every page itself: the same 25 pages three times,
and loading one (MathJax typesets its math, its interactive figures draw) costs a
second or more of CPU. Now a page is loaded once per test process and everything
the three files check is read from that one visit: the title and heading, the
visible text, the images, the cells' outputs, the JavaScript errors, the requests
that tried to leave the machine, the links, and axe-core's WCAG 2.1 A/AA
violations. Each test still asserts its own property of the page; a visit that
fails (a page that never loads) is not kept, so each test that asks again tries
again and fails with the page's own error.

``conftest.pytest_xdist_make_scheduler`` gives the three files to the same
pytest-xdist worker, so that they share the visits under ``make test`` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
AXE = ROOT / "_vendor" / "axe" / "axe.min.js"
WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# the test files whose pages come from here: one pytest-xdist worker runs them all
FILES = ("test_accessibility.py", "test_book_site.py", "test_launch_links.py")

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

_LINKS = """() => Array.from(document.querySelectorAll(
    '.dropdown-launch-buttons a, .dropdown-download-buttons a, article a[href]'))
  .map(a => ({href: a.href, text: a.textContent.trim(),
              launch: !!a.closest('.dropdown-launch-buttons'),
              download: !!a.closest('.dropdown-download-buttons')}))"""

_RUN_AXE = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => n.target.join(' ') + ': ' + (n.failureSummary || '')
                              .replace(/\\s+/g, ' ').slice(0, 200)),
  }));
}"""


@dataclass(frozen=True)
class Visit:
    """What one page showed, read once its math was typeset and its interactive
    figures drawn."""

    page: str
    title: str
    h1: str  # the first heading's text, without the permalink sign
    mathjax: bool  # the page loaded MathJax
    typeset_math: int  # mjx-container elements
    visible_text: str  # the main text without code, scripts and typeset math
    images: list[dict]  # every <img>: src, ok (loaded, non-empty)
    output_images: int  # images among the cells' outputs
    outputs_text: str  # the cells' outputs, as text
    error_outputs: int  # error or traceback outputs
    stderr_outputs: int  # outputs written to stderr
    outside: list[str]  # requests to another host or scheme (aborted)
    js_errors: list[str]  # uncaught exceptions and console errors, before axe ran
    links: list[dict]  # launch, download and article links: href, text, kind
    # axe-core's WCAG 2.1 A/AA violations (None where axe-core is not installed)
    axe_violations: list[dict] | None


_VISITS: dict[tuple[str, str], Visit] = {}


def visit(browser, base_url: str, page: str) -> Visit:
    """The visit of ``base_url/page.html`` in this process, made on first use."""
    key = (base_url, page)
    if key not in _VISITS:
        _VISITS[key] = _visit(browser, base_url, page)
    return _VISITS[key]


def _visit(browser, base_url: str, page: str) -> Visit:
    ctx = browser.new_context()
    tab = ctx.new_page()
    js_errors: list[str] = []
    outside: list[str] = []
    tab.on("pageerror", lambda e: js_errors.append(str(e)))
    tab.on(
        "console",
        lambda m: js_errors.append(m.text) if m.type == "error" else None,
    )
    host = urlparse(base_url).hostname

    def route(r):
        url = urlparse(r.request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.hostname != host:
            outside.append(r.request.url)
            return r.abort()
        return r.continue_()

    tab.route("**/*", route)
    try:
        tab.goto(f"{base_url}/{page}.html", wait_until="load")
        # not "networkidle" (no request for 500 ms): in two of five fresh-clone runs one
        # request stayed open past 30 s and then 120 s after the load event; what the
        # checks read is waited for explicitly (MathJax's promise, figures' data-ready)
        mathjax = tab.evaluate("() => !!window.MathJax")
        if mathjax:
            tab.wait_for_function(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
            )
            tab.evaluate("() => MathJax.startup.promise")
        for figure in tab.locator(".pe-interactive").all():
            figure.locator("xpath=self::*[@data-ready='true']").wait_for(
                state="attached", timeout=30_000
            )
        h1 = tab.locator("h1").first.inner_text().strip().rstrip("#").strip()
        seen = dict(
            page=page,
            title=tab.title(),
            h1=h1,
            mathjax=mathjax,
            typeset_math=tab.locator("mjx-container").count(),
            visible_text=tab.evaluate(_VISIBLE_TEXT),
            images=tab.evaluate(_IMAGES),
            output_images=tab.locator(".cell_output img").count(),
            outputs_text=" ".join(tab.locator(".cell_output").all_inner_texts()),
            error_outputs=tab.locator(
                ".cell_output .output.error, .output.traceback"
            ).count(),
            stderr_outputs=tab.locator(".cell_output .output.stderr").count(),
            outside=list(outside),
            js_errors=list(js_errors),
            links=tab.evaluate(_LINKS),
        )
        violations = None
        if AXE.is_file():  # last: the errors above are the page's own
            tab.add_script_tag(content=AXE.read_text(encoding="utf-8"))
            violations = tab.evaluate(_RUN_AXE, WCAG_21_AA)
    finally:
        ctx.close()
    return Visit(**seen, axe_violations=violations)
