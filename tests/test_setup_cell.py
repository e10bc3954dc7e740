"""The guarded set-up cell that every notebook a student opens starts with.

* every source (``solutions/``), release (``notebooks/``) and chapter notebook
  (``book/notebooks/``) starts with exactly the cell that ``_config.yml`` gives, once;
* it carries no nbgrader metadata (never graded);
* run where ``course_lib`` is importable it does nothing; where it is missing it runs
  one ``pip install`` of the configured student package;
* ``course release`` inserts it into a new assignment and refreshes an old one.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from course_lib.grading.editions.launch import (
    SETUP_TAG,
    insert_setup_cell,
    read_settings,
    settings_from_config,
    setup_cell,
    setup_cell_source,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
NOTEBOOKS = sorted(
    [*ROOT.glob("solutions/*/*.ipynb"), *ROOT.glob("notebooks/*/*.ipynb")]
    + sorted(ROOT.glob("book/notebooks/*.ipynb"))
)


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def test_the_package_comes_from_the_repository_setting() -> None:
    """``student_package`` when set, else the repository of ``_config.yml`` at its
    branch."""
    settings = read_settings(ROOT)
    repo = CONFIG["repository"]
    default = f"course_lib @ git+{repo['url']}@{repo['branch']}"
    assert settings.package == (
        CONFIG["launch_buttons"].get("student_package") or default
    )
    assert json.dumps(settings.package) in setup_cell_source(settings)


def test_a_class_can_set_its_own_package() -> None:
    config = json.loads(json.dumps(CONFIG))
    wheel = "https://class.example.org/dist/course_lib-0.1.0-py3-none-any.whl"
    config["launch_buttons"]["student_package"] = wheel
    source = setup_cell_source(settings_from_config(config))
    assert f'COURSE_PACKAGE = "{wheel}"' in source
    assert "git+" not in source


def test_there_are_notebooks_to_check() -> None:
    kinds = {p.relative_to(ROOT).parts[0] for p in NOTEBOOKS}
    assert kinds == {"solutions", "notebooks", "book"}, kinds
    assert len(list(ROOT.glob("notebooks/*/*.ipynb"))) >= 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_starts_with_exactly_the_setup_cell(path: Path) -> None:
    cells = json.loads(path.read_text())["cells"]
    expected = setup_cell(read_settings(ROOT))
    first = cells[0]
    hint = f"{path.relative_to(ROOT)}: run `make release` (or `make notebooks`)"
    assert first["cell_type"] == "code", hint
    assert _source(first) == expected["source"], hint
    assert first["metadata"] == expected["metadata"], hint
    assert "nbgrader" not in first["metadata"], "the set-up cell must not be graded"
    assert first.get("outputs", []) == [], hint
    others = [c for c in cells[1:] if SETUP_TAG in c["metadata"].get("tags", [])]
    assert not others, f"{path.relative_to(ROOT)} has a second set-up cell"


def _run_cell(monkeypatch, *, installed: bool) -> list[list[str]]:
    """Run the set-up cell's code with ``course_lib`` importable or not; return the
    commands it started."""
    calls: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        calls.append(list(cmd))
        assert kwargs.get("check") is True  # a failed install stops the notebook
        return subprocess.CompletedProcess(cmd, 0)

    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "course_lib" and not installed:
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    source = _source(json.loads(NOTEBOOKS[-1].read_text())["cells"][0])
    exec(compile(source, "setup-cell", "exec"), {"__name__": "__main__"})
    return calls


def test_the_cell_does_nothing_where_course_lib_is_installed(monkeypatch, capsys):
    assert _run_cell(monkeypatch, installed=True) == []
    assert capsys.readouterr().out == ""


def test_the_cell_installs_the_package_where_course_lib_is_missing(monkeypatch, capsys):
    calls = _run_cell(monkeypatch, installed=False)
    package = read_settings(ROOT).package
    assert calls == [[sys.executable, "-m", "pip", "install", "--quiet", package]]
    assert package in capsys.readouterr().out


def test_insert_refreshes_an_old_cell_and_keeps_one() -> None:
    settings = read_settings(ROOT)
    old = setup_cell(settings)
    old["source"] = "# an older set-up cell\n"
    task = {"cell_type": "markdown", "id": "task", "metadata": {}, "source": "# Task"}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [task, old]}
    assert insert_setup_cell(nb, settings) is True
    assert [c["id"] for c in nb["cells"]] == [SETUP_TAG, "task"]
    assert nb["cells"][0]["source"] == setup_cell_source(settings)
    assert insert_setup_cell(nb, settings) is False  # already up to date


@pytest.mark.slow
def test_course_release_gives_a_new_assignment_the_cell(tmp_path: Path) -> None:
    """A new assignment without the cell, released by ``course release``: the source
    gains the cell and the release starts with it (and is not graded for it)."""
    from course_lib.grading.course import Course
    from course_lib.grading.release import release

    course = tmp_path / "course"
    course.mkdir()
    for name in ("nbgrader_config.py", "_config.yml"):
        shutil.copy(ROOT / name, course / name)
    src = course / "solutions" / "ex99_new"
    src.mkdir(parents=True)
    nb = json.loads((ROOT / "solutions/ex05_alibi/ex05_alibi.ipynb").read_text())
    nb["cells"] = [
        c for c in nb["cells"] if SETUP_TAG not in c["metadata"].get("tags", [])
    ]
    for c in nb["cells"]:  # ex05's term variants belong to its own checks module
        c["metadata"].pop("course_variants", None)
    (src / "ex99_new.ipynb").write_text(json.dumps(nb, indent=1))
    (result,) = release(Course(course), "ex99_new")
    expected = setup_cell_source(read_settings(ROOT))
    for path in (src / "ex99_new.ipynb", course / result.notebooks[0]):
        first = json.loads(path.read_text())["cells"][0]
        assert _source(first) == expected, path
        assert "nbgrader" not in first["metadata"]
    # the points are those of the graded cells only (the set-up cell adds none)
    original = json.loads((ROOT / "solutions/ex05_alibi/ex05_alibi.ipynb").read_text())
    points = sum(
        c["metadata"].get("nbgrader", {}).get("points", 0)
        for c in original["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade")
    )
    assert result.points == points


def test_a_bad_launch_setting_stops_course_release_with_one_line(
    tmp_path: Path, capsys
) -> None:
    from course_lib.cli import main

    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    shutil.copytree(
        ROOT / "solutions" / "ex05_alibi", tmp_path / "solutions/ex05_alibi"
    )
    config = json.loads(json.dumps(CONFIG))
    config["launch_buttons"]["jupyterhub_url"] = "https://hub.some-class.org"
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    assert main(["release", "--root", str(tmp_path), "ex05"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "student_repository" in err, err
    assert not (tmp_path / "notebooks").exists()  # nothing released
