"""Sphinx extension: interactive figures that work in the static, offline book.

In a chapter (MyST)::

    ```{interactive-figure} rope
    Caption: what the figure shows and what to try.
    ```

The argument names one of ``course_lib.viz.interactive.FIGURES`` (``rope``,
``alibi``, ``t5``, ``yarn``). The directive computes that figure's data with
``course_lib`` at build time and writes, for HTML builders, a block with one labelled
``<input type="range">`` per slider (keyboard-movable, hidden until the script runs),
an ``<output>`` showing each slider's value, an empty ``<svg>``, the data as JSON and
a ``<noscript>`` line for readers without JavaScript; the caption follows as ordinary
MyST text. The ``<svg>`` is an image named by the caption's first sentence and
described by the whole caption (``aria-describedby``).
``_static/interactive/figures.js`` (vendored in ``book/_static``, loaded from the book
itself, never from a CDN) draws the figure from the data: no algorithm of the library,
graded or not, is copied into the JavaScript.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

import course_lib.alibi
import course_lib.relative
import course_lib.rope
import course_lib.rope_scaling
import course_lib.viz.interactive
from course_lib.viz.interactive import FIGURES, figure_data, figure_json

DATA_MODULES = tuple(
    Path(m.__file__).resolve()
    for m in (course_lib.viz.interactive, course_lib.alibi, course_lib.relative,
              course_lib.rope, course_lib.rope_scaling)
)

NOSCRIPT = (
    "Interactive figure: it needs JavaScript, which is off in this browser; the "
    "chapter's text and static figures say the same."
)


def first_sentence(node: nodes.Node, limit: int = 200) -> str:
    """The first sentence of a node's text, on one line (math as its TeX source),
    cut at a word before ``limit`` characters."""
    text = re.sub(r"\s+", " ", node.astext()).strip()
    match = re.search(r"[.!?](\s|$)", text)
    if match:
        text = text[: match.start() + 1]
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return text


class interactive_figure(nodes.General, nodes.Element):  # noqa: N801 - docutils style
    """The figure's HTML block; other builders write nothing for it."""


def _visit_html(self, node: interactive_figure) -> None:
    self.body.append(node["html"])
    raise nodes.SkipNode


def _skip(self, node: interactive_figure) -> None:
    raise nodes.SkipNode


def _controls(kind: str, sliders: list[dict]) -> str:
    rows = []
    for slider in sliders:
        ident = f"pe-{kind}-{slider['name']}"
        rows.append(
            f'<div class="pe-control"><label for="{ident}">'
            f"{html.escape(slider['label'])}</label> "
            f'<input type="range" class="pe-slider" id="{ident}" '
            f'name="{html.escape(slider["name"])}" min="0" '
            f'max="{len(slider["values"]) - 1}" step="1" value="{slider["default"]}"> '
            f'<output for="{ident}" id="{ident}-value"></output></div>'
        )
    return "".join(rows)


class InteractiveFigure(SphinxDirective):
    """``{interactive-figure} KIND`` with the caption as content."""

    required_arguments = 1
    has_content = True
    option_spec = {"name": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        kind = self.arguments[0].strip()
        if kind not in FIGURES:
            raise self.error(
                f"interactive-figure: unknown figure {kind!r}; choose one of "
                f"{', '.join(FIGURES)}"
            )
        if not self.content:
            raise self.error(
                f"interactive-figure {kind}: write a caption (what to try) as content"
            )
        # Re-read the page when the data module or a library module it calls changes
        # (an incremental build would otherwise keep the old numbers).
        for module in DATA_MODULES:
            self.env.note_dependency(str(module))
        sliders = figure_data(kind)["sliders"]
        caption = nodes.container(classes=["pe-caption"], ids=[f"pe-caption-{kind}"])
        self.state.nested_parse(self.content, self.content_offset, caption)
        # The plot's name says what it shows (the caption's first sentence); the
        # whole caption describes it.
        label = html.escape(f"Interactive figure: {first_sentence(caption)}")
        block = (
            f'<div class="pe-interactive" data-kind="{kind}" id="pe-fig-{kind}">'
            f'<noscript><p class="pe-nojs">{NOSCRIPT}</p></noscript>'
            f'<div class="pe-controls" hidden>{_controls(kind, sliders)}</div>'
            f'<svg class="pe-plot" role="img" hidden aria-label="{label}" '
            f'aria-describedby="pe-caption-{kind}" '
            f'xmlns="http://www.w3.org/2000/svg"></svg>'
            f'<script type="application/json" class="pe-data">{figure_json(kind)}'
            f"</script></div>"
        )
        outer = nodes.container(classes=["pe-figure"])
        outer += interactive_figure(html=block)
        outer += caption
        if "name" in self.options:
            self.add_name(outer)
        return [outer]


def setup(app):
    app.add_node(
        interactive_figure,
        html=(_visit_html, None),
        latex=(_skip, None),
        text=(_skip, None),
        man=(_skip, None),
        texinfo=(_skip, None),
    )
    app.add_directive("interactive-figure", InteractiveFigure)
    app.add_js_file("interactive/figures.js", loading_method="defer")
    app.add_css_file("interactive/figures.css")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
