"""The authoring guide (book/authoring.md) works as written: its worked example, a
new exercise ex90_offsets with a named mistake, a hint, a variant and seeded hidden
cases, is built by running the page's own blocks, in order, in a scratch copy of the
repository (``tmp_path``; never in the repository).

The page marks its blocks with a class: ``author-file`` (a file to write, its caption
the path), ``author-entry`` (lines to add to ``SECTIONS`` in
``course_lib/checks/sections.py``) and ``author-run`` (bash, run from the repository
root with ``-euo pipefail``). The scratch copy holds the working tree's
``course_lib``, ``solutions/``, ``nbgrader_config.py`` and ``_config.yml``, and uses
this test's virtual environment; ``PYTHONPATH`` makes its ``course_lib`` the one
every command imports (the editable install's finder comes after it). A block that
fails fails the test with its line in the page and its output.

What the run must have produced is checked against values computed here: the open
edition's release (no solution, no variant text, plain grader calls), the term's
release (the variant's text, its grader values in the public cell and the gradebook's
hidden cell, a stub for the answer), the stored public values of the variant, the
grades of the two submissions (3/3 and 0/3) and the named mistake
``relative_offsets:default-variant`` in the report; then, in the scratch copy, the
hint and its section pointer, the worked examples of both editions, and the seed's
draw. The grading is the course's own ``course autograde`` (sandboxed), as the page
runs it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "authoring.md"
A = "ex90_offsets"
VARIANT = "query-minus-key"
SEED = 20270101

_BLOCK = re.compile(
    r"^```\{code-block\} (?P<lang>\w+)\n(?P<options>(?::[\w-]+:[^\n]*\n)*)\n?"
    r"(?P<body>.*?)^```$",
    re.M | re.S,
)


@dataclass(frozen=True)
class Block:
    kind: str  # author-file, author-entry or author-run
    caption: str
    body: str
    line: int  # in the page

    def where(self) -> str:
        return f"book/authoring.md:{self.line} ({self.kind} {self.caption})".strip()


def page_blocks(text: str) -> list[Block]:
    """The page's marked code blocks, in order."""
    out = []
    for m in _BLOCK.finditer(text):
        options = dict(re.findall(r"^:([\w-]+): (.*)$", m.group("options"), re.M))
        kind = options.get("class", "")
        if kind.startswith("author-"):
            line = text.count("\n", 0, m.start()) + 1
            out.append(Block(kind, options.get("caption", ""), m.group("body"), line))
    return out


def _scratch_repository(dest: Path) -> Path:
    """The parts of the working tree the page's commands use, and this test's venv."""
    dest.mkdir()
    skip = shutil.ignore_patterns("__pycache__")
    for folder in ("course_lib", "solutions"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=skip)
    for name in ("nbgrader_config.py", "_config.yml"):
        shutil.copyfile(ROOT / name, dest / name)
    (dest / ".venv").symlink_to(Path(sys.prefix))  # the virtual environment
    return dest


def _environment(repo: Path, cache: Path) -> dict[str, str]:
    """The commands' environment: the scratch copy's ``course_lib`` first, and a
    cache of the grading edition of the test's own (the scratch library's files
    differ from run to run, so the user's cache would only fill up)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo)
    env["XDG_CACHE_HOME"] = str(cache)
    env.pop("COURSE_HINTS", None)
    env.pop("COURSE_EDITION_CACHE", None)
    return env


def _add_entry(repo: Path, block: Block) -> None:
    """``author-entry``: the lines the page says to add to SECTIONS."""
    path = repo / "course_lib" / "checks" / "sections.py"
    head = "SECTIONS: dict[str, Section] = {\n"
    text = path.read_text()
    assert text.count(head) == 1, f"{path}: SECTIONS is no longer `{head.strip()}`"
    path.write_text(text.replace(head, head + block.body))


def run_blocks(blocks: list[Block], repo: Path, env: dict[str, str]) -> list[str]:
    """Follow the page: write its files, add its entries, run its commands; the
    output of each command block. The first failure raises with its place. Prints
    each command block's wall time."""
    outputs = []
    for block in blocks:
        if block.kind == "author-file":
            path = repo / block.caption
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.body)
        elif block.kind == "author-entry":
            _add_entry(repo, block)
        elif block.kind == "author-run":
            start = time.monotonic()
            run = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.body],
                cwd=repo, env=env, capture_output=True, text=True, timeout=900,
            )
            if run.returncode != 0:
                raise AssertionError(
                    f"{block.where()} failed (exit {run.returncode}):\n"
                    f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
                )
            outputs.append(run.stdout)
            print(f"{block.where()}: {time.monotonic() - start:.1f} s")
        else:
            raise AssertionError(f"{block.where()}: unknown block class {block.kind}")
    return outputs


# --- the page's blocks, read without running them -------------------------------------


def test_the_page_marks_the_worked_example_s_blocks() -> None:
    blocks = page_blocks(PAGE.read_text())
    files = [b.caption for b in blocks if b.kind == "author-file"]
    assert files == ["course_lib/offsets.py", f"course_lib/checks/{A}.py"]
    assert [b.kind for b in blocks].count("author-entry") == 1
    runs = "\n".join(b.body for b in blocks if b.kind == "author-run")
    for command in (
        ".venv/bin/course release ex90\n",
        ".venv/bin/python -m course_lib.checks._stored\n",
        ".venv/bin/course release ex90 --root ../ex90-dry\n",
        ".venv/bin/course autograde ex90 --root ../ex90-dry --jobs 1\n",
        ".venv/bin/course report ex90 --root ../ex90-dry\n",
    ):
        assert command in runs, command


def test_the_page_s_sections_stand_in_the_book() -> None:
    """Every ``Section(page, label, title)`` of the example (SECTIONS' entry and the
    variant's own section): the label stands once, right above that heading."""
    text = "\n".join(b.body for b in page_blocks(PAGE.read_text()))
    found = re.findall(
        r'Section\(\s*"(book/[\w-]+)",\s*"([\w-]+)",\s*"([^"]+)"\s*\)', text
    )
    assert len(found) == 2, found
    for page, label, title in found:
        lines = (ROOT / f"{page}.md").read_text().splitlines()
        places = [i for i, line in enumerate(lines) if line.strip() == f"({label})="]
        assert len(places) == 1, (page, label, places)
        assert re.fullmatch(rf"#{{2,4}} {re.escape(title)}", lines[places[0] + 1]), (
            page, label, lines[places[0] + 1])


def test_a_failing_command_fails_with_its_place_in_the_page(tmp_path) -> None:
    block = Block("author-run", "", "true\nfalse\necho never\n", 7)
    failed = r"book/authoring.md:7 .*failed \(exit 1\)"
    with pytest.raises(AssertionError, match=failed):
        run_blocks([block], tmp_path, dict(os.environ))


# --- following the page ------------------------------------------------------------


def _cells(path: Path) -> dict[str, dict]:
    """grade id (or ``cell<index>``) -> cell, of a notebook."""
    nb = json.loads(path.read_text())
    out = {}
    for i, cell in enumerate(nb["cells"]):
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id") or f"cell{i}"
        out[gid] = {**cell, "source": "".join(cell["source"])}
    return out


def _j_minus_i(n: int) -> torch.Tensor:
    return torch.tensor([[j - i for j in range(n)] for i in range(n)])


# What the scratch copy's graders must do, beyond what the page ran (the hint and
# its section, the worked examples, the seed's draw); prints one JSON line.
_PROBE = textwrap.dedent('''
    import doctest, io, json, os, re, contextlib
    from pathlib import Path
    import torch
    from course_lib.checks import _stored
    from course_lib.checks import ex90_offsets as g

    out = {}
    def absolute(seq_len):
        pos = torch.arange(seq_len)
        return (pos[None, :] - pos[:, None]).abs()
    for hints in ("", "1"):
        os.environ["COURSE_HINTS"] = hints
        try:
            g.check_relative_offsets(absolute)
        except AssertionError as exc:
            out[f"hint{hints}"] = [str(exc), exc.mistake]
    examples = {}
    for variant in ("default", "query-minus-key"):
        ns = _stored._solution_namespace(Path("."), "ex90_offsets", variant)
        path = Path("solutions/ex90_offsets/ex90_offsets.ipynb")
        texts = [
            c["metadata"].get("course_variants", {}).get(variant, "".join(c["source"]))
            for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "markdown"
        ]
        blocks = [
            b for t in texts for b in re.findall(r"```python\\n(.*?)```", t, re.S)
        ]
        runner, parser = doctest.DocTestRunner(), doctest.DocTestParser()
        for b in blocks:
            runner.run(parser.get_doctest(b, dict(ns), variant, None, 0))
        examples[variant] = [len(blocks), runner.failures]
        with contextlib.redirect_stdout(io.StringIO()):
            g.grade_relative_offsets(ns["relative_offsets"], variant, 7)
    out["examples"] = examples
    calls = {}
    def recording(seed):
        def relative_offsets(n):
            calls.setdefault(seed, []).append(n)
            pos = torch.arange(n)
            return pos[None, :] - pos[:, None]
        return relative_offsets
    for seed in (None, 1, 2, 1):
        with contextlib.redirect_stdout(io.StringIO()):
            g.grade_relative_offsets(recording(seed), None, seed)
    out["lengths"] = {str(k): v for k, v in calls.items()}
    print(json.dumps(out))
''')


@pytest.mark.slow
def test_following_the_page_builds_releases_and_grades_an_exercise(tmp_path) -> None:
    repo = _scratch_repository(tmp_path / "repo")
    env = _environment(repo, tmp_path / "cache")
    blocks = page_blocks(PAGE.read_text())
    outputs = run_blocks(blocks, repo, env)
    dry = tmp_path / "ex90-dry"  # the page's ../ex90-dry

    # the open edition's release: no solution, no variant, the plain grader calls
    source = _cells(repo / "solutions" / A / f"{A}.ipynb")
    assert VARIANT in source["relative_offsets__answer"]["metadata"]["course_variants"]
    released = _cells(repo / "notebooks" / A / f"{A}.ipynb")
    assert set(released) == set(source)
    text = json.dumps(released)
    assert "course_variants" not in text and "BEGIN SOLUTION" not in text
    assert "pos[None, :] - pos[:, None]" not in text
    answer = released["relative_offsets__answer"]["source"]
    assert answer.endswith("raise NotImplementedError()"), answer
    assert released["relative_offsets__public"]["source"].endswith(
        "check_relative_offsets(relative_offsets)")
    assert released["relative_offsets__hidden"]["source"] == ""
    assert "$j - i$" in released["cell3"]["source"]  # the default task (after set-up)
    assert "course" not in json.loads(
        (repo / "notebooks" / A / f"{A}.ipynb").read_text())["metadata"]

    # the term's release: the variant's text and values, still no solution
    term_nb = json.loads((dry / "notebooks" / A / f"{A}.ipynb").read_text())
    assert term_nb["metadata"]["course"] == {"variant": VARIANT}
    term = _cells(dry / "notebooks" / A / f"{A}.ipynb")
    text = json.dumps(term)
    assert "course_variants" not in text and "BEGIN SOLUTION" not in text
    assert "pos[:, None] - pos[None, :]" not in text
    assert "$i - j$" in term["cell1"]["source"] and "R_{i-j}" in term["cell3"]["source"]
    assert term["cell1"]["source"] == (
        source["cell1"]["metadata"]["course_variants"][VARIANT])
    assert term["relative_offsets__public"]["source"].endswith(
        f"check_relative_offsets(relative_offsets, {VARIANT!r})")
    assert term["relative_offsets__hidden"]["source"] == ""
    with sqlite3.connect(dry / "gradebook.db") as db:
        hidden = db.execute(
            "select source from source_cell where name = 'relative_offsets__hidden'"
        ).fetchall()
    assert len(hidden) == 1 and (
        f"grade_relative_offsets(relative_offsets, {VARIANT!r}, {SEED})" in hidden[0][0]
    ), hidden
    assert f"variant {VARIANT!r}, hidden cases of seed {SEED}" in "".join(outputs)

    # the stored public values: the variant's answers for the public lengths
    stored = torch.load(repo / "course_lib" / "checks" / "public_expected.pt")
    entries = stored[f"{A}:_reference_query_minus_key"]
    assert sorted(e["args"][0] for e in entries) == [3, 5]
    for e in entries:
        assert torch.equal(e["result"], -_j_minus_i(e["args"][0]))
    library = {(e["args"][0], tuple(e["kwargs"].items())): e["result"]
               for e in stored["relative_offsets"]}
    assert sorted(library) == [(3, ()), (3, (("query_minus_key", True),)),
                               (5, ()), (5, (("query_minus_key", True),))]
    for (n, kwargs), result in library.items():
        assert torch.equal(result, -_j_minus_i(n) if kwargs else _j_minus_i(n))

    # the grades: this term's answer full marks, the open edition's none, named
    with (dry / "reports" / A / "grades.csv").open() as f:
        grades = {r["student_id"]: r for r in csv.DictReader(f)}
    scores = {s: (float(r["score"]), float(r["max_score"])) for s, r in grades.items()}
    assert scores == {"ada": (3.0, 3.0), "bob": (0.0, 3.0)}
    with (dry / "reports" / A / "mistakes.csv").open() as f:
        mistakes = list(csv.DictReader(f))
    assert {(r["student_id"], r["grade_id"], r["mistake"]) for r in mistakes} == {
        ("bob", "relative_offsets__public", "relative_offsets:default-variant"),
        ("bob", "relative_offsets__hidden", "relative_offsets:default-variant"),
    }

    # in the scratch copy: the hint and its section, the worked examples, the seed
    probe = subprocess.run([sys.executable, "-c", _PROBE], cwd=repo, env=env,
                           capture_output=True, text=True, timeout=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    asked, hinted = found["hint"], found["hint1"]
    assert asked[1] == hinted[1] == "absolute"
    pointer = ('Reread the section "Shaw et al.: relative key and value vectors" of '
               "chapter 6 (06-relative).")
    assert pointer in asked[0] and "course check --hint" in asked[0]
    assert "Hint: subtract the query's position from the key's" in hinted[0]
    assert "Hint:" not in asked[0]
    assert found["examples"] == {"default": [1, 0], VARIANT: [1, 0]}
    lengths = found["lengths"]
    assert lengths["None"] == [3, 5, 1, 2, 7, 16]
    assert lengths["1"] != lengths["2"]
    assert lengths["1"] == 2 * lengths["1"][: len(lengths["1"]) // 2]  # same seed
    for seed in ("1", "2"):
        drawn = lengths[seed][: len(lengths[seed]) // 2]
        assert drawn[:3] == [3, 5, 1] and all(6 <= n <= 64 for n in drawn[3:])
