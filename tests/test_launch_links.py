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


def test_hub_button_pulls_the_student_repository() -> None:
    student = "https://github.com/some-class/pe-student"
    settings = settings_from_config(
        _with_hub(
            jupyterhub_url="https://hub.some-class.org/",
            student_repository=student,
            student_branch="term-2027",
        )
    )
    url = urlparse(
        launch_urls(settings, "notebooks/ex05_alibi/ex05_alibi.ipynb")["JupyterHub"]
    )
    assert (url.scheme, url.netloc) == ("https", "hub.some-class.org")
    assert url.path == "/hub/user-redirect/git-pull"
    query = parse_qs(url.query)
    assert query["repo"] == [student]  # never the repository that holds solutions/
    assert query["branch"] == ["term-2027"]
    # nbgitpuller clones into a folder named after the repository
    assert query["urlpath"] == [
        "lab/tree/pe-student/notebooks/ex05_alibi/ex05_alibi.ipynb"
    ]


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
    marker = "{only} not class_edition"
    assert marker in open_nb and "Solution to exercise" in open_nb
    assert marker not in class_nb and "Solution to exercise" not in class_nb
    # only the dropdowns go: every code cell stays, after the chapter set-up cell
    class_cells = json.loads(class_nb)["cells"]
    assert class_cells[1]["metadata"]["tags"] == [CHAPTER_SETUP_TAG]
    assert 'start_chapter("05-alibi")' in "".join(class_cells[1]["source"])
    assert [c["source"] for i, c in enumerate(class_cells)
            if c["cell_type"] == "code" and i != 1] == [
        c["source"] for c in json.loads(open_nb)["cells"] if c["cell_type"] == "code"]


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
