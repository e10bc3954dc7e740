"""Every assignment through the real nbgrader pipeline.

For each assignment under ``solutions/``:

* the committed release in ``notebooks/`` is what ``nbgrader generate_assignment``
  produces from the source today (cell types, sources and metadata), and holds no
  solution and no hidden test;
* graded by nbgrader (through ``course_lib.grading.autograde``), a student who hands
  in the reference answers earns every autograded point, and a student who hands in
  the release untouched earns none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
RELEASES = ROOT / "notebooks"
ASSIGNMENTS = (
    sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    if SOLUTIONS.is_dir()
    else []
)
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
REGENERATE = (
    "regenerate the releases with `course release all` (or `make release`) "
    "and commit notebooks/"
)


def test_there_are_assignments():
    assert ASSIGNMENTS, f"no assignments under {SOLUTIONS}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_assignment_is_released(assignment):
    for source in sorted((SOLUTIONS / assignment).glob("*.ipynb")):
        release = RELEASES / assignment / source.name
        assert release.is_file(), (
            f"{release.relative_to(ROOT)} is missing; {REGENERATE}"
        )


@pytest.mark.parametrize(
    "release",
    sorted(RELEASES.glob("*/*.ipynb")) if RELEASES.is_dir() else [],
    ids=lambda p: p.parent.name,
)
def test_release_holds_no_solution_or_hidden_test(release):
    text = release.read_text()
    for marker in MARKERS:
        assert marker not in text, (
            f"{release.relative_to(ROOT)} contains {marker!r}; {REGENERATE}"
        )
    source = SOLUTIONS / release.parent.name / release.name
    assert source.is_file(), f"{release.relative_to(ROOT)} has no source in solutions/"
    released = _code_lines(json.loads(text))
    pattern = re.compile(
        r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.DOTALL
    )
    cells = json.loads(source.read_text())["cells"]
    # lines the source shows outside its solution regions (a bug-zoo task repeats
    # much of the fixed code) may appear in the release; the others may not
    public = _code_lines(
        {"cells": [{"source": pattern.sub("", _source(cell))} for cell in cells]}
    )
    for cell in cells:
        for _, region in pattern.findall(_source(cell)):
            for line in region.splitlines():
                code = line.strip()
                if len(code) > 20 and not code.startswith("#") and code not in public:
                    assert code not in released, (
                        f"{release.relative_to(ROOT)} contains the solution line "
                        f"{code!r}"
                    )


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _code_lines(nb) -> set[str]:
    return {line.strip() for cell in nb["cells"] for line in _source(cell).splitlines()}


# --- generated releases and grades (nbgrader runs: slow) --------------------------


@pytest.fixture(scope="module")
def pipeline(every_assignment_graded):
    """A scratch course with every assignment, released and graded for two students:
    ``perfect`` (the reference answers) and ``untouched`` (the release as is);
    shared with ``tests/test_feedback_pages.py`` (conftest.every_assignment_graded)."""
    return every_assignment_graded


def _cells(nb) -> list[tuple]:
    return [
        (c.get("cell_type"), _source(c), c.get("metadata", {})) for c in nb["cells"]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_equals_generate_assignment(pipeline, assignment):
    course, _ = pipeline
    for generated in sorted((course.release_dir / assignment).glob("*.ipynb")):
        committed = RELEASES / assignment / generated.name
        name = committed.relative_to(ROOT)
        assert committed.is_file(), f"{name} is missing; {REGENERATE}"
        want = json.loads(generated.read_text())
        have = json.loads(committed.read_text())
        want_cells, have_cells = _cells(want), _cells(have)
        assert len(have_cells) == len(want_cells), (
            f"{name} has {len(have_cells)} cells, generate_assignment gives "
            f"{len(want_cells)}; {REGENERATE}"
        )
        for i, (w, h) in enumerate(zip(want_cells, have_cells, strict=True)):
            gid = w[2].get("nbgrader", {}).get("grade_id", "")
            for part, a, b in zip(
                ("cell type", "source", "metadata"), w, h, strict=True
            ):
                assert a == b, (
                    f"{name}: cell {i} {gid!r}: the {part} differs from what nbgrader "
                    f"generate_assignment produces from solutions/; {REGENERATE}"
                )
        assert have.get("metadata", {}).get("kernelspec") == want.get(
            "metadata", {}
        ).get("kernelspec"), f"{name}: kernelspec differs; {REGENERATE}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_earns_all_autograded_points_release_none(pipeline, assignment):
    course, outcomes = pipeline
    statuses = {
        student: (status, reason) for student, status, reason in outcomes[assignment]
    }
    assert statuses == {"perfect": ("graded", ""), "untouched": ("graded", "")}
    from course_lib.grading.gradebook import read_status

    with course.gradebook() as gb:
        status = read_status(gb, assignment)
        tests = {}  # grade id -> points, for autograded test cells
        for nb in gb.find_assignment(assignment).notebooks:
            solution_cells = {c.name for c in nb.solution_cells}
            tests.update(
                {
                    c.name: c.max_score
                    for c in nb.grade_cells
                    if c.cell_type == "code" and c.name not in solution_cells
                }
            )
        assert tests, f"{assignment} has no autograded test cells"
        for student, full in (("perfect", True), ("untouched", False)):
            sub = gb.find_submission(assignment, student)
            got = {
                g.name: g.auto_score
                for nb in sub.notebooks
                for g in nb.grades
                if g.name in tests
            }
            want = {name: (points if full else 0.0) for name, points in tests.items()}
            assert got == want, (assignment, student, status[student].failures)
