"""Sphinx extension: the fixes that make every page pass axe-core's WCAG 2.1 A/AA
rules (``tests/test_accessibility.py``).

* The theme's search field and colour-mode button come from the templates in
  ``book/_templates/`` (added to ``templates_path`` here): the search
  field's name is what it shows ("Search Ctrl+K", not an ``aria-label`` "Search"),
  and the colour-mode icons are hidden from assistive technology, so that their
  titles are no visible text missing from the button's name "Color mode" (WCAG 2.5.3
  Label in Name, axe-core's ``label-content-name-mismatch``).
* A figure's image says what it shows: an image of a captioned figure (the chapters'
  ``mystnb: figure: caption``) without alt text of its own gets the caption's text as
  ``alt`` (Sphinx would write the file name, ``../_images/3b81...png``; WCAG 1.1.1).
* The bibliography's entries are written by Sphinx as ``role="doc-biblioentry"`` in a
  ``role="list"``: that role is deprecated in WAI-ARIA DPUB 1.1, so the list had no
  list items (``aria-deprecated-role``, ``aria-required-children``). They become
  ``role="listitem"``.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

TEMPLATES = Path(__file__).resolve().parent.parent / "_templates"


def _add_templates(app, config) -> None:
    paths = list(config.templates_path or [])
    if str(TEMPLATES) not in paths:
        config.templates_path = [str(TEMPLATES), *paths]


def plain_text(node: nodes.Node) -> str:
    """The node's text on one line (math as its TeX source, without dollars)."""
    return re.sub(r"\s+", " ", node.astext()).strip()


def _alt_from_captions(app, doctree, docname) -> None:
    for figure in doctree.findall(nodes.figure):
        captions = [c for c in figure.children if isinstance(c, nodes.caption)]
        if not captions:
            continue
        text = plain_text(captions[0])
        for image in figure.findall(nodes.image):
            alt = image.get("alt", "")
            if not alt or alt == image.get("uri"):
                image["alt"] = text


def _fix_body(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if isinstance(body, str) and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


def setup(app):
    app.connect("config-inited", _add_templates)
    app.connect("doctree-resolved", _alt_from_captions)
    app.connect("html-page-context", _fix_body)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
