"""Sphinx extension: which edition of the book is being built.

``COURSE_EDITION=open`` (the default, what ``make book`` builds) or
``COURSE_EDITION=class`` (what ``course publish`` builds). The class edition adds the
Sphinx tag ``class_edition``, so every ``{only} not class_edition`` block (the
"Solution to exercise N" dropdowns) is dropped from the doctree before anything is
written: the HTML pages and the search index hold none of it. Sphinx copies the page
sources (``_sources/``, the ``.md`` and ``.ipynb`` downloads) verbatim, so at the end
of a class build the same blocks are cut from every such copy under the output folder.
The API page of the class edition documents each exercise target (a function an
exercise asks for, such as ``alibi_bias``) by the first paragraph of its docstring only,
as the student wheel does: the rest may state the rule the exercise grades.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from sphinx.errors import ConfigError

from course_lib.grading.editions.launch import strip_open_only

EDITIONS = ("open", "class")


def _set_edition(app, config) -> None:
    edition = os.environ.get("COURSE_EDITION", "open").strip() or "open"
    if edition not in EDITIONS:
        raise ConfigError(
            f"COURSE_EDITION={edition!r} is not an edition of this book; "
            "use 'open' or 'class'"
        )
    if edition == "class":
        app.tags.add("class_edition")
    config.html_context = {**(config.html_context or {}), "course_edition": edition}


@functools.cache
def _targets() -> dict[str, dict[str, int]]:
    from course_lib.grading.editions.library import exercise_targets

    return exercise_targets()


def _first_paragraph_of_targets(app, what, name, obj, options, lines) -> None:
    """autodoc: in the class edition, an exercise target's docstring is cut to its
    first paragraph, with a line saying where the rest is."""
    if not app.tags.has("class_edition"):
        return
    module, _, function = name.rpartition(".")
    number = _targets().get(module, {}).get(function)
    if number is None:
        return
    blank = (i for i, line in enumerate(lines) if i and not line.strip())
    end = next(blank, len(lines))
    lines[end:] = [
        "",
        f"*Exercise {number} asks for this function: the rest of its documentation "
        "is in the open edition of the book.*",
    ]


def _strip_copies(app, exception) -> None:
    if exception is not None or not app.tags.has("class_edition"):
        return
    for path in Path(app.outdir).rglob("*"):
        if path.suffix not in {".md", ".txt", ".ipynb"} or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if "class_edition" not in text:
            continue
        if path.suffix == ".ipynb":
            nb = json.loads(text)
            for cell in nb.get("cells", []):
                src = cell.get("source", "")
                joined = "".join(src) if isinstance(src, list) else src
                stripped = strip_open_only(joined)
                if stripped != joined:
                    cell["source"] = stripped.splitlines(keepends=True)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                            encoding="utf-8")
        else:
            path.write_text(strip_open_only(text), encoding="utf-8")


def setup(app):
    app.connect("config-inited", _set_edition)
    app.connect("build-finished", _strip_copies)
    app.connect("autodoc-process-docstring", _first_paragraph_of_targets)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
