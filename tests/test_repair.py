"""Student accidents repaired before grading (course_lib.grading.notebooks.repair), one
case per test, without running nbgrader: the released ex05 notebook is the reference,
and each case is the solved notebook with one accident. After a repair the assignment's
cells must stand in released order with the released metadata, the student's code must
be kept, and every note must name the cell."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import course_cli

from course_lib.grading.notebooks.repair import (
    NOTES_CELL_ID,
    Note,
    Reference,
    Ungradable,
    notes_cell,
    notes_from_notebook,
    read_notebook,
    repair_file,
    repair_notebook,
)
from course_lib.grading.synthetic import solution_answers, student_notebook

ROOT = Path(__file__).resolve().parent.parent
A = "ex05_alibi"
RELEASE = ROOT / "notebooks" / A / f"{A}.ipynb"
SOURCE = ROOT / "solutions" / A / f"{A}.ipynb"


@pytest.fixture(scope="module")
def release():
    return nbformat.read(str(RELEASE), as_version=4)


@pytest.fixture(scope="module")
def reference(release):
    return Reference.from_notebook(release, A)


@pytest.fixture(scope="module")
def answers():
    return solution_answers(SOURCE)


@pytest.fixture
def solved(answers):
    """The released notebook with every answer written in."""
    return student_notebook(RELEASE, answers)


def gid(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def graded_ids(nb) -> list[str]:
    return [gid(c) for c in nb.cells if gid(c)]


def index_of(nb, grade_id: str) -> int:
    (i,) = [i for i, c in enumerate(nb.cells) if gid(c) == grade_id]
    return i


def major(result) -> list[str]:
    return result.texts(routine=False)


def assert_as_released(nb, release) -> None:
    """The assignment's cells in released order with the released metadata, the
    locked ones with the released text, and a notebook nbformat 4.5 accepts."""
    assert graded_ids(nb) == graded_ids(release)
    by_id = {gid(c): c for c in release.cells if gid(c)}
    for cell in nb.cells:
        if gid(cell):
            want = by_id[gid(cell)]
            assert cell.metadata.nbgrader == want.metadata.nbgrader
            assert cell.cell_type == want.cell_type
            if want.metadata.nbgrader.get("locked"):
                assert cell.source == want.source
    assert nb.nbformat == 4 and nb.nbformat_minor == 5
    nbformat.validate(nb)
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids)


def test_reference_reads_the_release(reference, release):
    assert [c.grade_id for c in reference.cells] == graded_ids(release)
    public = reference.by_id["alibi_bias__public"]
    assert public.grade and public.locked and not public.solution
    assert public.points == 1
    answer = reference.by_id["alibi_bias__answer"]
    assert answer.solution and not answer.grade
    assert "import math\n\nimport torch" in reference.plain_sources


def test_a_clean_notebook_is_left_alone(solved, reference, release):
    before = copy.deepcopy(solved)
    result = repair_notebook(solved, reference)
    assert result.notes == []
    assert [c.source for c in result.notebook.cells] == [c.source for c in before.cells]
    assert [c.id for c in result.notebook.cells] == [c.id for c in before.cells]
    assert_as_released(result.notebook, release)


@pytest.mark.parametrize("where", ["above_answer", "below_hidden", "end"])
def test_duplicated_test_cell_keeps_one_copy(solved, reference, release, where):
    original = solved.cells[index_of(solved, "alibi_bias__public")]
    paste = copy.deepcopy(original)
    paste["id"] = "pasted"
    at = {
        "above_answer": index_of(solved, "alibi_bias__answer"),
        "below_hidden": index_of(solved, "alibi_bias__hidden") + 1,
        "end": len(solved.cells),
    }[where]
    solved.cells.insert(at, paste)
    n_before = len(solved.cells)
    result = repair_notebook(solved, reference)
    nb = result.notebook
    assert_as_released(nb, release)
    assert len(nb.cells) == n_before - 1  # the identical copy is gone
    # the graded copy is the one below its answer: the answer comes first
    assert index_of(nb, "alibi_bias__answer") < index_of(nb, "alibi_bias__public")
    (note,) = major(result)
    assert note.startswith(f"cell {at + 1} repeats the test cell `alibi_bias__public`")


def test_edited_copy_of_a_test_cell_runs_as_an_ordinary_cell(
    solved, reference, release
):
    at = index_of(solved, "alibi_slopes__public")
    paste = copy.deepcopy(solved.cells[at])
    paste["id"] = "pasted"
    paste.source = "print(alibi_slopes(3))"
    solved.cells.insert(at + 1, paste)
    result = repair_notebook(solved, reference)
    nb = result.notebook
    assert_as_released(nb, release)
    kept = [c for c in nb.cells if c.source == "print(alibi_slopes(3))"]
    assert len(kept) == 1 and "nbgrader" not in kept[0].metadata
    (note,) = major(result)
    assert f"cell {at + 2} is an edited copy of the test cell" in note


@pytest.mark.parametrize("stub_first", [True, False])
def test_duplicated_answer_cell_grades_the_copy_written_in(
    release, reference, answers, stub_first
):
    nb = student_notebook(RELEASE)  # stubs everywhere
    at = index_of(nb, "alibi_bias__answer")
    stub = nb.cells[at]
    written = copy.deepcopy(stub)
    written["id"] = "written"
    written.source = answers["alibi_bias__answer"]
    nb.cells.insert(at + 1 if stub_first else at, written)
    result = repair_notebook(nb, reference)
    out = result.notebook
    assert_as_released(out, release)
    graded = out.cells[index_of(out, "alibi_bias__answer")]
    assert graded.source == answers["alibi_bias__answer"]
    # the other copy is still there, as ordinary code, in its place
    plain = [c for c in out.cells if c.source == stub.source and not gid(c)]
    assert len(plain) == 1
    assert len(out.cells) == len(release.cells) + 1
    written_at = at + (2 if stub_first else 1)
    (note,) = major(result)
    assert f"cell {written_at} (the one you wrote in) is graded" in note


def test_extra_cell_with_unknown_grade_id_is_ignored(solved, reference, release):
    extra = nbformat.v4.new_code_cell("helper = 2")
    extra.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "cell-8f3a",
        "locked": False,
        "points": 3,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    solved.cells.insert(3, extra)
    result = repair_notebook(solved, reference)
    nb = result.notebook
    assert_as_released(nb, release)
    (kept,) = [c for c in nb.cells if c.source == "helper = 2"]
    assert "nbgrader" not in kept.metadata  # runs, earns nothing
    (note,) = major(result)
    assert note.startswith("cell 4 carries grading metadata (grade id `cell-8f3a`)")


@pytest.mark.parametrize(
    "lost",
    [
        ["alibi_slopes__answer"],
        ["alibi_slopes__public"],
        ["alibi_slopes__hidden"],
        ["alibi_slopes__answer", "alibi_slopes__public"],  # nbgrader crashed on this
        ["alibi_bias__answer", "alibi_bias__public", "alibi_bias__hidden"],
    ],
)
def test_cells_that_lost_their_metadata_get_it_back(
    solved, reference, release, answers, lost
):
    positions = {}
    for grade_id in lost:
        i = index_of(solved, grade_id)
        positions[grade_id] = i
        del solved.cells[i].metadata["nbgrader"]
    result = repair_notebook(solved, reference)
    nb = result.notebook
    assert_as_released(nb, release)
    assert len(nb.cells) == len(release.cells)  # adopted, none added
    for grade_id in lost:
        if grade_id.endswith("__answer"):
            assert nb.cells[index_of(nb, grade_id)].source == answers[grade_id]
    assert len(major(result)) == len(lost)
    for grade_id, i in positions.items():
        assert any(
            n.startswith(f"cell {i + 1} had lost its grading metadata")
            and f"`{grade_id}`" in n
            for n in major(result)
        )


def test_a_deleted_test_cell_is_put_back_below_its_answer(solved, reference, release):
    del solved.cells[index_of(solved, "alibi_bias__public")]
    result = repair_notebook(solved, reference)
    nb = result.notebook
    assert_as_released(nb, release)
    assert index_of(nb, "alibi_bias__public") == index_of(nb, "alibi_bias__answer") + 1
    (note,) = major(result)
    assert "`alibi_bias__public` was missing" in note and "below" in note


def test_a_deleted_answer_cell_is_reported_not_invented(solved, reference, release):
    # the student deleted the answer cell and wrote the function in a cell of their
    # own at the end, away from where the answer was: nothing may overwrite it with
    # a stub, and a cell outside the answer's place is not taken for the answer
    at = index_of(solved, "alibi_slopes__answer")
    code = solved.cells[at].source
    del solved.cells[at]
    solved.cells.append(nbformat.v4.new_code_cell(code))
    result = repair_notebook(solved, reference)
    nb = result.notebook
    assert "alibi_slopes__answer" not in graded_ids(nb)
    assert sum(c.source == code for c in nb.cells) == 1
    stub = release.cells[index_of(release, "alibi_slopes__answer")].source
    assert not any(c.source == stub for c in nb.cells)
    (note,) = major(result)
    assert "`alibi_slopes__answer` was not found" in note


def test_a_test_cell_dragged_above_its_answer_is_moved_back(solved, reference, release):
    helper = nbformat.v4.new_code_cell("def _helper():\n    return 1")
    solved.cells.insert(index_of(solved, "alibi_bias__answer") + 1, helper)
    public = solved.cells.pop(index_of(solved, "alibi_bias__public"))
    from_at = index_of(solved, "alibi_bias__answer")
    solved.cells.insert(from_at, public)
    result = repair_notebook(solved, reference)
    nb = result.notebook
    assert_as_released(nb, release)
    order = [c.source for c in nb.cells]
    # the answer keeps its place and the student's cell after it stays with it
    assert order.index(helper.source) == index_of(nb, "alibi_bias__answer") + 1
    assert index_of(nb, "alibi_bias__public") == order.index(helper.source) + 1
    (note,) = major(result)
    assert note.startswith(f"cell {from_at + 1} (the test cell `alibi_bias__public`)")


def test_whole_exercises_swapped_are_put_back_in_order(solved, reference, release):
    first = [c for c in solved.cells if (gid(c) or "").startswith("alibi_slopes")]
    rest = [c for c in solved.cells if c not in first]
    solved.cells = rest + first
    result = repair_notebook(solved, reference)
    assert_as_released(result.notebook, release)
    assert major(result)


def test_outputs_left_in_are_cleared(solved, reference, release):
    cell = solved.cells[index_of(solved, "alibi_slopes__public")]
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ok\n")]
    cell.execution_count = 7
    result = repair_notebook(solved, reference)
    assert_as_released(result.notebook, release)
    assert all(
        c.outputs == [] and c.execution_count is None
        for c in result.notebook.cells
        if c.cell_type == "code"
    )
    assert major(result) == []
    assert [n.text for n in result.notes] == [
        "cleared the outputs of 1 cell (grading runs every cell afresh)"
    ]


def _as_old_format(nb, minor: int) -> bytes:
    raw = json.loads(nbformat.writes(nb))
    raw["nbformat_minor"] = minor
    for cell in raw["cells"]:
        cell.pop("id", None)
    return json.dumps(raw).encode()


@pytest.mark.parametrize("minor", [0, 1, 2, 3, 4])
def test_older_nbformat_minor_versions_are_upgraded(solved, reference, release, minor):
    data = _as_old_format(solved, minor)
    nb, notes = read_notebook(data)
    result = repair_notebook(nb, reference)
    assert_as_released(result.notebook, release)
    texts = [n.text for n in notes + result.notes]
    assert any(f"format 4.{minor}" in t for t in texts)
    assert any(f"gave {len(release.cells)} cells the ids" in t for t in result.texts())
    assert all(n.routine for n in notes + result.notes)


def test_duplicated_cell_ids_are_made_unique(solved, reference, release):
    for cell in solved.cells:
        cell["id"] = "same"
    result = repair_notebook(solved, reference)
    assert_as_released(result.notebook, release)
    assert result.notebook.cells[0].id == "same"


def test_nbformat_3_is_converted(release, reference):
    v3 = nbformat.convert(copy.deepcopy(release), 3)
    nb, notes = read_notebook(nbformat.writes(v3, version=3).encode())
    assert nb.nbformat == 4 and "format 3" in notes[0].text
    repair_notebook(nb, reference)


def test_repair_is_idempotent(solved, reference, release):
    solved.cells.insert(
        2, copy.deepcopy(solved.cells[index_of(solved, "alibi_bias__public")])
    )
    del solved.cells[index_of(solved, "alibi_slopes__hidden")].metadata["nbgrader"]
    once = repair_notebook(solved, reference).notebook
    twice = repair_notebook(copy.deepcopy(once), reference)
    assert twice.notes == []
    assert [c.source for c in twice.notebook.cells] == [c.source for c in once.cells]


# ---------------------------------------------------------------- cannot be graded

_PYTHONISH = re.compile(r"\w+\(\)|self\.|Traceback|Error:|\bFile \"")


def _reason(data) -> str:
    with pytest.raises(Ungradable) as info:
        read_notebook(data, "ex05_alibi.ipynb")
    reason = str(info.value)
    assert not _PYTHONISH.search(reason), reason
    assert "\n" not in reason
    return reason


def test_invalid_json_names_the_line():
    text = '{\n  "cells": [\n    {"cell_type": "code", "source": }\n  ]\n}\n'
    bad_line = 1 + text[: text.index("}\n  ]")].count("\n")
    reason = _reason(text.encode())
    assert f"invalid JSON at line {bad_line}," in reason
    assert reason.startswith("ex05_alibi.ipynb is not a valid notebook")


def test_other_files_that_are_not_notebooks():
    assert "not text in UTF-8" in _reason(b"\xff\xfe\x00binary")
    assert "JSON but not a notebook" in _reason(b"[1, 2, 3]")
    assert "is empty" in _reason(b"  \n")
    assert "notebook format 5" in _reason(b'{"nbformat": 5, "cells": []}')


def test_a_damaged_cell_is_named():
    raw = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "x", "id": "a"},
            {"cell_type": "heading", "metadata": {}, "source": "y", "id": "b"},
        ],
    }
    reason = _reason(json.dumps(raw).encode())
    assert reason.startswith("cell 2 of ex05_alibi.ipynb is damaged")


def test_a_cell_the_schema_rejects_is_named(tmp_path, release, reference):
    raw = json.loads(nbformat.writes(release))
    raw["cells"][2]["attachments"] = {"figure.png": "not a mapping"}
    path = tmp_path / "student.ipynb"
    path.write_text(json.dumps(raw))
    with pytest.raises(Ungradable) as info:
        repair_file(path, reference, tmp_path / "private.ipynb")
    reason = str(info.value)
    assert reason.startswith(f"cell 3 of {A}.ipynb is damaged"), reason
    assert not _PYTHONISH.search(reason), reason
    assert not (tmp_path / "private.ipynb").exists()


def test_nbgrader_errors_are_told_in_words():
    from course_lib.grading.grade import _nbgrader_error

    log = (
        "[WARNING] Cell with id 'alibi_bias__public' exists multiple times!\n"
        "Traceback (most recent call last):\n    self.convert_notebooks()\n"
    )
    reason = _nbgrader_error({"log": log}, "ann", A)
    assert "`alibi_bias__public` appears more than once" in reason
    unknown = _nbgrader_error({"log": "    self.convert_notebooks()\n"}, "ann", A)
    assert f"reports/{A}/logs/ann.log" in unknown
    for text in (reason, unknown):
        assert not _PYTHONISH.search(text), text


# ---------------------------------------------------------------- files and notes


def test_repair_file_writes_a_copy_with_the_notes_first(tmp_path, solved, reference):
    paste = copy.deepcopy(solved.cells[index_of(solved, "alibi_bias__public")])
    paste["id"] = "pasted"
    solved.cells.append(paste)
    student = tmp_path / "student.ipynb"
    nbformat.write(solved, str(student))
    before = student.read_bytes()
    private = tmp_path / "private.ipynb"
    result = repair_file(student, reference, private, with_notes_cell=True)
    assert student.read_bytes() == before  # the student's file is never touched
    written = nbformat.read(str(private), as_version=4)
    assert written.cells[0].id == NOTES_CELL_ID
    assert notes_from_notebook(private) == major(result)
    assert notes_from_notebook(student) == []


def test_notes_cell_lists_routine_clean_up_apart():
    cell = notes_cell([Note("cell 3 repeats x"), Note("cleared outputs", routine=True)])
    assert "- cell 3 repeats x" in cell.source
    assert "Routine clean-up: cleared outputs." in cell.source


def test_own_metadata_reference_finds_a_pasted_test_cell(solved):
    """`course check` has no release at hand: the checksum in the cell's own
    metadata tells the released copy from an edited one."""
    at = index_of(solved, "alibi_bias__public")
    edited = copy.deepcopy(solved.cells[at])
    edited.source += "\nprint('mine')"
    solved.cells.insert(at, edited)  # edited copy first
    reference = Reference.from_own_metadata(solved)
    assert [c.grade_id for c in reference.cells] == graded_ids(
        student_notebook(RELEASE)
    )
    result = repair_notebook(solved, reference)
    nb = result.notebook
    kept = nb.cells[index_of(nb, "alibi_bias__public")]
    assert "print('mine')" not in kept.source
    (note,) = major(result)
    assert note.startswith(f"cell {at + 1} is an edited copy of the test cell")
    assert "delete the copy" in result.notes[-1].advice or any(
        "delete the copy" in n.advice for n in result.notes
    )


def test_gradebook_decides_which_cells_exist(tmp_path, release, monkeypatch):
    """A cell of the release that the gradebook does not know is not graded."""
    from nbgrader.api import Gradebook

    # nbgrader stamps a new gradebook with the `alembic` script of this environment
    bindir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ.get("PATH", ""))

    with Gradebook(f"sqlite:///{tmp_path / 'gb.db'}") as gb:
        gb.add_assignment(A)
        gb.add_notebook(A, A)
        for cell in release.cells:
            meta = cell.metadata.get("nbgrader")
            if not meta or meta["grade_id"] == "alibi_bias__hidden":
                continue
            gb.add_source_cell(
                meta["grade_id"],
                A,
                A,
                cell_type=cell.cell_type,
                locked=meta["locked"],
                source=cell.source,
                checksum=meta["checksum"],
            )
            if meta["grade"]:
                gb.add_grade_cell(
                    meta["grade_id"], A, A, max_score=meta["points"], cell_type="code"
                )
            if meta["solution"]:
                gb.add_solution_cell(meta["grade_id"], A, A)
        reference = Reference.from_gradebook(gb, A, A, RELEASE)
    assert "alibi_bias__hidden" not in reference.by_id
    assert reference.by_id["alibi_bias__public"].points == 1.0
    result = repair_notebook(copy.deepcopy(release), reference)
    hidden = [c for c in result.notebook.cells if c.id == "alibi-bias--hidden"]
    assert hidden and "nbgrader" not in hidden[0].metadata


# ---------------------------------------------------------------- every release


@pytest.mark.parametrize(
    "path", sorted((ROOT / "notebooks").glob("*/*.ipynb")), ids=lambda p: p.stem
)
def test_every_released_notebook_needs_no_repair(path):
    nb = nbformat.read(str(path), as_version=4)
    for reference in (Reference.from_notebook(nb), Reference.from_own_metadata(nb)):
        assert [c.grade_id for c in reference.cells] == graded_ids(nb)
        result = repair_notebook(copy.deepcopy(nb), reference)
        assert result.notes == []
        assert [c.source for c in result.notebook.cells] == [c.source for c in nb.cells]


# ---------------------------------------------------- an answer graded by hand (ex01)

EX01 = ROOT / "notebooks" / "ex01_permutation" / "ex01_permutation.ipynb"
WRITTEN = "Permuting the tokens permutes the outputs the same way."


@pytest.fixture
def ex01():
    nb = nbformat.read(str(EX01), as_version=4)
    return nb, Reference.from_notebook(copy.deepcopy(nb))


def test_duplicated_written_answer_grades_the_copy_written_in(ex01):
    nb, reference = ex01
    at = index_of(nb, "equivariance__answer")
    stub = nb.cells[at].source
    written = copy.deepcopy(nb.cells[at])
    written["id"] = "written"
    written.source = WRITTEN
    nb.cells.insert(at, written)  # the written copy first, the stub after it
    result = repair_notebook(nb, reference)
    out = result.notebook
    assert out.cells[index_of(out, "equivariance__answer")].source == WRITTEN
    assert sum(c.source == stub and not gid(c) for c in out.cells) == 1
    (note,) = major(result)
    assert f"cell {at + 1} (the one you wrote in) is graded" in note


def test_written_answer_that_lost_its_metadata_is_found(ex01):
    nb, reference = ex01
    cell = nb.cells[index_of(nb, "equivariance__answer")]
    cell.source = WRITTEN
    del cell.metadata["nbgrader"]
    result = repair_notebook(nb, reference)
    out = result.notebook
    assert out.cells[index_of(out, "equivariance__answer")].source == WRITTEN
    assert len(out.cells) == len(nbformat.read(str(EX01), as_version=4).cells)


# ---------------------------------------------------------------- course check


def test_check_report_lists_the_accidents():
    from course_lib.grading.check import CheckReport, ExerciseResult, format_report

    report = CheckReport(
        "ex05_alibi.ipynb",
        [ExerciseResult("alibi_bias", True, "passed")],
        accidents=[
            "cell 7 repeats the test cell `alibi_bias__public`; delete the copy"
        ],
    )
    text = format_report(report)
    assert "  - cell 7 repeats the test cell `alibi_bias__public`; delete the copy" in (
        text.splitlines()
    )


@pytest.mark.slow
def test_check_names_a_pasted_test_cell_and_runs_as_grading_would(tmp_path, solved):
    from course_lib.grading.check import check_notebook

    at = index_of(solved, "alibi_bias__answer")
    paste = copy.deepcopy(solved.cells[index_of(solved, "alibi_bias__public")])
    paste["id"] = "pasted"
    solved.cells.insert(at, paste)  # above the answer: it would fail with NameError
    path = tmp_path / f"{A}.ipynb"
    nbformat.write(solved, str(path))
    before = path.read_bytes()
    report = check_notebook(path, cell_timeout=120)
    assert path.read_bytes() == before
    assert report.accidents == [
        f"cell {at + 1} repeats the test cell `alibi_bias__public`; delete the copy"
    ]
    assert [e.name for e in report.exercises] == ["alibi_slopes", "alibi_bias"]
    assert report.ok, report


# ------------------------------------------- end to end: `course autograde` on a class


_course_cmd = course_cli


def _accident_class(release_path: Path, answers: dict[str, str]) -> dict[str, object]:
    """student -> submission (a notebook, or bytes): correct and wrong answers, clean
    and with each accident."""
    wrong = dict(answers)
    wrong["alibi_bias__answer"] = answers["alibi_bias__answer"].replace(
        "return -alibi_slopes", "return alibi_slopes"
    )
    assert wrong != answers, "the ex05 solution changed; update this test's edit"

    def nb(ans=answers):
        return student_notebook(release_path, ans)

    def paste(notebook, grade_id, at_id):
        cell = copy.deepcopy(notebook.cells[index_of(notebook, grade_id)])
        cell["id"] = "pasted-copy"
        notebook.cells.insert(index_of(notebook, at_id), cell)
        return notebook

    dup_answer = nb()
    stub = copy.deepcopy(
        student_notebook(release_path).cells[index_of(dup_answer, "alibi_bias__answer")]
    )
    stub["id"] = "stub-copy"
    dup_answer.cells.insert(index_of(dup_answer, "alibi_bias__answer"), stub)

    extra = nb()
    cell = nbformat.v4.new_code_cell("scratch = 1")
    cell.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "cell-5d1e",
        "locked": False,
        "points": 2,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    extra.cells.insert(2, cell)

    no_metadata = nb()
    for grade_id in ("alibi_slopes__answer", "alibi_slopes__public"):
        del no_metadata.cells[index_of(no_metadata, grade_id)].metadata["nbgrader"]

    moved = nb()
    public = moved.cells.pop(index_of(moved, "alibi_bias__public"))
    moved.cells.insert(index_of(moved, "alibi_bias__answer"), public)

    outputs = nb()
    for i, c in enumerate(c for c in outputs.cells if c.cell_type == "code"):
        c.execution_count = i + 1
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="old\n")]

    return {
        "clean": nb(),
        "dup_test": paste(nb(), "alibi_bias__public", "alibi_bias__answer"),
        "dup_answer": dup_answer,
        "extra_cell": extra,
        "no_metadata": no_metadata,
        "moved_test": moved,
        "outputs_left": outputs,
        "old_format": _as_old_format(nb(), 2),
        "wrong": nb(wrong),
        "wrong_dup_test": paste(nb(wrong), "alibi_bias__public", "alibi_bias__answer"),
        "not_json": b'{"cells": [\n  {"cell_type": "code",\n  "source": ',
    }


@pytest.fixture(scope="module")
def repaired_class(tmp_path_factory):
    from course_lib.grading.synthetic import scratch_course, write_submission

    tmp = tmp_path_factory.mktemp("repair-e2e")
    course = scratch_course(tmp / "course", ROOT, [A])
    out = _course_cmd("release", A, cwd=course.root)
    assert out.returncode == 0, out.stderr
    release_path = course.root / "notebooks" / A / f"{A}.ipynb"
    answers = solution_answers(course.root / "solutions" / A / f"{A}.ipynb")
    inbox = tmp / "inbox"
    for student, submission in _accident_class(release_path, answers).items():
        write_submission(inbox, student, A, submission)
    collected = _course_cmd("collect", str(inbox), "--assignment", A, cwd=course.root)
    assert collected.returncode == 0, collected.stderr
    submitted = {
        p.parent.parent.name: p.read_bytes()
        for p in course.submitted_dir.glob(f"*/{A}/{A}.ipynb")
    }
    run = _course_cmd(
        "autograde",
        A,
        "--jobs",
        "2",
        "--no-progress",
        "--cell-timeout",
        "60",
        cwd=course.root,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    return course, submitted, run


def _scores(course) -> dict[str, tuple[float, float]]:
    with course.gradebook() as gb:
        return {
            s.student.id: (float(s.score), float(s.max_score))
            for s in gb.assignment_submissions(A)
        }


@pytest.mark.slow
def test_accidents_are_graded_as_meant(repaired_class):
    from course_lib.grading.gradebook import read_status

    course, submitted, run = repaired_class
    scores = _scores(course)
    with course.gradebook() as gb:
        status = read_status(gb, A)
        max_score = float(gb.find_assignment(A).max_score)
    assert scores["clean"] == (max_score, max_score)
    correct = ["dup_test", "dup_answer", "extra_cell", "no_metadata", "moved_test"]
    routine = ["outputs_left", "old_format"]
    for student in correct + routine:
        assert status[student].status == "graded", (student, status[student])
        assert scores[student] == scores["clean"], (student, status[student])
    # a wrong answer keeps its wrong score, accident or not
    assert scores["wrong"][0] < max_score
    assert scores["wrong_dup_test"] == scores["wrong"]
    assert status["wrong_dup_test"].failures == status["wrong"].failures
    # the table names each repair; routine clean-up is not listed
    table = run.stdout
    for student in correct + ["wrong_dup_test"]:
        row = next(ln for ln in table.splitlines() if ln.strip().startswith(student))
        following = table.split(row, 1)[1].splitlines()[1]
        assert "repaired:" in following and "cell " in following, (student, table)
    for student in ["clean", *routine]:
        row = next(ln for ln in table.splitlines() if ln.strip().startswith(student))
        after = table.split(row, 1)[1].splitlines()
        assert not after or "repaired:" not in after[1], (student, table)
    # the students' files are never modified
    for student, data in submitted.items():
        path = course.submitted_dir / student / A / f"{A}.ipynb"
        assert path.read_bytes() == data, student


@pytest.mark.slow
def test_a_file_that_is_not_a_notebook_gets_a_plain_reason(repaired_class):
    from course_lib.grading.gradebook import read_status

    course, _, _ = repaired_class
    with course.gradebook() as gb:
        row = read_status(gb, A)["not_json"]
    assert row.status == "ungradable"
    assert row.reason.startswith(f"{A}.ipynb is not a valid notebook (invalid JSON")
    assert not _PYTHONISH.search(row.reason), row.reason
    assert _scores(course)["not_json"][0] == 0


@pytest.mark.slow
def test_feedback_and_rerun_carry_the_repairs(repaired_class):
    import html

    from course_lib.grading.feedback import feedback

    course, _, first = repaired_class
    result = feedback(course, A)
    assert set(result.repaired) == {
        "dup_test",
        "dup_answer",
        "extra_cell",
        "no_metadata",
        "moved_test",
        "wrong_dup_test",
    }
    assert any("repeats the test cell" in t for t in result.repaired["dup_test"])
    page = (course.feedback_dir / "dup_test" / A / f"{A}.html").read_text()
    assert "Repairs made before grading" in page
    assert "repeats the test cell" in html.unescape(page)
    clean = (course.feedback_dir / "clean" / A / f"{A}.html").read_text()
    assert "Repairs made before grading" not in clean
    again = _course_cmd(
        "autograde", A, "--no-progress", "--cell-timeout", "60", cwd=course.root
    )
    assert again.returncode == 0, again.stderr
    assert "11 unchanged" in again.stdout
    repaired = [ln for ln in first.stdout.splitlines() if "repaired:" in ln]
    assert repaired == [ln for ln in again.stdout.splitlines() if "repaired:" in ln]
