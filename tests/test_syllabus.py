"""The syllabus page (``book/syllabus.md``) and the introduction's chapter table.

The page is executed here as the book executes it (jupytext reads the MyST notebook,
a kernel runs it in ``book/``, as myst-nb does), into memory, never into ``_build/``.
What it computes is then checked against the nbgrader notebooks read again here,
independently, from their JSON: the points of each exercise and which of them are
graded by hand, the sizes the time estimate uses, the example calendar. The rubrics
are checked against the hand-graded cells of ``solutions/``, and the introduction's
table against the chapters and exercises that exist.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import date, timedelta
from pathlib import Path

import pytest

from course_lib.grading.editions.launch import strip_open_only

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "syllabus.md"
INTRO = ROOT / "book" / "intro.md"
CHAPTER_FILES = sorted((ROOT / "book").glob("[0-9][0-9]-*.md"))
CHAPTERS = {int(p.name[:2]): p for p in CHAPTER_FILES}


# --- the notebooks, read independently of the page ------------------------------------


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _assignments(folder: str) -> dict[str, Path]:
    """``exNN_topic`` -> its notebook ``folder/exNN_topic/exNN_topic.ipynb``."""
    found = {}
    for sub in sorted((ROOT / folder).iterdir()):
        nb = sub / f"{sub.name}.ipynb"
        if re.fullmatch(r"ex\d\d_\w+", sub.name) and nb.is_file():
            found[sub.name] = nb
    return found


def points_of(path: Path) -> dict:
    """nbgrader's view of one notebook: every cell whose ``nbgrader.grade`` is true
    carries ``points``; it is graded by hand when it is also a ``solution`` cell
    (nbgrader's "manually graded answer"), else it is a test cell."""
    auto, hand, written, tested = 0.0, 0.0, {}, set()
    for cell in _cells(path):
        meta = cell["metadata"].get("nbgrader") or {}
        if not meta.get("grade"):
            continue
        value = float(meta["points"])
        if meta.get("solution"):
            hand += value
            written[meta["grade_id"]] = value
        else:
            auto += value
            tested.add(re.sub(r"__(public|hidden)$", "", meta["grade_id"]))
    return {"auto": auto, "hand": hand, "written": written, "tested": tested}


SOURCES = _assignments("solutions")
EXPECTED = {name: points_of(path) for name, path in SOURCES.items()}
BY_CHAPTER = {int(name[2:4]): name for name in SOURCES}


def test_every_exercise_belongs_to_a_chapter_and_is_graded() -> None:
    assert SOURCES, "no source notebooks in solutions/"
    assert set(BY_CHAPTER) <= set(CHAPTERS)
    for name, pts in EXPECTED.items():
        assert pts["auto"] > 0 and pts["tested"], name


# --- the executed page ----------------------------------------------------------------


def _execute(path: Path, cwd: Path) -> list:
    import jupytext
    from nbclient import NotebookClient

    if path.suffix == ".md":
        nb = jupytext.read(path, fmt="md:myst")
    else:
        import nbformat

        nb = nbformat.read(path, as_version=4)
    # raises CellExecutionError, with the traceback, on the first failing cell
    NotebookClient(
        nb,
        kernel_name="python3",
        timeout=300,
        resources={"metadata": {"path": str(cwd)}},
    ).execute()
    return [c for c in nb.cells if c.cell_type == "code"]


def _markdown_outputs(cells: list) -> list[str]:
    return [
        o["data"]["text/markdown"]
        for c in cells
        for o in c.outputs
        if "data" in o and "text/markdown" in o["data"]
    ]


@pytest.fixture(scope="module")
def executed() -> list:
    return _execute(PAGE, ROOT / "book")


@pytest.fixture(scope="module")
def outputs(executed) -> list[str]:
    return _markdown_outputs(executed)


def test_page_runs_without_errors_or_warnings(executed) -> None:
    for cell in executed:
        for out in cell.outputs:
            assert out["output_type"] != "error", out
            assert not (out["output_type"] == "stream" and out["name"] == "stderr"), (
                f"a cell of the syllabus wrote to stderr: {out['text']}"
            )


def _table(markdown: str, header_start: str) -> list[list[str]]:
    """The body rows of the markdown table whose header starts with ``header_start``."""
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                # a cell may hold an escaped pipe, `[sin \| cos]`
                cells = re.split(r"(?<!\\)\|", row.strip()[1:-1])
                rows.append([c.strip() for c in cells])
            return rows
    raise AssertionError(f"no table starting {header_start!r}")


def _output_with(outputs: list[str], header_start: str) -> str:
    found = [o for o in outputs if header_start in o]
    assert len(found) >= 1, f"no output table starting {header_start!r}"
    return found[0]


def _number(cell: str) -> float:
    return float(re.match(r"\**([\d.]+)", cell).group(1))


def _check_points_table(markdown: str, expected: dict) -> None:
    rows = _table(markdown, "| exercise | autograded |")
    *body, total = rows
    seen = {}
    for exercise, auto, hand, whole in body:
        name = exercise.strip("`")
        seen[name] = name
        want = expected[name]
        assert _number(auto) == want["auto"], (name, auto, want)
        assert _number(hand) == want["hand"], (name, hand, want)
        # each hand-graded cell is named next to its points
        assert set(re.findall(r"`(\w+)`", hand)) == set(want["written"]), (name, hand)
        assert _number(whole) == want["auto"] + want["hand"], (name, whole)
    assert set(seen) == set(expected), "the table lists every exercise once"
    assert len(body) == len(expected)
    auto_sum = sum(p["auto"] for p in expected.values())
    hand_sum = sum(p["hand"] for p in expected.values())
    assert _number(total[1]) == auto_sum
    assert _number(total[2]) == hand_sum
    assert _number(total[3]) == auto_sum + hand_sum


def test_points_table_matches_the_source_notebooks(outputs) -> None:
    markdown = _output_with(outputs, "| exercise | autograded |")
    _check_points_table(markdown, EXPECTED)
    total = sum(p["auto"] + p["hand"] for p in EXPECTED.values())
    hand = sum(p["hand"] for p in EXPECTED.values())
    summary = next(o for o in outputs if o.startswith("In all ") and "points" in o)
    assert summary.startswith(f"In all {total:g} points, {hand:g} of them"), summary
    assert "read from `solutions/`" in summary
    no_exercise = sorted(set(CHAPTERS) - set(BY_CHAPTER))
    assert f"Chapters {', '.join(map(str, no_exercise))} have no exercise" in summary


def test_every_chapter_has_outcomes_and_every_graded_cell_an_outcome() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for number, path in CHAPTERS.items():
        title = re.search(r"^# (.+)$", path.read_text(encoding="utf-8"), re.M).group(1)
        m = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", text, re.M | re.S)
        assert m, f"the syllabus has no outcomes section '### {title}'"
        rows = _table(m.group(1).strip(), "| students can | assessed by |")
        assert rows, title
        for outcome, _ in rows:
            assert re.search(r"\*\*[a-z ]+\*\*", outcome), (
                f"{title}: an outcome without a verb in bold: {outcome}"
            )
        named = {n for _, by in rows for n in re.findall(r"`(\w+)`", by)}
        name = BY_CHAPTER.get(number)
        if name is None:
            assert all(by == "chapter only" for _, by in rows), title
            continue
        want = EXPECTED[name]["tested"] | set(EXPECTED[name]["written"])
        assert named == want, (
            f"{title}: outcomes name {sorted(named)}, {name} grades {sorted(want)}"
        )
        for _, by in rows:
            assert by == "chapter only" or by.startswith(f"{name[:4]}"), (title, by)


def _plans(outputs: list[str]) -> list[list[list[str]]]:
    plans = [o for o in outputs if o.startswith("| week | starts |")]
    assert len(plans) == 2, "a 12-week and a 6-week plan"
    return [_table(p, "| week | starts |") for p in plans]


def test_both_plans_hold_every_chapter_and_exercise_once(outputs) -> None:
    for rows in _plans(outputs):
        chapters, exercises = [], []
        for week, _, chs, exs, due, points, _ in rows:
            numbers = [int(n) for n in re.findall(r"(?:^|, )(\d+)\. ", chs)]
            chapters += numbers
            names = re.findall(r"`(\w+)`", exs)
            exercises += names
            assert sorted(int(n[2:4]) for n in names) == sorted(
                n for n in numbers if n in BY_CHAPTER
            ), (week, chs, exs)
            if names:
                assert _number(points) == sum(
                    EXPECTED[n]["auto"] + EXPECTED[n]["hand"] for n in names
                )
                assert due
        assert sorted(chapters) == sorted(CHAPTERS)
        assert sorted(exercises) == sorted(SOURCES)
    assert [len(r) for r in _plans(outputs)] == [12, 6]


def test_due_date_commands_follow_the_12_week_plan(outputs) -> None:
    rows = _plans(outputs)[0]
    commands = next(o for o in outputs if "nbgrader db assignment add" in o)
    dues = dict(
        re.findall(
            r'assignment add (\w+) --duedate="(\d{4}-\d\d-\d\d) 12:00:00 UTC"', commands
        )
    )
    assert set(dues) == set(SOURCES)
    starts = {}
    for _week, start, _, exs, *_ in rows:
        for name in re.findall(r"`(\w+)`", exs):
            starts[name] = start
    first = date.fromisoformat(min(dues.values())) - timedelta(weeks=1)
    assert first.weekday() == 0
    for name, due in dues.items():
        release = date.fromisoformat(due) - timedelta(weeks=1)
        assert release.weekday() == 0, name
        assert starts[name] == f"{release:%a %d %b}", (name, starts[name], release)


# --- the time estimate: rates stated in the prose are the rates computed with -------


def _solution_sizes(path: Path) -> dict:
    lines, answers, words, task = 0, 0, 0, 0
    word = re.compile(r"[^\W\d_][\w'’-]*")
    fence = re.compile(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2[ \t]*$", re.M | re.S)
    display = re.compile(r"^\$\$.*?^\$\$[^\n]*$", re.M | re.S)

    def prose(s: str) -> int:
        return len(word.findall(display.sub("", fence.sub("", s))))

    for cell in _cells(path):
        meta = cell["metadata"].get("nbgrader") or {}
        text = _source(cell)
        inside = "\n".join(
            re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", text, re.S)
        )
        if meta.get("solution") and cell["cell_type"] == "code":
            answers += 1
            lines += sum(
                1
                for line in inside.splitlines()
                if line.strip() and not line.lstrip().startswith("#")
            )
        elif meta.get("solution"):
            words += prose(inside)
        elif cell["cell_type"] == "markdown":
            task += prose(text)
    return {"answers": answers, "lines": lines, "words": words, "task": task}


def _rate(pattern: str, text: str) -> float:
    m = re.search(pattern, text, re.S)
    assert m, pattern
    return float(m.group(1))


def test_time_estimate_uses_the_stated_method(outputs) -> None:
    text = PAGE.read_text(encoding="utf-8")
    prose_wpm = _rate(r"read at (\d+) words per minute", text)
    per_answer = _rate(r"for each code answer cell,\s+(\d+) minutes", text)
    per_line = _rate(r"plus (\d+) minutes per line", text)
    writing_wpm = _rate(r"at (\d+) words per minute\s+of thinking", text)
    # the code computes with the rates the prose states
    assert _rate(r"READING_WPM = (\d+)", text) == prose_wpm
    assert _rate(r"MINUTES_PER_CODE_ANSWER = (\d+)", text) == per_answer
    assert _rate(r"MINUTES_PER_SOLUTION_LINE = (\d+)", text) == per_line
    assert _rate(r"WRITING_WPM = (\d+)", text) == writing_wpm
    assert "100 words per minute" in text and prose_wpm == 100

    rows = _table(_output_with(outputs, "| chapter | prose words |"), "| chapter |")
    assert [int(r[0]) for r in rows] == sorted(CHAPTERS)
    for chapter, words, reading, exercise, task, answers, lines, written, hours in rows:
        # printed to 0.1 h: within half of that of the exact value
        assert abs(float(reading) - int(words) / prose_wpm / 60) <= 0.05 + 1e-9
        name = BY_CHAPTER.get(int(chapter))
        if name is None:
            assert exercise == "none" and hours == ""
            continue
        assert exercise == f"`{name}`"
        sizes = _solution_sizes(SOURCES[name])
        assert (int(task), int(answers), int(lines), int(written)) == (
            sizes["task"],
            sizes["answers"],
            sizes["lines"],
            sizes["words"],
        ), name
        minutes = (
            sizes["task"] / prose_wpm
            + sizes["answers"] * per_answer
            + sizes["lines"] * per_line
            + sizes["words"] / writing_wpm
        )
        assert abs(float(hours) - minutes / 60) <= 0.05 + 1e-9, (name, hours, minutes)
    assert "Nobody has timed students" in text, "the page says it is an estimate"


# --- rubrics --------------------------------------------------------------------------

RUBRIC = re.compile(
    r"^\*\*Rubric: `(?P<ex>\w+)`, `(?P<cell>\w+)`, (?P<points>[\d.]+) points?\.\*\*\n"
    r"(?P<body>.*?)(?=^\*\*Rubric:|^:{3,}\s*$)",
    re.M | re.S,
)


def _rubrics(text: str) -> dict[tuple[str, str], tuple[float, list[list[str]]]]:
    found = {}
    for m in RUBRIC.finditer(text):
        rows = _table(m["body"], "| part | points |")
        found[(m["ex"], m["cell"])] = (float(m["points"]), rows)
    return found


def test_every_hand_graded_cell_has_a_rubric_that_adds_up() -> None:
    rubrics = _rubrics(PAGE.read_text(encoding="utf-8"))
    hand_graded = {
        (name, cell): value
        for name, pts in EXPECTED.items()
        for cell, value in pts["written"].items()
    }
    assert hand_graded, "the course has answers graded by hand"
    assert set(rubrics) == set(hand_graded)
    for key, value in hand_graded.items():
        stated, rows = rubrics[key]
        assert stated == value, (key, stated, value)
        levels: dict[str, list[float]] = {}
        for part, points, description in rows:
            levels.setdefault(part, []).append(float(points))
            assert description, (key, part)
        for part, values in levels.items():
            assert 0.0 in values, f"{key} part {part}: no level of 0 points"
            assert len(set(values)) == len(values) >= 2, (key, part, values)
            assert values == sorted(values, reverse=True), (key, part, values)
        # the full marks of the parts add up to the cell's points (halves add exactly)
        assert sum(max(v) for v in levels.values()) == value, (key, levels)


def test_rubrics_are_left_out_of_the_class_edition() -> None:
    text = PAGE.read_text(encoding="utf-8")
    class_text = strip_open_only(text)
    assert _rubrics(text), "the open edition has the rubrics"
    assert not _rubrics(class_text)
    assert "| part | points |" not in class_text
    assert "rubrics of the written answers are in the instructor's copy" in class_text


# --- the introduction's chapter table -----------------------------------------------


def test_intro_table_lists_every_chapter_and_its_exercise() -> None:
    rows = _table(
        INTRO.read_text(encoding="utf-8"), "| chapter | question it answers |"
    )
    seen = []
    for chapter, question, exercise in rows:
        m = re.fullmatch(r"\[(\d+)\. [^\]]+\]\((\d\d-[\w-]+\.md)\)", chapter)
        assert m, chapter
        number = int(m.group(1))
        seen.append(number)
        assert CHAPTERS[number].name == m.group(2), chapter
        assert question.endswith("?"), question
        name = BY_CHAPTER.get(number)
        assert exercise == (f"`{name}`" if name else "none"), (chapter, exercise)
    assert seen == sorted(CHAPTERS), "every chapter, in order, once"


def test_intro_says_which_chapters_have_exercises() -> None:
    text = INTRO.read_text(encoding="utf-8")
    with_exercise = sorted(BY_CHAPTER)
    assert with_exercise == list(range(1, len(with_exercise) + 1))
    assert f"Chapters 1 to {with_exercise[-1]} each have an autograded notebook" in text
    without = sorted(set(CHAPTERS) - set(BY_CHAPTER))
    assert f"(chapters {' and '.join(map(str, without))} have none" in text
    assert "Each chapter has an autograded notebook" not in text
    assert "Everything a transformer knows about word" not in text
    assert "every derivation ends" not in text


# --- in a class's student repository: releases only ----------------------------------


def test_page_runs_in_a_student_repository(tmp_path: Path) -> None:
    """What ``course publish`` gives students holds the release notebooks and the
    chapter notebooks, no ``solutions/`` and no chapter sources: the syllabus
    notebook still runs there, reads the points from the releases and says that
    the time estimate needs the source notebooks."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "book" / "notebooks", tmp_path / "book" / "notebooks")
    releases = {name: points_of(p) for name, p in _assignments("notebooks").items()}
    assert releases == EXPECTED, "the releases carry the source notebooks' points"
    cells = _execute(
        tmp_path / "book" / "notebooks" / "syllabus.ipynb",
        tmp_path / "book" / "notebooks",
    )
    outputs = _markdown_outputs(cells)
    _check_points_table(_output_with(outputs, "| exercise | autograded |"), releases)
    assert any("read from `notebooks/`" in o for o in outputs)
    assert any("which a class's student repository does not hold" in o for o in outputs)


def test_intro_notation_table_matches_the_chapters() -> None:
    """Issue 33, review S2 and N1-N2: the notation table separates d_model (token
    vectors and added encodings, chapters 1-3) from d (the head width inside
    attention, chapters 4-9, which is what 1/sqrt(d) scales by); the pair index i is
    listed apart from the query index i; the ALiBi row names the head width; the
    chapters that use n or j otherwise say so (chapter 1's n tokens, chapter 7's layer
    n) and chapter 3 writes its offset k. Conventions are said to be tested where each
    method is introduced, not in every chapter."""
    text = INTRO.read_text(encoding="utf-8")
    rows = dict(
        (row[0], row[1])
        for row in _table(text, "| symbol or name | meaning |")
        if len(row) == 2
    )
    assert "head" not in rows["$d_\\text{model}$, `d_model`"]
    assert "the scaling $1/\\sqrt{d}$ uses it" in rows["$d$, `head_dim`"]
    assert "not* a query position" in rows["$i$ (in $\\omega_i$, $\\theta_i$)"]
    assert "$d$ the head width" in text
    assert "stated, converted and tested in every chapter" not in text
    assert "chapters that introduce each method (2 and 4–7)" in " ".join(text.split())
    ch = {
        n: " ".join(p.read_text(encoding="utf-8").split()) for n, p in CHAPTERS.items()
    }
    assert "$n$ is the number of tokens" in ch[1]
    assert "in this chapter $n$ is never a position" in ch[7]
    assert "M(j)" not in ch[3] and "$A = M(k)$" in ch[3]
    for n in (4, 5, 6, 8, 9):  # each defines d as the head width where it uses it
        assert re.search(
            r"head (width|dimension)|(dimension|width) of (a|one) head|head_dim",
            ch[n],
        ), n


def test_syllabus_claims_only_what_ex05_grades() -> None:
    """Review M7: ex05 grades the bias tensor (alibi_bias(n, seq_len)), not where it is
    added, so 'place it after the scaling' is assessed by the chapter only; review N4:
    the syllabus names both the exercise's and the library's conversion."""
    text = PAGE.read_text(encoding="utf-8")
    rows = {}  # the outcome rows of every chapter's table
    for line in text.splitlines():
        if line.startswith("| **"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            rows[cells[0]] = cells[-1]
    place = next(k for k in rows if k.startswith("**place** the bias"))
    assert rows[place].startswith("chapter only")
    assert not any("**place** it after" in k for k in rows)
    assert "`rope_interleaved_to_half_weights(t, n_heads, head_dim)`" in text
