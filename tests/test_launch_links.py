"""Launch buttons and downloads open files that exist in the repository.

* fast: the chapter notebooks ``book/notebooks/*.ipynb`` that the buttons open are in
  sync with the MyST chapters; the launch settings in ``_config.yml`` (no placeholder
  hub, no JupyterHub button unless a hub is set, the hub pulls the student repository);
* slow (browser): every launch and download link of every page of the built book,
  mapped back to a path in this repository, names a file that exists (and a download
  serves that file's bytes).
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from book_visits import visit

from course_lib.grading.editions.launch import (
    CHAPTER_SETUP_TAG,
    LaunchSettingsError,
    chapter_notebook,
    class_settings,
    launch_urls,
    read_settings,
    settings_from_config,
    stale_chapter_notebooks,
    write_chapter_notebooks,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"].rstrip("/")
ORG, REPO = urlparse(REPO_URL).path.strip("/").split("/")
BRANCH = CONFIG["repository"]["branch"]


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return pages


def _notebook_pages() -> list[str]:
    """Pages executed as notebooks (a jupytext header): these get launch buttons."""
    return [
        p
        for p in _toc_pages()
        if (ROOT / f"{p}.md").read_text().startswith("---\njupytext:")
    ]


def _md_code_cells(md: str) -> list[str]:
    """The code of each ```{code-cell} block of a MyST notebook, without its
    option lines (``:tags: ...``)."""
    cells = []
    for body in re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", md, re.M | re.S):
        lines = body.splitlines()
        if lines and lines[0].strip() == "---":  # a YAML options block
            end = lines.index("---", 1)
            lines = lines[end + 1 :]
        while lines and lines[0].startswith(":") and ":" in lines[0][1:]:
            lines = lines[1:]
        cells.append("\n".join(lines).strip("\n"))
    return cells


def _nb_code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return [
        "".join(c["source"]).strip("\n")
        for c in nb["cells"]
        if c["cell_type"] == "code"
        and "course-setup" not in c["metadata"].get("tags", [])
    ]


# --- chapter notebooks ----------------------------------------------------------


def test_every_notebook_page_has_a_committed_notebook() -> None:
    pages = _notebook_pages()
    assert len(pages) >= 11, pages
    names = {p.split("/")[-1] for p in pages}
    committed = {p.stem for p in (ROOT / "book" / "notebooks").glob("*.ipynb")}
    assert committed == names, (
        "book/notebooks/ should hold one notebook per chapter; run `make notebooks`"
    )


@pytest.mark.parametrize("page", _notebook_pages())
def test_chapter_notebook_has_the_chapter_code(page: str) -> None:
    """The notebook a launch button opens runs the chapter's code, cell by cell
    (read from the MyST file here, independently of jupytext)."""
    md = (ROOT / f"{page}.md").read_text()
    nb = ROOT / "book" / "notebooks" / f"{page.split('/')[-1]}.ipynb"
    expected = _md_code_cells(md)
    assert expected, f"{page} has no code cells"
    assert _nb_code_cells(nb) == expected, (
        f"{nb.relative_to(ROOT)} is out of date; run `make notebooks`"
    )


def test_chapter_notebooks_are_in_sync() -> None:
    assert stale_chapter_notebooks(ROOT) == [], "run `make notebooks` and commit"


def test_an_edited_chapter_makes_its_notebook_stale(tmp_path: Path) -> None:
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(
        ROOT / "book", tmp_path / "book", ignore=shutil.ignore_patterns("_*")
    )
    assert stale_chapter_notebooks(tmp_path) == []
    md = tmp_path / "book" / "05-alibi.md"
    md.write_text(md.read_text().replace("```{code-cell}", "```{code-cell}\n# new", 1))
    (tmp_path / "book" / "notebooks" / "extra.ipynb").write_text("{}")
    stale = stale_chapter_notebooks(tmp_path)
    assert stale == ["book/notebooks/05-alibi.ipynb", "book/notebooks/extra.ipynb"]
    written = write_chapter_notebooks(tmp_path)
    assert sorted(p.name for p in written) == ["05-alibi.ipynb", "extra.ipynb"]
    assert stale_chapter_notebooks(tmp_path) == []
    code = _nb_code_cells(tmp_path / "book" / "notebooks" / "05-alibi.ipynb")
    assert code == _md_code_cells(md.read_text())


# --- settings and URLs ------------------------------------------------------------


def test_config_has_no_placeholder_hub_and_no_hub_button() -> None:
    launch = CONFIG["launch_buttons"]
    for key, value in launch.items():  # no placeholder host in any launch setting
        assert "example." not in str(value), (key, value)
    assert launch.get("jupyterhub_url", "") == ""
    settings = read_settings(ROOT)
    urls = launch_urls(settings, "book/notebooks/05-alibi.ipynb")
    assert set(urls) == {"Binder", "Colab"}


def _with_hub(**launch) -> dict:
    config = json.loads(json.dumps(CONFIG))
    config["launch_buttons"].update(launch)
    return config


HUB = "https://hub.some-class.org"


def _hub_settings(**more):
    return settings_from_config(
        _with_hub(
            jupyterhub_url=HUB + "/",
            student_repository="https://github.com/some-class/pe-student",
            student_branch="term-2027",
            **more,
        )
    )


def test_hub_button_pulls_the_student_repository_for_a_chapter() -> None:
    student = "https://github.com/some-class/pe-student"
    settings = _hub_settings()
    url = urlparse(launch_urls(settings, "book/notebooks/05-alibi.ipynb")["JupyterHub"])
    assert (url.scheme, url.netloc) == ("https", "hub.some-class.org")
    assert url.path == "/hub/user-redirect/git-pull"
    query = parse_qs(url.query)
    assert query["repo"] == [student]  # never the repository that holds solutions/
    assert query["branch"] == ["term-2027"]
    # nbgitpuller clones into a folder named after the repository
    assert query["urlpath"] == ["lab/tree/pe-student/book/notebooks/05-alibi.ipynb"]


def test_hub_button_of_an_exercise_opens_the_fetched_copy() -> None:
    """One copy of each exercise: on the hub, an exercise notebook opens where
    nbgrader's Assignments tab fetches it (~/ex05_alibi/ex05_alibi.ipynb, the copy
    that Submit sends), never a pulled copy of the student repository's notebooks/;
    Colab and Binder open the repository's file as without a hub."""
    path = "notebooks/ex05_alibi/ex05_alibi.ipynb"
    settings = _hub_settings()
    urls = launch_urls(settings, path)
    assert urls["JupyterHub"] == (
        "https://hub.some-class.org/hub/user-redirect/lab/tree/"
        "ex05_alibi/ex05_alibi.ipynb"
    )
    assert "git-pull" not in urls["JupyterHub"]
    without_hub = launch_urls(settings_from_config(CONFIG), path)
    assert {k: v for k, v in urls.items() if k != "JupyterHub"} == without_hub
    classic = _hub_settings(notebook_interface="classic")
    assert launch_urls(classic, path)["JupyterHub"] == (
        "https://hub.some-class.org/hub/user-redirect/tree/ex05_alibi/ex05_alibi.ipynb"
    )
    # only an exercise's own notebook path counts as an exercise
    for other in ("notebooks/README.md.ipynb", "book/notebooks/05-alibi.ipynb",
                  "notebooks/ex05_alibi/sub/x.ipynb"):  # fmt: skip
        assert "/git-pull?" in launch_urls(settings, other)["JupyterHub"], other


def test_class_links_that_pull_an_exercise_open_the_fetched_copy() -> None:
    from course_lib.grading.editions.launch import rehome_url

    settings = _hub_settings()
    launch = class_settings(settings)
    pulled = launch_urls(launch, "book/notebooks/05-alibi.ipynb")["JupyterHub"]
    exercise = pulled.replace(
        "book/notebooks/05-alibi.ipynb", "notebooks/ex07_transformer_xl/"
        "ex07_transformer_xl.ipynb"
    )  # fmt: skip
    assert rehome_url(exercise, settings, launch) == (
        f"{HUB}/hub/user-redirect/lab/tree/ex07_transformer_xl/ex07_transformer_xl.ipynb"
    )
    assert rehome_url(pulled, settings, launch) == pulled  # a chapter stays pulled


def _exercise_pointer_cells(cells) -> list[int]:
    return [
        i for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and re.search(
            r"github\.com/[^)\s]+/blob/[^)\s]+/notebooks/ex05_alibi/ex05_alibi\.ipynb",
            "".join(c["source"]))
    ]  # fmt: skip


def test_hub_chapter_notebooks_point_to_the_fetched_copy() -> None:
    """With a hub, the exercise pointer of a chapter notebook (the one the hub
    button pulls, class edition) is followed by a note: fetch on the Assignments
    tab, work in ~/ex05_alibi/ex05_alibi.ipynb (a link to it on the hub), the
    pulled copy is not submitted. Without a hub, no note (the committed ones)."""
    settings = _hub_settings()
    for class_edition in (True, False):
        cells = json.loads(chapter_notebook(
            ROOT, "book/05-alibi", settings, class_edition=class_edition))["cells"]
        (pointer,) = _exercise_pointer_cells(cells)
        note = cells[pointer + 1]
        text = "".join(note["source"])
        assert note["metadata"]["tags"] == ["course-hub-note"]
        assert (
            f"({HUB}/hub/user-redirect/lab/tree/ex05_alibi/ex05_alibi.ipynb)" in text
        )
        assert "`~/ex05_alibi/ex05_alibi.ipynb`" in text and "Fetch" in text
        assert "not submitted" in text
        assert sum("course-hub-note" in c["metadata"].get("tags", [])
                   for c in cells) == 1  # fmt: skip
    plain = json.loads((ROOT / "book/notebooks/05-alibi.ipynb").read_text())["cells"]
    assert _exercise_pointer_cells(plain)  # the open edition's pointer, no note
    assert not any("course-hub-note" in c["metadata"].get("tags", []) for c in plain)


def test_pulled_exercise_notebooks_say_they_are_not_submitted(tmp_path) -> None:
    """course publish on a hub class: each exercise notebook of the student
    repository (what nbgitpuller pulls) starts with a cell naming the fetched copy;
    everything else in it is unchanged; a second run keeps one such cell; without
    a hub nothing changes."""
    from course_lib.grading.editions.launch import mark_pulled_exercises

    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))  # fmt: skip
    paths = sorted((tmp_path / "notebooks").glob("*/*.ipynb"))
    before = {p: json.loads(p.read_text()) for p in paths}
    assert mark_pulled_exercises(tmp_path / "notebooks", settings_from_config(CONFIG))\
        == []  # fmt: skip
    settings = class_settings(_hub_settings())
    assert mark_pulled_exercises(tmp_path / "notebooks", settings) == paths
    mark_pulled_exercises(tmp_path / "notebooks", settings)  # idempotent
    assert len(paths) >= 11
    for path in paths:
        nb = json.loads(path.read_text())
        first, rest = nb["cells"][0], nb["cells"][1:]
        assert first["cell_type"] == "markdown", path.name
        assert first["metadata"]["tags"] == ["course-hub-note"]
        text = "".join(first["source"])
        folder = path.parent.name
        assert text.startswith("*On the class's JupyterHub, this copy is not the one")
        links = re.findall(r"\]\(([^)\s]+)\)", text)
        assert links == [
            f"{HUB}/hub/user-redirect/lab/tree/{folder}/{path.name}"
        ], (path.name, links)
        assert f"`{folder}`" in text
        assert rest == before[path]["cells"], path.name
        assert "nbgrader" not in first["metadata"]  # never graded


def test_a_chapter_on_the_hub_uses_the_fetched_copy(tmp_path, monkeypatch) -> None:
    """The chapter set-up takes the student's answers from the copy nbgrader
    fetched into the home folder (the one submitted), not from the pulled copy of
    the student repository beside the chapter notebook."""
    from course_lib.grading.editions.chapter_runtime import find_exercise_notebooks

    home, pulled = tmp_path / "home", tmp_path / "home" / "pe-student"
    name = "ex05_alibi/ex05_alibi.ipynb"
    for where in (home, pulled / "notebooks"):
        (where / name).parent.mkdir(parents=True)
        (where / name).write_text("{}")
    (pulled / "notebooks" / "ex06_relative").mkdir()
    (pulled / "notebooks" / "ex06_relative" / "ex06_relative.ipynb").write_text("{}")
    (pulled / "book" / "notebooks").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    found = find_exercise_notebooks(pulled / "book" / "notebooks")
    assert found == [
        (home / name).resolve(),
        (pulled / "notebooks" / "ex06_relative" / "ex06_relative.ipynb").resolve(),
    ]


def test_hub_notes_in_the_book_pages() -> None:
    """The book (Sphinx, doctree-resolved): with a hub, a section that links to an
    exercise notebook on GitHub gets one note per exercise, before its
    subsections, whose link opens the fetched copy."""
    from docutils import nodes
    from docutils.core import publish_doctree

    from course_lib.grading.editions.launch import _hub_notes_in_doctree

    blob = "https://github.com/some-class/pe-student/blob/term-2027/notebooks"
    doctree = publish_doctree(
        "Title\n=====\n\nExercise\n--------\n\n"
        f"Read `it <{blob}/ex05_alibi/ex05_alibi.ipynb>`__ and `again "
        f"<{blob}/ex05_alibi/ex05_alibi.ipynb>`__.\n\n"
        "Sub\n~~~\n\ntext\n\nOther\n-----\n\n`a chapter <"
        "https://github.com/some-class/pe-student/blob/term-2027/book/05.md>`__\n"
    )
    _hub_notes_in_doctree(doctree, _hub_settings())
    notes = list(doctree.findall(nodes.note))
    assert len(notes) == 1
    section = notes[0].parent
    assert section["names"] == ["exercise"]
    kinds = [type(c).__name__ for c in section.children]
    assert kinds == ["title", "paragraph", "note", "section"]
    (link,) = [r["refuri"] for r in notes[0].findall(nodes.reference)]
    assert link == f"{HUB}/hub/user-redirect/lab/tree/ex05_alibi/ex05_alibi.ipynb"


def test_a_hub_without_a_student_repository_is_refused() -> None:
    with pytest.raises(LaunchSettingsError, match="student_repository"):
        settings_from_config(_with_hub(jupyterhub_url="https://hub.some-class.org"))
    with pytest.raises(LaunchSettingsError, match="github.com/ORG/REPO"):
        settings_from_config(
            _with_hub(
                jupyterhub_url="https://hub.some-class.org",
                student_repository="not a url",
            )
        )


# --- the class edition launches from the student repository ---------------------

STUDENT = "https://github.com/some-class/pe-student"


def test_class_edition_without_a_student_repository_has_no_launch() -> None:
    assert not CONFIG["launch_buttons"].get("student_repository")
    assert class_settings(read_settings(ROOT)) is None


def test_class_edition_opens_and_installs_from_the_student_repository() -> None:
    from importlib import metadata

    open_ = settings_from_config(
        _with_hub(student_repository=STUDENT, student_branch="term-2027")
    )
    cls = class_settings(open_)
    assert (cls.repository, cls.branch) == (STUDENT, "term-2027")
    wheel = f"course_lib-{metadata.version('course_lib')}-py3-none-any.whl"
    assert cls.package == (
        "course_lib @ https://raw.githubusercontent.com/some-class/pe-student/"
        f"term-2027/dist/{wheel}"
    )
    path = "book/notebooks/05-alibi.ipynb"
    urls = launch_urls(cls, path)
    colab = f"/github/some-class/pe-student/blob/term-2027/{path}"
    assert urls["Colab"].endswith(colab)
    assert "/v2/gh/some-class/pe-student/term-2027?" in urls["Binder"]
    for url in urls.values():  # the instructor's repository is private
        assert f"{ORG}/{REPO}" not in url
    # a class that hosts its wheel elsewhere says so, and that wins
    own = "course_lib @ https://class.example.org/course_lib-0.1.0-py3-none-any.whl"
    cls = class_settings(settings_from_config(
        _with_hub(student_repository=STUDENT, student_package=own)))
    assert cls.package == own


def test_class_chapter_notebook_has_no_solution_dropdown() -> None:
    settings = read_settings(ROOT)
    open_nb = chapter_notebook(ROOT, "book/05-alibi", settings)
    class_nb = chapter_notebook(ROOT, "book/05-alibi", settings, class_edition=True)
    # neither notebook shows an {only} fence (Jupyter has no such directive): the
    # open one keeps the dropdowns' text, the class one leaves them out
    assert "Solution to exercise" in open_nb and "Solution to exercise" not in class_nb
    assert "{only}" in (ROOT / "book/05-alibi.md").read_text()
    assert "{only}" not in open_nb and "{only}" not in class_nb
    # only the dropdowns go: every code cell stays, after the chapter set-up cell
    class_cells = json.loads(class_nb)["cells"]
    assert class_cells[1]["metadata"]["tags"] == [CHAPTER_SETUP_TAG]
    assert 'start_chapter("05-alibi")' in "".join(class_cells[1]["source"])
    assert [c["source"] for i, c in enumerate(class_cells)
            if c["cell_type"] == "code" and i != 1] == [
        c["source"] for c in json.loads(open_nb)["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("edition", ["open", "class"])
def test_a_hub_book_page_points_to_the_fetched_copy(tmp_path, edition) -> None:
    """A real Sphinx build with the course's extension and a hub in _config.yml:
    the page's exercise pointer (a GitHub link, moved to the student repository in
    the class edition) is followed by the note whose link opens the fetched copy;
    without a hub, no note."""
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    config = {
        "repository": {"url": REPO_URL, "branch": BRANCH},
        "launch_buttons": {
            "jupyterhub_url": HUB,
            "student_repository": "https://github.com/some-class/pe-student",
        },
    }
    (src / "_config.yml").write_text(yaml.safe_dump(config))
    (src / "_toc.yml").write_text("root: index\n")
    (src / "conf.py").write_text(
        'extensions = ["course_lib.grading.editions.launch"]\n'
    )
    blob = f"{REPO_URL}/blob/{BRANCH}/notebooks/ex05_alibi/ex05_alibi.ipynb"
    (src / "index.rst").write_text(
        f"Title\n=====\n\nExercise\n--------\n\nRead `it on GitHub <{blob}>`__.\n"
    )
    tags = ["-t", "class_edition"] if edition == "class" else []

    def build(out: Path) -> str:
        run = subprocess.run(
            [sys.executable, "-m", "sphinx", "-q", "-W", "-n", "-b", "html", *tags,
             str(src), str(out)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        return (out / "index.html").read_text()

    page = build(tmp_path / "out")
    links = re.findall(r'href="(https://[^"]+)"', page)
    fetched = f"{HUB}/hub/user-redirect/lab/tree/ex05_alibi/ex05_alibi.ipynb"
    github = [u for u in links if u.startswith("https://github.com/")]
    if edition == "class":
        assert github == [blob.replace(f"{ORG}/{REPO}", "some-class/pe-student")]
    else:
        assert github == [blob]
    assert [u for u in links if u.startswith(HUB)] == [fetched]
    assert page.index(github[0]) < page.index("course-hub-note") < page.index(fetched)
    config["launch_buttons"] = {}
    (src / "_config.yml").write_text(yaml.safe_dump(config))
    assert "course-hub-note" not in build(tmp_path / "out-no-hub")


# --- mapping a link back to a repository path (independent of course_lib) --------


def repository_path(href: str, base: str) -> str | None:
    """The repository path a launch or download link opens, or None when the link is
    none of those (the repository and issue buttons)."""
    url = urlparse(href)
    if href.startswith(base):  # a download from the site is _sources/<repo path>
        path = url.path.lstrip("/")
        return path.removeprefix("_sources/") if path.startswith("_sources/") else None
    if url.netloc == "mybinder.org":
        prefix = f"/v2/gh/{ORG}/{REPO}/{BRANCH}"
        assert url.path == prefix, f"Binder builds another repository: {href}"
        (urlpath,) = parse_qs(url.query)["urlpath"]
        return urlpath.removeprefix("lab/tree/")
    if url.netloc == "colab.research.google.com":
        prefix = f"/github/{ORG}/{REPO}/blob/{BRANCH}/"
        assert url.path.startswith(prefix), f"Colab opens another repository: {href}"
        return url.path.removeprefix(prefix)
    if url.netloc == "github.com" and url.path.startswith(f"/{ORG}/{REPO}/blob/"):
        prefix = f"/{ORG}/{REPO}/blob/{BRANCH}/"
        assert url.path.startswith(prefix), f"a link to another branch: {href}"
        return url.path.removeprefix(prefix)
    if url.path.endswith("/git-pull"):
        pytest.fail(f"a JupyterHub button although no hub is configured: {href}")
    return None


@pytest.mark.slow
@pytest.mark.parametrize("page", _toc_pages())
def test_launch_and_download_links_open_repository_files(
    page: str, server: str, browser
) -> None:
    links = visit(browser, server, page).links
    launch = [link for link in links if link["launch"]]
    downloads = [link for link in links if link["download"]]
    if page in _notebook_pages():
        titles = {link["text"] for link in launch}
        assert {"Binder", "Colab"} <= titles, titles
        assert any(link["href"].endswith(".ipynb") for link in downloads), downloads
    assert downloads, f"{page}: no download button"
    checked = 0
    for link in (
        launch
        + downloads
        + [link for link in links if not link["launch"] and not link["download"]]
    ):
        path = repository_path(link["href"], server)
        if link["launch"] or link["download"]:
            # the repository and issue buttons are the only other entries
            assert (
                path is not None
                or link["href"] == REPO_URL
                or link["href"].startswith(f"{REPO_URL}/issues/")
            ), f"{page}: {link['text']} {link['href']} opens no repository file"
        if path is None:
            continue
        assert (ROOT / path).is_file(), (
            f"{page}: {link['href']} opens {path}, not in the repository"
        )
        if link["launch"]:
            assert path.endswith(".ipynb"), f"{page}: {link['text']} opens {path}"
        if link["download"]:
            with urllib.request.urlopen(link["href"]) as response:
                served = response.read()
            assert served == (ROOT / path).read_bytes(), (
                f"{page}: the download {link['href']} differs from {path}"
            )
        checked += 1
    assert checked >= len(launch) + len(downloads)


def test_class_chapter_notebook_leaves_out_open_edition_only_code() -> None:
    """Chapter 4's cell that computes the open edition's diagnosis of exercise 9's
    first bug (tagged open-edition-only) is in the open chapter notebook and not in
    the class one; every other code cell is in both."""
    from course_lib.grading.editions.launch import OPEN_ONLY_TAG

    settings = read_settings(ROOT)
    text = (ROOT / "book/04-rope.md").read_text()
    assert f":tags: [remove-input, {OPEN_ONLY_TAG}]" in text
    open_cells = json.loads(chapter_notebook(ROOT, "book/04-rope", settings))["cells"]
    class_cells = json.loads(
        chapter_notebook(ROOT, "book/04-rope", settings, class_edition=True))["cells"]

    def code(cells):
        return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]

    tagged = [c for c in open_cells if OPEN_ONLY_TAG in c["metadata"].get("tags", [])]
    assert len(tagged) == 1 and "neox_err" in "".join(tagged[0]["source"])
    assert not any("neox_err" in src for src in code(class_cells))
    kept = [src for src in code(open_cells) if src != "".join(tagged[0]["source"])]
    assert kept[1:] == [src for src in code(class_cells)
                        if 'start_chapter("04-rope")' not in src][1:]
