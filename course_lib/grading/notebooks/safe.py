"""What a student's notebook shows reaches a browser only as inert content.

A submission's outputs are the student's own: a cell can ``display`` any HTML or
JavaScript, and a markdown cell can hold raw HTML. Whoever opens a page built from
them (the student's feedback, a teaching assistant checking it, the instructor in
nbgrader's formgrader, which serves the autograded notebooks in the grader's own
Jupyter origin) would run that script. Two layers keep it inert:

1. :func:`safe_outputs` reduces the outputs of every code cell of an autograded
   notebook to types that carry no script: plain text, PNG, JPEG and GIF images,
   and HTML passed through the ammonia allowlist sanitizer (``nh3``; tables and
   text formatting kept; no script, style, event handler, link, frame, form, SVG or
   MathML). Anything else (JavaScript, SVG, widgets, markdown and LaTeX outputs,
   which browsers or MathJax render) is dropped, its plain-text form kept. Each
   markdown cell a student can edit (every cell but the locked ones, which nbgrader
   restores from the release) is replaced by its rendering, cleaned the same way
   (links kept, to http, https and mailto only): nbgrader's feedback and formgrader
   templates render markdown cells without sanitizing them. The rendering is stored
   as one HTML block (:func:`as_html_block`), because both templates render the
   stored cell as markdown again: a bare rendering would end its HTML block at its
   first blank line, and the formgrader would show the rest (a code example with a
   blank line, ex05's worked example) as escaped ``<span class="p">`` markup. The
   grade is read before this runs, so it cannot change a grade.
2. Every HTML page nbgrader writes from a notebook renders with nbconvert's own
   sanitizing of outputs (``HTMLExporter.sanitize_html``, set in the course's
   ``nbgrader_config.py``), a second layer for the outputs.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "SAFE_IMAGE_TYPES",
    "as_html_block",
    "clean_html",
    "safe_markdown",
    "safe_outputs",
    "stored_markdown",
]

SAFE_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")

# The HTML a student's output may keep: structure and text formatting (a pandas
# table, a styled message), nothing that loads, links, runs or restyles the page.
_TAGS = {
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col",
    "div", "span", "p", "br", "hr", "pre", "code", "blockquote",
    "b", "i", "em", "strong", "u", "s", "sub", "sup", "small", "mark", "a",
    "ul", "ol", "li", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
}
_ATTRIBUTES = {
    "a": {"href", "title"},
    **{f"h{n}": {"id"} for n in range(1, 7)},
    "th": {"colspan", "rowspan", "align"},
    "td": {"colspan", "rowspan", "align"},
    "col": {"span"},
    "ol": {"start"},
    "table": {"border"},
    "*": {"class"},
}


def clean_html(html: str) -> str:
    """``html`` through the allowlist above (``nh3``, the Python binding of the
    ammonia sanitizer): disallowed elements go with their content when they hold
    code (script, style), keep their text otherwise.

    >>> clean_html('<b>ok</b><script>alert(1)</script><img src=x onerror=alert(1)>')
    '<b>ok</b>'
    """
    import nh3

    return nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        clean_content_tags={"script", "style", "svg", "math", "iframe", "object",
                            "embed", "template", "noscript", "textarea", "select"},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def _safe_data(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "text/plain" in data:
        out["text/plain"] = data["text/plain"]
    for kind in SAFE_IMAGE_TYPES:
        if kind in data:
            out[kind] = data[kind]
    if "text/html" in data:
        html = data["text/html"]
        html = "".join(html) if isinstance(html, list) else str(html)
        cleaned = clean_html(html)
        if cleaned.strip():
            out["text/html"] = cleaned
    return out


def safe_markdown(source: str) -> str:
    """A markdown cell's text as its rendering (nbconvert's, as the feedback page
    renders it: math left to MathJax), cleaned by :func:`clean_html`.

    >>> safe_markdown('**ok** [a](javascript:alert(1)) <b onclick="x()">b</b>')
    '<p><strong>ok</strong> <a rel="noopener noreferrer nofollow">a</a> <b>b</b></p>'
    """
    from nbconvert.filters.markdown import markdown2html

    return clean_html(markdown2html(source)).strip()


# what as_html_block writes, and the blank lines it takes out
_BLOCK_START = '<div class="course-rendered">\n'
_BLANK_LINE = re.compile(r"^[ \t]*$", re.MULTILINE)


def as_html_block(rendered: str) -> str:
    r"""HTML that a markdown renderer (nbgrader's feedback and formgrader
    templates render every markdown cell as markdown again) passes through
    unchanged.

    Rendered again, an HTML block (CommonMark: a line opening ``<div``, ``<p``,
    ...) ends at the first blank line, and what follows is markdown: the indented
    rest of a code example with a blank line became a code block showing the
    highlighter's ``<span class="p">`` markup as text. One ``<div>`` around it
    opens a single block, and each blank line becomes an empty ``<span></span>``
    line (nothing to see; inside ``<pre>`` still a line), so the block runs to the
    end.

    >>> as_html_block("<pre>a\n\nb</pre>")
    '<div class="course-rendered">\n<pre>a\n<span></span>\nb</pre>\n</div>'
    """
    body = _BLANK_LINE.sub("<span></span>", rendered.strip())
    return f"{_BLOCK_START}{body}\n</div>"


def stored_markdown(source: str) -> str:
    """What :func:`safe_outputs` stores for a markdown cell a student can edit: its
    cleaned rendering (:func:`safe_markdown`) as one HTML block, which a markdown
    renderer (the formgrader's, the feedback page's) passes through unchanged. A
    cell that already holds such a block is kept as it is (a second pass changes
    nothing).

    >>> print(stored_markdown("```\\nx\\n\\ny\\n```"))
    <div class="course-rendered">
    <pre><code>x
    <span></span>
    y
    </code></pre>
    </div>
    """
    if (
        source.startswith(_BLOCK_START)
        and source.endswith("\n</div>")
        and not _BLANK_LINE.search(source)
        and clean_html(source) == source
    ):
        return source
    return as_html_block(safe_markdown(source))


def safe_outputs(nb) -> int:
    """Reduce the outputs of every code cell of ``nb`` (an nbformat node, changed
    in place) to inert types, and replace each markdown cell a student can edit by
    its cleaned rendering as one HTML block (:func:`stored_markdown`); returns how
    many outputs or cells changed."""
    changed = 0
    for cell in nb.cells:
        if cell.get("cell_type") == "markdown":
            locked = cell.get("metadata", {}).get("nbgrader", {}).get("locked")
            text = cell.source
            text = "".join(text) if isinstance(text, list) else text
            if not locked and text.strip():
                safe = stored_markdown(text)
                if safe != text:
                    cell.source = safe
                    changed += 1
            continue
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") in ("display_data", "execute_result"):
                data = output.get("data", {})
                safe = _safe_data(data)
                if safe != data:
                    changed += 1
                if not safe:
                    continue
                output["data"] = safe
                output["metadata"] = {
                    k: v for k, v in output.get("metadata", {}).items()
                    if k in SAFE_IMAGE_TYPES
                }
            kept.append(output)
        cell["outputs"] = kept
    return changed
