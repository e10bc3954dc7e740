"""Issue 33, deliver 3: the class edition of a chapter shows no graded answer.

What is looked for, in every chapter (``book/NN-*.md``) as the class edition has it
(:func:`course_lib.grading.editions.launch.chapter_notebook` with
``class_edition=True``), run cell by cell (``tests/giveaway_scan.py``):

* **Answers**: each graded function's output on each input of its public check and
  its hidden grade, read from ``course_lib.checks`` when the test runs (every
  ``check_<name>``/``grade_<name>`` is run on a stand-in whose calls its planned
  reference answers), so a changed exercise changes what is looked for.
* **Shown**: everything a reader of the page sees as numbers: each cell's printed
  output and displayed results (text, HTML, Markdown, LaTeX, JSON), each glued value
  (``myst_nb.glue``, shown with ``{glue:}``), the data of each matplotlib figure the
  cell draws (lines, scatter offsets and colours, images, bars, the numbers written
  in annotations, titles and legends), and the JSON embedded by each
  ``{interactive-figure}`` left in the class edition.
* **A match**: an answer appears when all its entries appear in order in one of
  those (contiguously or as every s-th number, s <= 8: a column of a printed
  table), each within half a unit of the page's last printed digit (so rounding to
  the printed precision is caught) plus a relative 1e-5 (float32 noise); also the
  answer negated, as log2 or ln of its magnitude, and sorted either way. A match
  counts when it carries at least 8 significant digits in all (its distinct non-zero
  values, each at the precision it was matched with) and the answer is not an
  arithmetic progression or a constant (``giveaway_scan.says_little``).
* **Code that computes a graded function in full**: each function a chapter cell
  defines is called with the graders' inputs (those its signature accepts), with the
  library's own graded functions made to raise meanwhile; it is reported when it
  returns the reference's output on at least two informative inputs and on every
  input it accepts and runs on.
* **Answers of one or two numbers** (a YaRN attention factor, a correction range)
  are looked for together, per graded function, anywhere on the page: found when
  at least two of its distinct answer values that are not simple (an integer, a
  multiple of 1/64) appear, each to 3 significant digits or more, 8 in all
  (``giveaway_scan.find_small_answers``).

Limits (what this cannot see): an answer shown only in part (a slice, a truncated
print of a large tensor), or with too little information to be told from a
coincidence (a single scalar answer, or only simple values such as integer
correction ranges; integers that carry fewer than 8 digits in all, such as the
position ids of a short mask; an answer that is an arithmetic progression, or a
match on page numbers that are one, such as an axis); a transformation
other than those above (a transpose, a product with another quantity); pixels of a
figure drawn otherwise than through matplotlib's artists; a graded computation
written inline (not as a function), or as a function whose parameters are not the
graded function's (``tests/test_class_edition_answers.py`` watches the values that
chapter cells compute inline); prose and math (``test_publish.py`` and
``test_class_edition_05_08.py`` read the text); hand-graded answers (ex10's
questions, ex03's hand computation). Findings on today's chapters that remain are
marked ``xfail(strict=True)`` in :data:`KNOWN`, naming the page.

Cost: the graders' calls once (about 10 s), then every chapter run once in a fork
(about 40 s of CPU for the thirteen chapters here; the library's stored experiment
results are read, nothing is trained).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import giveaway_scan as scan
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(p.name for p in BOOK.glob("[0-9][0-9]-*.md"))
TIMEOUT = 1200

pytestmark = pytest.mark.slow

# Give-aways found in today's chapters and not yet removed by the chapter's owner.
KNOWN: dict[str, str] = {
}


class ScanRunner:
    """A ``giveaway_scan.py --serve`` process: graded calls computed once, each
    chapter scanned in a fork of it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = (tmp / "serve.log").open("w")
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(scan.__file__).resolve()), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.n = 0

    def scan(self, md_path: Path) -> dict:
        self.n += 1
        result = self.tmp / f"result-{self.n}.json"
        log = self.tmp / f"chapter-{self.n}.log"
        self.proc.stdin.write(f"{md_path}\t{result}\t{log}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT + 120)
        answer = self.proc.stdout.readline() if ready else ""
        tail = log.read_text()[-4000:] if log.is_file() else ""
        if not answer:
            self.log.flush()
            raise AssertionError(
                "the scan server stopped or hung:\n"
                + (self.tmp / "serve.log").read_text()[-4000:]
                + tail
            )
        assert int(answer) == 0, tail
        return json.loads(result.read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    r = ScanRunner(tmp_path_factory.mktemp("giveaways"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def calls() -> list[scan.GradedCall]:
    return scan.graded_calls()


def report(found: dict) -> list[str]:
    lines = [f["text"] for f in found["shown"]]
    lines += [
        f"{f['where']}: function {f['function']} computes {f['computes']} "
        f"(agrees on {f['agreed']} grader inputs)"
        for f in found["functions"]
    ]
    return lines


# --- the search itself ----------------------------------------------------------------


def test_number_tokens_carry_their_printed_precision() -> None:
    values, tols = scan.number_tokens(
        "tensor([ 1.1386, -2.,  3e-05]) float32 ex05 nan \u22120.25 7"
    )
    assert values[:3] == [1.1386, -2.0, 3e-05]
    assert np.isnan(values[3]) and values[4:] == [-0.25, 7.0]
    assert tols[0] == pytest.approx(5e-5) and tols[1] == 0.5
    assert tols[2] == pytest.approx(5e-6) and tols[5] == 0.5


def test_every_graded_function_has_answers_to_look_for(calls) -> None:
    from course_lib.grading.editions.library import PLAN_REFERENCES
    from course_lib.grading.notebooks.integrity import pristine_graders

    graded = {
        n.removeprefix("grade_")
        for n in pristine_graders()
        if n.startswith("grade_") and PLAN_REFERENCES.get(n, "") is not None
    }
    by_kind = {
        kind: {c.name for c in calls if c.kind == kind} for kind in ("public", "hidden")
    }
    assert len(graded) >= 20  # ex01-ex11
    assert by_kind["hidden"] == graded
    assert by_kind["public"] <= graded and len(by_kind["public"]) >= 20


def _hidden_input(calls, name: str, want) -> object:
    """The first argument of a hidden call of ``name`` for which ``want`` holds."""
    for c in calls:
        if c.name == name and c.kind == "hidden" and c.args and want(c.args[0]):
            return c.args[0]
    raise AssertionError(f"no hidden call of {name} fits")


def test_a_rounded_or_transformed_answer_is_found_in_text_and_json(calls) -> None:
    n = _hidden_input(calls, "alibi_slopes", lambda n: n & (n - 1) and n > 8)
    slopes = next(
        c.output for c in calls if c.name == "alibi_slopes" and c.args == (n,)
    )
    shown = -np.log2(slopes.double().numpy())
    text = "order: " + ", ".join(f"{v:.2f}" for v in sorted(shown)) + " (heads)"
    found = scan.find_answers([scan.text_segment("printed", text)], calls)
    assert any(
        f"alibi_slopes({n})" in f.answer and "-log2, sorted" in f.form for f in found
    ), found
    embedded = {
        "figure": {
            "rows": [[float(v) for v in slopes[:4]], [float(v) for v in slopes[4:]]]
        }
    }
    found = scan.find_answers(scan.json_segments("json", embedded), calls)
    assert any(f"alibi_slopes({n})" in f.answer and f.form == "as is" for f in found), (
        found
    )
    # a number too coarse to tell: the same slopes printed to one decimal
    coarse = ", ".join(f"{v:.1f}" for v in slopes.tolist())
    assert not scan.find_answers(
        [scan.text_segment("printed", coarse)],
        [c for c in calls if c.name == "alibi_slopes"],
    )


PLANTED = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Planted give-aways

```{{code-cell}} ipython3
import matplotlib.pyplot as plt
import torch
from myst_nb import glue

import course_lib as cl
```

```{{code-cell}} ipython3
print(cl.alibi_slopes({printed}))
```

```{{code-cell}} ipython3
glue("frequencies", [round(v, 6) for v in cl.rope_frequencies({glued}).tolist()],
     display=False)
```

```{{code-cell}} ipython3
fig, ax = plt.subplots()
ax.plot(cl.alibi_slopes({plotted}))
```

```{{code-cell}} ipython3
print(sorted(round(-v, 3) for v in cl.alibi_slopes({transformed}).log2().tolist()))
```

```{{code-cell}} ipython3
import math

print([round(0.1 * math.log(s) + 1, 4) for s in ({small})])  # YaRN's factor
```

```{{code-cell}} ipython3
def slopes_by_the_rule(n):
    closest = 2 ** (n.bit_length() - 1)
    first = 2.0 ** (-8.0 * torch.arange(1, closest + 1) / closest)
    extra = 2.0 ** (-4.0 * torch.arange(1, 2 * (n - closest), 2) / closest)
    return torch.cat([first, extra])


def slopes_only_powers_of_two(n):
    return 2.0 ** (-8.0 * torch.arange(1, n + 1) / n)


def slopes_from_the_library(n):
    return cl.alibi_slopes(n)
```

```{{code-cell}} ipython3
# control: the frequencies at a size no grader uses, a wrong slope rule at a graded one
print(cl.rope_frequencies({ungraded_d}), 2.0 ** (-8.0 * torch.arange(1, {printed} + 1)
                                               / {printed}))
```
"""


@pytest.fixture(scope="module")
def planted(tmp_path_factory, runner, calls) -> tuple[dict, dict]:
    alibi = {c.args[0] for c in calls if c.name == "alibi_slopes" and c.args}
    rope = {c.args[0] for c in calls if c.name == "rope_frequencies" and c.args}
    odd = sorted(n for n in alibi if isinstance(n, int) and n & (n - 1) and n > 8)
    assert len(odd) >= 2, "the planted chapter needs two graded head counts"
    sizes = {
        "printed": odd[0],
        "glued": max(d for d in rope if isinstance(d, int)),
        "plotted": odd[-1],
        "transformed": odd[1],
        # 2p, p prime: no graded size's frequencies are every k-th of these
        "ungraded_d": next(
            2 * p
            for p in range(11, 400)
            if all(p % q for q in range(2, p)) and 2 * p not in rope
        ),
    }
    factors = sorted(
        {
            c.args[0]
            for c in calls
            if c.name == "yarn_attention_factor"
            and len(c.args) == 1
            and c.kind == "hidden"
            and not scan._simple(c.output)
        }
    )
    assert len(factors) >= 2, "the planted chapter needs two graded YaRN factors"
    sizes["small"] = ", ".join(map(repr, factors[:2]))
    chapter = tmp_path_factory.mktemp("planted") / "book" / "99-planted.md"
    chapter.parent.mkdir()
    chapter.write_text(PLANTED.format(**sizes))
    return runner.scan(chapter), sizes


@pytest.mark.parametrize(
    "kind", ["printed", "glued", "plotted", "transformed", "small"]
)
def test_a_planted_giveaway_is_found(planted, kind: str) -> None:
    found, sizes = planted
    if kind == "small":  # two scalar answers, each printed to 4 decimals
        hits = [
            f
            for f in found["shown"]
            if f["answer"].startswith("yarn_attention_factor: 2 of")
        ]
        assert hits and "printed output" in hits[0]["where"], report(found)
        for s in sizes["small"].split(", "):
            assert f"yarn_attention_factor({s})" in hits[0]["answer"]
        return
    name = "rope_frequencies" if kind == "glued" else "alibi_slopes"
    want = {
        "printed": "printed output",
        "glued": "glued value 'frequencies'",
        "plotted": "figure 0 axes 0 line 0 y",
        "transformed": "printed output",
    }[kind]
    hits = [
        f
        for f in found["shown"]
        if f"{name}({sizes[kind]})" in f["answer"] and want in f["where"]
    ]
    assert hits, "\n".join(report(found))
    if kind == "transformed":
        assert hits[0]["form"] == "-log2, sorted"


def test_a_planted_function_is_found_and_its_look_alikes_are_not(planted) -> None:
    found, _ = planted
    functions = {f["function"]: f["computes"] for f in found["functions"]}
    # the rule in full; not the power-of-two formula (wrong for 12 heads), not a
    # wrapper of the library (the library's call earns nothing)
    assert functions == {"slopes_by_the_rule": "alibi_slopes"}, report(found)


def test_an_ungraded_input_or_a_wrong_rule_is_not_a_giveaway(planted) -> None:
    found, _ = planted
    control = PLANTED.format(
        **{
            k: 0
            for k in (
                "printed",
                "glued",
                "plotted",
                "transformed",
                "ungraded_d",
                "small",
            )
        }
    )
    line = (
        control.splitlines().index(
            "# control: the frequencies at a size no "
            "grader uses, a wrong slope rule at a graded "
            "one"
        )
        + 1
    )
    assert found["shown"]
    assert not [f for f in found["shown"] if f"99-planted.md:{line} " in f["where"]], (
        report(found)
    )


# --- the chapters ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "chapter",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN[c]))
        if c in KNOWN
        else c
        for c in CHAPTERS
    ],
)
def test_class_edition_shows_no_graded_answer(chapter: str, runner) -> None:
    found = runner.scan(BOOK / chapter)
    assert found["segments"] > 0 or chapter.startswith("13"), chapter
    lines = report(found)
    assert not lines, textwrap.indent("\n".join(lines), "  ")
