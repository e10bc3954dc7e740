"""The package split: what a student installs, what the course venv and CI pin, and
the Binder environment.

* the core (``pip install course_lib``) declares Python 3.11-3.13 and a torch range,
  and pulls neither Jupyter Book nor nbgrader; the book, the grading tool and the tests
  are extras;
* ``constraints.txt`` pins the exact versions installed in the venv (the Makefile
  installs every extra under it), and each pin satisfies ``pyproject.toml``;
* ``binder/`` installs the core with the CPU build of torch at the pinned versions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CORE = [Requirement(r) for r in PROJECT["dependencies"]]
EXTRAS = {
    name: [Requirement(r) for r in reqs]
    for name, reqs in PROJECT["optional-dependencies"].items()
}
# Distributions a student's install must not pull, and the modules they would bring.
HEAVY = {"jupyter-book", "nbgrader", "sphinx", "myst-nb", "jupytext", "pytest"}
HEAVY_MODULES = ("jupyter_book", "nbgrader", "sphinx", "myst_nb", "jupytext", "pytest")


def _pins(path: Path) -> dict[str, str]:
    """name -> exact version of each ``name==version`` line of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier  # one exact pin per line
        assert spec.operator == "==", f"{path.name}: {line!r} is not an exact pin"
        pins[canonicalize_name(req.name)] = spec.version
    return pins


CONSTRAINTS = _pins(ROOT / "constraints.txt")
BINDER = _pins(ROOT / "binder" / "requirements.txt")


def _public(version: str) -> Version:
    """2.13.0+cpu -> 2.13.0 (a local build label does not change the release)."""
    return Version(Version(version).public)


def test_core_declares_python_3_11_to_3_13() -> None:
    spec = SpecifierSet(PROJECT["requires-python"])
    assert [v for v in ("3.11", "3.12", "3.13") if v not in spec] == []
    assert "3.10" not in spec and "3.14" not in spec


def test_core_takes_a_torch_range_not_a_pin() -> None:
    (torch,) = [r for r in CORE if r.name == "torch"]
    assert all(s.operator not in ("==", "===") for s in torch.specifier), torch
    # the oldest supported release, a current Colab's, and the pinned one all fit
    for version in ("2.1.0", "2.6.0", CONSTRAINTS["torch"]):
        assert torch.specifier.contains(version), (str(torch), version)
    assert not torch.specifier.contains("2.0.1")


def test_core_pulls_neither_the_book_nor_the_grading_tool() -> None:
    names = {canonicalize_name(r.name) for r in CORE}
    assert not names & HEAVY, names & HEAVY
    # what `course check` needs on a student's machine is in the core
    assert {"nbformat", "nbclient", "jupyter-client", "ipykernel"} <= names


def test_extras_hold_the_book_the_grading_tool_and_the_tests() -> None:
    assert {"book", "grading", "test"} <= set(EXTRAS)
    assert "jupyter-book" in {canonicalize_name(r.name) for r in EXTRAS["book"]}
    assert "nbgrader" in {canonicalize_name(r.name) for r in EXTRAS["grading"]}
    assert "pytest" in {canonicalize_name(r.name) for r in EXTRAS["test"]}
    jb = next(r for r in EXTRAS["book"] if r.name == "jupyter-book")
    assert jb.specifier.contains("1.0.4") and not jb.specifier.contains("2.0.0")


def test_constraints_pin_every_requirement_within_its_range() -> None:
    assert CONSTRAINTS["torch"] == "2.13.0"
    for req in CORE + [r for reqs in EXTRAS.values() for r in reqs]:
        name = canonicalize_name(req.name)
        assert name in CONSTRAINTS, f"constraints.txt does not pin {req.name}"
        assert req.specifier.contains(CONSTRAINTS[name], prereleases=True), (
            f"constraints.txt pins {name}=={CONSTRAINTS[name]}, outside {req}"
        )


def test_constraints_are_the_versions_installed_in_the_venv() -> None:
    """constraints.txt was taken from the venv (pip freeze): each pinned distribution
    is installed at exactly that version."""
    wrong = {}
    for name, version in CONSTRAINTS.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name == "rfc3987-syntax":  # `make setup` uninstalls it (slow start-up)
                continue
            wrong[name] = (version, None)
            continue
        if _public(installed) != _public(version):
            wrong[name] = (version, installed)
    assert not wrong, f"pinned vs installed: {wrong}"


def test_makefile_installs_every_extra_under_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    install = [ln for ln in makefile.splitlines() if "pip install" in ln and "-e" in ln]
    assert len(install) == 1, install
    assert "-c constraints.txt" in install[0]
    extras = install[0].split("'.[", 1)[1].split("]'", 1)[0].split(",")
    assert {"book", "grading", "test"} <= set(extras), extras


def test_binder_installs_the_core_with_cpu_torch_at_the_pinned_versions() -> None:
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    assert Version(BINDER["torch"]).local == "cpu", "binder must get the CPU build"
    for req in CORE:  # postBuild installs the package with --no-deps
        name = canonicalize_name(req.name)
        assert name in BINDER, f"binder/requirements.txt lacks {req.name}"
        assert req.specifier.contains(_public(BINDER[name])), (name, str(req))
    for name, version in BINDER.items():
        assert _public(version) == _public(CONSTRAINTS[name]), (
            f"binder pins {name}=={version}, constraints.txt {CONSTRAINTS[name]}"
        )
    post = ROOT / "binder" / "postBuild"
    assert os.access(post, os.X_OK), "binder/postBuild must be executable"
    assert "pip install --no-cache-dir --no-deps -e ." in post.read_text()
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert runtime.removeprefix("python-") in SpecifierSet(PROJECT["requires-python"])


def _requirement_closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, from this venv's metadata."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_binder_has_every_module_a_chapter_notebook_imports() -> None:
    """A chapter opened on Binder runs: each module its code cells import comes with
    Python, with the course package, or from binder/requirements.txt (or something
    that requires it)."""
    import ast
    import json

    provided = _requirement_closure(set(BINDER) | {req.name for req in CORE})
    owners = metadata.packages_distributions()
    missing = []
    for path in sorted((ROOT / "book" / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for cell in cells:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(
                ("%", "!"))]
            for node in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    modules = [node.module or ""]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top == "course_lib":
                        continue
                    dists = {canonicalize_name(d) for d in owners.get(top, [top])}
                    if not dists & provided:
                        missing.append(f"{path.name}: {module} ({', '.join(dists)})")
    assert not missing, "binder/requirements.txt lacks: " + "; ".join(missing)


@pytest.mark.slow
def test_importing_the_core_loads_no_book_grading_or_test_module() -> None:
    """A fresh interpreter imports the student-facing modules (algorithms, figures,
    public checks, `course check`) and loads nothing of the extras."""
    script = textwrap.dedent(f"""
        import sys
        import course_lib, course_lib.viz, course_lib.checks
        import course_lib.grading.check
        heavy = {HEAVY_MODULES!r}
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
    """)
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout


@pytest.mark.slow
def test_course_cli_runs_in_the_full_venv() -> None:
    course = Path(sys.executable).with_name("course")
    run = subprocess.run(
        [str(course), "--help"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    for command in ("check", "release", "autograde"):
        assert command in run.stdout, run.stdout


@pytest.mark.slow
def test_the_open_wheel_ships_every_data_file_of_the_package(tmp_path: Path) -> None:
    """What `pip install git+https://github.com/ORG/REPO` (the Colab set-up cell) gets:
    a wheel built from the tracked files must hold every tracked non-Python file under
    ``course_lib/`` (the stored public check values, the results the chapters read).
    Setuptools ships only the data files that ``package-data`` names."""
    import zipfile

    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    for rel in filter(None, tracked):
        if (ROOT / rel).is_file():
            (tmp_path / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "src" / rel).write_bytes((ROOT / rel).read_bytes())
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(tmp_path / "dist"), str(tmp_path / "src")],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("course_lib-*.whl")
    members = set(zipfile.ZipFile(wheel).namelist())
    data = {
        rel for rel in tracked
        if rel.startswith("course_lib/") and not rel.endswith(".py")
    }
    assert {"course_lib/checks/public_expected.pt",
            "course_lib/data/lm_extrapolation.json"} <= data
    assert data - members == set(), "add these to package-data in pyproject.toml"
