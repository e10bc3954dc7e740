"""``import course_lib`` is lazy (PEP 562): the library's modules, and so torch, are
imported the first time one of their names is used. The exported names stay what
the eager ``from .module import *`` gave, and the ``course`` command starts without
torch for everything but the lab."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import course_lib

ROOT = Path(__file__).resolve().parent.parent
COURSE = Path(sys.executable).with_name("course")
# the library modules the package exported with `from .module import *`, in order
MODULES = (
    "attention",
    "sinusoidal",
    "rotation",
    "rope",
    "rope_scaling",
    "alibi",
    "relative",
    "transformer_xl",
    "da",
    "conventions",
)


def _runtime_all(module: str) -> list[str]:
    return list(importlib.import_module(f"course_lib.{module}").__all__)


def test_lazy_table_is_every_library_modules_all():
    """The names read from the sources are those the imported modules export."""
    assert course_lib._MODULES == MODULES
    assert tuple(course_lib._exports()) == MODULES
    for module in MODULES:
        assert list(course_lib._exports()[module]) == _runtime_all(module), module


def test_all_is_the_modules_all_in_the_eager_order():
    expected = [name for module in MODULES for name in _runtime_all(module)]
    assert course_lib.__all__ == expected
    assert len(set(expected)) == len(expected), "a name exported by two modules"


def test_star_import_gives_the_same_names_and_objects():
    namespace: dict = {}
    exec("from course_lib import *", namespace)
    names = set(namespace) - {"__builtins__"}
    assert names == set(course_lib.__all__)
    for module in MODULES:
        loaded = importlib.import_module(f"course_lib.{module}")
        for name in loaded.__all__:
            assert namespace[name] is getattr(loaded, name), name


def test_attribute_is_the_modules_object():
    assert course_lib.alibi_bias is course_lib.alibi.alibi_bias
    assert course_lib.RotaryEmbedding is course_lib.rope.RotaryEmbedding
    scaling = course_lib.rope_scaling
    assert course_lib.ROPE_SCALING_METHODS is scaling.ROPE_SCALING_METHODS


def test_unknown_attribute_raises_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no_such_function"):
        course_lib.no_such_function  # noqa: B018
    assert not hasattr(course_lib, "no_such_function")
    with pytest.raises(ImportError, match="no_such_function"):
        exec("from course_lib import no_such_function", {})


def test_dir_lists_the_exports_and_modules():
    listed = dir(course_lib)
    assert set(course_lib.__all__) <= set(listed)
    assert set(MODULES) <= set(listed)
    assert "__version__" in listed


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )


def test_import_is_lazy_in_a_fresh_process():
    proc = _fresh(
        "import sys, course_lib\n"
        "assert 'torch' not in sys.modules\n"
        "assert 'course_lib.alibi' not in sys.modules\n"
        "course_lib.alibi_slopes\n"
        "assert 'course_lib.alibi' in sys.modules and 'torch' in sys.modules\n"
        "assert 'course_lib.da' not in sys.modules\n"
        "assert 'alibi_bias' in vars(course_lib)  # the module's names, bound once\n"
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["check", "--help"]],
    ids=["version", "help", "check-help"],
)
def test_course_command_does_not_import_torch(argv):
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['course', *{argv!r}]\n"
        "try:\n"
        "    from course_lib.cli import main\n"
        "    code = main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "assert code in (0, None), code\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO TORCH')\n"
    )
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "NO TORCH", proc.stdout


def test_cli_module_and_check_do_not_import_torch():
    proc = _fresh(
        "import sys\n"
        "import course_lib.cli\n"
        "import course_lib.grading.check, course_lib.grading.notebooks.repair\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not COURSE.exists(), reason="the course script is not installed")
def test_course_version_script():
    proc = subprocess.run(
        [str(COURSE), "--version"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("course ")


def test_the_graders_see_every_library_module_at_once():
    """The reference trap collects the library's functions when a grader runs: with
    a lazy package, a module no grader imports (course_lib.conventions) would be
    missing from it, private helpers and all, until something loaded it."""
    proc = _fresh(
        "import sys\n"
        "import course_lib.checks.ex05_alibi\n"
        "from course_lib.checks._core import _course_modules, _public_callables\n"
        "import course_lib\n"
        "missing = [m for m in course_lib._MODULES\n"
        "           if f'course_lib.{m}' not in sys.modules]\n"
        "assert not missing, missing\n"
        "names = set(_public_callables(*_course_modules()).values())\n"
        "assert 'course_lib.conventions._permute_head_rows' in names, sorted(names)\n"
    )
    assert proc.returncode == 0, proc.stderr
