"""``course publish``: the class edition holds no answer; the open edition keeps its
answers collapsed after each exercise.

The search looks for two kinds of pattern in every text file under ``OUT`` and in every
file inside the student wheel:

* a distinctive line of each solution body of ``solutions/*/*.ipynb`` (between
  ``### BEGIN SOLUTION`` and ``### END SOLUTION``): the longest line that is not blank,
  not a comment, not trivially short and not shown to the student elsewhere in the
  same notebook (the bug zoo hands out buggy code that shares lines with the fix);
* the source of each hidden test cell (between the hidden-test markers).

HTML is compared as text (tags removed, entities decoded), JSON/notebooks by their
string values, so a listing split into highlighted ``<span>`` pieces is still found.

The tree is published from a copy of the course whose ``_config.yml`` names a student
repository and a JupyterHub, as a class sets them before publishing; then every link
the published tree and ``course feedback`` give students (the book's pages, the
Binder, Colab and JupyterHub buttons, the set-up cells' wheel) is followed to a file
of the tree, with the student repository's GitHub Pages address mapped to ``docs/``.
The open edition's Pages workflow is checked to deploy only from a public
repository.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
MIN_LEN = 16  # shorter lines (`return x`, `out = a + b`) are not distinctive
TEXT_SUFFIXES = {
    ".html",
    ".js",
    ".txt",
    ".md",
    ".ipynb",
    ".json",
    ".py",
    ".css",
    ".toml",
    ".cfg",
    ".yml",
    ".yaml",
    ".csv",
    ".svg",
    ".xml",
    ".inv",
    "",
    ".typed",
    ".METADATA",
    ".RECORD",
    ".WHEEL",
}


def _cells(nb_path: Path):
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = cell.get("source", "")
        yield cell, "".join(src) if isinstance(src, list) else src


def _between(text: str, begin: str, end: str) -> list[list[str]]:
    bodies, current = [], None
    for line in text.splitlines():
        if line.strip() == begin:
            current = []
        elif line.strip() == end and current is not None:
            bodies.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return bodies


def _given(text: str) -> set[str]:
    """Stripped lines of ``text`` outside its solution regions: what the release shows
    the student anyway (the bug zoo, for instance, hands out the buggy code)."""
    given, inside = set(), False
    for line in text.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif not inside:
            given.add(line.strip())
    return given


def _distinctive(body: list[str], given: set[str]) -> str | None:
    lines = [ln.strip() for ln in body]
    lines = [
        ln
        for ln in lines
        if len(ln) >= MIN_LEN and not ln.startswith("#") and ln not in given
    ]
    return max(lines, key=len) if lines else None


def solution_patterns(root: Path = ROOT) -> dict[str, str]:
    """label -> pattern: one distinctive line per solution body, one per hidden cell."""
    patterns = {}
    for nb_path in sorted(root.glob("solutions/*/*.ipynb")):
        given = set().union(*(_given(src) for _cell, src in _cells(nb_path)))
        for i, (_cell, src) in enumerate(_cells(nb_path)):
            for j, body in enumerate(_between(src, BEGIN, END)):
                line = _distinctive(body, given)
                if line:
                    patterns[f"{nb_path.name} cell {i} solution {j}"] = line
            for j, body in enumerate(_between(src, HIDDEN_BEGIN, HIDDEN_END)):
                hidden = "\n".join(ln.strip() for ln in body if ln.strip())
                if hidden:
                    patterns[f"{nb_path.name} cell {i} hidden tests {j}"] = hidden
    return patterns


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, list):
        # a notebook's source is a list of lines: join them before the rest
        if all(isinstance(x, str) for x in obj):
            return ["".join(obj)]
        return [s for x in obj for s in _strings(x)]
    if isinstance(obj, dict):
        return [s for x in obj.values() for s in _strings(x)]
    return []


def _views(name: str, data: bytes) -> list[str]:
    """The texts in which a pattern is searched, or [] for a binary file."""
    if b"\0" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    views = [text]
    if name.endswith((".html", ".htm", ".xml", ".svg")):
        views.append(html_lib.unescape(re.sub(r"<[^>]+>", "", text)))
    if name.endswith((".ipynb", ".json")):
        try:
            views.append("\n".join(_strings(json.loads(text))))
        except json.JSONDecodeError:
            pass
    # compare line by line with surrounding whitespace removed
    return ["\n".join(ln.strip() for ln in v.splitlines()) for v in views]


def search_tree(out: Path, patterns: dict[str, str]) -> tuple[list[str], int]:
    """Hits as 'file: label', and the number of files searched (wheel members too)."""
    hits, searched = [], 0

    def scan(name: str, data: bytes):
        nonlocal searched
        views = _views(name, data)
        if not views:
            return
        searched += 1
        for label, pattern in patterns.items():
            if any(pattern in v for v in views):
                hits.append(f"{name}: {label}: {pattern.splitlines()[0]!r}")

    for path in sorted(out.rglob("*")):
        if not path.is_file():
            continue
        rel = str(path.relative_to(out))
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as whl:
                for member in whl.namelist():
                    scan(f"{rel}!{member}", whl.read(member))
        else:
            scan(rel, path.read_bytes())
    return hits, searched


# --- fast: the search itself can fail -------------------------------------------------


def test_patterns_cover_every_solution_notebook() -> None:
    patterns = solution_patterns()
    notebooks = {p.name for p in ROOT.glob("solutions/*/*.ipynb")}
    assert notebooks, "no solution notebooks found"
    covered = {label.split(" cell ")[0] for label in patterns}
    assert covered == notebooks
    hidden = [label for label in patterns if "hidden tests" in label]
    assert hidden and all("grade_" in patterns[label] for label in hidden)
    solutions = [p for label, p in patterns.items() if "solution" in label]
    assert solutions and all(len(p) >= MIN_LEN for p in solutions)


def test_search_finds_a_leaked_solution(tmp_path: Path) -> None:
    """A tree holding one solution notebook (and a wheel holding another, and an HTML
    page with a highlighted solution line) is caught."""
    patterns = solution_patterns()
    sources = sorted(ROOT.glob("solutions/*/*.ipynb"))
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / sources[0].name).write_bytes(sources[0].read_bytes())
    with zipfile.ZipFile(tmp_path / "x-0-py3-none-any.whl", "w") as whl:
        whl.writestr("pkg/leak.ipynb", sources[-1].read_text(encoding="utf-8"))
    label, line = next((k, v) for k, v in patterns.items() if "solution" in k)
    words = [html_lib.escape(w) for w in line.split(" ")]
    page = "<pre>" + " ".join(f"<span class='n'>{w}</span>" for w in words) + "</pre>"
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    hits, _ = search_tree(tmp_path, patterns)
    assert any(h.startswith(f"notebooks/{sources[0].name}:") for h in hits)
    assert any("!pkg/leak.ipynb:" in h for h in hits)
    assert any(h.startswith("page.html:") and label in h for h in hits)
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "a.md").write_text("# nothing to see\n", encoding="utf-8")
    assert search_tree(clean, patterns)[0] == []


def _settings(**launch):
    from course_lib.grading.editions.launch import settings_from_config

    return settings_from_config(
        {
            "repository": {"url": INSTRUCTOR_URL, "branch": "main"},
            "launch_buttons": {
                "colab_url": "https://colab.research.google.com",
                "binderhub_url": "https://mybinder.org",
                **launch,
            },
        }
    )


def test_exercise_links_lead_to_the_published_chapter() -> None:
    """An exercise notebook's link to its chapter's source (``book/*.md``, not in
    the published tree) leads to the chapter's page: under the class book's
    address, or in the tree's docs/ when that is unknown."""
    from course_lib.grading.editions.publish import exercise_links

    text = '"**Chapter:** [6. Relative](../../book/06-relative.md#t5-buckets)"'
    assert exercise_links(text, STUDENT_PAGES) == (
        f'"**Chapter:** [6. Relative]({STUDENT_PAGES}book/06-relative.html#t5-buckets)"'
    )
    assert exercise_links(text) == (
        '"**Chapter:** [6. Relative](../../docs/book/06-relative.html#t5-buckets)"'
    )
    other = "[a page](https://example.org/book/06-relative.md) [b](06-relative.md)"
    assert exercise_links(other, STUDENT_PAGES) == other  # not a chapter link
    moved = 0
    for path in sorted((ROOT / "notebooks").glob("*/*.ipynb")):
        text = path.read_text(encoding="utf-8")
        after = exercise_links(text, STUDENT_PAGES)
        assert "../../book/" not in after, path.name
        moved += after != text
    assert moved == len(list((ROOT / "notebooks").glob("*/*.ipynb")))


def test_the_class_book_address() -> None:
    """Where the feedback links and the class build's html.baseurl point:
    student_book_url, else the student repository's Pages site, else nowhere
    (the open edition's address then stays the feedback's)."""
    from course_lib.grading.editions.launch import (
        LaunchSettingsError,
        book_page_url,
        class_book_url,
        feedback_settings,
        pages_url,
    )

    assert pages_url(STUDENT_URL) == STUDENT_PAGES
    assert pages_url("https://github.com/PE-Class/pe-class.github.io") == (
        "https://pe-class.github.io/"
    )  # a user or organization site
    with_repo = _settings(student_repository=STUDENT_URL)
    assert class_book_url(with_repo) == STUDENT_PAGES
    assert book_page_url(feedback_settings(with_repo), "book/05-alibi", "x") == (
        f"{STUDENT_PAGES}book/05-alibi.html#x"
    )
    own = _settings(
        student_repository=STUDENT_URL, student_book_url="https://pe.example.edu/book"
    )
    assert class_book_url(own) == "https://pe.example.edu/book/"
    assert feedback_settings(own).book_url == "https://pe.example.edu/book/"
    only_url = _settings(student_book_url="https://pe.example.edu/book/")
    assert feedback_settings(only_url).book_url == "https://pe.example.edu/book/"
    assert feedback_settings(only_url).repository == INSTRUCTOR_URL  # no buttons moved
    neither = _settings()
    assert class_book_url(neither) == "" and feedback_settings(neither) == neither
    assert book_page_url(neither, "book/intro") == (
        "https://positional-encodings-course.github.io/course/book/intro.html"
    )
    with pytest.raises(LaunchSettingsError, match="student_book_url"):
        _settings(student_book_url="pe.example.edu/book")


def test_class_links_move_to_the_student_repository() -> None:
    from course_lib.grading.editions.launch import (
        class_settings,
        rehome_links,
        rehome_url,
    )

    settings = _settings(student_repository=STUDENT_URL, student_branch="term")
    launch = class_settings(settings)
    path = "notebooks/ex05_alibi/ex05_alibi.ipynb"
    moved = {
        f"{INSTRUCTOR_URL}/blob/main/{path}": f"{STUDENT_URL}/blob/term/{path}",
        f"{INSTRUCTOR_URL}/tree/main/notebooks": f"{STUDENT_URL}/tree/term/notebooks",
        "https://colab.research.google.com/github/positional-encodings-course/course/"
        f"blob/main/{path}": "https://colab.research.google.com/github/"
        f"{STUDENT_ORG}/{STUDENT_REPO}/blob/term/{path}",
        "https://mybinder.org/v2/gh/positional-encodings-course/course/main?urlpath=x": f"https://mybinder.org/v2/gh/{STUDENT_ORG}/{STUDENT_REPO}/term?urlpath=x",
        "https://raw.githubusercontent.com/positional-encodings-course/course/main/"
        "dist/a.whl": f"https://raw.githubusercontent.com/{STUDENT_ORG}/"
        f"{STUDENT_REPO}/term/dist/a.whl",
    }
    for old, new in moved.items():
        assert rehome_url(old, settings, launch) == new
    kept = [
        f"{INSTRUCTOR_URL}/blob/other-branch/{path}",  # not the course's branch
        "https://github.com/someone/else/blob/main/x.py",
        f"{INSTRUCTOR_URL}/issues",
        "https://arxiv.org/abs/2108.12409",
    ]
    for url in kept:
        assert rehome_url(url, settings, launch) == url
    text = f"[read it]({INSTRUCTOR_URL}/blob/main/{path}). See https://arxiv.org/x."
    assert rehome_links(text, settings, launch) == (
        f"[read it]({STUDENT_URL}/blob/term/{path}). See https://arxiv.org/x."
    )


def test_a_hub_class_tree_opens_no_pulled_exercise(tmp_path: Path) -> None:
    """One copy of each exercise (issue 32 item 4), in the notebooks ``course
    publish`` writes for a hub class (its own steps, without the book's build):
    no link of a published notebook opens a pulled exercise copy on the hub; every
    hub link to an exercise opens the fetched copy ~/A/N.ipynb of an exercise the
    tree holds; each exercise notebook starts with the note saying so, each chapter
    notebook's exercise pointer is followed by one."""
    from importlib import metadata

    from course_lib.grading.editions.publish import (
        _copy_notebooks,
        _write_launch_files,
        class_chapter_notebooks,
    )

    course, out = tmp_path / "course", tmp_path / "out"
    skip = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "_build")
    for name in ("book", "notebooks", "binder"):
        shutil.copytree(ROOT / name, course / name, ignore=skip)
    shutil.copy2(ROOT / "_toc.yml", course / "_toc.yml")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["launch_buttons"].update(
        student_repository=STUDENT_URL, student_branch="main", jupyterhub_url=HUB_URL
    )
    (course / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    out.mkdir()
    _copy_notebooks(course, out / "notebooks", STUDENT_PAGES)
    wheel = out / "dist" / (
        f"course_lib-{metadata.version('course_lib')}-py3-none-any.whl"
    )
    texts = class_chapter_notebooks(course)
    _write_launch_files(out, course, wheel, texts, log=lambda *_: None)

    exercises = sorted((out / "notebooks").glob("*/*.ipynb"))
    assert len(exercises) >= 11
    held = {p.relative_to(out).as_posix() for p in exercises}
    hub_links: dict[str, list[str]] = {}
    for path in [*exercises, *sorted((out / "book" / "notebooks").glob("*.ipynb"))]:
        text = path.read_text(encoding="utf-8")
        for link in re.findall(r"https://hub\.example\.edu[^)\s\"]*", text):
            parts = urlsplit(link)  # nbgitpuller's git-pull would fail here too
            fetched = FETCHED.fullmatch(parts.path)
            assert fetched, f"{path.name}: {link} opens no fetched copy"
            source = f"notebooks/{fetched['assignment']}/{fetched['name']}"
            assert source in held, f"{path.name}: {link} names no exercise of the tree"
            hub_links.setdefault(path.relative_to(out).as_posix(), []).append(source)
    for path in exercises:  # the first cell: this copy is not submitted
        rel = path.relative_to(out).as_posix()
        first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
        assert first["metadata"]["tags"] == ["course-hub-note"], rel
        assert "not the one you submit" in "".join(first["source"])
        assert hub_links[rel] == [rel], rel  # its own fetched copy, once
    pointed = {  # the exercises the chapter notebooks point to, on GitHub
        m for text in texts.values()
        for m in re.findall(r"/blob/[^/]+/(notebooks/[^/]+/[^/)\s]+\.ipynb)", text)
    }  # fmt: skip
    assert len(pointed) >= 11
    from_chapters = {
        source
        for rel, sources in hub_links.items()
        if rel.startswith("book/")
        for source in sources
    }
    assert from_chapters == pointed


# --- slow: the real tree --------------------------------------------------------------


# The class's public student repository and hub, as an instructor sets them in
# _config.yml before publishing (instructor guide, "Two repositories").
STUDENT_ORG, STUDENT_REPO = "PE-Class-2027", "student-term"
STUDENT_URL = f"https://github.com/{STUDENT_ORG}/{STUDENT_REPO}"
HUB_URL = "https://hub.example.edu"
# Where GitHub Pages serves that repository's site (a project site: the owner's
# name in lower case, then the repository's): docs/ of the published tree.
STUDENT_PAGES = f"https://{STUDENT_ORG.lower()}.github.io/{STUDENT_REPO}/"
INSTRUCTOR_URL = "https://github.com/positional-encodings-course/course"
INSTRUCTOR_REPO = "positional-encodings-course/course"
STUDENT_FILES = f"{STUDENT_URL}/blob/main/"


@pytest.fixture(scope="module")
def class_course(tmp_path_factory: pytest.TempPathFactory, built_book: Path) -> Path:
    """A copy of the course (what the class book build reads) whose _config.yml
    names the student repository and a hub. Its execution cache is the test
    build's (or `make book`'s), so no chapter is executed again."""
    course = tmp_path_factory.mktemp("class-course")
    skip = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    for name in ("book", "notebooks", "binder"):
        shutil.copytree(ROOT / name, course / name, ignore=skip)
    shutil.copy2(ROOT / "_toc.yml", course / "_toc.yml")
    # read only: MathJax, and the library the chapters list (literalinclude)
    (course / "_vendor").symlink_to(ROOT / "_vendor")
    (course / "course_lib").symlink_to(ROOT / "course_lib")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["repository"]["url"] == INSTRUCTOR_URL
    config["launch_buttons"].update(
        student_repository=STUDENT_URL, student_branch="main", jupyterhub_url=HUB_URL
    )
    (course / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for cache in (
        ROOT / "_build" / ".jupyter_cache",
        built_book.parent / ".jupyter_cache",
    ):
        if cache.is_dir():
            shutil.copytree(cache, course / "_build" / ".jupyter_cache")
            break
    return course


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, class_course: Path) -> Path:
    out = tmp_path_factory.mktemp("publish") / "class"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_lib.cli",
            "publish",
            str(out),
            "--root",
            str(class_course),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"course publish failed:\n{log[-4000:]}"
    return out


@pytest.mark.slow
def test_publish_tree_holds_no_answer(published: Path) -> None:
    assert sorted(p.name for p in published.iterdir()) == [
        "README.md",
        "binder",
        "book",
        "dist",
        "docs",
        "notebooks",
    ]
    assert (published / "docs" / "index.html").is_file()
    wheels = list((published / "dist").glob("course_lib-*.whl"))
    assert len(wheels) == 1
    releases = sorted(
        p.relative_to(published / "notebooks")
        for p in (published / "notebooks").rglob("*.ipynb")
    )
    expected = sorted(
        p.relative_to(ROOT / "notebooks")
        for p in (ROOT / "notebooks").rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
    )
    assert releases == expected
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
    private = ("solutions/", "course_lib/grading/autograde")
    assert not [n for n in names if n.startswith(private)]

    # nor the library's listing of a graded function (the open edition shows it in
    # a dropdown: test_open_edition_keeps_collapsed_solutions)
    graded = sorted({fn for _, fns in GRADED_LISTINGS.values() for fn in fns})
    pages = sorted((published / "docs").rglob("*.html"))
    assert len(pages) > 10
    for path in pages:
        text = _text(path.read_text(encoding="utf-8"))
        listed = [fn for fn in graded if f"def {fn}(" in text]
        assert not listed, f"{path.relative_to(published)} lists {listed}"

    # the API page documents an exercise target by its first paragraph only (the
    # rest of yarn_correction_range's docstring states the rounding ex11 grades)
    api = _text((published / "docs" / "book" / "api.html").read_text(encoding="utf-8"))
    assert "Pair indices (low, high) where YaRN" in api
    assert "floor(i(beta_fast))" not in api
    assert "the rest of its documentation is in the open edition" in api

    patterns = solution_patterns()
    hits, searched = search_tree(published, patterns)
    print(
        f"searched {searched} text files (wheel members included) for "
        f"{len(patterns)} patterns"
    )
    assert searched > 50
    assert not hits, "answers in the published tree:\n" + "\n".join(hits[:40])


@pytest.mark.slow
def test_publish_tree_is_a_student_repository(published: Path) -> None:
    """The published tree is laid out as the student repository the buttons open,
    and nothing in it points students at the instructor's repository."""
    from course_lib.grading.editions.launch import chapter_notebook_path, chapter_pages

    for page in chapter_pages(ROOT):
        nb = json.loads((published / chapter_notebook_path(page)).read_text())
        first = "".join(nb["cells"][0]["source"])
        assert "course-setup" in nb["cells"][0]["metadata"]["tags"], page
        assert "COURSE_PACKAGE" in first
        assert not any(
            "{only} not class_edition" in "".join(c["source"]) for c in nb["cells"]
        )
    (wheel,) = (published / "dist").glob("*.whl")
    # the chapters' stored outputs (shown where a cell needs an unsolved
    # exercise) are the class build's: every chapter, and outputs in each
    with zipfile.ZipFile(wheel) as whl:
        stored = json.loads(whl.read("course_lib/data/chapter_outputs.json"))
    assert set(stored) == {Path(p).name for p in chapter_pages(ROOT)}
    for chapter, cells in stored.items():
        assert any(cells.values()), f"{chapter}: no stored output"
    post = (published / "binder" / "postBuild").read_text()
    assert f"dist/{wheel.name}" in post
    assert (published / "binder" / "requirements.txt").read_text() == (
        ROOT / "binder" / "requirements.txt"
    ).read_text()
    # the buttons are there (where they lead: test_every_student_link_resolves)
    page = (published / "docs" / "book" / "05-alibi.html").read_text()
    for service in ("colab.research.google.com", "mybinder.org", "git-pull?"):
        assert service in page
    download = published / "docs" / "_sources" / "book" / "notebooks" / "05-alibi.ipynb"
    assert "Solution to exercise" not in download.read_text()


@pytest.mark.slow
def test_publish_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "publish", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not empty" in lines[0]


GRADED_LISTINGS = {
    "01-permutation": (1, ["permutation_matrix", "self_attention"]),
    "02-sinusoidal": (2, ["sinusoidal_encoding", "position_ids_from_attention_mask"]),
    "03-rotation": (3, ["offset_matrix"]),
    "04-rope": (4, ["apply_rope", "rope_interleaved_to_half_weights"]),
    "05-alibi": (5, ["alibi_slopes", "alibi_bias"]),
    "06-relative": (6, ["shaw_relative_attention", "t5_relative_position_bucket"]),
    "07-transformer-xl": (
        7,
        ["rel_attention_scores", "rel_shift", "rel_shift_bidirectional"],
    ),
    "08-da-transformer": (8, ["da_rescale", "da_attention"]),
    "11-long-context": (
        11,
        ["yarn_correction_range", "yarn_attention_factor", "llama3_scaled_frequencies"],
    ),
}


def _text(page: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", page)).replace("\xa0", " ")


@pytest.mark.slow
def test_open_edition_documents_exercise_targets_in_full(built_book: Path) -> None:
    api = _text((built_book / "book" / "api.html").read_text(encoding="utf-8"))
    assert "floor(i(beta_fast))" in api
    assert "the rest of its documentation is in the open edition" not in api


@pytest.mark.slow
@pytest.mark.parametrize("chapter", sorted(GRADED_LISTINGS))
def test_open_edition_keeps_collapsed_solutions(built_book: Path, chapter: str) -> None:
    n, functions = GRADED_LISTINGS[chapter]
    page = (built_book / "book" / f"{chapter}.html").read_text(encoding="utf-8")
    details = list(re.finditer(r"<details\b([^>]*)>(.*?)</details>", page, re.DOTALL))
    solution = [d for d in details if f"Solution to exercise {n}" in _text(d.group(2))]
    assert len(solution) == 1, f"{chapter}: {len(solution)} 'Solution to exercise {n}'"
    d = solution[0]
    before = _text(page[: d.start()])
    assert f"course check notebooks/ex{n:02d}_" in before, (
        f"{chapter}: the solution does not come after the exercise pointer"
    )
    assert not re.search(r"\bopen\b", d.group(1)), f"{chapter}: the dropdown is open"
    body = _text(d.group(2))
    for fn in functions:
        assert f"def {fn}(" in body, f"{chapter}: {fn} missing from the dropdown"
        assert f"def {fn}(" not in before, f"{chapter}: {fn} listed before the exercise"


# --- every link a student is given leads into the published tree ---------------------

LAUNCH_HOSTS = {"mybinder.org", "colab.research.google.com", "hub.example.edu"}
# the hub's address of a fetched exercise, ~/<assignment>/<name> (nbgrader's fetch
# puts the release of notebooks/<assignment>/ there)
FETCHED = re.compile(
    r"/hub/user-redirect/lab/tree/(?P<assignment>[^/]+)/(?P<name>[^/]+\.ipynb)"
)


def _repository_path(url: str) -> str:
    """The student repository's file that a launch link opens, read from the link
    as each service defines it (Binder: ``/v2/gh/ORG/REPO/BRANCH?urlpath=lab/tree/
    PATH``; Colab: ``/github/ORG/REPO/blob/BRANCH/PATH``; nbgitpuller:
    ``git-pull?repo=URL&branch=B&urlpath=lab/tree/REPO/PATH``; an exercise on the
    hub: ``user-redirect/lab/tree/A/N.ipynb``, the copy nbgrader fetches, whose
    source is the tree's ``notebooks/A/N.ipynb``). Fails on a link that opens
    another repository or branch, or a pulled copy of an exercise on the hub."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.netloc == "mybinder.org":
        assert parts.path == f"/v2/gh/{STUDENT_ORG}/{STUDENT_REPO}/main", url
        (urlpath,) = query["urlpath"]
        assert urlpath.startswith("lab/tree/"), url
        return unquote(urlpath.removeprefix("lab/tree/"))
    if parts.netloc == "colab.research.google.com":
        prefix = f"/github/{STUDENT_ORG}/{STUDENT_REPO}/blob/main/"
        assert parts.path.startswith(prefix), url
        return unquote(parts.path.removeprefix(prefix))
    assert parts.netloc == "hub.example.edu", url
    fetched = FETCHED.fullmatch(parts.path)
    if fetched:  # the copy the Assignments tab fetches: the release of notebooks/
        return f"notebooks/{unquote(fetched['assignment'])}/{unquote(fetched['name'])}"
    assert parts.path == "/hub/user-redirect/git-pull", url
    assert query["repo"] == [STUDENT_URL] and query["branch"] == ["main"], url
    (urlpath,) = query["urlpath"]
    assert urlpath.startswith(f"lab/tree/{STUDENT_REPO}/"), url
    path = unquote(urlpath.removeprefix(f"lab/tree/{STUDENT_REPO}/"))
    # one copy of each exercise: the hub never opens a pulled exercise notebook
    assert not path.startswith("notebooks/"), f"opens a pulled exercise copy: {url}"
    return path


def _book_target(url: str, published: Path) -> tuple[Path, str]:
    """The page of ``docs/`` that an address under the class book's address names,
    and its fragment."""
    assert url.startswith(STUDENT_PAGES), url
    rel, _, fragment = url.removeprefix(STUDENT_PAGES).partition("#")
    return published / "docs" / unquote(rel or "index.html"), fragment


def _assert_page(path: Path, fragment: str, link: str) -> None:
    assert path.is_file(), f"{link} -> {path}: no such page"
    if fragment:
        ids = re.findall(r'\bid="([^"]+)"', path.read_text(encoding="utf-8"))
        assert fragment in ids, f"{link}: {path.name} has no id {fragment!r}"


@pytest.mark.slow
def test_every_student_link_resolves(published: Path, class_course: Path) -> None:
    """Each link of ``course feedback`` (the book at the section, the chapter
    notebook on each service), each launch button and relative link of every
    published page, and each set-up cell's wheel lead to a file of the published
    tree: the class book's address is where GitHub Pages serves ``docs/``. The
    chapters' own links to the course's repository ("read it on GitHub", "exercise
    5 in Colab") open the student repository's copy, and no link of a page names
    the instructor's repository."""
    from course_lib.checks.sections import SECTIONS
    from course_lib.grading.feedback import teaching_links

    assert (published / "docs" / ".nojekyll").is_file()
    followed = {
        "feedback": 0,
        "launch": 0,
        "relative": 0,
        "github": 0,
        "wheel": 0,
        "notebook": 0,
        "fetched": 0,
    }
    # the feedback's links, as course feedback writes them for this class
    for function in SECTIONS:
        _name, links = teaching_links(class_course, function)
        (text, book), *launch = links
        assert text == "the book"
        _assert_page(*_book_target(book, published), book)
        assert {service for service, _ in launch} == {"Binder", "Colab", "JupyterHub"}
        for _service, url in launch:
            assert (published / _repository_path(url)).is_file(), url
        followed["feedback"] += 1 + len(launch)
    # every link of every published page
    docs = published / "docs"
    for page in sorted(docs.rglob("*.html")):
        if page.relative_to(docs).parts[0] == "_static":
            continue  # the theme's templates, not pages
        text = page.read_text(encoding="utf-8")
        redirect = re.fullmatch(
            r'<meta http-equiv="Refresh" content="0; url=([^"]+)" />\s*', text
        )
        if redirect:  # index.html: the book's first page
            assert (page.parent / redirect.group(1)).is_file(), page
            followed["relative"] += 1
            continue
        canonical = re.search(r'<link rel="canonical" href="([^"]+)"', text)
        assert canonical, f"{page}: no canonical address (html.baseurl)"
        assert canonical.group(1) == STUDENT_PAGES + page.relative_to(docs).as_posix()
        for link in map(html_lib.unescape, re.findall(r'href="([^"]+)"', text)):
            parts = urlsplit(link)
            if parts.netloc in LAUNCH_HOSTS:
                assert (published / _repository_path(link)).is_file(), link
                followed["launch"] += 1
                followed["fetched"] += bool(FETCHED.fullmatch(parts.path))
            elif parts.scheme == "" and parts.netloc == "" and parts.path:
                target = (page.parent / unquote(parts.path)).resolve()
                assert target.is_relative_to(docs.resolve()), (page, link)
                if target.is_dir():
                    target = target / "index.html"
                assert target.is_file(), f"{page.relative_to(published)}: {link}"
                followed["relative"] += 1
            elif link.startswith(STUDENT_PAGES):
                _assert_page(*_book_target(link, published), link)
            elif link.startswith(STUDENT_FILES):  # "read it on GitHub"
                path = unquote(urlsplit(link.removeprefix(STUDENT_FILES)).path)
                assert (published / path).exists(), f"{page.name}: {link}"
                followed["github"] += 1
            assert INSTRUCTOR_REPO not in link, f"{page.name}: {link}"
    # the chapter notebooks' links lead into the student repository too
    for nb_path in sorted((published / "book" / "notebooks").glob("*.ipynb")):
        assert INSTRUCTOR_REPO not in nb_path.read_text(), nb_path.name
    # every markdown link of a published notebook (an exercise's chapter link, a
    # chapter's link to another) leads to a file of the tree or a page of docs/
    for nb_path in sorted(published.rglob("*.ipynb")):
        if "docs" in nb_path.relative_to(published).parts:
            continue
        for cell in json.loads(nb_path.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for link in re.findall(r"\]\(([^)\s]+)\)", "".join(cell["source"])):
                if link.startswith(STUDENT_PAGES):
                    _assert_page(*_book_target(link, published), link)
                    followed["notebook"] += 1
                elif urlsplit(link).netloc in LAUNCH_HOSTS:  # the hub notes
                    assert (published / _repository_path(link)).is_file(), link
                    followed["fetched"] += 1
                elif not re.match(r"[a-z]+:|#", link):
                    target = nb_path.parent / unquote(link.split("#")[0])
                    assert target.resolve().is_file(), (nb_path.name, link)
                    followed["notebook"] += 1
    # the wheel each published notebook's set-up cell installs
    raw = f"https://raw.githubusercontent.com/{STUDENT_ORG}/{STUDENT_REPO}/main/"
    for nb_path in sorted(published.rglob("*.ipynb")):
        if "docs" in nb_path.relative_to(published).parts:
            continue  # the downloads of the chapter notebooks: same cells
        cells = json.loads(nb_path.read_text())["cells"]
        (setup,) = ["".join(c["source"]) for c in cells
                    if "course-setup" in c["metadata"].get("tags", [])]  # fmt: skip
        (package,) = re.findall(r'COURSE_PACKAGE = "course_lib @ ([^"]+)"', setup)
        assert package.startswith(raw), (nb_path, package)
        assert (published / package.removeprefix(raw)).is_file(), package
        followed["wheel"] += 1
    print(f"links followed: {followed}")
    assert followed["feedback"] >= 4 * len(SECTIONS)
    assert followed["launch"] >= 3 * 10  # three services, every chapter page
    assert followed["relative"] > 100 and followed["wheel"] > 20
    assert followed["github"] >= 10  # the chapters' "read it on GitHub" links
    assert followed["notebook"] >= 11  # every exercise's chapter link at least
    # the hub notes: each exercise notebook's first cell, each chapter notebook's
    # and each chapter page's exercise pointer (11 exercises, 3 places)
    assert followed["fetched"] >= 3 * 11
    for nb_path in sorted((published / "notebooks").glob("*/*.ipynb")):
        first = json.loads(nb_path.read_text())["cells"][0]
        assert first["metadata"]["tags"] == ["course-hub-note"], nb_path


# --- the open edition's Pages workflow --------------------------------------------

WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"


def _tokens(expr: str) -> list[str]:
    return re.findall(r"'[^']*'|&&|\|\||==|!=|!|\(|\)|[A-Za-z_][\w.-]*", expr)


def evaluate(expr: str, context: dict) -> object:
    """A GitHub Actions ``if:`` expression (the subset the workflow uses: contexts,
    string literals, ``==``, ``!=``, ``!``, ``&&``, ``||``, parentheses) on the
    given context; a context path that is missing is ``None``, and ``==`` on
    strings ignores case, as GitHub's documentation of expressions says."""
    tokens = _tokens(expr)
    assert "".join(tokens) == re.sub(r"\s+", "", expr), f"unparsed part in {expr!r}"
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def value(token):
        if token.startswith("'"):
            return token[1:-1]
        if token in ("true", "false"):
            return token == "true"
        node = context
        for key in token.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def atom():
        token = take()
        if token == "!":
            return not atom()
        if token == "(":
            inner = either()
            assert take() == ")"
            return inner
        return value(token)

    def same(a, b):
        if isinstance(a, str) and isinstance(b, str):
            return a.lower() == b.lower()
        return a == b

    def comparison():
        left = atom()
        while peek() in ("==", "!="):
            op, right = take(), atom()
            left = same(left, right) if op == "==" else not same(left, right)
        return left

    def both():
        left = comparison()
        while peek() == "&&":
            take()
            right = comparison()
            left = left and right
        return left

    def either():
        left = both()
        while peek() == "||":
            take()
            right = both()
            left = left or right
        return left

    result = either()
    assert pos == len(tokens), f"trailing tokens in {expr!r}"
    return result


def _context(visibility, event="push", ref="refs/heads/main") -> dict:
    repository = (
        {}
        if visibility is None
        else {"visibility": visibility, "private": visibility != "public"}
    )
    return {
        "github": {"ref": ref, "event_name": event, "event": {"repository": repository}}
    }


def test_evaluator_reads_conditions_as_github_does() -> None:
    ctx = _context("public")
    assert evaluate("github.event.repository.visibility == 'PUBLIC'", ctx) is True
    assert evaluate("!(github.ref == 'refs/heads/main')", ctx) is False
    assert evaluate("github.nothing.here == 'x' || github.event_name == 'push'", ctx)
    with pytest.raises(AssertionError):
        evaluate("github.ref ~= 'x'", ctx)


def test_the_open_edition_deploys_only_from_a_public_repository() -> None:
    """The workflow's deploy job (the only step that publishes to Pages) runs for a
    push to main of a public repository, and never for a private or internal one,
    nor when GitHub gives no visibility; a private copy gets a notice instead."""
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    jobs = workflow["jobs"]
    deployers = [
        name
        for name, job in jobs.items()
        if any(
            "deploy-pages" in str(step.get("uses", "")) or "gh-pages" in str(step)
            for step in job.get("steps", [])
        )
    ]
    assert deployers == ["deploy"]
    condition = jobs["deploy"]["if"]
    cases = {
        ("public", "push"): True,
        ("public", "workflow_dispatch"): True,
        ("public", "pull_request"): False,
        ("private", "push"): False,
        ("private", "workflow_dispatch"): False,
        ("internal", "push"): False,
        (None, "push"): False,
    }
    for (visibility, event), wanted in cases.items():
        got = bool(evaluate(condition, _context(visibility, event)))
        assert got == wanted, (visibility, event, condition)
    assert not evaluate(condition, _context("public", ref="refs/heads/other"))
    notice = jobs["not-deployed"]
    assert evaluate(notice["if"], _context("private"))
    assert not evaluate(notice["if"], _context("public"))
    assert "course publish" in str(notice["steps"])
