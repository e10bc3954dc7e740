"""``course feedback``: nbgrader ``generate_feedback`` for every graded submission,
and a short page for each submission that could not be graded, saying why.

nbgrader writes ``feedback/<student>/<assignment>/<notebook>.html`` from the
autograded notebooks and the gradebook. A submission that could not be graded has no
autograded notebook, so nbgrader skips it; this module writes the same file for it
with the reason and the score of zero, so that every student who submitted gets
feedback through nbgrader's ``release_feedback``.

A submission whose accidents were repaired before grading (a pasted or moved cell,
lost metadata: :mod:`course_lib.grading.notebooks.repair`) carries the list of repairs
as the first cell of its autograded notebook, so nbgrader's page shows it at the top.

Under each failed test, :class:`MistakeNotes` adds what the grading tool judged
(:class:`~course_lib.grading.notebooks.integrity.Judgement`): the known mistake by
name, and where the book teaches the function (:mod:`course_lib.checks.sections`):
the section on the book's web page, and the chapter notebook's launch links.

Every feedback folder holds what ``nbgrader release_feedback`` opens in each one
(``timestamp.txt``, ``submission_secret.txt``), so one ungradable submission or one
collected without the exchange never stops the release of the others.

A page reads anywhere, the file alone with no network: the page template
(``templates/course_feedback/``: nbgrader's ``feedback`` template with its MathJax
macro replaced) puts MathJax 3 into the page, and :class:`RenderedMarkdown` shows
the markdown cells ``course autograde`` stored rendered as they were rendered.
"""

from __future__ import annotations

import datetime as _dt
import html
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from traitlets import Bool, Unicode

from .course import Course
from .errors import CourseError
from .gradebook import read_status
from .notebooks.integrity import Judgement, judged_cells
from .notebooks.repair import notes_from_notebook
from .notebooks.safe import as_html_block

__all__ = [
    "FeedbackResult",
    "MistakeNotes",
    "RenderedMarkdown",
    "as_html_block",
    "feedback",
    "teaching_links",
]


@dataclass
class FeedbackResult:
    """The feedback files written, graded and ungradable."""

    assignment: str
    graded: list[str] = field(default_factory=list)
    ungradable: list[str] = field(default_factory=list)
    # student -> the repairs their feedback lists (students without repairs absent)
    repaired: dict[str, list[str]] = field(default_factory=dict)


_STAMP = "%Y-%m-%d %H:%M:%S.%f UTC"  # nbgrader's timestamp.txt format

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>
<body>
<h1>{title}</h1>
<p>Your submission could not be graded automatically, so it was recorded with a score
of <strong>0 / {max_score:g}</strong>.</p>
<p>Reason: {reason}</p>
<p>Run <code>course check {notebook}.ipynb</code> on your notebook to see the problem,
and ask your instructor about resubmitting.</p>
</body></html>
"""


# Judgements that point the student back to the chapter (a time limit or tampering
# is about the run, not the step the function implements).
_TEACHABLE = {
    "mistake",
    "unrecognised",
    "not-attempted",
    "raised",
    "calls-library",
    "changed-input",
}


# What ``nbgrader release_feedback`` opens in every feedback folder before it
# releases a page (``exchange/default/release_feedback.py``, ``copy_files``): a
# folder without either stops it with FileNotFoundError, and every folder after it
# in its glob order goes unreleased.
_RELEASE_FILES = ("timestamp.txt", "submission_secret.txt")
_SMALL = 4096  # bytes: a timestamp or nbgrader's 128-hex-digit secret, with room


def _small_text(path: Path) -> str | None:
    """The text of ``path`` if it is a small regular file (never through a
    symbolic link a student put into the submission), else None."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _SMALL:
            return None
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _release_files(folder: Path, submitted: Path, kept_secret: str | None) -> None:
    """Give ``folder`` the two files release_feedback needs.

    ``timestamp.txt`` and ``submission_secret.txt`` come from the submission, as
    nbgrader's ``generate_feedback`` copies them (through ``autograded/``) for a
    graded one. A submission collected by ``course collect`` (an LMS download, a
    folder) has no secret: nbgrader's ``submit`` writes it, into the exchange and
    into the student's own cache, and ``fetch_feedback`` finds the page by
    ``md5(secret + notebook)``. Such a folder gets a new random secret (kept from
    an earlier run when there was one): release_feedback then goes on and puts the
    page into the exchange under a name no one can derive, so the student fetches
    nothing through the exchange (their page goes back by the LMS zip or by hand)
    and the students after them are not held up."""
    for name in _RELEASE_FILES:
        if (folder / name).is_file() and not (folder / name).is_symlink():
            continue
        (folder / name).unlink(missing_ok=True)
        text = _small_text(submitted / name)
        if text is None and name == "timestamp.txt":
            text = _dt.datetime.now(_dt.UTC).strftime(_STAMP) + "\n"  # when none
        if text is None:
            text = kept_secret or secrets.token_hex(64)
        (folder / name).write_text(text)


def teaching_links(root, function: str) -> tuple[str, list[tuple[str, str]]]:
    """Where the book teaches ``function``: the section's name ("Chapter 5, section
    "The bias"") and ``(text, url)`` links: the book page at the section, then the
    chapter notebook on each launch service (:mod:`~.editions.launch`; a class with
    a student repository gets its own). No links without a ``_config.yml`` in
    ``root``; no section for a function the table does not know. A term's variant
    that teaches the function in another section (``CourseTerm`` in ``root``'s
    ``nbgrader_config.py``, :func:`.editions.term.variant_section`) links there."""
    from .editions.launch import (
        book_page_url,
        chapter_notebook_path,
        feedback_settings,
        launch_urls,
        read_settings,
    )
    from .editions.term import term_at, variant_section

    section = variant_section(function, term_at(root))
    if section is None:
        return "", []
    number = section.page.rsplit("/", 1)[-1].split("-", 1)[0]
    name = f'Chapter {int(number)}, section "{_plain(section.title)}"'
    settings = read_settings(root)
    if settings is None:
        return name, []
    settings = feedback_settings(settings)
    links = [("the book", book_page_url(settings, section.page, section.label))]
    urls = launch_urls(settings, chapter_notebook_path(section.page))
    return name, links + sorted(urls.items())


def _plain(title: str) -> str:
    """A heading as plain text: ``$d_\\text{model} = 4$`` reads ``d_model = 4``, and
    code loses its backticks."""
    text = re.sub(r"\\(?:text|mathrm|operatorname)\{([^{}]*)\}", r"\1", title)
    return text.replace("$", "").replace("`", "")


# MathJax 3 (npm ``mathjax@3``, its ``es5/`` folder, which ``make setup`` copies
# for the book) in the SVG output: its glyphs are in the script, where the CHTML
# output loads font files by URL, which a page alone has not. The "full" bundle holds
# every TeX extension, so no formula a student writes needs a file from the network.
_MATHJAX = Path("_vendor") / "static" / "mathjax" / "es5" / "tex-svg-full.js"
_TEMPLATES = Path(__file__).with_name("templates")
# the delimiters of nbgrader's MathJax 2 set-up (nbconvert's base/mathjax.html.j2)
_MATHJAX_CONFIG = """window.MathJax = {
  tex: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]],
        displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
        processEscapes: true, processEnvironments: true, tags: "ams"},
  svg: {fontCache: "global"},
  options: {enableMenu: false}
};"""


def mathjax_file(root) -> Path:
    """The MathJax script the feedback pages carry: under the course folder
    ``root``, else under the repository this ``course_lib`` runs from."""
    for base in (Path(root), Path(__file__).resolve().parents[2]):
        if (base / _MATHJAX).is_file():
            return base / _MATHJAX
    raise CourseError(
        f"{_MATHJAX} is missing (feedback pages carry MathJax, to show their math "
        "with no network): run `make setup` in the course repository (it installs "
        "the npm package mathjax@3 there)"
    )


def _inline_mathjax(path: Path):
    """The Jinja filter ``course_mathjax``: MathJax's configuration and script, in
    the page. ``<!--`` inside a script can end it early in an HTML parser (the
    "script data escaped" states); MathJax's one ``<!--`` is in a regular
    expression, where ``<\\!--`` matches the same."""
    from markupsafe import Markup

    def course_mathjax(_value="") -> Markup:
        code = path.read_text(encoding="utf-8").replace("<!--", "<\\!--")
        if "</script" in code.lower():
            raise CourseError(f"{path} holds '</script' and cannot go into a page")
        return Markup(f"<script>{_MATHJAX_CONFIG}</script>\n<script>{code}</script>")

    return course_mathjax


class RenderedMarkdown(Preprocessor):
    """Markdown cells that ``course autograde`` stored rendered (every unlocked
    one: :func:`~.notebooks.safe.safe_outputs`) shown as the notebook shows them
    (:func:`as_html_block`), their HTML cleaned again on the way."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        from .notebooks.safe import clean_html

        for cell in nb.cells:
            if cell.get("cell_type") != "markdown":
                continue
            if cell.get("metadata", {}).get("nbgrader", {}).get("locked"):
                continue
            text = cell.source
            text = "".join(text) if isinstance(text, list) else text
            if text.lstrip().startswith("<"):
                cell.source = as_html_block(clean_html(text))
        return nb, resources


class MistakeNotes(Preprocessor):
    """Adds, under each failed test cell of a feedback page, the grading tool's
    judgement: the known mistake by name and where the book teaches the step."""

    course_root = Unicode("", help="the course folder (its _config.yml)").tag(
        config=True
    )
    # nbconvert runs a registered preprocessor only when enabled (nbgrader's own
    # preprocessors default to True)
    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        for cell, judged in judged_cells(nb):
            if judged.kind in _TEACHABLE:
                cell.outputs.append(self._note(judged))
        return nb, resources

    def _note(self, judged: Judgement):
        """The note as plain text and as HTML: a list, since the feedback page is
        sanitised (``HTMLExporter.sanitize_html``) to the tags bleach allows, which
        have no paragraph."""
        name, links = teaching_links(self.course_root, judged.function)
        plain, rich = [], []
        if judged.kind == "mistake":
            plain.append(f"Known mistake {judged.mistake}: {judged.explanation}")
            rich.append(
                f"<strong>Known mistake</strong> <code>{html.escape(judged.mistake)}"
                f"</code>: {html.escape(judged.explanation)}"
            )
        if name:
            where = ", ".join(f"{text}: {url}" for text, url in links)
            plain.append(f"Read again: {name}" + (f" ({where})" if where else ""))
            anchors = " · ".join(
                f'<a href="{html.escape(url)}">{html.escape(text)}</a>'
                for text, url in links
            )
            rich.append(
                f"Read again: {html.escape(name)}"
                + (f" — {anchors}" if anchors else "")
            )
        items = "".join(f"<li>{item}</li>" for item in rich)
        return new_output(
            "display_data",
            data={"text/plain": "\n".join(plain), "text/html": f"<ul>{items}</ul>"},
        )


def _generate_feedback(course: Course, assignment: str) -> dict:
    """nbgrader's ``generate_feedback --force`` for every student of
    ``assignment``, as ``NbGraderAPI.generate_feedback`` runs it but with the
    course's preprocessors and template (the API sets ``HTMLExporter.template_name
    = "feedback"`` over any configured one)."""
    import nbgrader
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import GenerateFeedback
    from nbgrader.preprocessors import GetGrades
    from nbgrader.utils import capture_log, temp_attrs

    config = course.config.copy()
    config.GenerateFeedback.preprocessors = [
        GetGrades,
        RenderedMarkdown,
        MistakeNotes,
        CSSHTMLHeaderPreprocessor,
    ]
    config.MistakeNotes.course_root = str(course.root)
    # nbgrader's feedback template, its MathJax macro replaced (templates/)
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config.HTMLExporter.template_name = "course_feedback"
    config.HTMLExporter.extra_template_basedirs = [
        str(_TEMPLATES),
        str(formgrader / "templates"),
    ]
    config.HTMLExporter.filters = {
        "course_mathjax": _inline_mathjax(mathjax_file(course.root))
    }

    api = course.api(config)
    with temp_attrs(api.coursedir, assignment_id=assignment):
        app = GenerateFeedback(coursedir=api.coursedir, parent=api)
        app.force = True
        return capture_log(app)


def feedback(course: Course, assignment: str) -> FeedbackResult:
    """Generate the feedback of every submission of ``assignment``."""
    with course.gradebook(create=False, assignment=assignment) as gb:
        assignment = course.resolve_released(gb, assignment)
        status = read_status(gb, assignment)
        notebooks = [nb.name for nb in gb.find_assignment(assignment).notebooks]
    result = FeedbackResult(assignment)
    graded = sorted(
        p.parent.name
        for p in course.autograded_dir.glob(f"*/{assignment}")
        if p.is_dir()
    )
    # a secret written for a folder without one (course collect), kept across runs:
    # generate_feedback --force removes the graded folders first
    kept = {
        student: _small_text(
            course.feedback_dir / student / assignment / "submission_secret.txt"
        )
        for student in status
    }
    if graded:
        outcome = _generate_feedback(course, assignment)
        if not outcome.get("success"):
            detail = (outcome.get("log") or "") + (outcome.get("error") or "")
            raise CourseError(f"nbgrader generate_feedback failed:\n{detail.strip()}")
        for student in graded:
            folder = course.feedback_dir / student / assignment
            _release_files(
                folder,
                course.submitted_dir / student / assignment,
                kept.get(student),
            )
            result.graded += sorted(
                str(p.relative_to(course.root)) for p in folder.glob("*.html")
            )
            repairs = [
                text
                for nb in notebooks
                for text in notes_from_notebook(
                    course.autograded_dir / student / assignment / f"{nb}.ipynb"
                )
            ]
            if repairs:
                result.repaired[student] = repairs
    for student, row in sorted(status.items()):
        if row.status != "ungradable":
            continue
        folder = course.feedback_dir / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        _release_files(
            folder,
            course.submitted_dir / student / assignment,
            kept.get(student),
        )
        for nb in notebooks:
            page = folder / f"{nb}.html"
            page.write_text(
                _PAGE.format(
                    title=html.escape(f"{assignment}: feedback for {student}"),
                    max_score=row.max_score,
                    reason=html.escape(row.reason),
                    notebook=html.escape(nb),
                )
            )
            result.ungradable.append(str(page.relative_to(course.root)))
    return result
