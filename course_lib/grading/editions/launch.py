"""Where students run the course: Colab, Binder, a JupyterHub or their own machine.

Three things live here, all driven by the settings in ``_config.yml``:

* the **set-up cell** that every notebook students open starts with (each release in
  ``notebooks/``, its source in ``solutions/``, each chapter notebook). Where
  ``course_lib`` is missing (Colab, a bare Binder) it installs the student package;
  where it is installed (the course venv, a class hub) it does nothing. It carries no
  nbgrader metadata, so it is never graded. ``course release`` inserts or refreshes it
  in the source notebooks before generating the releases, so a new assignment gets it
  without anyone copying it by hand;
* the **chapter notebooks** ``book/notebooks/NN-topic.ipynb``, built from the MyST
  chapters ``book/NN-topic.md`` (jupytext) with the set-up cell in front. They are
  committed, because the launch buttons open them from the repository
  (``python -m course_lib.grading.editions.launch``, run by ``make notebooks``, ``make
  book`` and ``make release``, rewrites them; ``tests/test_launch_links.py`` fails when
  one is stale);
* in the **class edition** of a chapter notebook (``course publish``, the class
  book's download), a second cell, the *chapter set-up*
  (:func:`chapter_setup_cell`), runs :func:`.chapter_runtime.start_chapter`: with
  only the student wheel, the chapter runs top to bottom, using the student's own
  answers where they pass their public checks and the build's stored output (with
  a note) where a cell needs an exercise not solved yet; its links to other pages
  lead to the sibling notebook or the published page;
* a small **Sphinx extension** (listed in ``_config.yml``) that points the book's
  Binder, Colab and JupyterHub buttons and its ``.ipynb`` download at those notebooks
  (sphinx-book-theme would open the ``.md`` source, which Colab cannot read);
* **one copy of each exercise on a class hub** (``jupyterhub_url`` set). The
  JupyterHub button pulls the whole student repository (nbgitpuller), its
  ``notebooks/`` included, while nbgrader's Assignments tab fetches exercise ``A``
  into ``~/A/`` and submits only that copy. The course takes the fetched copy as the
  one path: a hub link to an exercise notebook opens ``~/A/A.ipynb``
  (:func:`fetched_url`, from :func:`launch_urls` and :func:`rehome_url`), each
  exercise pointer of the book and of the chapter notebooks is followed by a note
  saying how to fetch that copy and that the pulled one is not submitted
  (:func:`hub_exercise_note`), and ``course publish`` starts each exercise notebook
  of the student repository with a cell saying the same
  (:func:`mark_pulled_exercises`). Without a hub nothing of this applies.

Settings (``_config.yml``)::

    repository:
      url: https://github.com/ORG/REPO     # the set-up cell installs from here ...
      branch: main
    launch_buttons:
      student_package: ""    # ... unless this pip requirement is set (a class's wheel)
      jupyterhub_url: ""     # empty: no JupyterHub button
      student_repository: "" # what the hub pulls (nbgitpuller): the class's public
      student_branch: main   # student repository, never the one holding solutions/
      student_book_url: ""   # where the class edition is served ("": the GitHub
                             # Pages site of student_repository, from its docs/)

The **class edition** (``COURSE_EDITION=class``, ``course publish``) launches from the
student repository, never from the instructor's (private) one: its Binder, Colab and
JupyterHub buttons open ``student_repository`` at the same paths (``course publish``
writes ``book/notebooks/`` and ``notebooks/`` there), and its set-up cells install
``student_package`` or else the student wheel that ``course publish`` puts in that
repository's ``dist/``. Without ``student_repository`` the class edition has no launch
buttons (:func:`class_settings`).

The class edition's **address** (:func:`class_book_url`) is ``student_book_url``, or
else where GitHub Pages serves the student repository's ``docs/`` folder
(``https://ORG.github.io/REPO/``; ``course publish`` writes the book there). Both the
class build's ``html.baseurl`` and the links of ``course feedback``
(:func:`feedback_settings`) take it from these settings, so a page the feedback names
is a page of the published tree (``tests/test_publish.py`` walks them). The class
build also moves the chapters' own links to a file of the course's repository (a
GitHub, Colab or Binder address) to the student repository (:func:`rehome_url`), so
no page leads students to the instructor's repository.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from ..errors import CourseError

__all__ = [
    "CHAPTER_NOTEBOOK_DIR",
    "SETUP_CELL_TEMPLATE",
    "SETUP_TAG",
    "LaunchSettings",
    "book_page_url",
    "chapter_notebook",
    "chapter_setup_cell",
    "class_book_url",
    "class_settings",
    "exercise_of",
    "feedback_settings",
    "fetched_url",
    "hub_exercise_note",
    "mark_pulled_exercises",
    "note_markdown",
    "pages_url",
    "chapter_pages",
    "insert_setup_cell",
    "launch_urls",
    "read_settings",
    "refresh_setup_cells",
    "setup_cell",
    "setup_cell_source",
    "stale_chapter_notebooks",
    "write_chapter_notebooks",
]

CONFIG_FILE = "_config.yml"
TOC_FILE = "_toc.yml"
CHAPTER_NOTEBOOK_DIR = "book/notebooks"
SETUP_TAG = "course-setup"
# the class edition's chapter set-up cell (chapter_setup_cell)
CHAPTER_SETUP_TAG = "course-chapter-setup"

# The one text of the set-up cell; ``{package}`` is the pip requirement of the student
# package (``LaunchSettings.package``) as a Python string literal.
SETUP_CELL_TEMPLATE = """\
# Set-up (not graded). Colab or Binder without the course package: this installs it
# (about a minute). In the course environment, or on a hub that has it: nothing to do.
import importlib
import importlib.util
import subprocess
import sys

COURSE_PACKAGE = {package}

if importlib.util.find_spec("course_lib") is None:
    print(f"Installing {{COURSE_PACKAGE}} ...")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", COURSE_PACKAGE]
    subprocess.run(pip, check=True)
    importlib.invalidate_caches()"""


class LaunchSettingsError(CourseError, ValueError):
    """A launch setting in ``_config.yml`` is missing or malformed (``course release``
    prints the message without a traceback)."""


@dataclass(frozen=True)
class LaunchSettings:
    """The launch settings of one course (from its ``_config.yml``)."""

    repository: str  # https://github.com/ORG/REPO, the book's repository
    branch: str
    package: str  # the pip requirement the set-up cell installs
    binderhub_url: str = ""
    colab_url: str = ""
    jupyterhub_url: str = ""  # "" = no JupyterHub button
    student_repository: str = ""  # what the hub pulls: the class's student repository
    student_branch: str = "main"
    notebook_interface: str = "jupyterlab"
    student_package: str = ""  # launch_buttons.student_package as written ("" = unset)
    book_url: str = ""  # html.baseurl: where the book is published ("" = GitHub Pages)
    student_book_url: str = ""  # launch_buttons.student_book_url: the class edition's

    @property
    def github(self) -> tuple[str, str]:
        """(org, repo) of :attr:`repository` on GitHub."""
        return _github_parts(self.repository, "repository.url")


def _github_parts(url: str, setting: str) -> tuple[str, str]:
    prefix = "https://github.com/"
    parts = url.removeprefix(prefix).strip("/").split("/")
    if not url.startswith(prefix) or len(parts) != 2 or not all(parts):
        raise LaunchSettingsError(
            f"{setting} in {CONFIG_FILE} must look like https://github.com/ORG/REPO "
            f"(got {url!r})"
        )
    return parts[0], parts[1].removesuffix(".git")


def settings_from_config(config: dict[str, Any]) -> LaunchSettings:
    """:class:`LaunchSettings` from the parsed ``_config.yml``."""
    repo = config.get("repository") or {}
    launch = config.get("launch_buttons") or {}
    html = config.get("html") or {}
    url = str(repo.get("url") or "").rstrip("/")
    if not url:
        raise LaunchSettingsError(f"{CONFIG_FILE} has no repository.url")
    branch = str(repo.get("branch") or "main")
    package = str(launch.get("student_package") or "").strip()
    if not package:
        package = f"course_lib @ git+{url}@{branch}"
    settings = LaunchSettings(
        repository=url,
        branch=branch,
        package=package,
        binderhub_url=str(launch.get("binderhub_url") or "").rstrip("/"),
        colab_url=str(launch.get("colab_url") or "").rstrip("/"),
        jupyterhub_url=str(launch.get("jupyterhub_url") or "").rstrip("/"),
        student_repository=str(launch.get("student_repository") or "").rstrip("/"),
        student_branch=str(launch.get("student_branch") or "main"),
        notebook_interface=str(launch.get("notebook_interface") or "jupyterlab"),
        student_package=str(launch.get("student_package") or "").strip(),
        book_url=str(html.get("baseurl") or "").strip(),
        student_book_url=str(launch.get("student_book_url") or "").strip(),
    )
    settings.github  # noqa: B018  (fails early on a malformed repository URL)
    if settings.jupyterhub_url and not settings.student_repository:
        raise LaunchSettingsError(
            f"launch_buttons.jupyterhub_url is set in {CONFIG_FILE} but "
            "launch_buttons.student_repository is not: name the class's public student "
            "repository, which the hub pulls (never the one holding solutions/)"
        )
    if settings.student_repository:
        _github_parts(settings.student_repository, "launch_buttons.student_repository")
    for name, value in (
        ("html.baseurl", settings.book_url),
        ("launch_buttons.student_book_url", settings.student_book_url),
    ):
        if value and not value.startswith(("https://", "http://")):
            raise LaunchSettingsError(
                f"{name} in {CONFIG_FILE} must be a web address starting with "
                f"https:// (got {value!r})"
            )
    if settings.notebook_interface not in _UI_PREFIX:
        raise LaunchSettingsError(
            f"launch_buttons.notebook_interface must be one of {sorted(_UI_PREFIX)} "
            f"(got {settings.notebook_interface!r})"
        )
    return settings


def student_wheel_name() -> str:
    """File name of the student wheel that ``course publish`` writes to ``dist/``."""
    from importlib import metadata

    return f"course_lib-{metadata.version('course_lib')}-py3-none-any.whl"


def pages_url(repository: str, setting: str = "repository.url") -> str:
    """Where GitHub Pages serves the site of the GitHub repository ``repository``
    (``https://github.com/ORG/REPO``): ``https://org.github.io/REPO/``, or
    ``https://org.github.io/`` for the repository named ``ORG.github.io`` (GitHub's
    "About GitHub Pages": project sites and user or organization sites)."""
    org, repo = _github_parts(repository, setting)
    host = f"{org.lower()}.github.io"
    return f"https://{host}/" if repo.lower() == host else f"https://{host}/{repo}/"


def class_book_url(settings: LaunchSettings) -> str:
    """The address of the class edition: ``launch_buttons.student_book_url``, else
    the GitHub Pages site of ``student_repository`` (whose ``docs/`` folder
    ``course publish`` fills); ``""`` when neither is set."""
    if settings.student_book_url:
        return settings.student_book_url.rstrip("/") + "/"
    if settings.student_repository:
        return pages_url(
            settings.student_repository, "launch_buttons.student_repository"
        )
    return ""


def feedback_settings(settings: LaunchSettings) -> LaunchSettings:
    """The settings behind the links of ``course feedback``: the class edition's
    (:func:`class_settings`) when the class has a student repository; else these
    settings, pointed at ``student_book_url`` when that is set. Feedback is written
    for a class, so its book links go to the class edition wherever it is known."""
    launch = class_settings(settings)
    if launch is not None:
        return launch
    if settings.student_book_url:
        return replace(settings, book_url=class_book_url(settings))
    return settings


def class_settings(settings: LaunchSettings) -> LaunchSettings | None:
    """The launch settings of the class edition: the student repository (and branch)
    in place of the instructor's, and the set-up cell installing ``student_package``,
    or else the student wheel in the student repository's ``dist/``. ``None`` when no
    ``student_repository`` is set: the class edition then has no launch buttons."""
    if not settings.student_repository:
        return None
    org, repo = _github_parts(
        settings.student_repository, "launch_buttons.student_repository"
    )
    package = settings.student_package or (
        f"course_lib @ https://raw.githubusercontent.com/{org}/{repo}/"
        f"{settings.student_branch}/dist/{student_wheel_name()}"
    )
    return replace(
        settings,
        repository=settings.student_repository,
        branch=settings.student_branch,
        package=package,
        book_url=class_book_url(settings),
    )


# An edition's block as the chapters write it (MyST colon fence, any depth):
# ``{only} not class_edition`` (the open edition's: the "Solution to exercise N"
# dropdowns, which the class edition leaves out) or ``{only} class_edition``.
_ONLY_BLOCK = re.compile(
    r"^(?P<fence>:{3,})\{only\}\s+(?P<not>not\s+)?class_edition[ \t]*\n"
    r"(?P<body>.*?)^(?P=fence)[ \t]*(?:\n|\Z)",
    re.MULTILINE | re.DOTALL,
)

# A code cell a chapter tags so: it computes what only the open edition's text
# quotes (chapter 4's diagnosis of exercise 9's first bug), so the class edition's
# chapter notebook leaves it out (its page shows no input of it either: the cell is
# also tagged remove-input and prints nothing).
OPEN_ONLY_TAG = "open-edition-only"


def strip_open_only(text: str) -> str:
    """``text`` without its ``{only} not class_edition`` blocks (the class
    edition's blocks are kept as they are)."""
    return _ONLY_BLOCK.sub(lambda m: "" if m.group("not") else m.group(0), text)


def edition_text(text: str, *, class_edition: bool) -> str:
    """``text`` as one edition's notebook shows it: the other edition's ``{only}``
    blocks left out, this edition's kept without their fences (Jupyter would show
    the directive as text)."""

    def keep(match: re.Match) -> str:
        open_only = bool(match.group("not"))
        return "" if open_only == class_edition else match.group("body")

    return _ONLY_BLOCK.sub(keep, text)


def read_settings(root: str | Path) -> LaunchSettings | None:
    """The launch settings of the course at ``root``; ``None`` when it has no
    ``_config.yml`` (a scratch grading folder): its notebooks are left as they are."""
    path = Path(root) / CONFIG_FILE
    if not path.is_file():
        return None
    import yaml

    return settings_from_config(yaml.safe_load(path.read_text()) or {})


# --- the set-up cell ------------------------------------------------------------


def setup_cell_source(settings: LaunchSettings) -> str:
    """The set-up cell's source for these settings."""
    return SETUP_CELL_TEMPLATE.format(package=json.dumps(settings.package))


def setup_cell(settings: LaunchSettings) -> dict[str, Any]:
    """The set-up cell as a notebook cell: no nbgrader metadata (never graded), not
    deletable or editable in Jupyter, tagged ``course-setup``."""
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": SETUP_TAG,
        "metadata": {"deletable": False, "editable": False, "tags": [SETUP_TAG]},
        "outputs": [],
        "source": setup_cell_source(settings),
    }


def is_setup_cell(cell: dict[str, Any]) -> bool:
    """The set-up cell, or a class-edition chapter notebook's chapter set-up cell
    (:func:`chapter_setup_cell`): course machinery, not the chapter's content."""
    tags = cell.get("metadata", {}).get("tags") or []
    return SETUP_TAG in tags or CHAPTER_SETUP_TAG in tags


def insert_setup_cell(nb: dict[str, Any], settings: LaunchSettings) -> bool:
    """Make ``nb`` (a notebook as JSON) start with exactly the set-up cell: insert it,
    or refresh an old one; any other copy further down is removed. Returns whether
    ``nb`` changed."""
    cells = nb["cells"]
    wanted = setup_cell(settings)
    if nb.get("nbformat_minor", 0) < 5 and nb.get("nbformat", 4) == 4:
        wanted.pop("id")  # cell ids exist from nbformat 4.5 on
    others = [
        c for c in cells if SETUP_TAG not in (c.get("metadata", {}).get("tags") or [])
    ]
    new = [wanted, *others]
    if _normal(new) == _normal(cells):
        return False
    cells[:] = new
    return True


def _normal(cells: list[dict[str, Any]]) -> str:
    def norm(cell):
        cell = dict(cell)
        src = cell.get("source", "")
        cell["source"] = "".join(src) if isinstance(src, list) else src
        return cell

    return json.dumps([norm(c) for c in cells], sort_keys=True)


def refresh_setup_cells(paths: Iterable[Path], settings: LaunchSettings) -> list[Path]:
    """Insert or refresh the set-up cell in each notebook file; returns those changed.
    The file is written as nbformat writes it (sorted keys, one-space indent)."""
    changed = []
    for path in paths:
        nb = json.loads(Path(path).read_text())
        if insert_setup_cell(nb, settings):
            Path(path).write_text(
                json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
            )
            changed.append(Path(path))
    return changed


# --- chapter notebooks ----------------------------------------------------------


def chapter_pages(root: str | Path) -> list[str]:
    """The book's notebook pages in table-of-contents order (``book/05-alibi``, ...):
    pages whose MyST file has a jupytext header, so the book executes them and gives
    them launch buttons."""
    import yaml

    root = Path(root)
    toc = yaml.safe_load((root / TOC_FILE).read_text())
    files: list[str] = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("chapters"))
            walk(entry.get("sections"))
            for part in entry.get("parts") or []:
                walk(part.get("chapters"))

    walk(toc.get("chapters"))
    for part in toc.get("parts") or []:
        walk(part.get("chapters"))
    pages = []
    for page in files:
        md = root / f"{page}.md"
        if md.is_file() and _has_jupytext_header(md):
            pages.append(page)
    return pages


def _has_jupytext_header(md: Path) -> bool:
    text = md.read_text()
    return text.startswith("---") and "jupytext:" in text.split("\n---", 1)[0]


def chapter_notebook_path(page: str) -> str:
    """``book/05-alibi`` -> ``book/notebooks/05-alibi.ipynb`` (repository path)."""
    return f"{CHAPTER_NOTEBOOK_DIR}/{Path(page).name}.ipynb"


def chapter_notebook(
    root: str | Path,
    page: str,
    settings: LaunchSettings,
    *,
    class_edition: bool = False,
) -> str:
    """The text of the chapter notebook of ``page``: its MyST cells (jupytext), the
    set-up cell in front, no outputs, stable cell ids. Each edition's notebook holds
    its own ``{only}`` blocks' text and leaves out the other's (:func:`edition_text`):
    the class edition has no solution dropdowns, nor the code cells tagged
    :data:`OPEN_ONLY_TAG`."""
    import jupytext

    nb = jupytext.read(Path(root) / f"{page}.md", fmt="md:myst")
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["language_info"] = {"name": "python"}
    data = json.loads(jupytext.writes(nb, fmt="ipynb"))
    data["nbformat"], data["nbformat_minor"] = 4, 5
    if class_edition:
        if (Path(root) / TOC_FILE).is_file():
            notebooks = {Path(p).name for p in chapter_pages(root)}
        else:  # a folder with chapters but no table of contents (a scratch copy)
            notebooks = {
                md.stem
                for md in (Path(root) / Path(page).parent).glob("*.md")
                if _has_jupytext_header(md)
            }
        # another page of the book: the published page (the class edition's
        # address, or the tree's docs/ from book/notebooks/)
        base = (
            settings.book_url.rstrip("/") + "/book/"
            if settings.student_repository
            and settings.repository == settings.student_repository
            and settings.book_url
            else "../../docs/book/"
        )

        def links(match: re.Match) -> str:
            name, anchor = match.group("name"), match.group("anchor") or ""
            if name in notebooks:
                return f"]({name}.ipynb{anchor})"
            return f"]({base}{name}.html{anchor})"

    if class_edition:  # code that only the open edition's text needs
        data["cells"] = [
            c for c in data["cells"]
            if OPEN_ONLY_TAG not in (c.get("metadata", {}).get("tags") or [])
        ]
    for i, cell in enumerate(data["cells"]):
        cell["id"] = f"cell-{i}"
        if cell["cell_type"] == "markdown":
            src = cell["source"]
            joined = "".join(src) if isinstance(src, list) else src
            if _ONLY_BLOCK.search(joined):
                kept = edition_text(joined, class_edition=class_edition)
                cell["source"] = kept.splitlines(keepends=True)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        elif class_edition and cell["cell_type"] == "markdown":
            src = cell["source"]
            joined = "".join(src) if isinstance(src, list) else src
            moved = _CHAPTER_LINK.sub(links, joined)
            if moved != joined:
                cell["source"] = moved.splitlines(keepends=True)
    if settings.jupyterhub_url:  # the fetched copy of each exercise it points to
        _add_hub_notes(data["cells"], settings)
    insert_setup_cell(data, settings)
    if class_edition:
        data["cells"].insert(1, chapter_setup_cell(Path(page).name))
    return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


# A markdown link from one page of the book to another (``](05-alibi.md)``, with or
# without a section): in the class edition's chapter notebooks it leads to the
# sibling notebook (``05-alibi.ipynb``) or to the published page.
_CHAPTER_LINK = re.compile(
    r"\]\((?P<name>[0-9A-Za-z][0-9A-Za-z_-]*)\.md(?P<anchor>#[^)\s]*)?\)"
)


CHAPTER_SETUP_TEMPLATE = """\
# Set-up of this chapter (not graded). Your own answers from your exercise notebooks
# are used where they pass their public checks; a cell that needs an exercise you have
# not solved yet shows a note and the course's stored output instead of an error.
try:
    from course_lib.chapter_runtime import start_chapter
except ImportError:  # the full course package (an instructor's environment)
    from course_lib.grading.editions.chapter_runtime import start_chapter

start_chapter({chapter})"""


def chapter_setup_cell(chapter: str) -> dict[str, Any]:
    """The class edition's second cell of a chapter notebook: the student's own
    answers, ``myst_nb.glue`` without myst_nb, and the stored output of a cell that
    needs an unsolved exercise (:mod:`.chapter_runtime`)."""
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": CHAPTER_SETUP_TAG,
        "metadata": {
            "deletable": False,
            "editable": False,
            "tags": [CHAPTER_SETUP_TAG],
        },
        "outputs": [],
        "source": CHAPTER_SETUP_TEMPLATE.format(chapter=json.dumps(chapter)),
    }


def write_chapter_notebooks(root: str | Path) -> list[Path]:
    """(Re)write every chapter notebook under ``book/notebooks/`` and remove those
    whose chapter is gone; returns the files written or removed."""
    root = Path(root)
    settings = read_settings(root)
    if settings is None:
        raise LaunchSettingsError(f"{root} has no {CONFIG_FILE}")
    out = root / CHAPTER_NOTEBOOK_DIR
    out.mkdir(parents=True, exist_ok=True)
    touched, wanted = [], set()
    for page in chapter_pages(root):
        path = root / chapter_notebook_path(page)
        wanted.add(path)
        text = chapter_notebook(root, page, settings)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            touched.append(path)
    for path in out.glob("*.ipynb"):
        if path not in wanted:
            path.unlink()
            touched.append(path)
    return touched


def stale_chapter_notebooks(root: str | Path) -> list[str]:
    """Repository paths of chapter notebooks that are missing, out of date or left
    over (empty when ``book/notebooks/`` matches the chapters)."""
    root = Path(root)
    settings = read_settings(root)
    if settings is None:
        raise LaunchSettingsError(f"{root} has no {CONFIG_FILE}")
    stale, wanted = [], set()
    for page in chapter_pages(root):
        rel = chapter_notebook_path(page)
        wanted.add(rel)
        path = root / rel
        if not path.is_file() or path.read_text() != chapter_notebook(
            root, page, settings
        ):
            stale.append(rel)
    for path in sorted((root / CHAPTER_NOTEBOOK_DIR).glob("*.ipynb")):
        rel = path.relative_to(root).as_posix()
        if rel not in wanted:
            stale.append(rel)
    return stale


# --- launch links ---------------------------------------------------------------

_UI_PREFIX = {"classic": "tree", "jupyterlab": "lab/tree"}


def book_page_url(settings: LaunchSettings, page: str, label: str = "") -> str:
    """The web address of a book page (``book/05-alibi``), at the section of a MyST
    label if given: under ``settings.book_url`` (``html.baseurl`` of ``_config.yml``,
    or the class edition's address in :func:`class_settings`), else where GitHub
    Pages publishes the repository's book (``.github/workflows/pages.yml``):
    ``https://ORG.github.io/REPO/``."""
    base = settings.book_url or pages_url(settings.repository)
    return f"{base.rstrip('/')}/{page}.html" + (f"#{label}" if label else "")


def launch_urls(settings: LaunchSettings, path: str) -> dict[str, str]:
    """Button text -> URL that opens the repository file ``path`` (an ``.ipynb``) on
    each configured service. JupyterHub pulls the student repository (nbgitpuller)
    and opens the same path in it, except for an exercise notebook
    (``notebooks/<assignment>/<name>.ipynb``): that opens the copy nbgrader's
    Assignments tab fetches, the one a student submits (:func:`fetched_url`)."""
    org, repo = settings.github
    ui = _UI_PREFIX[settings.notebook_interface]
    urls = {}
    if settings.binderhub_url:
        urls["Binder"] = (
            f"{settings.binderhub_url}/v2/gh/{org}/{repo}/{settings.branch}"
            f"?urlpath={quote(f'{ui}/{path}')}"
        )
    if settings.colab_url:
        urls["Colab"] = (
            f"{settings.colab_url}/github/{org}/{repo}/blob/{settings.branch}/{path}"
        )
    if settings.jupyterhub_url and exercise_of(path):
        urls["JupyterHub"] = fetched_url(settings, path)
    elif settings.jupyterhub_url:
        _, student_repo = _github_parts(
            settings.student_repository, "launch_buttons.student_repository"
        )
        query = urlencode(
            {
                "repo": settings.student_repository,
                "branch": settings.student_branch,
                "urlpath": f"{ui}/{student_repo}/{path}",
            },
            safe="/",
        )
        urls["JupyterHub"] = (
            f"{settings.jupyterhub_url}/hub/user-redirect/git-pull?{query}"
        )
    return urls


# --- one copy of each exercise on a class hub ------------------------------------
#
# On a hub, nbgrader's Assignments tab fetches exercise A into ~/A/ and submits that
# copy; the student repository that the JupyterHub button pulls (nbgitpuller, for
# the chapter notebooks) holds notebooks/A/ too, which is never submitted. The
# course takes the fetched copy as the one path: every hub link to an exercise
# opens it (launch_urls, rehome_url), the book's exercise pointers and the chapter
# notebooks say where it is (hub_exercise_note), and each pulled copy starts with
# a cell saying it is not the one submitted (mark_pulled_exercises).

# an exercise notebook of the repository, as nbgrader lays releases out
_EXERCISE = re.compile(r"notebooks/(?P<assignment>[^/]+)/(?P<name>[^/]+\.ipynb)")
# a GitHub page of one (the chapters' "read it on GitHub"), in any repository
_EXERCISE_ON_GITHUB = re.compile(
    r"https://github\.com/[^/\s]+/[^/\s]+/blob/[^/\s]+/"
    r"(?P<path>notebooks/[^/\s]+/[^/\s)]+\.ipynb)"
)
HUB_NOTE_TAG = "course-hub-note"


def exercise_of(path: str) -> tuple[str, str] | None:
    """``(assignment, notebook file)`` of an exercise notebook's repository path
    (``notebooks/ex05_alibi/ex05_alibi.ipynb``); ``None`` for any other path."""
    match = _EXERCISE.fullmatch(path.strip("/"))
    return (match["assignment"], match["name"]) if match else None


def fetched_url(settings: LaunchSettings, path: str) -> str:
    """The hub address of the copy of the exercise notebook ``path`` that nbgrader's
    Assignments tab fetches into the student's home (``~/<assignment>/<name>``):
    ``{hub}/hub/user-redirect/lab/tree/<assignment>/<name>``. That copy is the one
    nbgrader submits; it exists once the student has fetched the assignment."""
    found = exercise_of(path)
    if found is None or not settings.jupyterhub_url:
        raise LaunchSettingsError(
            f"{path!r} is not an exercise notebook (notebooks/<assignment>/<name>"
            ".ipynb) or no launch_buttons.jupyterhub_url is set"
        )
    ui = _UI_PREFIX[settings.notebook_interface]
    where = quote(f"{found[0]}/{found[1]}")
    return f"{settings.jupyterhub_url}/hub/user-redirect/{ui}/{where}"


def hub_exercise_note(
    settings: LaunchSettings, path: str, *, pulled: bool = False
) -> list[tuple[str, str, str]]:
    """What a hub student is told about the exercise notebook ``path``, as
    ``(kind, text, url)`` parts (kind: ``text``, ``em``, ``code``, ``link``;
    :func:`note_markdown` writes them as markdown, the book as its own nodes).
    ``pulled``: the note of the pulled copy itself (its first cell)."""
    assignment, name = exercise_of(path)
    fetched = f"~/{assignment}/{name}"
    url = fetched_url(settings, path)
    if pulled:
        head = [
            ("em", "On the class's JupyterHub, this copy is not the one you "
             "submit.", ""),
            ("text", " It came with the course's repository (the JupyterHub "
             "button pulls it for the chapters); nbgrader submits the copy that its "
             "Assignments tab fetches, so answers written here are never graded. ",
             ""),
        ]  # fmt: skip
    else:
        head = [("em", "On the class's JupyterHub:", ""), ("text", " ", "")]
    return head + [
        ("text", "Open " if pulled else "open ", ""),
        ("em", "Nbgrader → Assignment List", ""),
        ("text", ", press ", ""),
        ("em", "Fetch", ""),
        ("text", " next to ", ""),
        ("code", assignment, ""),
        ("text", " and work in ", ""),
        ("code", fetched, ""),
        ("text", " (", ""),
        ("link", "open it on the hub", url),
        ("text", "). ", ""),
        ("em", "Submit", ""),
        ("text", " on the same tab sends that copy."
         + ("" if pulled else f" The copy in notebooks/{assignment}/ of the "
            "repository the JupyterHub button pulls is not submitted."), ""),
    ]  # fmt: skip


def note_markdown(parts: list[tuple[str, str, str]]) -> str:
    """The parts of :func:`hub_exercise_note` as one markdown paragraph."""
    out = []
    for kind, text, url in parts:
        out.append(
            {"em": f"*{text}*", "code": f"`{text}`", "link": f"[{text}]({url})"}.get(
                kind, text
            )
        )
    return "".join(out)


def _note_cell(markdown: str, cell_id: str) -> dict[str, Any]:
    return {
        "cell_type": "markdown",
        "id": cell_id,
        "metadata": {"deletable": False, "editable": False, "tags": [HUB_NOTE_TAG]},
        "source": markdown,
    }


def _add_hub_notes(cells: list[dict[str, Any]], settings: LaunchSettings) -> None:
    """After each markdown cell that links to an exercise notebook's GitHub page
    (the chapters' exercise pointers), a cell with :func:`hub_exercise_note`."""
    seen: set[str] = set()
    for i in range(len(cells) - 1, -1, -1):
        cell = cells[i]
        if cell["cell_type"] != "markdown":
            continue
        src = cell["source"]
        text = "".join(src) if isinstance(src, list) else src
        for match in _EXERCISE_ON_GITHUB.finditer(text):
            path = match["path"]
            if path in seen or not exercise_of(path):
                continue
            seen.add(path)
            note = note_markdown(hub_exercise_note(settings, path))
            assignment = exercise_of(path)[0]
            cells.insert(i + 1, _note_cell(note, f"{HUB_NOTE_TAG}-{assignment}"))


def mark_pulled_exercises(folder: Path, settings: LaunchSettings) -> list[Path]:
    """On a hub class (``jupyterhub_url`` set), start every exercise notebook under
    ``folder`` (the student repository's ``notebooks/``, which the JupyterHub
    button pulls) with a cell saying that this copy is not submitted and where the
    fetched one is (:func:`hub_exercise_note`); an old such cell is replaced.
    Returns the notebooks changed; none without a hub."""
    if not settings.jupyterhub_url:
        return []
    changed = []
    for path in sorted(Path(folder).glob("*/*.ipynb")):
        rel = f"notebooks/{path.parent.name}/{path.name}"
        nb = json.loads(path.read_text(encoding="utf-8"))
        note = note_markdown(hub_exercise_note(settings, rel, pulled=True))
        cell = _note_cell(note, HUB_NOTE_TAG)
        if nb.get("nbformat", 4) == 4 and nb.get("nbformat_minor", 0) < 5:
            cell.pop("id")  # cell ids exist from nbformat 4.5 on
        others = [
            c for c in nb["cells"]
            if HUB_NOTE_TAG not in (c.get("metadata", {}).get("tags") or [])
        ]  # fmt: skip
        nb["cells"] = [cell, *others]
        path.write_text(
            json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        changed.append(path)
    return changed


# --- links of the class edition -------------------------------------------------


def rehome_url(url: str, open_settings: LaunchSettings, launch: LaunchSettings) -> str:
    """``url`` moved from the course's repository to the class's student repository
    when it opens a file of the repository: a GitHub page (``/blob/``, ``/tree/``,
    ``/raw/``), a raw file, or the file on Colab or Binder. The chapters' prose
    links ("read it on GitHub", "exercise 5 in Colab") then lead into the published
    tree (whose ``notebooks/`` and ``book/notebooks/`` hold those paths). On a hub
    class, a link that pulls an exercise notebook onto the hub (nbgitpuller) opens
    the fetched copy instead (:func:`fetched_url`). Any other URL is returned as it
    is."""
    pulled = _pulled_exercise(url, launch)
    if pulled:
        return fetched_url(launch, pulled)
    org, repo = open_settings.github
    new_org, new_repo = launch.github
    branch, new_branch = open_settings.branch, launch.branch
    pairs = [
        (
            f"https://github.com/{org}/{repo}/{kind}/{branch}/",
            f"https://github.com/{new_org}/{new_repo}/{kind}/{new_branch}/",
        )
        for kind in ("blob", "tree", "raw")
    ]
    pairs.append(
        (
            f"https://raw.githubusercontent.com/{org}/{repo}/{branch}/",
            f"https://raw.githubusercontent.com/{new_org}/{new_repo}/{new_branch}/",
        )
    )
    if launch.colab_url:
        pairs.append(
            (
                f"{launch.colab_url}/github/{org}/{repo}/blob/{branch}/",
                f"{launch.colab_url}/github/{new_org}/{new_repo}/blob/{new_branch}/",
            )
        )
    if launch.binderhub_url:
        pairs.append(
            (
                f"{launch.binderhub_url}/v2/gh/{org}/{repo}/{branch}?",
                f"{launch.binderhub_url}/v2/gh/{new_org}/{new_repo}/{new_branch}?",
            )
        )
    for old, new in pairs:
        if url.startswith(old):
            return new + url[len(old) :]
    return url


def _pulled_exercise(url: str, settings: LaunchSettings) -> str | None:
    """The exercise notebook's repository path that ``url`` pulls onto this
    class's hub with nbgitpuller (``git-pull?...&urlpath=lab/tree/REPO/PATH``);
    ``None`` for any other URL."""
    hub = settings.jupyterhub_url
    if not hub or not url.startswith(f"{hub}/hub/user-redirect/git-pull?"):
        return None
    (urlpath, *_) = parse_qs(urlsplit(url).query).get("urlpath") or [""]
    for ui in _UI_PREFIX.values():
        if urlpath.startswith(f"{ui}/"):
            _folder, _, path = urlpath.removeprefix(f"{ui}/").partition("/")
            return path if exercise_of(path) else None
    return None


_URL = re.compile(r"https?://[^\s)\]>\"'`]+")


def rehome_links(
    text: str, open_settings: LaunchSettings, launch: LaunchSettings
) -> str:
    """Every URL of ``text`` through :func:`rehome_url`."""
    return _URL.sub(lambda m: rehome_url(m.group(0), open_settings, launch), text)


def _rehome_references(app, doctree, docname) -> None:
    """In the class edition, the links of the pages that open a file of the course's
    repository open it in the student repository instead (none is left pointing at
    the instructor's repository). With a hub, each section that points to an
    exercise notebook on GitHub (the chapters' exercise pointers) ends with where
    the copy to work in and submit is (:func:`hub_exercise_note`)."""
    launch = app.env.course_launch_settings
    if launch is None:
        return
    from docutils import nodes

    if app.env.course_class_edition:
        for node in doctree.findall(nodes.reference):
            uri = node.get("refuri")
            if uri:
                node["refuri"] = rehome_url(uri, app.env.course_open_settings, launch)
    if launch.jupyterhub_url:
        _hub_notes_in_doctree(doctree, launch)


def _hub_notes_in_doctree(doctree, settings: LaunchSettings) -> None:
    """A note (:func:`hub_exercise_note`) at the end of each section's own text
    (before its subsections) for each exercise notebook its links show on GitHub."""
    from docutils import nodes

    wanted: dict[int, tuple[nodes.Element, list[str]]] = {}
    for ref in doctree.findall(nodes.reference):
        match = _EXERCISE_ON_GITHUB.fullmatch(ref.get("refuri", ""))
        section = ref.parent
        while section is not None and not isinstance(section, nodes.section):
            section = section.parent
        if match is None or section is None or not exercise_of(match["path"]):
            continue
        paths = wanted.setdefault(id(section), (section, []))[1]
        if match["path"] not in paths:
            paths.append(match["path"])
    for section, paths in wanted.values():
        at = next(
            (i for i, c in enumerate(section.children) if isinstance(c, nodes.section)),
            len(section.children),
        )
        for path in reversed(paths):
            section.insert(at, _note_node(hub_exercise_note(settings, path)))


def _note_node(parts: list[tuple[str, str, str]]):
    """The parts of :func:`hub_exercise_note` as a docutils note."""
    from docutils import nodes

    para = nodes.paragraph()
    for kind, text, url in parts:
        if kind == "em":
            para += nodes.emphasis(text, text)
        elif kind == "code":
            para += nodes.literal(text, text)
        elif kind == "link":
            para += nodes.reference(text, text, refuri=url, internal=False)
        else:
            para += nodes.Text(text)
    return nodes.note("", para, classes=[HUB_NOTE_TAG])


# --- Sphinx extension -----------------------------------------------------------


def _page_context(app, pagename, templatename, context, doctree) -> None:
    """Point the launch buttons and the .ipynb download of a chapter at its committed
    notebook (runs after sphinx-book-theme built its buttons). In the class edition
    the buttons open the student repository (none without one) and the download is
    the class edition of the chapter notebook."""
    if pagename not in app.env.course_launch_pages:
        return
    settings = app.env.course_launch_settings  # None: class edition, no student repo
    class_edition = app.env.course_class_edition
    rel = chapter_notebook_path(pagename)
    urls = launch_urls(settings, rel) if settings is not None else {}
    for group in context.get("header_buttons", []):
        if group.get("label") == "launch-buttons":
            kept = []
            for button in group.get("buttons", []):
                if button.get("type") == "link" and button.get("text") in (
                    "Binder",
                    "Colab",
                    "JupyterHub",
                ):
                    if button["text"] not in urls:
                        continue
                    button["url"] = urls[button["text"]]
                kept.append(button)
            group["buttons"] = kept
        for button in group.get("buttons", []) or []:
            if button.get("label") == "download-notebook-button":
                target = Path(app.outdir) / "_sources" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if class_edition:
                    text = chapter_notebook(
                        app.srcdir,
                        pagename,
                        settings or app.env.course_open_settings,
                        class_edition=True,
                    )
                    if settings is not None:
                        text = rehome_links(
                            text, app.env.course_open_settings, settings
                        )
                    target.write_text(text)
                else:
                    shutil.copyfile(Path(app.srcdir) / rel, target)
                depth = pagename.count("/")
                button["url"] = "../" * depth + f"_sources/{rel}"


def _builder_inited(app) -> None:
    root = Path(app.srcdir)
    settings = read_settings(root)
    class_edition = app.tags.has("class_edition")  # set by book/_ext/course_edition
    app.env.course_class_edition = class_edition
    app.env.course_open_settings = settings
    app.env.course_launch_settings = (
        class_settings(settings) if class_edition and settings else settings
    )
    app.env.course_launch_pages = set(chapter_pages(root)) if settings else set()
    if settings is None:
        return
    stale = stale_chapter_notebooks(root)
    if stale:
        # A note, not a warning: a chapter edited without `make notebooks` still builds
        # strictly (its buttons open the committed notebook); tests/test_launch_links.py
        # fails until the notebooks are regenerated.
        from sphinx.util import logging

        logging.getLogger(__name__).info(
            "chapter notebooks out of date (the launch buttons open them): %s; "
            "run `make notebooks` and commit book/notebooks/",
            ", ".join(stale),
        )


def setup(app) -> dict[str, Any]:
    """Sphinx entry point (``sphinx.extra_extensions`` in ``_config.yml``)."""
    app.connect("builder-inited", _builder_inited)
    app.connect("doctree-resolved", _rehome_references)
    # after sphinx-book-theme's add_launch_buttons / add_header_buttons (501)
    app.connect("html-page-context", _page_context, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.grading.editions.launch [ROOT]``: rewrite the chapter
    notebooks."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path.cwd()
    try:
        touched = write_chapter_notebooks(root)
    except LaunchSettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in touched:
        print(f"wrote {path.relative_to(root)}")
    print(f"{len(chapter_pages(root))} chapter notebooks under {CHAPTER_NOTEBOOK_DIR}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
