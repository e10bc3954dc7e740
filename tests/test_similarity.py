"""``course similarity`` (issue 34, items 1 and 2).

The measurement on a class whose truth is known (benchmarks/bench_similarity.py):
the course's solution and the honest slow variants of benchmarks/honest_variants.py
are the independent students; copies of each, renamed, reformatted, reordered,
with changed comments and all of these at once, and a disguised copy of the public
solution are the copiers. Each class is written as submitted notebooks in a scratch
course and goes through ``similarity`` as ``course similarity`` runs it. A copier is
caught when the pair of it and the student it copied is flagged (or, for a copy of
the solution, its match with the public solution). The test fails if one is
missed. Then: the pages show a student's ``<script>`` as text, unanswered stubs are
not compared, the normalisation undoes each copier's edit and keeps dependent
statements in order, and the scores are the same in another process.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_similarity as bench
from benchmarks import honest_variants as hv
from course_lib.grading import similarity as sim

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ["ex05_alibi", "ex06_relative", "ex11_long_context"]

SCRIPT = '"</pre><script>alert(1)</script>"'


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def known(request, tmp_path_factory):
    """The known class of one assignment, written and compared."""
    assignment = request.param
    answers, origin = bench.known_class(assignment)
    course = bench.write_class(tmp_path_factory.mktemp(assignment), assignment, answers)
    report = sim.similarity(course, assignment)
    return assignment, answers, origin, report


def test_every_copier_is_caught(known) -> None:
    assignment, _, origin, report = known
    counts = bench.evaluate(report, origin)
    assert set(counts) == set(hv.graded_functions(assignment))
    for function, c in counts.items():
        # 5 kinds of copy of each independent student, and the public-solution copy
        independent = 1 + hv.rounds(assignment)
        assert c["copiers"] == len(bench.KINDS) * independent + 1, (function, c)
        assert c["missed"] == [], f"{assignment} {function}: missed {c['missed']}"
        assert c["caught"] == c["copiers"]


def test_independent_pairs_are_rarely_flagged(known) -> None:
    """At most one independent pair in twenty flagged, for every function, and no
    honest variant matches the public solution."""
    assignment, _, origin, report = known
    for function, c in bench.evaluate(report, origin).items():
        assert c["independent_pairs"] > 0
        assert c["independent_flagged"] * 20 <= c["independent_pairs"], (function, c)
        assert c["independent_public"] == [], (function, c)


def test_the_report_lists_what_it_flags(known) -> None:
    """pairs.csv holds every flagged pair and reference match; each listed page
    exists and names both students; the cut-off follows the class's median/MAD."""
    assignment, _, _, report = known
    with open(report.out / "pairs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    expected = sum(len(r.flagged) + len(r.reference_matches) for r in report.results)
    assert len(rows) == expected
    for row in rows:
        assert float(row["similarity"]) >= float(row["cutoff"]) - 1e-4  # 4 decimals
        page = (report.out / row["page"]).read_text()
        assert row["a"] in page and row["b"] in page
        assert "<mark>" in page  # matched lines are marked
    for r in report.results:
        med, mad, cutoff = sim.threshold(p for p in _pair_similarities(r))
        assert (med, mad, cutoff) == (r.median, r.mad, r.cutoff)
        assert cutoff >= sim.FLOOR
    index = (report.out / "index.html").read_text()
    assert all(r.function in index for r in report.results)


def _pair_similarities(r):
    """The class's pair similarities, recomputed pair by pair from the
    fingerprint sets (not through the matrix product the module uses)."""
    people = [a for a in r.answers.values() if len(a.fp.hashes) >= sim.MIN_FINGERPRINTS]
    for i, a in enumerate(people):
        for b in people[i + 1 :]:
            shared = len(set(a.fp.hashes.tolist()) & set(b.fp.hashes.tolist()))
            yield shared / min(len(a.fp.hashes), len(b.fp.hashes))


# --- the pages are inert ------------------------------------------------------------


def test_a_script_in_a_students_code_is_shown_as_text(tmp_path: Path) -> None:
    assignment = "ex05_alibi"
    solution = hv.answer_cells(assignment)
    keep = set(solution)
    answers = {"sol": solution}
    for k in range(hv.rounds(assignment)):
        answers[f"v{k}"] = hv.variant_answers(assignment, k)
    evil = {
        f: src.replace("\n", f"\n    note = {SCRIPT}  # <b>bold</b>\n", 1)
        for f, src in solution.items()
    }
    answers["mallory<x>"[:7]] = evil  # "mallory": a copy carrying a script
    answers["copier"] = {f: bench.rename(src, keep) for f, src in evil.items()}
    course = bench.write_class(tmp_path / "c", assignment, answers)
    report = sim.similarity(course, assignment)
    pages = list((report.out / "pairs").glob("*.html"))
    pair = [p for p in pages if "mallory" in p.name and "copier" in p.name]
    assert pair, [p.name for p in pages]
    text = pair[0].read_text()
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;b&gt;bold&lt;/b&gt;" in text
    for page in [*pages, report.out / "index.html"]:
        html = page.read_text()
        assert not re.search(r"<\s*script", html, re.I), page.name
        assert "default-src 'none'" in html  # and a policy that runs nothing


# --- what is compared -----------------------------------------------------------------


def test_unanswered_stubs_are_not_compared(tmp_path: Path) -> None:
    """Students who left the release's stub are listed as too short, never flagged
    with each other, though their cells are identical."""
    assignment = "ex05_alibi"
    answers = bench.known_class(assignment)[0]
    answers = {s: answers[s] for s in ("sol", "v0", "v1", "renamed_of_v0")}
    course = bench.write_class(tmp_path / "c", assignment, answers)
    for student in ("lazy1", "lazy2", "lazy3"):  # the released notebook, untouched
        folder = course.submitted_dir / student / assignment
        folder.mkdir(parents=True)
        release = course.release_dir / assignment / f"{assignment}.ipynb"
        (folder / release.name).write_bytes(release.read_bytes())
    report = sim.similarity(course, assignment)
    for r in report.results:
        assert r.too_short == ["lazy1", "lazy2", "lazy3"]
        assert not [p for p in r.flagged if "lazy" in p.a + p.b]
        assert {frozenset((p.a, p.b)) for p in r.flagged} == {
            frozenset(("v0", "renamed_of_v0"))
        }


def test_an_answer_cell_that_lost_its_metadata_is_found_by_its_function() -> None:
    cells = [
        {"cell_type": "code", "metadata": {}, "source": "import torch\n"},
        {
            "cell_type": "code",
            "metadata": {},
            "source": ["def alibi_bias(h, n):\n", "    return h\n"],
        },
    ]
    found = sim.read_answers(cells, ["alibi_bias", "alibi_slopes"], "s")
    assert list(found) == ["alibi_bias"]
    assert found["alibi_bias"].source == "def alibi_bias(h, n):\n    return h\n"
    assert "metadata was lost" in found["alibi_bias"].how


def test_graded_functions_come_from_the_checks() -> None:
    import json

    nb = ROOT / "notebooks" / "ex11_long_context" / "ex11_long_context.ipynb"
    cells = json.loads(nb.read_text())["cells"]
    from course_lib.checks import ex11_long_context as checks

    graded = {
        n.removeprefix("grade_") for n in checks.__all__ if n.startswith("grade_")
    }
    assert set(sim.graded_functions("ex11_long_context", cells)) == graded


# --- normalisation ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["renamed", "reformatted", "commented", "disguised"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_copy_normalises_to_its_source(assignment: str, kind: str) -> None:
    """Renaming, reformatting, comments and (in 'disguised') independent statements
    swapped leave the normalised tokens as they were."""
    keep = set(hv.graded_functions(assignment))
    for function, src in hv.answer_cells(assignment).items():
        copy = bench.copy_of(src, kind, keep)
        assert copy != src
        assert sim.normalise(copy, keep).tokens == sim.normalise(src, keep).tokens, (
            function
        )


def test_reordering_moves_only_independent_statements() -> None:
    a = "def f(x):\n    y = x + 1\n    z = x * 2\n    return y, z\n"
    b = "def f(x):\n    z = x * 2\n    y = x + 1\n    return y, z\n"
    assert sim.normalise(a, ["f"]).tokens == sim.normalise(b, ["f"]).tokens
    # a statement that reads what another writes stays after it
    c = "def f(x):\n    y = x + 1\n    y = y * 2\n    return y\n"
    d = "def f(x):\n    y = y * 2\n    y = x + 1\n    return y\n"
    assert sim.normalise(c, ["f"]).tokens != sim.normalise(d, ["f"]).tokens
    # a method call may change its object: the append stays after the assignment
    e = "def f(x):\n    out = []\n    out.append(x)\n    n = len(out)\n    return n\n"
    g = "def f(x):\n    out = []\n    n = len(out)\n    out.append(x)\n    return n\n"
    assert sim.normalise(e, ["f"]).tokens != sim.normalise(g, ["f"]).tokens


def test_library_names_and_docstrings() -> None:
    """``torch.arange`` stays, a docstring goes, strings become S."""
    norm = sim.normalise(
        'def f(n):\n    """Given."""\n    t = torch.arange(n, dtype=torch.float64)\n'
        '    raise ValueError("no")\n',
        ["f"],
    )
    text = " ".join(norm.tokens)
    assert "torch . arange ( V0 , dtype = torch . float64 )" in text
    assert "Given" not in text and "ValueError ( S )" in text
    assert norm.lines[norm.tokens.index("arange")] == (3, 3)


def test_threshold_is_a_robust_z_score() -> None:
    values = [0.10, 0.12, 0.15, 0.2, 0.22, 0.25, 0.3]
    med, mad, cut = sim.threshold(values)
    assert med == pytest.approx(0.2)
    assert mad == pytest.approx(0.05)  # |v - 0.2|: 0.1 0.08 .05 0 .02 .05 .1
    assert cut == pytest.approx(max(sim.FLOOR, 0.2 + 3.5 * 1.4826 * 0.05))
    # a copy among them moves the median to 0.21 and the MAD to 0.075 (deviations
    # .11 .09 .06 .01 .01 .04 .09 .79): the copy still stands far above
    med, mad, cut = sim.threshold([*values, 1.0])
    assert (med, mad) == (pytest.approx(0.21), pytest.approx(0.075))
    assert cut == pytest.approx(0.21 + 3.5 * 1.4826 * 0.075) and cut < 1.0
    # a class whose answers all look alike: nothing stands out
    assert sim.threshold([0.95] * 10)[2] > 0.95 - 1e-12


def test_the_scores_are_the_same_in_another_process() -> None:
    """The k-gram hashes do not depend on Python's per-process string hash."""
    src = hv.answer_cells("ex05_alibi")["alibi_slopes"]
    here = sim.kgram_hashes(sim.normalise(src, ["alibi_slopes"]).tokens).tolist()
    code = (
        "import sys, json; from course_lib.grading import similarity as s; "
        "print(json.dumps(s.kgram_hashes(s.normalise(sys.stdin.read(), "
        "['alibi_slopes']).tokens).tolist()))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        input=src,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert [int(v) for v in run.stdout.strip().strip("[]").split(", ")] == here


# --- the command --------------------------------------------------------------------


def test_the_command_writes_the_report(tmp_path: Path, capsys) -> None:
    from course_lib.cli import main

    answers = bench.known_class("ex05_alibi")[0]
    answers = {s: answers[s] for s in ("sol", "v0", "v1", "commented_of_v1")}
    course = bench.write_class(tmp_path / "c", "ex05_alibi", answers)
    out = tmp_path / "out"
    assert (
        main(["similarity", "ex05", "--root", str(course.root), "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "ex05_alibi: 4 submissions compared" in printed
    assert "never a grade" in printed
    assert (out / "index.html").is_file() and (out / "pairs.csv").is_file()
    # no submissions: a one-line error naming what to do
    empty = bench.write_class(tmp_path / "e", "ex05_alibi", {})
    assert main(["similarity", "ex05", "--root", str(empty.root)]) == 2
    assert "course collect first" in capsys.readouterr().err
