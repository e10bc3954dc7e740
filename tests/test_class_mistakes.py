"""What the class got wrong (issue 22): the known mistakes the graders recognise,
recorded per student, function and cell by the grading tool outside the students'
kernels, counted by ``course report`` and named in the feedback.

A synthetic class of 30 ex05_alibi students with a realistic mix (right answers in
three styles, the classic slope and sign mistakes, BLOOM's ``+m_h * j`` form, two
wrong answers no grader knows, stubs, a crash, and one student who prints a fake
"known mistake" message and writes a fake judgement into a test cell's metadata) is
graded by the real pipeline (``course collect``, ``course autograde --jobs 2`` in the
sandbox, ``course report``, ``course feedback``).

What each student should get is derived independently of the pipeline: the
student's answer cells run here, in this process, and the pristine graders are
called on their functions directly; the exception each raises says which mistake
it is (``CheckFailed.mistake``) or why there is no answer (``CheckFailed.cause``).
The pipeline instead runs the notebook in a sandboxed kernel, records what the
functions returned, replays the graders on that record and stores the verdict: the
two must agree cell by cell, and the table, the CSV and the guide's worked example
follow from those expectations.
"""

from __future__ import annotations

import csv
import inspect
import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from conftest import course_cli
from zoo import ex05_alibi as zoo

from course_lib.checks import ex05_alibi as graders
from course_lib.checks._errors import CAUSES, CheckFailed
from course_lib.grading.mistakes import KIND_LABELS, class_mistakes, format_mistakes
from course_lib.grading.notebooks.integrity import JUDGEMENT_KEY, Judgement

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"
# test cell -> (graded function, pristine grader)
CELLS = {
    "alibi_slopes__public": ("alibi_slopes", graders.check_alibi_slopes),
    "alibi_slopes__hidden": ("alibi_slopes", graders.grade_alibi_slopes),
    "alibi_bias__public": ("alibi_bias", graders.check_alibi_bias),
    "alibi_bias__hidden": ("alibi_bias", graders.grade_alibi_bias),
}
FAKE = "alibi_bias(4, 5) is wrong in a known way: the bias is positive (fake)"


# --------------------------------------------------------------------------------------
# the class: what each student's answer cells hold


def _source(fn, name: str | None = None) -> str:
    text = textwrap.dedent(inspect.getsource(fn))
    return text.replace(f"def {fn.__name__}(", f"def {name or fn.__name__}(", 1)


# helpers a student's cell may define (the zoo's correct slopes, under their names)
_HELPERS = "import math\nimport torch\n\n" + "\n".join(
    _source(f)
    for f in (zoo._paper_slopes, zoo.slopes_vectorised, zoo.slopes_float64_loop)
)


def _answer(fn) -> str:
    """An answer cell defining ``fn`` under its graded name (and the helpers)."""
    name = "alibi_slopes" if fn.__name__.startswith("slopes") else "alibi_bias"
    extra = _source(zoo.bias_broadcast) if "bias_broadcast(" in _source(fn) else ""
    return f"{_HELPERS}\n{extra}\n{_source(fn, name)}"


_STUB = (
    "def alibi_bias(n_heads, seq_len):\n"
    "    # YOUR CODE HERE\n"
    "    raise NotImplementedError()\n"
)
_CRASH = (
    "import torch\n\n"
    "def alibi_bias(n_heads, seq_len):\n"
    "    pos = torch.arange(seq_len)\n"
    "    # the slopes not broadcast over (query, key): no [:, None, None]\n"
    "    return alibi_slopes(n_heads) * (pos[:, None] - pos).abs()\n"
)
# 30 students: (slopes, bias); None keeps the course's solution
MIX: list[tuple[object, object]] = [
    *[(zoo.slopes_paper_recursion, zoo.bias_broadcast)] * 2,
    *[(zoo.slopes_vectorised, zoo.bias_loops)] * 2,
    *[(None, zoo.bias_float64_cdist)] * 2,
    *[(zoo.slopes_power_of_two_only, None)] * 4,
    *[(zoo.slopes_reversed, None)] * 2,
    (zoo.slopes_from_zero, None),
    *[(None, zoo.bias_bloom)] * 5,
    (zoo.slopes_power_of_two_only, zoo.bias_bloom),
    *[(None, zoo.bias_positive)] * 2,
    (None, zoo.bias_no_abs),
    (None, zoo.bias_causal),
    (None, zoo.bias_heads_last),
    *[(None, zoo.bias_clipped_distance)] * 2,
    *[(None, _STUB)] * 2,
    (None, _CRASH),
    (None, "forger"),
]
assert len(MIX) == 30


def _answers(solution: dict[str, str], slopes, bias) -> dict[str, str]:
    answers = dict(solution)
    if slopes is not None:
        answers["alibi_slopes__answer"] = _answer(slopes)
    if isinstance(bias, str):
        if bias == "forger":
            answers["alibi_bias__answer"] = (
                solution["alibi_bias__answer"] + f"\nprint({FAKE!r})\n"
            )
        else:
            answers["alibi_bias__answer"] = bias
    elif bias is not None:
        answers["alibi_bias__answer"] = _answer(bias)
    return answers


def _preamble(release: Path) -> str:
    """The released notebook's own code before the answers (its imports): every
    code cell that is neither graded nor the set-up cell."""
    import nbformat

    from course_lib.grading.editions.launch import is_setup_cell

    nb = nbformat.read(str(release), as_version=4)
    return "\n".join(
        c.source
        for c in nb.cells
        if c.cell_type == "code"
        and "nbgrader" not in c.metadata
        and not is_setup_cell(c)
    )


def _expected(
    answers: dict[str, str], preamble: str
) -> dict[str, tuple[str, str, str]]:
    """grade id -> (function, kind, mistake id) of every cell the pristine graders
    fail when called here, in this process, on the student's functions (defined
    as the notebook defines them: its own imports, then the answer cells)."""
    namespace: dict[str, object] = {}
    exec(compile(preamble, "preamble", "exec"), namespace)  # noqa: S102
    for grade_id in ("alibi_slopes__answer", "alibi_bias__answer"):
        exec(compile(answers[grade_id], grade_id, "exec"), namespace)  # noqa: S102
    out = {}
    for grade_id, (function, grader) in CELLS.items():
        try:
            grader(namespace[function])
        except CheckFailed as exc:
            if exc.mistake:
                out[grade_id] = (function, "mistake", f"{function}:{exc.mistake}")
            elif exc.cause in CAUSES:
                out[grade_id] = (function, exc.cause, "")
            else:
                out[grade_id] = (function, "unrecognised", "")
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class, collected, autograded, reported and given feedback."""
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    tmp = tmp_path_factory.mktemp("mistakes")
    course = scratch_course(tmp / "course", ROOT, [A])
    (course.root / "_config.yml").write_text((ROOT / "_config.yml").read_text())

    def cli(*args):
        out = course_cli(*args, cwd=course.root)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out.stdout

    cli("release", A)
    release = course.release_dir / A / f"{A}.ipynb"
    solution = solution_answers(course.source_dir / A / f"{A}.ipynb")
    inbox = tmp / "inbox"
    preamble = _preamble(release)
    assert "import torch" in preamble
    expected, kinds = {}, {}
    for i, (slopes, bias) in enumerate(MIX, 1):
        student = f"s{i:02d}"
        answers = _answers(solution, slopes, bias)
        nb = student_notebook(release, answers)
        if bias == "forger":
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade") and not meta.get("solution"):
                    cell.metadata[JUDGEMENT_KEY] = {
                        "grade_id": meta["grade_id"],
                        "function": "alibi_bias",
                        "kind": "mistake",
                        "mistake": "alibi_bias:positive-sign",
                        "explanation": "fake",
                    }
        write_submission(inbox, student, A, nb)
        expected[student] = _expected(answers, preamble)
        kinds[student] = bias if isinstance(bias, str) else None
    cli("collect", str(inbox), "--assignment", A)
    autograde = cli("autograde", A, "--jobs", "2", "--no-progress")
    report = cli("report", A)
    cli("feedback", A)
    return {
        "course": course,
        "expected": expected,
        "kinds": kinds,
        "autograde": autograde,
        "report": report,
    }


def _recorded(course) -> dict[str, dict[str, tuple[str, str, str]]]:
    from course_lib.grading.gradebook import read_judgements

    with course.gradebook(create=False) as gb:
        rows = read_judgements(gb, A)
    out: dict[str, dict[str, tuple[str, str, str]]] = {}
    for r in rows:
        out.setdefault(r["student"], {})[r["grade_id"]] = (
            r["function"],
            r["kind"],
            r["mistake"],
        )
    return out


# --------------------------------------------------------------------------------------
# the recorded judgements


@pytest.mark.slow
def test_the_mix_is_realistic(graded):
    """The derived expectations hold what the class is meant to show: at least
    five named mistakes, unrecognised answers, stubs and a crash, and right
    answers (a class in which every student fails teaches nothing)."""
    expected = graded["expected"]
    named = {m for cells in expected.values() for _, k, m in cells.values() if m}
    kinds = Counter(k for cells in expected.values() for _, k, _ in cells.values())
    assert len(named) >= 5, named
    assert {"unrecognised", "not-attempted", "raised"} <= set(kinds)
    assert sum(not cells for cells in expected.values()) >= 7  # all right


@pytest.mark.slow
def test_every_failed_cell_is_judged_as_the_graders_judge_it_here(graded):
    """Cell by cell, the pipeline's judgement (sandboxed kernel, record, replay
    outside it) equals the pristine graders called here on the same functions;
    a student who passed has no judgement at all."""
    recorded = _recorded(graded["course"])
    for student, cells in graded["expected"].items():
        assert recorded.get(student, {}) == cells, student


@pytest.mark.slow
def test_a_printed_or_stored_fake_mistake_changes_nothing(graded):
    """The forger prints a "wrong in a known way" message and writes a judgement
    into every test cell's metadata: full marks, no judgement recorded, and the
    graded notebook holds none of the fake ones."""
    course = graded["course"]
    forger = next(s for s, kind in graded["kinds"].items() if kind == "forger")
    assert graded["expected"][forger] == {}
    assert forger not in _recorded(course)
    with (course.root / "reports" / A / "grades.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["student_id"] == forger)
    assert float(row["score"]) == float(row["max_score"]) == 6.0
    nb = json.loads((course.autograded_dir / forger / A / f"{A}.ipynb").read_text())
    assert FAKE in json.dumps(nb)  # it did print
    assert not [c for c in nb["cells"] if JUDGEMENT_KEY in c.get("metadata", {})]


@pytest.mark.slow
def test_mistakes_csv_has_one_row_per_student_and_failed_cell(graded):
    path = graded["course"].root / "reports" / A / "mistakes.csv"
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    got = {
        (r["student_id"], r["grade_id"]): (r["function"], r["kind"], r["mistake"])
        for r in rows
    }
    assert len(got) == len(rows)
    want = {
        (student, grade_id): judged
        for student, cells in graded["expected"].items()
        for grade_id, judged in cells.items()
    }
    assert got == want
    for r in rows:
        # a named mistake carries the graders' explanation; the others an example
        assert bool(r["explanation"]) == (r["kind"] == "mistake"), r
        if r["kind"] in ("unrecognised", "raised", "not-attempted"):
            assert r["example"], r
    assert (path.parent / "mistakes.png").stat().st_size > 1000


def _table(report: str) -> dict[tuple[str, str], tuple[int, float, float]]:
    """(function, reason) -> (students, % of all, % of those who lost points) from
    the report's table."""
    block = report.split("What the class got wrong", 1)[1].split("\n\n", 2)[1]
    out = {}
    for line in block.splitlines()[1:]:
        function, rest = line.split(maxsplit=1)
        reason, students, share, lost = rest.rsplit(maxsplit=3)
        out[(function, reason.strip())] = (
            int(students),
            float(share.rstrip("%")),
            float(lost.rstrip("%")),
        )
    return out


@pytest.mark.slow
def test_the_report_counts_each_mistake_over_the_class(graded):
    """Each line: the students with that reason for that function, their share of
    the 30 graded submissions and of those who lost points on the function,
    counted here from the expectations."""
    expected = graded["expected"]
    students: dict[tuple[str, str], set[str]] = {}
    lost: dict[str, set[str]] = {}
    for student, cells in expected.items():
        for function, kind, mistake in cells.values():
            reason = mistake or KIND_LABELS[kind]
            students.setdefault((function, reason), set()).add(student)
            lost.setdefault(function, set()).add(student)
    want = {
        key: (
            len(who),
            round(100 * len(who) / len(expected), 1),
            round(100 * len(who) / len(lost[key[0]]), 1),
        )
        for key, who in students.items()
    }
    assert _table(graded["report"]) == want
    assert "30 graded submissions" in graded["report"]


def test_counting_by_hand():
    """class_mistakes on a hand-made record: a student counts once per reason and
    function whatever the cells, in both lines when two reasons; shares of all and
    of those who lost points; the most common reason first; examples of the
    unrecognised answers kept, one per student."""

    def row(student, grade_id, kind, mistake="", example=""):
        function = grade_id.rsplit("__", 1)[0]
        return dict(
            student=student,
            notebook="nb",
            grade_id=grade_id,
            function=function,
            kind=kind,
            mistake=mistake,
            explanation="x" if mistake else "",
            example=example,
        )

    rows = [
        row("a", "f__public", "mistake", "f:one"),
        row("a", "f__hidden", "mistake", "f:one"),
        row("b", "f__hidden", "mistake", "f:one"),
        row("b", "f__public", "unrecognised", example="b's answer"),
        row("c", "f__public", "unrecognised", example="c's answer"),
        row("c", "f__hidden", "unrecognised", example="c's other answer"),
        row("d", "g__public", "not-attempted"),
    ]
    counts = class_mistakes(rows, graded=10, functions=["g", "f"])
    got = [
        (
            c.function,
            c.label,
            sorted(c.students),
            c.share_of_submissions,
            c.share_of_lost,
        )
        for c in counts
    ]
    assert got == [
        ("g", KIND_LABELS["not-attempted"], ["d"], 0.1, 1.0),
        ("f", "f:one", ["a", "b"], 0.2, 2 / 3),
        ("f", KIND_LABELS["unrecognised"], ["b", "c"], 0.2, 2 / 3),
    ]
    assert counts[2].examples == [("b", "b's answer"), ("c", "c's answer")]
    text = "\n".join(format_mistakes(counts, 10))
    assert "f, b: b's answer" in text and "c's other answer" not in text


def test_only_test_cells_carry_a_judgement():
    """judged_cells reads the key from test cells only (an answer cell or a
    markdown cell holding one is ignored); a malformed value is no judgement."""
    import nbformat

    from course_lib.grading.notebooks.integrity import judged_cells

    fake = Judgement("f__public", "f", "mistake", "f:one").to_json()
    nb = nbformat.v4.new_notebook()
    test = nbformat.v4.new_code_cell("check_f(f)")
    test.metadata = {
        "nbgrader": {"grade": True, "solution": False, "grade_id": "f__public"},
        JUDGEMENT_KEY: fake,
    }
    answer = nbformat.v4.new_code_cell("def f(): ...")
    answer.metadata = {
        "nbgrader": {"grade": False, "solution": True, "grade_id": "f__answer"},
        JUDGEMENT_KEY: fake,
    }
    text = nbformat.v4.new_markdown_cell("x")
    text.metadata = {JUDGEMENT_KEY: fake}
    broken = nbformat.v4.new_code_cell("check_f(f)")
    broken.metadata = {
        "nbgrader": {"grade": True, "solution": False, "grade_id": "f__hidden"},
        JUDGEMENT_KEY: "junk",
    }
    nb.cells = [answer, text, test, broken]
    assert [j for _, j in judged_cells(nb)] == [Judgement.from_json(fake)]


# --------------------------------------------------------------------------------------
# feedback and the guide


@pytest.mark.slow
def test_feedback_names_the_mistake_and_links_the_section(graded):
    """A student with a named mistake reads its id and explanation under the failed
    test, and a link to the section that teaches the function on the book's web
    page, plus the chapter notebook's launch links; a student who passed reads
    none."""
    from course_lib.checks.sections import section_of
    from course_lib.grading.editions.launch import book_page_url, read_settings

    course = graded["course"]
    settings = read_settings(course.root)
    for student, cells in graded["expected"].items():
        page = (course.feedback_dir / student / A / f"{A}.html").read_text()
        named = {m for _, k, m in cells.values() if k == "mistake"}
        for mistake in named:
            function = mistake.split(":")[0]
            section = section_of(function)
            assert f"<code>{mistake}</code>" in page, (student, mistake)
            url = book_page_url(settings, section.page, section.label)
            assert f'href="{url}"' in page
            assert "colab.research.google.com" in page
        if not cells:
            assert "Read again" not in page and "Known mistake" not in page, student


@pytest.mark.slow
def test_the_guide_shows_this_class(graded):
    """The guide's worked example (book/class-mistakes.md) is this class's table,
    as printed."""
    report = graded["report"]
    start = report.index("What the class got wrong")
    block = report[start:].split("\n\nwrote ", 1)[0]
    block = block.split("\n\nLate", 1)[0].split("\n\nCould not", 1)[0]
    guide = (ROOT / "book" / "class-mistakes.md").read_text()
    quoted = guide.split("<!-- mistakes table: tests/test_class_mistakes.py -->", 1)[1]
    quoted = quoted.split("```text\n", 1)[1].split("```", 1)[0]
    assert quoted == block + "\n", block


def test_every_graded_function_links_its_section_in_plain_words():
    """teaching_links for each graded function: the chapter and the heading without
    TeX or backticks, a link to the book page at the section's label (GitHub Pages
    of the repository, as .github/workflows/pages.yml publishes it), and the
    chapter notebook on each launch service of _config.yml."""
    from course_lib.checks.sections import SECTIONS
    from course_lib.grading.editions.launch import chapter_notebook_path
    from course_lib.grading.feedback import teaching_links

    for function, section in SECTIONS.items():
        name, links = teaching_links(ROOT, function)
        number = int(section.page.split("/")[-1][:2])
        assert name.startswith(f'Chapter {number}, section "'), name
        assert not set("$`\\") & set(name), name
        text, url = links[0]
        assert (text, url) == (
            "the book",
            "https://positional-encodings-course.github.io/course/"
            f"{section.page}.html#{section.label}",
        )
        services = dict(links[1:])
        assert set(services) == {"Binder", "Colab"}
        assert all(chapter_notebook_path(section.page) in u for u in services.values())
    assert teaching_links(ROOT, "no_such_function") == ("", [])
