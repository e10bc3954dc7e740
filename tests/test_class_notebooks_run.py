"""The class edition runs for a student: every published notebook, run top to bottom
in a fresh virtual environment that has only the student wheel (and the kernel a
notebook server gives, as Colab or a student hub has it).

The tree is what ``course publish`` writes for the notebooks (its own functions:
the class edition's chapter notebooks, the release notebooks with their chapter
links moved to the published pages, the student wheel with the stored outputs of the
chapters' cells), the stored outputs taken from the executed notebooks of this run's
book build (``built_book``), as ``course publish`` takes them from the class build's.

* every chapter notebook runs without an error: a cell that needs an exercise the
  student has not solved ends with the course's note and the build's output of that
  cell;
* with a solved exercise notebook in the tree, the chapter uses the student's answer
  (it prints so, and fewer cells fall back);
* every exercise notebook, as released, fails only in the public-check cells of the
  functions the student must write, with the checks' "still the stub" message;
* every relative link of a published notebook leads to a file of the published tree.

Each notebook runs in its own kernel (as a student opens it), three at a time, all
driven by one nbclient process; the wall time is printed (``-s``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
from test_student_wheel import _NOT_A_STUDENTS

from course_lib.grading.editions import library as edition
from course_lib.grading.editions.launch import chapter_notebook_path
from course_lib.grading.editions.publish import (
    BOOK_DIR,
    _copy_notebooks,
    chapter_outputs,
    class_chapter_notebooks,
)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
STUB_NOTE = "the function is still the stub"
FALLBACK_NOTE = "[course] This cell"
STORED_NOTE = "Below, the course's stored output of this cell:"
# one notebook's run: the kernel, torch's import and its cells
CELL_TIMEOUT = 600
PARALLEL = 3
SOLVED = "ex06_relative"  # the exercise solved in the second tree

# Runs the notebooks argv[4:] in place, each in its own kernel named argv[1] (as a
# student opens each one), argv[3] at a time, every cell even after an error (as
# "Run All" would not: the test asserts where errors are); one process for all of
# them (importing nbclient costs about 1.3 s of CPU: once, not once per notebook).
# Prints one JSON line per notebook: its path, its seconds, and the error that
# stopped its run (null when it ran to the end).
_RUNNER = """
import asyncio, json, pathlib, sys, time, traceback
import nbformat
from nbclient import NotebookClient
kernel, timeout, parallel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


async def run(path, slots):
    async with slots:
        start = time.perf_counter()
        try:
            nb = nbformat.read(path, as_version=4)
            client = NotebookClient(
                nb, kernel_name=kernel, timeout=timeout, allow_errors=True,
                resources={"metadata": {"path": str(path.parent)}},
            )
            await asyncio.wait_for(client.async_execute(), 2 * timeout)
            nbformat.write(nb, path)
            failed = None
        except BaseException:
            failed = traceback.format_exc()[-3000:]
        seconds = time.perf_counter() - start
        print(json.dumps([str(path), seconds, failed]), flush=True)


async def main():
    slots = asyncio.Semaphore(parallel)
    await asyncio.gather(*(run(pathlib.Path(p), slots) for p in sys.argv[4:]))


asyncio.run(main())
"""


def _text(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _outputs_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(_text({"source": out.get("text", "")}))
        elif out.get("output_type") == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
        else:
            parts.append(_text({"source": out.get("data", {}).get("text/plain", "")}))
    return "".join(parts)


@pytest.fixture(scope="module")
def stored(built_book: Path) -> tuple[dict, dict]:
    """The class chapter notebooks' texts and their cells' stored outputs, from this
    run's book build."""
    texts = class_chapter_notebooks(ROOT)
    outputs = chapter_outputs([built_book.parent], texts)
    # every chapter's stored outputs are the build's: some cell printed or drew
    assert set(outputs) == {Path(p).name for p in texts}
    for chapter, cells in outputs.items():
        assert any(cells.values()), f"{chapter}: no stored output at all"
    return texts, outputs


@pytest.fixture(scope="module")
def venv_and_kernel(stored, student_venv, tmp_path_factory: pytest.TempPathFactory):
    """The student's venv (conftest.student_venv: torch, the student wheel's
    requirements, ipykernel) with the published wheel, the one that holds the
    stored outputs of this run's chapters, installed over its plain one; and a
    kernel spec that starts its Python."""
    tmp = tmp_path_factory.mktemp("class-run")
    wheel = edition.build_student_wheel(tmp / "dist", chapter_outputs=stored[1])
    venv = student_venv
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        + ["--no-compile", "--no-deps", "--force-reinstall", str(wheel)],
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    spec = tmp / "jupyter" / "kernels" / "student"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    str(venv / "bin" / "python"),
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "student",
                "language": "python",
            }
        )
    )
    return venv, tmp / "jupyter"


def _tree(where: Path, texts: dict[str, str], solved: tuple[str, ...] = ()) -> Path:
    """The published notebooks under ``where``: ``book/notebooks/`` and
    ``notebooks/`` (the exercises in ``solved`` with the instructor's answers)."""
    for page, text in texts.items():
        path = where / chapter_notebook_path(page)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    _copy_notebooks(ROOT, where / "notebooks")
    for name in solved:
        release = where / "notebooks" / name / f"{name}.ipynb"
        solution = json.loads(
            (ROOT / "solutions" / name / f"{name}.ipynb").read_text(encoding="utf-8")
        )
        answers = {
            c["metadata"]["nbgrader"]["grade_id"]: _text(c)
            for c in solution["cells"]
            if c["metadata"].get("nbgrader", {}).get("solution")
        }
        nb = json.loads(release.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if cell["metadata"].get("nbgrader", {}).get("solution"):
                cell["source"] = "\n".join(
                    line
                    for line in answers[grade_id].splitlines()
                    if "### BEGIN SOLUTION" not in line
                    and "### END SOLUTION" not in line
                )
        release.write_text(json.dumps(nb), encoding="utf-8")
    return where


def _run_all(paths: list[Path], venv: Path, jupyter: Path) -> dict[Path, dict]:
    env = {k: v for k, v in os.environ.items() if k not in _NOT_A_STUDENTS}
    env["JUPYTER_PATH"] = str(jupyter)
    # a student's kernel: no course venv on its PATH, one thread like the tests
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    env["OMP_NUM_THREADS"] = "1"

    # the longest chapters first, so that the runs end together
    order = sorted(paths, key=lambda p: -p.stat().st_size)
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, "student", str(CELL_TIMEOUT), str(PARALLEL)]
        + [str(p) for p in order],
        capture_output=True,
        text=True,
        env=env,
        cwd=order[0].parent,
        timeout=CELL_TIMEOUT * 2 * len(order),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = {}
    for line in proc.stdout.splitlines():
        path, seconds, failed = json.loads(line)
        assert failed is None, f"{Path(path).name}: {failed}"
        print(f"  {Path(path).name}: {seconds:.1f} s")
        done[Path(path)] = json.loads(Path(path).read_text())
    assert set(done) == set(paths), proc.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def ran(venv_and_kernel, stored, tmp_path_factory: pytest.TempPathFactory):
    """Every published notebook of the tree as released, and the solved exercise's
    chapter of a second tree, each run in the student environment."""
    venv, jupyter = venv_and_kernel
    texts = stored[0]
    base = tmp_path_factory.mktemp("trees")
    released = _tree(base / "released", texts)
    solved = _tree(base / "solved", texts, (SOLVED,))
    paths = sorted((released / "book" / "notebooks").glob("*.ipynb"))
    paths += sorted((released / "notebooks").glob("*/*.ipynb"))
    chapter = solved / "book" / "notebooks" / "06-relative.ipynb"
    start = time.perf_counter()
    results = _run_all([*paths, chapter], venv, jupyter)
    print(f"ran {len(results)} notebooks in {time.perf_counter() - start:.0f} s")
    return released, solved, results


def _errors(nb: dict) -> list[tuple[int, dict, str]]:
    return [
        (i, cell, f"{out['ename']}: {out['evalue']}")
        for i, cell in enumerate(nb["cells"])
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]


def test_chapter_notebooks_run_top_to_bottom(ran, stored) -> None:
    from course_lib.grading.editions.chapter_runtime import cell_key

    released, _solved, results = ran
    chapters = {
        p: nb for p, nb in results.items() if p.is_relative_to(released / "book")
    }
    assert len(chapters) == len(class_chapter_notebooks(ROOT)) >= 13
    fell_back = {}
    for path, nb in chapters.items():
        assert not _errors(nb), (path.name, _errors(nb)[:3])
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(c.get("execution_count") for c in code), path.name  # all ran
        notes = [c for c in code if FALLBACK_NOTE in _outputs_text(c)]
        for cell in notes:
            text = _outputs_text(cell)
            # the note, then the build's own output of that cell, all of it
            assert STORED_NOTE in text, (path.name, text[:500])
            shown = text.split(STORED_NOTE, 1)[1]
            build = stored[1][path.stem][cell_key(_text(cell))]
            for out in build:
                expected = _outputs_text({"outputs": [out]}).strip()
                assert expected in shown, (path.name, expected[:200])
        fell_back[path.stem] = len(notes)
    print("cells with the stored output:", fell_back)
    # the two chapters: stubbed exercise targets, stored outputs instead
    assert fell_back["06-relative"] >= 1 and fell_back["11-long-context"] >= 3
    # glue works without myst_nb (not installed there): chapter 2 glues values
    assert "from myst_nb import glue" in "".join(
        _text(c)
        for c in chapters[released / "book/notebooks/02-sinusoidal.ipynb"]["cells"]
    )


def test_the_chapter_uses_the_students_answers(ran) -> None:
    released, solved, results = ran
    path = solved / "book" / "notebooks" / "06-relative.ipynb"
    nb = results[path]
    assert not _errors(nb), _errors(nb)[:3]
    setup = _outputs_text(nb["cells"][1])
    assert "Using your answers" in setup, setup
    assert f"t5_relative_position_bucket ({SOLVED}.ipynb)" in setup, setup
    before = results[released / "book" / "notebooks" / "06-relative.ipynb"]

    def notes(nb):
        return sum(FALLBACK_NOTE in _outputs_text(c) for c in nb["cells"])

    assert notes(nb) < notes(before)


def test_exercise_notebooks_fail_only_where_the_student_writes(ran) -> None:
    released, _solved, results = ran
    exercises = {
        p: nb for p, nb in results.items() if p.is_relative_to(released / "notebooks")
    }
    assert len(exercises) == len(list((ROOT / "notebooks").glob("*/*.ipynb")))
    for path, nb in exercises.items():
        answers = {
            c["metadata"]["nbgrader"]["grade_id"].removesuffix("__answer")
            for c in nb["cells"]
            if c["metadata"].get("nbgrader", {}).get("solution")
            and c["cell_type"] == "code"
        }
        failed = _errors(nb)
        assert failed, f"{path.name}: no cell failed, yet every answer is a stub"
        stubbed = set()  # answer cells (code the student writes) that raised
        for i, cell, error in failed:
            meta = cell["metadata"].get("nbgrader", {})
            grade_id = meta.get("grade_id", "")
            if error == "NotImplementedError: ":
                # the release's own stub, `raise NotImplementedError()` (the
                # library's stubs all say which exercise): an answer cell, or a
                # cell that calls the student's function before it is written
                if meta.get("solution"):
                    stubbed.add(grade_id.removesuffix("__answer"))
                continue
            # otherwise only a public check of an answer, locked, saying so
            assert meta.get("grade") and meta.get("locked"), (path.name, i, error)
            assert any(grade_id.startswith(a) for a in answers), (path.name, grade_id)
            if error.startswith("NameError"):
                # a check of values its answer cell (still the stub) should define
                assert grade_id.removesuffix("__public") in stubbed, (path.name, i)
            else:
                assert STUB_NOTE in error, (path.name, i, error)


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_every_link_of_a_published_notebook_resolves(
    ran, built_book: Path, tmp_path: Path
) -> None:
    """Relative links resolve in the tree (its ``docs/`` is the class book, whose
    pages the built book has too)."""
    released, _solved, _results = ran
    tree = tmp_path / "tree"
    shutil.copytree(released, tree)
    (tree / BOOK_DIR).symlink_to(built_book)
    checked = 0
    for path in sorted(tree.rglob("*.ipynb")):
        if BOOK_DIR in path.relative_to(tree).parts:
            continue
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for match in _LINK.finditer(_text(cell)):
                target = match.group("target")
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                file = unquote(target.split("#")[0])
                assert (path.parent / file).resolve().is_file(), (
                    f"{path.relative_to(tree)} links to {target}, which is not in "
                    "the published tree"
                )
                checked += 1
    assert checked >= 11  # every exercise's chapter link at least
