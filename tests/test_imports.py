"""The import structure of ``course_lib``: no module imports itself back through
others (an import circle), and no module takes a private name (``_name``) from
another module. A private name is a module's own business: what two modules share
is public in one of them. Imports inside functions count as much as those at the
top, since they run all the same. Tests are not walked: they may reach in.
The grading tool's functions are short, and each of its packages names in its
docstring every module it holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "course_lib"


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (packages by their
    ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package_of(module: str) -> str:
    """The package a module's relative imports start from."""
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """``(imported module, name taken from it or None, line)`` for every import of a
    ``course_lib`` module in ``module``; ``from pkg import sub`` counts as an import
    of the submodule ``pkg.sub``."""
    tree = ast.parse(MODULES[module].read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = _package_of(module).split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                source = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in MODULES:
                    found.append((sub, None, node.lineno))
                else:
                    found.append((source, alias.name, node.lineno))
    return [f for f in found if f[0] in MODULES and f[0] != module]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    graph = {m: set() for m in MODULES}
    for module in MODULES:
        for source, _name, _line in _imports(module):
            # importing a package's submodule runs the package's __init__ too, but
            # course_lib's __init__ files import nothing of their own (lazy names):
            # the edge that matters is the one to the module named
            graph[module].add(source)
    return graph


def test_the_walk_sees_the_imports_it_must() -> None:
    """The walker itself: relative, absolute and in-function imports all count."""
    graph = _graph()
    assert "course_lib.grading.grade" in graph["course_lib.grading.cluster"]
    assert "course_lib.grading.kernels.start" in graph["course_lib.grading.grade"]
    assert "course_lib.grading.pool" in graph["course_lib.grading.autograde"]  # lazy
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]
    ]


def test_no_import_circle() -> None:
    cycles = _cycles(_graph())
    listed = "\n".join(" <-> ".join(c) for c in cycles)
    assert not cycles, f"modules importing each other, maybe through others:\n{listed}"


def test_no_private_name_taken_from_another_module() -> None:
    bad = []
    for module in MODULES:
        for source, name, line in _imports(module):
            if name is None or not name.startswith("_") or name.startswith("__"):
                continue
            bad.append(
                f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: "
                f"from {source} import {name}"
            )
    assert not bad, "private names imported from another module:\n" + "\n".join(bad)


# --- short functions in the grading tool -------------------------------------------

MAX_LINES = 80


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring aside."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        if isinstance(first.value.value, str):
            lines -= first.end_lineno - first.lineno + 1
    return lines


def test_no_long_function_in_the_grading_tool() -> None:
    """A long sequence of steps reads as named steps: no function of
    ``course_lib/grading`` or ``cli.py`` is over 80 lines (docstrings aside)."""
    files = [*(PACKAGE / "grading").rglob("*.py"), PACKAGE / "cli.py"]
    long = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: "
        f"{_length(node)} lines"
        for path in sorted(files)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and _length(node) > MAX_LINES
    ]
    assert not long, f"functions over {MAX_LINES} lines:\n" + "\n".join(long)


# --- the grading tool's layout: each package says what it holds ---------------------


def test_each_grading_package_names_every_module_it_holds() -> None:
    """The folder listing is the map (issue 20): each package of the grading tool
    says in its docstring what each of its modules owns, so its docstring names
    every module in it (``:mod:`.name```, or ``name.py`` for the scripts that run
    outside the package)."""
    grading = PACKAGE / "grading"
    missing = []
    for init in sorted(grading.rglob("__init__.py")):
        if "__pycache__" in init.parts:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for path in sorted(init.parent.glob("*.py")):
            name = path.stem
            if name == "__init__":
                continue
            if f":mod:`.{name}`" not in doc and f"``{path.name}``" not in doc:
                missing.append(f"{init.relative_to(PACKAGE.parent)}: {path.name}")
        for sub in sorted(
            p for p in init.parent.iterdir() if (p / "__init__.py").is_file()
        ):
            if f"grading.{sub.name}`" not in doc and f":mod:`.{sub.name}`" not in doc:
                missing.append(f"{init.relative_to(PACKAGE.parent)}: {sub.name}/")
    assert not missing, (
        "modules their package's docstring does not name:\n" + "\n".join(missing)
    )
