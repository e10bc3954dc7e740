"""Stored expected values for the public checks, so that ``check_<name>`` works in the
student edition, where the exercise targets' reference code is absent.

In the full library every public check computes its expected values from the
references in :mod:`course_lib`. The student edition
(:func:`course_lib.grading.editions.library.write_student_edition`) replaces each such
reference inside the checks by :func:`reference`, an oracle that answers only the calls
the public checks make, from ``public_expected.pt`` next to this module. That file is
written by :func:`generate` (``python -m course_lib.checks._stored``) from the
references, running every public check on a correct solution and storing each
reference call's arguments and result. A test regenerates it and compares.

The file holds the public cases only: hidden graders never run during generation.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import json
import pkgutil
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

__all__ = ["DATA", "generate", "local_references", "reference", "target_imports"]

DATA = Path(__file__).with_name("public_expected.pt")

# Arguments of a stored call are matched, not compared bit for bit: seeded random
# inputs pass through vectorised transcendental kernels (randn's Box-Muller, exp)
# whose last bits may differ between CPUs (AVX2 vs AVX-512 paths, a few ulps). A
# relative 1e-5 is ~80 float32 ulps, far above such noise and far below the O(1)
# differences between the public cases (distinct seeds and sizes).
_ARG_RTOL = 1e-5
_ARG_ATOL = 1e-6

_entries: dict[str, list[dict[str, Any]]] | None = None

# A checks module's own reference computations: its expected values (ex10 has no
# library reference) and its known mistakes (built from the right answer).
_LOCAL = re.compile(r"_\w*(reference|expected|variant|mistakes)\w*")


def local_references(source: str) -> list[str]:
    """The names of a checks module's top-level functions that compute expected
    values, the answer with switchable mistakes, or known mistakes (private, with
    ``reference``, ``expected``, ``variant`` or ``mistakes`` in the name):
    stored, like the library references, in the student edition. Their key in the
    stored file is ``"<module>:<name>"``."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and _LOCAL.fullmatch(node.name)
    ]


def _to_plain(value: Any) -> Any:
    """A known mistake as plain data, ``{"__mistake__": [answer, explanation,
    slug, hint]}`` (the stored file holds no class of ours)."""
    from ._core import Mistake

    if isinstance(value, Mistake):
        return {
            "__mistake__": [
                _to_plain(value.answer), value.explanation, value.slug, value.hint
            ]
        }
    if isinstance(value, tuple):
        return tuple(_to_plain(v) for v in value)
    if isinstance(value, list):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def _from_plain(value: Any) -> Any:
    from ._core import Mistake

    if isinstance(value, dict):
        if list(value) == ["__mistake__"]:
            answer, explanation, slug, *hint = value["__mistake__"]
            return Mistake(_from_plain(answer), explanation, slug, *hint)
        return {k: _from_plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_from_plain(v) for v in value)
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    return value


def target_imports(module: types.ModuleType | str) -> dict[str, tuple[str, str]]:
    """``alias -> (library module, function)`` for every top-level
    ``from course_lib.<module> import <function> as <alias>`` of a checks module:
    the references its graders compare with (the exercise targets)."""
    if isinstance(module, str):
        source = module
    else:
        source = inspect.getsource(module)
    out: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "course_lib."
        ):
            lib = node.module
            if lib.startswith("course_lib.checks") or lib.startswith(
                "course_lib.experiments"
            ):
                continue
            for alias in node.names:
                out[alias.asname or alias.name] = (lib, alias.name)
    return out


def _load() -> dict[str, list[dict[str, Any]]]:
    global _entries
    if _entries is None:
        if not DATA.exists():
            raise FileNotFoundError(
                f"the public checks' stored expected values are missing ({DATA}); "
                "reinstall the course package"
            )
        _entries = torch.load(DATA, weights_only=True)
    return _entries


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, torch.Tensor):
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(
                torch.allclose(a, b, rtol=_ARG_RTOL, atol=_ARG_ATOL, equal_nan=True)
            )
        return bool(torch.equal(a, b))
    if isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(b, dict):
        return (
            isinstance(a, dict)
            and a.keys() == b.keys()
            and all(_same(a[k], b[k]) for k in b)
        )
    if isinstance(b, float) and isinstance(a, (int, float)):
        return abs(a - b) <= _ARG_ATOL + _ARG_RTOL * abs(b)
    return type(a) is type(b) and a == b


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def reference(name: str) -> Callable[..., Any]:
    """The stored answers of the reference ``name`` (a library function's name) for
    the calls the public checks make; any other call is an error that says so."""

    def stored(*args: Any, **kwargs: Any) -> Any:
        for entry in _load().get(name, []):
            if _same(list(args), entry["args"]) and _same(kwargs, entry["kwargs"]):
                return _from_plain(_copy(entry["result"]))
        raise RuntimeError(
            f"{name} is an exercise: this student edition of course_lib stores the "
            "expected values of the public checks only, and this call is not one of "
            "them"
        )

    stored.__name__ = f"stored_{name.rsplit(':', 1)[-1]}"
    stored.__qualname__ = stored.__name__
    return stored


def _checks_modules() -> list[types.ModuleType]:
    import course_lib.checks as package

    return [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
        if re.fullmatch(r"ex\d+_\w+", info.name)  # graders, not sections
    ]


def _solution_namespace(
    root: Path, assignment: str, variant: str = "default"
) -> dict[str, Any]:
    """The instructor's solution of ``assignment``: its answer cells and the cells
    that import or define (only those statements of theirs), executed; test cells
    and the lab's runs are not. For a ``variant``, a cell with that variant's text
    (cell metadata ``course_variants``) runs that text."""
    path = root / "solutions" / assignment / f"{assignment}.ipynb"
    notebook = json.loads(path.read_text())
    namespace: dict[str, Any] = {"__name__": f"solution_{assignment}"}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = "".join(cell["source"])
        texts = cell.get("metadata", {}).get("course_variants") or {}
        source = "".join(texts.get(variant, source))
        if meta.get("grade"):
            continue
        if meta.get("solution"):
            code = compile(source, f"{path.name}:cell", "exec")
        else:
            # Other cells: only their imports and definitions run. The set-up cell's
            # install and the lab's training runs are statements of another kind.
            tree = ast.parse(source)
            tree.body = [
                node for node in tree.body
                if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                     ast.ClassDef))
            ]
            code = compile(tree, f"{path.name}:cell", "exec")
        exec(code, namespace)  # noqa: S102
    return namespace


@contextlib.contextmanager
def _recording(
    module: types.ModuleType, log: dict[str, list[dict[str, Any]]]
) -> Iterator[None]:
    saved = {}
    short = module.__name__.rsplit(".", 1)[1]
    wrapped = {alias: name for alias, (_lib, name) in target_imports(module).items()}
    wrapped |= {
        name: f"{short}:{name}" for name in local_references(inspect.getsource(module))
    }
    for alias, name in wrapped.items():
        ref = getattr(module, alias)
        saved[alias] = ref

        def recorder(*args, __ref=ref, __name=name, **kwargs):
            result = __ref(*args, **kwargs)
            entries = log.setdefault(__name, [])
            entry = {"args": _copy(list(args)), "kwargs": _copy(kwargs),
                     "result": _to_plain(_copy(result))}
            if not any(_same(entry["args"], e["args"])
                       and _same(entry["kwargs"], e["kwargs"]) for e in entries):
                entries.append(entry)
            return result

        setattr(module, alias, recorder)
    try:
        yield
    finally:
        for alias, ref in saved.items():
            setattr(module, alias, ref)


def generate(root: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every reference call of every public check, run on a correct solution:
    ``{function name: [{"args", "kwargs", "result"}, ...]}``. The solution is the
    instructor's solution notebook (``solutions/<assignment>/``)."""
    import course_lib

    root = root or Path(course_lib.__file__).resolve().parent.parent
    log: dict[str, list[dict[str, Any]]] = {}
    modules = _checks_modules()
    # every module's references are recorded during every check: a check may use
    # another exercise's helpers (ex09 judges Transformer-XL scores with ex07's)
    with contextlib.ExitStack() as stack:
        for module in modules:
            stack.enter_context(_recording(module, log))
        for module in modules:
            _run_public_checks(module, root)
    return log


def _run_public_checks(module: types.ModuleType, root: Path) -> None:
    """Every public check of ``module`` on the solution, and, for each variant the
    module declares (``VARIANTS``), the checks that take a ``variant`` on that
    variant's solution."""
    from ._core import TERM_PARAMS

    assignment = module.__name__.rsplit(".", 1)[1]
    for variant in ["default", *sorted(getattr(module, "VARIANTS", {}) or {})]:
        namespace = _solution_namespace(root, assignment, variant)
        for check_name in sorted(n for n in module.__all__ if n.startswith("check_")):
            check = getattr(module, check_name)
            every = list(inspect.signature(check).parameters)
            if variant != "default" and "variant" not in every:
                continue
            params = [p for p in every if p not in TERM_PARAMS]
            target = check_name.removeprefix("check_")
            args = [namespace[target if len(params) == 1 else p] for p in params]
            if variant != "default":
                args.append(variant)
            with contextlib.redirect_stdout(sys.stderr):
                check(*args)


def _write(path: Path = DATA) -> None:
    torch.save(generate(), path)


if __name__ == "__main__":
    _write()
    print(f"wrote {DATA}")
