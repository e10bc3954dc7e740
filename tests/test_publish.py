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

import pytest

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
MIN_LEN = 16  # shorter lines (`return x`, `out = a + b`) are not distinctive
TEXT_SUFFIXES = {".html", ".js", ".txt", ".md", ".ipynb", ".json", ".py", ".css",
                 ".toml", ".cfg", ".yml", ".yaml", ".csv", ".svg", ".xml", ".inv",
                 "", ".typed", ".METADATA", ".RECORD", ".WHEEL"}


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
    lines = [ln for ln in lines
             if len(ln) >= MIN_LEN and not ln.startswith("#") and ln not in given]
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


# --- slow: the real tree --------------------------------------------------------------


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, built_book: Path) -> Path:
    # course publish reuses the open build's execution cache (_build/.jupyter_cache,
    # what `make book` leaves); after a fresh clone, hand it the cache of the test
    # build so that no chapter is executed twice.
    cache = ROOT / "_build" / ".jupyter_cache"
    if not cache.is_dir() and (built_book.parent / ".jupyter_cache").is_dir():
        shutil.copytree(built_book.parent / ".jupyter_cache", cache)
    out = tmp_path_factory.mktemp("publish") / "class"
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "publish", str(out),
         "--root", str(ROOT)],
        capture_output=True, text=True, timeout=1800,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"course publish failed:\n{log[-4000:]}"
    return out


@pytest.mark.slow
def test_publish_tree_holds_no_answer(published: Path) -> None:
    assert sorted(p.name for p in published.iterdir()) == [
        "README.md", "binder", "book", "dist", "html", "notebooks"]
    assert (published / "html" / "index.html").is_file()
    wheels = list((published / "dist").glob("course_lib-*.whl"))
    assert len(wheels) == 1
    releases = sorted(p.relative_to(published / "notebooks")
                      for p in (published / "notebooks").rglob("*.ipynb"))
    expected = sorted(p.relative_to(ROOT / "notebooks")
                      for p in (ROOT / "notebooks").rglob("*.ipynb")
                      if ".ipynb_checkpoints" not in p.parts)
    assert releases == expected
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
    private = ("solutions/", "course_lib/grading/autograde")
    assert not [n for n in names if n.startswith(private)]

    # nor the library's listing of a graded function (the open edition shows it in
    # a dropdown: test_open_edition_keeps_collapsed_solutions)
    graded = sorted({fn for _, fns in GRADED_LISTINGS.values() for fn in fns})
    pages = sorted((published / "html").rglob("*.html"))
    assert len(pages) > 10
    for path in pages:
        text = _text(path.read_text(encoding="utf-8"))
        listed = [fn for fn in graded if f"def {fn}(" in text]
        assert not listed, f"{path.relative_to(published)} lists {listed}"

    # the API page documents an exercise target by its first paragraph only (the
    # rest of yarn_correction_range's docstring states the rounding ex11 grades)
    api = _text((published / "html" / "book" / "api.html").read_text(encoding="utf-8"))
    assert "Pair indices (low, high) where YaRN" in api
    assert "floor(i(beta_fast))" not in api
    assert "the rest of its documentation is in the open edition" in api

    patterns = solution_patterns()
    hits, searched = search_tree(published, patterns)
    print(f"searched {searched} text files (wheel members included) for "
          f"{len(patterns)} patterns")
    assert searched > 50
    assert not hits, "answers in the published tree:\n" + "\n".join(hits[:40])


@pytest.mark.slow
def test_publish_tree_is_a_student_repository(published: Path) -> None:
    """What the class edition's launch buttons open exists in the published tree, and
    nothing in it points students at the instructor's repository."""
    from course_lib.grading.editions.launch import chapter_notebook_path, chapter_pages

    for page in chapter_pages(ROOT):
        nb = json.loads((published / chapter_notebook_path(page)).read_text())
        first = "".join(nb["cells"][0]["source"])
        assert "course-setup" in nb["cells"][0]["metadata"]["tags"], page
        assert "COURSE_PACKAGE" in first
        assert not any("{only} not class_edition" in "".join(c["source"])
                       for c in nb["cells"])
    (wheel,) = (published / "dist").glob("*.whl")
    post = (published / "binder" / "postBuild").read_text()
    assert f"dist/{wheel.name}" in post
    assert (published / "binder" / "requirements.txt").read_text() == (
        ROOT / "binder" / "requirements.txt").read_text()
    # this repository's _config.yml names no student repository: no launch buttons
    # (they would open the instructor's repository), and a download is the class
    # edition of the chapter notebook
    page = (published / "html" / "book" / "05-alibi.html").read_text()
    for service in ("colab.research.google.com", "mybinder.org", "git-pull?"):
        assert service not in page
    download = published / "html" / "_sources" / "book" / "notebooks" / "05-alibi.ipynb"
    assert "Solution to exercise" not in download.read_text()


@pytest.mark.slow
def test_publish_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "publish", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
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
    "07-transformer-xl": (7, ["rel_attention_scores", "rel_shift",
                             "rel_shift_bidirectional"]),
    "08-da-transformer": (8, ["da_rescale", "da_attention"]),
    "11-long-context": (11, ["yarn_correction_range", "yarn_attention_factor",
                             "llama3_scaled_frequencies"]),
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
        f"{chapter}: the solution does not come after the exercise pointer")
    assert not re.search(r"\bopen\b", d.group(1)), f"{chapter}: the dropdown is open"
    body = _text(d.group(2))
    for fn in functions:
        assert f"def {fn}(" in body, f"{chapter}: {fn} missing from the dropdown"
        assert f"def {fn}(" not in before, f"{chapter}: {fn} listed before the exercise"
