"""``course publish OUT``: the student-facing tree of a credit-bearing class.

The instructor's repository holds everything (``solutions/``, the hidden graders, the
grading tool). What students of a class get is written by :func:`publish` into a new
folder, ready to push to a public repository or a web server:

* ``OUT/docs/``: the **class edition** of the book, built with ``COURSE_EDITION=class``
  (``book/_ext/course_edition.py``), so the "Solution to exercise N" listings are left
  out of the pages, the search index and the page sources. It is served as it is:
  GitHub Pages publishes a branch's root or its ``docs/`` folder ("Configuring a
  publishing source for your GitHub Pages site", GitHub Docs), and ``docs/`` keeps
  the book apart from the repository's other folders; ``docs/.nojekyll`` turns off
  Jekyll, which would drop Sphinx's ``_static/``, ``_images/`` and ``_sources/``
  (Jekyll skips folders whose names start with ``_``; Sphinx's own
  ``sphinx.ext.githubpages`` writes the same file). The build's ``html.baseurl`` is
  the class edition's address (:func:`.launch.class_book_url`), the one the links
  of ``course feedback`` use;
* ``OUT/notebooks/``: the release notebooks of ``notebooks/`` (no solution regions, no
  hidden test cells);
* ``OUT/dist/``: the student wheel of
  :func:`course_lib.grading.editions.library.build_student_wheel` (exercise targets
  stubbed, hidden graders and the grading tool left out);
* ``OUT/book/notebooks/``: the chapter notebooks that the class edition's launch
  buttons open, without the solution dropdowns;
* ``OUT/binder/``: the Binder environment of the student repository (CPU torch, then
  the wheel of ``dist/``);
* ``OUT/README.md``: what each folder is.

``OUT`` is meant to become the class's public student repository
(``launch_buttons.student_repository`` in ``_config.yml``): the class edition's launch
buttons and set-up cells point there, never at the instructor's repository
(:func:`course_lib.grading.editions.launch.class_settings`).

The release notebooks must be those of this term: each one's variant (recorded by
``course release``, :mod:`.term`) must be the one ``CourseTerm`` in
``nbgrader_config.py`` asks of its exercise, or publishing stops before it starts.

Nothing is read from ``solutions/``. The class build reuses the execution cache of the
open build (``_build/.jupyter_cache``): chapters whose code did not change are not run
again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import CourseError

__all__ = ["PublishError", "PublishResult", "find_course_root", "publish"]

# Signs of an answer in a published file: a solution dropdown that reached the HTML or
# an open-edition-only block left in a page source; in a notebook, nbgrader's solution
# or hidden-test regions (the book's prose may name those markers).
_BOOK_LEAKS = re.compile(
    r"<summary[^>]*>(?:\s*<[^>]+>)*\s*Solution to exercise"
    r"|^:{3,}\{only\}\s+not\s+class_edition",
    re.MULTILINE,
)
_NOTEBOOK_LEAKS = re.compile(r"### BEGIN SOLUTION|### BEGIN HIDDEN TESTS")
_SKIP_DIRS = {".ipynb_checkpoints", "__pycache__"}


class PublishError(CourseError):
    """``course publish`` cannot go on; the message says why in one line."""


# Where the class edition of the book goes in the published tree: the folder GitHub
# Pages serves from a branch ("Deploy from a branch", folder /docs).
BOOK_DIR = "docs"


@dataclass(frozen=True)
class PublishResult:
    out: Path
    html: Path  # OUT/docs: the class edition of the book
    notebooks: list[Path]
    wheel: Path
    book_url: str = ""  # where html/ is served ("" = not known: no student repo)


def find_course_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` holding ``_config.yml`` and
    ``notebooks/``."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "notebooks").is_dir():
            return folder
    raise PublishError(
        f"no course folder (one with _config.yml and notebooks/) at or above {here}; "
        "run course publish from the course repository or pass --root"
    )


def _check_out(out: Path, root: Path) -> Path:
    out = Path(out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise PublishError(f"{out} exists and is not a folder; name a new or empty one")
    if out.is_dir() and any(out.iterdir()):
        raise PublishError(
            f"{out} is not empty; publish into a new or empty folder so that nothing "
            "old (or private) is published with it"
        )
    inside = out.relative_to(root).parts[:1] if root in out.parents else ()
    if (
        out == root
        or out in root.parents
        or (inside and inside[0] in {"solutions", "notebooks", "book", "course_lib"})
    ):
        raise PublishError(
            f"{out} is (or holds) a folder of the course itself; publish into a folder "
            "of its own"
        )
    return out


def _class_config(root: Path, tmp: Path, book_url: str = "") -> Path:
    """A copy of ``_config.yml`` for the class build: paths made absolute (the copy
    lives elsewhere), the open build's execution cache reused, and ``html.baseurl``
    the class edition's address (when known; the open one's otherwise goes)."""
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    sphinx = config.setdefault("sphinx", {})
    local = sphinx.get("local_extensions") or {}
    sphinx["local_extensions"] = {
        name: str((root / path).resolve()) for name, path in local.items()
    }
    execute = config.setdefault("execute", {})
    execute["cache"] = str(root / "_build" / ".jupyter_cache")
    html = config.setdefault("html", {})
    html.pop("baseurl", None)  # the open edition's address is not this book's
    if book_url:
        html["baseurl"] = book_url
    # The header's repository, issues and edit buttons name the student repository,
    # never the instructor's (private) one; without a student repository, none.
    launch = config.get("launch_buttons") or {}
    student = str(launch.get("student_repository") or "").rstrip("/")
    if student:
        repository = config.setdefault("repository", {})
        repository["url"] = student
        repository["branch"] = str(launch.get("student_branch") or "main")
    else:
        for button in (
            "use_repository_button",
            "use_issues_button",
            "use_edit_page_button",
        ):
            html[button] = False
    path = tmp / "_config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def build_class_html(root: Path, *, book_url: str = "", log=print) -> Path:
    """Build the class edition of the book (strict) and return its HTML folder;
    ``book_url``: where it will be served (its ``html.baseurl``)."""
    build = root / "_build" / "class"
    shutil.rmtree(build / "_build" / "html", ignore_errors=True)  # no stale pages
    build.mkdir(parents=True, exist_ok=True)
    logfile = build / "build.log"
    jb = Path(sys.executable).with_name("jupyter-book")
    command = [str(jb) if jb.exists() else "jupyter-book"]
    with tempfile.TemporaryDirectory(prefix="course-publish-") as tmp:
        config = _class_config(root, Path(tmp), book_url)
        command += [
            "build",
            str(root),
            "--builder",
            "html",
            "--path-output",
            str(build),
            "--config",
            str(config),
            "-W",
            "-n",
            "--keep-going",
        ]
        log("building the class edition of the book (COURSE_EDITION=class) ...")
        env = {**os.environ, "COURSE_EDITION": "class"}
        with open(logfile, "w", encoding="utf-8") as fh:
            try:
                run = subprocess.run(
                    command, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT
                )
            except FileNotFoundError:
                raise PublishError(
                    "jupyter-book is not installed; install the book extra: "
                    "pip install 'course_lib[book]'"
                ) from None
    html = build / "_build" / "html"
    if run.returncode != 0 or not (html / "index.html").is_file():
        raise PublishError(
            f"the class edition of the book did not build; see {logfile}"
        )
    return html


def _text_files(folder: Path):
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in {
            ".html",
            ".js",
            ".txt",
            ".md",
            ".ipynb",
            ".json",
        }:
            yield path


def _copy_notebooks(root: Path, dest: Path, book_url: str = "") -> list[Path]:
    src = root / "notebooks"
    written = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if not path.is_file() or _SKIP_DIRS & set(rel.parts):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        if target.suffix == ".ipynb":
            text = target.read_text(encoding="utf-8")
            moved = exercise_links(text, book_url)
            if moved != text:
                target.write_text(moved, encoding="utf-8")
        written.append(target)
    if not any(p.suffix == ".ipynb" for p in written):
        raise PublishError(
            f"{src} holds no release notebook; run `course release all` first"
        )
    return written


# An exercise notebook's link to its chapter's source (``](../../book/05-alibi.md)``,
# from ``notebooks/exNN_*/``): the published tree has no ``book/*.md``.
_EXERCISE_CHAPTER_LINK = re.compile(
    r"\]\(\.\./\.\./book/(?P<name>[^)#\s/]+)\.md(?P<anchor>#[^)\s]*)?\)"
)


def exercise_links(text: str, book_url: str = "") -> str:
    """``text`` (a release notebook) with its links to a chapter's ``.md`` source
    pointing at the chapter's published page: under ``book_url`` when the class
    edition's address is known, else the page in the tree's ``docs/``."""
    base = book_url.rstrip("/") + "/book/" if book_url else f"../../{BOOK_DIR}/book/"

    def page(match: re.Match) -> str:
        return f"]({base}{match.group('name')}.html{match.group('anchor') or ''})"

    return _EXERCISE_CHAPTER_LINK.sub(page, text)


def _executed_notebooks(builds: list[Path]) -> list[dict]:
    """The executed notebooks a book build left: its ``jupyter_execute/`` folder
    (written when a chapter is run) and its execution cache's notebooks
    (``.jupyter_cache/executed/*/base.ipynb``, the outputs of chapters the build
    took from the cache, whose ``jupyter_execute/`` copy has none)."""
    import json

    paths, cached = [], []
    for build in builds:
        paths += sorted((build / "jupyter_execute").rglob("*.ipynb"))
        cached += (build / ".jupyter_cache" / "executed").glob("*/base.ipynb")
    # the most recently executed last: it wins where two copies match a chapter
    paths += sorted(cached, key=lambda p: p.stat().st_mtime)
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


def chapter_outputs(
    builds: list[Path], texts: dict[str, str], *, strict: bool = True
) -> dict:
    """``{chapter: {cell key: outputs}}``: the outputs of each chapter's code cells in
    a book build (``builds``: the folders holding its ``jupyter_execute/`` and its
    ``.jupyter_cache/``), keyed by the cell's source
    (:func:`.chapter_runtime.cell_key`), for the cells of the chapter notebooks
    ``texts`` (page -> notebook text): what :mod:`.chapter_runtime` shows where a
    cell needs an unsolved exercise. For each chapter the executed notebook with
    outputs that holds every one of its code cells is used. ``strict``: a chapter
    that no executed notebook holds (a stale build) stops publishing."""
    import json

    from .chapter_runtime import cell_key
    from .launch import is_setup_cell

    def source(cell: dict) -> str:
        src = cell.get("source", "")
        return "".join(src) if isinstance(src, list) else src

    executed = []
    for nb in _executed_notebooks(builds):
        cells = {}
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "code":
                cells[cell_key(source(cell))] = [
                    {k: v for k, v in out.items() if k != "execution_count"}
                    for out in cell.get("outputs", [])
                    if out.get("output_type") != "error"
                ]
        if any(cells.values()):  # a copy without outputs is no record of a run
            executed.append(cells)
    stored: dict[str, dict[str, list]] = {}
    for page, text in texts.items():
        keys = [
            cell_key(source(c))
            for c in json.loads(text)["cells"]
            if c["cell_type"] == "code" and not is_setup_cell(c)
        ]
        match = [cells for cells in executed if all(k in cells for k in keys)]
        if not match:
            if strict:
                raise PublishError(
                    f"{page}: no executed notebook of the book's build holds all its "
                    "code cells: the build is stale or failed; publish again"
                )
            best = max(executed, key=lambda c: sum(k in c for k in keys), default={})
            match = [best]
        stored[Path(page).name] = {k: match[-1][k] for k in keys if k in match[-1]}
    return stored


def publish(out: Path, *, root: Path | None = None, log=print) -> PublishResult:
    """Write the student-facing tree of a class into the new or empty folder ``out``."""
    root = find_course_root(root).resolve() if root is None else Path(root).resolve()
    if not (root / "_config.yml").is_file():
        raise PublishError(f"{root} has no _config.yml: it is not the course folder")
    out = _check_out(out, root)
    _check_term(root)
    book_url = _book_url(root, log)

    html_src = build_class_html(root, book_url=book_url, log=log)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _write(out, root, html_src, book_url, log)
    except BaseException:
        # OUT was new or empty: leave nothing half-published behind
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                (shutil.rmtree if child.is_dir() else Path.unlink)(child)
        raise


def _check_term(root: Path) -> None:
    """A :class:`PublishError` unless every release notebook in ``notebooks/`` was
    released for the variant the term (``CourseTerm``) asks of its exercise."""
    import json

    from .term import released_variant, term_at

    term = term_at(root)
    for path in sorted((root / "notebooks").glob("*/*.ipynb")):
        assignment = path.parent.name
        have = released_variant(json.loads(path.read_text(encoding="utf-8")))
        want = term.variant(assignment)
        if have != want:
            raise PublishError(
                f"notebooks/{assignment}/{path.name} was released for the variant "
                f"{have!r}, but this term (CourseTerm in nbgrader_config.py) asks "
                f"{assignment} for {want!r}: run `course release {assignment}` first"
            )


def _book_url(root: Path, log) -> str:
    """The class edition's address from ``_config.yml`` (before the long build, so a
    malformed setting stops publishing at once)."""
    from .launch import LaunchSettingsError, class_book_url, read_settings

    try:
        settings = read_settings(root)
    except LaunchSettingsError as exc:
        raise PublishError(str(exc)) from None
    url = class_book_url(settings) if settings is not None else ""
    if not url:
        log(
            "note: neither launch_buttons.student_book_url nor student_repository "
            "is set in _config.yml, so the class edition's address is unknown: "
            "course feedback will link to the open edition's pages"
        )
    return url


def class_chapter_notebooks(root: Path) -> dict[str, str]:
    """page -> text of the class edition's chapter notebook (the published
    ``book/notebooks/*.ipynb``): no solution dropdowns, the chapter set-up cell, and
    its links into the student repository when the class has one."""
    from .launch import chapter_notebook, chapter_pages, class_settings, read_settings

    settings = read_settings(root)
    if settings is None:
        raise PublishError(f"{root} has no _config.yml: it is not the course folder")
    launch = class_settings(settings)
    texts = {}
    for page in chapter_pages(root):
        text = chapter_notebook(root, page, launch or settings, class_edition=True)
        if launch is not None:  # its links into the student repository
            from .launch import rehome_links

            text = rehome_links(text, settings, launch)
        texts[page] = text
    return texts


def _write_launch_files(
    out: Path, root: Path, wheel: Path, texts: dict[str, str], log
) -> None:
    """The chapter notebooks, the releases' set-up cells and ``binder/`` of the
    student repository."""
    from .launch import (
        chapter_notebook_path,
        class_settings,
        mark_pulled_exercises,
        read_settings,
        refresh_setup_cells,
        student_wheel_name,
    )

    if wheel.name != student_wheel_name():
        raise PublishError(
            f"the student wheel is {wheel.name}, but the set-up cells would install "
            f"{student_wheel_name()}; reinstall course_lib (pip install -e .) and "
            "publish again"
        )
    settings = read_settings(root)
    if settings is None:
        raise PublishError(f"{root} has no _config.yml: it is not the course folder")
    launch = class_settings(settings)
    if launch is None:
        log(
            "note: launch_buttons.student_repository is not set in _config.yml, so "
            "the class edition has no Binder/Colab/JupyterHub buttons"
        )
    else:
        refresh_setup_cells(sorted((out / "notebooks").rglob("*.ipynb")), launch)
        # a hub class: the pulled copies say they are not the ones submitted
        mark_pulled_exercises(out / "notebooks", launch)
    for page, text in texts.items():
        path = out / chapter_notebook_path(page)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    binder = out / "binder"
    binder.mkdir()
    for name in ("runtime.txt", "requirements.txt"):
        shutil.copyfile(root / "binder" / name, binder / name)
    post = binder / "postBuild"
    post.write_text(
        "#!/bin/bash\n"
        "# repo2docker runs this after binder/requirements.txt (CPU torch and the\n"
        "# other dependencies): install the student package of dist/.\n"
        "set -euo pipefail\n"
        f"python -m pip install --no-cache-dir --no-deps dist/{wheel.name}\n",
        encoding="utf-8",
    )
    post.chmod(0o755)


def _write(out: Path, root: Path, html_src: Path, book_url: str, log) -> PublishResult:
    html = out / BOOK_DIR
    shutil.copytree(html_src, html, ignore=shutil.ignore_patterns(".buildinfo"))
    (html / ".nojekyll").write_text("", encoding="utf-8")  # serve _static/ as is
    notebooks = _copy_notebooks(root, out / "notebooks", book_url)

    from .library import build_student_wheel

    texts = class_chapter_notebooks(root)
    # the class build's executed chapters and its execution cache (_class_config)
    stored = chapter_outputs([html_src.parent, root / "_build"], texts)
    log("building the student wheel ...")
    wheel = build_student_wheel(out / "dist", chapter_outputs=stored)
    _write_launch_files(out, root, wheel, texts, log)

    checks = [(p, _BOOK_LEAKS) for p in _text_files(html)]
    checks += [(p, _BOOK_LEAKS) for p in _text_files(out / "book")]
    checks += [(p, _NOTEBOOK_LEAKS) for p in _text_files(out / "notebooks")]
    for path, leaks in checks:
        text = path.read_text(encoding="utf-8", errors="replace")
        leak = leaks.search(text)
        if leak:
            raise PublishError(
                f"{path.relative_to(out)} contains {leak.group(0)!r}: the published "
                "tree would show an answer, so nothing was published"
            )
    (out / "README.md").write_text(
        "# Student edition\n\n"
        "Written by `course publish`.\n\n"
        "- `docs/`: the book (class edition: no solution listings); open "
        "`docs/index.html`, or serve it: on GitHub, Settings -> Pages -> Deploy "
        "from a branch, this branch, folder `/docs`"
        + (f" (the book's address: {book_url})" if book_url else "")
        + ".\n"
        "- `notebooks/`: the exercise notebooks; check one with "
        "`course check notebooks/<name>/<name>.ipynb`.\n"
        "- `book/notebooks/`: the chapters as notebooks (what the book's launch "
        "buttons open); they use a student's answers from `notebooks/` where "
        "those pass their public checks, and show the book's stored output "
        "where a cell needs an exercise not solved yet.\n"
        f"- `dist/`: the student package: `pip install dist/{wheel.name}`.\n"
        "- `binder/`: the Binder environment (CPU torch, then the package of "
        "`dist/`).\n",
        encoding="utf-8",
    )
    return PublishResult(
        out=out, html=html, notebooks=notebooks, wheel=wheel, book_url=book_url
    )
