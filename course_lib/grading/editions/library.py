"""The student edition of ``course_lib``: the package a credit-bearing class installs
(``course publish`` puts its wheel in ``OUT/dist/``).

It is written from the full package by source transformation, so there is one source:

* every *exercise target* (a library function that a grader of ``course_lib.checks``
  compares with, such as :func:`course_lib.alibi.alibi_bias`) keeps its signature and
  the first paragraph of its docstring, and its body becomes a stub that raises
  "alibi_bias is exercise 5: implement it in your notebook";
* the public checks take their expected values from the stored file
  ``checks/public_expected.pt`` (:mod:`course_lib.checks._stored`) instead of the
  references;
* every hidden grader ``grade_<name>`` becomes a stub saying that it runs at grading;
  its inputs and the private helpers only it used are gone;
* of the instructor tool (``grading/``) only what ``course check`` needs is kept:
  :mod:`~course_lib.grading.check`, :mod:`~course_lib.grading.kernels.start`,
  :mod:`~course_lib.grading.notebooks.repair`, :mod:`~course_lib.grading.course`,
  :mod:`~course_lib.grading.errors` and their packages' ``__init__``. Release,
  autograde, feedback, reports, the sandbox and this module are left out.

Private module-level helpers that nothing refers to any more after these changes are
removed, so a stubbed target leaves no private copy of its work behind. Library code
built on a target (``RotaryEmbedding`` on ``apply_rope``, the lab's models, the
figures of :mod:`course_lib.viz`) stays, and raises the target's stub error when used.

:func:`build_student_wheel` builds the wheel offline from that tree.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "STUDENT_GRADING_MODULES",
    "build_student_wheel",
    "exercise_targets",
    "library_fingerprint",
    "write_student_edition",
]

PACKAGE = Path(__file__).resolve().parents[2]
# The part of grading/ that `course check` needs on a student's machine (paths
# inside grading/).
STUDENT_GRADING_MODULES = (
    "__init__.py",
    "check.py",
    "course.py",
    "errors.py",
    "kernels/__init__.py",
    "kernels/_lifetime.py",
    "kernels/_rlimit_exec.py",
    "kernels/guard.py",
    "kernels/start.py",
    "notebooks/__init__.py",
    "notebooks/repair.py",
)
# What a sandboxed grading kernel runs from grading/ besides those.
GRADING_KERNEL_MODULES = ("kernels/_sandbox_exec.py",)
_DATA_FILES = (
    "checks/public_expected.pt",
    "data/lab_results.json",
    "data/lm_extrapolation.json",
)
_EXERCISE = re.compile(r"ex(\d+)_")


def _checks_files(package: Path) -> list[Path]:
    return sorted((package / "checks").glob("ex[0-9]*_*.py"))


def _target_imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """alias -> (library module, function) of a checks module's top-level imports of
    references (the same rule as :func:`course_lib.checks._stored.target_imports`)."""
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "course_lib."
        ):
            if node.module.startswith(("course_lib.checks", "course_lib.experiments")):
                continue
            for alias in node.names:
                out[alias.asname or alias.name] = (node.module, alias.name)
    return out


def exercise_targets(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """``{library module: {function: exercise number}}``: the functions the graders
    compare with. A function several exercises use is named after the exercise that
    asks for it (``check_<name>``), else the first one that uses it."""
    found: dict[str, dict[str, int]] = {}
    own: dict[str, int] = {}
    for path in _checks_files(package):
        number = int(_EXERCISE.match(path.name).group(1))
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("check_"):
                own.setdefault(node.name.removeprefix("check_"), number)
        for module, name in _target_imports(tree).values():
            found.setdefault(module, {}).setdefault(name, number)
    return {
        module: {name: own.get(name, number) for name, number in names.items()}
        for module, names in found.items()
    }


@functools.lru_cache(maxsize=1)
def library_fingerprint() -> str:
    """``course_lib``'s version and a hash of the files of the installed package
    (compiled and hidden files left out): two machines grade alike only when these
    agree.

    >>> library_fingerprint().split()[0]
    'course_lib'
    """
    import course_lib

    base = Path(course_lib.__file__).resolve().parent
    digest = hashlib.sha256()
    for file in sorted(base.rglob("*")):
        rel = file.relative_to(base)
        if (
            not file.is_file()
            or file.suffix == ".pyc"
            or any(p == "__pycache__" or p.startswith(".") for p in rel.parts)
        ):
            continue
        digest.update(str(rel).encode())
        digest.update(b"\0")
        digest.update(file.read_bytes())
        digest.update(b"\0")
    return f"course_lib {_installed_version()} (files {digest.hexdigest()[:16]})"


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("course_lib")
    except PackageNotFoundError:
        return "unknown"


# --- source surgery -------------------------------------------------------------------


def _replace_lines(source: str, edits: list[tuple[int, int, str]]) -> str:
    """Replace 1-based inclusive line ranges ``(first, last, text)``, which do not
    overlap."""
    lines = source.splitlines(keepends=True)
    for first, last, text in sorted(edits, reverse=True):
        lines[first - 1 : last] = [text] if text else []
    return "".join(lines)


def _first_paragraph(node: ast.FunctionDef) -> str | None:
    doc = ast.get_docstring(node)
    if not doc:
        return None
    return doc.split("\n\n")[0].strip()


def _stub_body(node: ast.FunctionDef, message: str, indent: str, keep_doc: bool) -> str:
    doc = _first_paragraph(node) if keep_doc else None
    out = ""
    if doc:
        doc = doc.replace('"""', "'''").replace("\\", "\\\\")
        out += f'{indent}"""{doc}"""\n'
    out += f"{indent}raise NotImplementedError({message!r})\n"
    return out


def _body_span(node: ast.FunctionDef) -> tuple[int, int, str]:
    first = node.body[0]
    line = first.lineno
    indent = " " * first.col_offset
    return line, node.end_lineno, indent


def _stub_functions(source: str, stubs: dict[str, str], *, keep_doc: bool) -> str:
    """Replace the bodies of the top-level functions named in ``stubs`` (name ->
    message) by ``raise NotImplementedError(message)``, after the first paragraph of
    the docstring if ``keep_doc``; a class named there gets that body in every
    method."""
    tree = ast.parse(source)
    edits = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in stubs:
            methods = (
                [node]
                if isinstance(node, ast.FunctionDef)
                else [m for m in node.body if isinstance(m, ast.FunctionDef)]
            )
            for method in methods:
                first, last, indent = _body_span(method)
                body = _stub_body(method, stubs[node.name], indent, keep_doc)
                edits.append((first, last, body))
    missing = set(stubs) - {
        n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)
    }
    if missing:
        raise RuntimeError(f"cannot stub {sorted(missing)}: no such top-level function")
    return _replace_lines(source, edits)


def _code_names(node: ast.AST) -> set[str]:
    """The names a definition's code uses (not its strings)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _dependents(source: str, targets: dict[str, int]) -> dict[str, tuple[str, int]]:
    """The other top-level functions and classes of a module that use an exercise
    target, directly or through each other: ``name -> (target, exercise)``. Their
    bodies go too, so that no private helper of the target's work survives."""
    defs = {
        n.name: n
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef | ast.ClassDef)
    }
    uses = {name: _code_names(node) - {name} for name, node in defs.items()}
    reason: dict[str, tuple[str, int]] = {t: (t, n) for t, n in targets.items()}
    changed = True
    while changed:
        changed = False
        for name, used in uses.items():
            hit = sorted(used & reason.keys())
            if name not in reason and hit:
                reason[name] = reason[hit[0]]
                changed = True
    return {k: v for k, v in reason.items() if k not in targets}


def _oracle_imports(source: str, short: str) -> str:
    """A checks module's references become stored-value oracles: its imports of
    library references, and its own expected-value and mistake functions
    (:func:`course_lib.checks._stored.local_references`)."""
    from course_lib.checks._stored import local_references

    tree = ast.parse(source)
    local = set(local_references(source))
    edits = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "course_lib."
        ):
            if node.module.startswith(("course_lib.checks", "course_lib.experiments")):
                continue
            text = "".join(
                f"{a.asname or a.name} = _stored.reference({a.name!r})\n"
                for a in node.names
            )
            edits.append((node.lineno, node.end_lineno, text))
        elif isinstance(node, ast.FunctionDef) and node.name in local:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            key = f"{short}:{node.name}"
            edits.append(
                (first, node.end_lineno, f"{node.name} = _stored.reference({key!r})\n")
            )
    if not edits:
        return source
    # the oracle module is imported before every other import (after any
    # ``from __future__``): the replaced reference imports come before the rest
    first_import = next(
        (
            n
            for n in tree.body
            if isinstance(n, ast.Import)
            or (isinstance(n, ast.ImportFrom) and n.module != "__future__")
        ),
        None,
    )
    if first_import is None:
        raise RuntimeError("a checks module without imports: cannot add _stored")
    edits.append(
        (first_import.lineno, first_import.lineno - 1, "from . import _stored\n")
    )
    return _replace_lines(source, edits)


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        names = []
        for target in node.targets:
            if not isinstance(target, ast.Name):
                return []
            names.append(target.id)
        return names
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _used_names(tree: ast.AST, skip: ast.AST | None = None) -> set[str]:
    used: set[str] = set()
    for node in ast.walk(tree):
        if node is skip:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value))
    return used


def _imported_names(tree: ast.AST) -> set[str]:
    """The names a module can take from another one: ``from m import name`` and
    ``module.name``."""
    out = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out |= {a.name for a in node.names}
    return out


def _prune_private(files: dict[Path, str]) -> dict[Path, str]:
    """Remove private top-level definitions (``_name``) that nothing refers to any
    more: no other statement of their module, and no other module importing them or
    reading them as an attribute. Repeated until none is left (one removal can
    orphan another). Each round parses again only the modules the round before
    changed (parsing every module each round was most of the cost of writing the
    student edition)."""
    parsed: dict[Path, tuple[str, list, set[str]]] = {}

    def analysed(path: Path) -> tuple[str, list, set[str]]:
        """``path``'s text, its top-level statements each with the names it uses,
        and the names it imports from other modules, for its text as it is now."""
        text = files[path]
        if path not in parsed or parsed[path][0] != text:
            tree = ast.parse(text)
            uses = [(stmt, _used_names(stmt)) for stmt in tree.body]
            parsed[path] = (text, uses, _imported_names(tree))
        return parsed[path]

    while True:
        modules = {path: analysed(path) for path in files}
        removed = False
        for path, (_text, uses, _imports) in modules.items():
            elsewhere: set[str] = set()
            for other, (_, _, names) in modules.items():
                if other != path:
                    elsewhere |= names
            count: Counter[str] = Counter()
            for _stmt, used in uses:
                count.update(used)
            edits = []
            for node, used in uses:
                names = _defined_names(node)
                if not names or not all(
                    n.startswith("_") and not n.startswith("__") for n in names
                ):
                    continue
                if all(
                    count[n] - (n in used) == 0 and n not in elsewhere for n in names
                ):
                    first = min(
                        [node.lineno]
                        + [d.lineno for d in getattr(node, "decorator_list", [])]
                    )
                    edits.append((first, node.end_lineno, ""))
            if edits:
                files[path] = _replace_lines(files[path], edits)
                removed = True
        if not removed:
            return files


def _hidden_stub(name: str) -> str:
    return (
        f"{name} is a hidden test: it runs only when your notebook is graded "
        "(the public check_ functions run here)"
    )


def _student_files(package: Path) -> Iterable[Path]:
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or path.is_dir():
            continue
        if (
            rel.parts[0] == "grading"
            and Path(*rel.parts[1:]).as_posix() not in STUDENT_GRADING_MODULES
        ):
            continue
        if path.suffix == ".py" or rel.as_posix() in _DATA_FILES:
            yield path


# Library functions that compute an exercise target another way, without calling it
# (so the dependency rule cannot find them): ``module -> {function: target}``.
# tests/test_edition.py checks that each one really equals its target.
ALTERNATES: dict[str, dict[str, str]] = {
    "course_lib.transformer_xl": {
        "rel_attention_scores_gather": "rel_attention_scores"
    },
    "course_lib.conventions": {
        "interleaved_to_concat_permutation": "interleaved_to_half_permutation"
    },
}


def _stub_library_module(
    text: str, module: str, targets: dict[str, dict[str, int]]
) -> str:
    """Stub a library module's exercise targets, the alternates of any target, and
    everything of the module built on either."""
    numbers = {n: k for names in targets.values() for n, k in names.items()}
    own = dict(targets.get(module, {}))
    stubs = {
        name: f"{name} is exercise {number}: implement it in your notebook"
        for name, number in own.items()
    }
    for name, target in ALTERNATES.get(module, {}).items():
        stubs[name] = (
            f"{name} computes {target}, which is exercise {numbers[target]}: "
            "implement it in your notebook"
        )
        own[name] = numbers[target]
    for name, (target, number) in _dependents(text, own).items():
        stubs[name] = (
            f"{name} uses {target}, which is exercise {number}: implement it in "
            "your notebook"
        )
    return _stub_functions(text, stubs, keep_doc=True)


# Where the student edition has :mod:`.chapter_runtime` (``course_lib.chapter_runtime``)
# and the stored outputs of the chapters' cells (course publish), inside course_lib/.
RUNTIME_MODULE = "chapter_runtime.py"
CHAPTER_OUTPUTS = "data/chapter_outputs.json"


def write_student_edition(
    dest: Path, package: Path = PACKAGE, *, chapter_outputs: dict | None = None
) -> Path:
    """Write the student edition of ``package`` to ``dest/course_lib`` (``dest`` must
    not hold one already) and return that folder. ``chapter_outputs``: the stored
    outputs of the chapter notebooks' cells (``{chapter: {cell key: outputs}}``, from
    the book's build) that :mod:`.chapter_runtime` shows where a cell needs an
    unsolved exercise."""
    out = Path(dest) / "course_lib"
    if out.exists():
        raise FileExistsError(f"{out} exists already: choose an empty folder")
    stored = package / "checks" / "public_expected.pt"
    if not stored.exists():
        raise FileNotFoundError(
            f"{stored} is missing: run `python -m course_lib.checks._stored` first"
        )
    targets = exercise_targets(package)
    sources: dict[Path, str] = {}
    for path in _student_files(package):
        rel = path.relative_to(package)
        if path.suffix != ".py":
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / rel)
            continue
        text = path.read_text()
        module = "course_lib." + ".".join(rel.with_suffix("").parts)
        if module in targets or module in ALTERNATES:
            text = _stub_library_module(text, module, targets)
        if rel.parts[0] == "checks" and _EXERCISE.match(rel.name):
            text = _oracle_imports(text, rel.stem)
            hidden = [
                n.name
                for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name.startswith("grade_")
            ]
            # no docstring: a hidden grader's describes its hidden cases
            text = _stub_functions(
                text, {n: _hidden_stub(n) for n in hidden}, keep_doc=False
            )
        sources[rel] = text
    sources = _prune_private(sources)
    # what a class-edition chapter notebook runs in its set-up (launch.py)
    runtime = package / "grading" / "editions" / "chapter_runtime.py"
    sources[Path(RUNTIME_MODULE)] = runtime.read_text()
    for rel, text in sources.items():
        compile(text, str(rel), "exec")  # a transformation bug fails here, not later
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    if chapter_outputs is not None:
        path = out / CHAPTER_OUTPUTS
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(chapter_outputs, sort_keys=True), encoding="utf-8")
    return out


def _pyproject(package: Path) -> str:
    """The student wheel's metadata: the main project's core (no extras, no
    optional tools), under the same name and version."""
    main = tomllib.loads((package.parent / "pyproject.toml").read_text())
    project = main["project"]

    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(f'"{i}"' for i in items) + "]"

    scripts = "".join(
        f'{name} = "{target}"\n' for name, target in project.get("scripts", {}).items()
    )
    return (
        "[build-system]\n"
        'requires = ["setuptools>=68", "wheel"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{project["name"]}"\n'
        f'version = "{project["version"]}"\n'
        f'description = "{project["description"]} (student edition)"\n'
        f'requires-python = "{project["requires-python"]}"\n'
        f"dependencies = {toml_list(project['dependencies'])}\n\n"
        "[project.scripts]\n"
        f"{scripts}\n"
        "[tool.setuptools.packages.find]\n"
        'include = ["course_lib*"]\n\n'
        "[tool.setuptools.package-data]\n"
        # every data file the edition copies (_DATA_FILES), paths from course_lib/
        f'"course_lib" = {toml_list([*_DATA_FILES, CHAPTER_OUTPUTS])}\n'
    )


def build_student_wheel(dest_dir: Path, *, chapter_outputs: dict | None = None) -> Path:
    """Build the student wheel (offline, no build isolation) into ``dest_dir`` and
    return the ``.whl`` path; ``chapter_outputs``: see :func:`write_student_edition`."""
    dest_dir = Path(dest_dir).resolve()  # pip runs in another folder
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="course-student-") as tmp:
        root = Path(tmp) / "src"
        write_student_edition(root, chapter_outputs=chapter_outputs)
        (root / "pyproject.toml").write_text(_pyproject(PACKAGE))
        before = set(dest_dir.glob("*.whl"))
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--quiet",
                "--wheel-dir",
                str(dest_dir),
                str(root),
            ],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        if run.returncode != 0:
            raise RuntimeError(
                "building the student wheel failed: "
                + (run.stderr.strip().splitlines() or ["(no message)"])[-1]
            )
    built = (
        sorted(set(dest_dir.glob("course_lib-*.whl")) - before)
        or sorted(dest_dir.glob("course_lib-*.whl"), key=lambda p: p.stat().st_mtime)[
            -1:
        ]
    )
    if not built:
        raise RuntimeError(f"pip reported success but left no wheel in {dest_dir}")
    return built[-1]


# --- the grading edition: what a sandboxed grading kernel sees ----------------------

# The reference each hidden grader is planned with, where its name does not say it:
# ``grader -> name of a function of its checks module`` (or ``"module:name"``;
# ``None``: the grader calls no student function, only judges the values it is
# given). Any other ``grade_<name>`` is planned with its module's ``_ref_<name>``.
PLAN_REFERENCES: dict[str, str | None] = {
    "grade_da_attention": "_ref_attention",
    "grade_t5_relative_position_bucket": "_ref_bucket",
    "grade_rel_attention_scores": "_ref_scores",
    "grade_rel_shift": "_ref_shift",
    "grade_da_rescale": "_ref_rescale",
    "grade_log_distance_bias": "_reference_bias",
    "grade_retained_skill": "_reference_retained",
    "grade_hand_computation": None,
    # ex03 asks for the [sin | cos] layout: the library's offset_matrix, permuted
    "grade_offset_matrix": "_reference_offset_concat",
}


class _DirectCall(BaseException):
    """A hidden grader used the student's function other than through
    ``call_student``: its calls cannot be planned. A ``BaseException``, so that a
    grader's ``except Exception`` lets it through."""


class _StandIn:
    """The student's function while planning: only ``call_student`` may call it."""

    def __init__(self, reference) -> None:
        self.reference = reference
        self.__name__ = self.__qualname__ = getattr(reference, "__name__", "fn")

    def __call__(self, *args, **kwargs):
        raise _DirectCall(self.__name__)


class _Planner:
    """A ``_record`` session that notes every ``call_student`` of a hidden grader
    (which argument, the call's text, its inputs) and answers with the reference."""

    def __init__(self, arguments: tuple) -> None:
        self.arguments = arguments
        self.plan: list[tuple[int, str, tuple, dict]] = []

    def call(self, impl, fn, args, kwargs, call):
        import copy

        from course_lib.checks._errors import CheckFailed

        position = next((i for i, a in enumerate(self.arguments) if a is fn), None)
        if position is None or not isinstance(fn, _StandIn):
            raise _DirectCall(call)
        self.plan.append((position, call, copy.deepcopy(args), copy.deepcopy(kwargs)))
        try:
            return fn.reference(*args, **kwargs), []
        except Exception as exc:  # noqa: BLE001 - reported like call_student does
            raise CheckFailed(f"{call} raised {type(exc).__name__}: {exc}") from exc


def _plan_reference(module, grader: str, variant: str = "default"):
    """The function of ``module`` (a checks module) that ``grader`` is planned with
    (for ``variant``: the one its ``VARIANTS`` entry names for the function)."""
    target = grader.removeprefix("grade_")
    chosen = getattr(module, "VARIANTS", {}).get(variant)
    if chosen is not None and target in chosen.references:
        return getattr(module, chosen.references[target])
    if grader in PLAN_REFERENCES:
        name = PLAN_REFERENCES[grader]
        if name is None:
            return None
        if ":" in name:
            import importlib

            where, name = name.split(":")
            module = importlib.import_module(where)
        return getattr(module, name)
    return getattr(module, f"_ref_{target}")


def _term_calls(grader, name: str, module_name: str, term) -> list[tuple]:
    """``[(plan key, variant, term values)]`` to plan ``grader`` with: the open
    edition's call, and the call the term's hidden cells make
    (:func:`course_lib.grading.editions.term.grader_values`) when it differs."""
    from course_lib.checks._core import TERM_PARAMS, plan_key
    from course_lib.grading.editions.term import grader_values

    params = [p for p in inspect.signature(grader).parameters if p in TERM_PARAMS]
    calls = [(name, "default", (None,) * len(params))]
    if term is not None and params:
        variant = term.variant(module_name.rsplit(".", 1)[-1])
        values = grader_values(grader, variant, term.seed)
        if values:
            values = values + (None,) * (len(params) - len(values))
            calls.append((plan_key(name, values), variant, values))
    return calls


def plan_hidden_graders(term=None) -> tuple[dict[str, dict[str, list]], set[str]]:
    """``({dtype: {plan key: planned calls}}, checks modules that cannot be planned)``:
    every hidden grader run in this process on its reference under a recording
    session, for the float32 and the float64 default dtype. The key is the grader's
    name; with a ``term`` (:class:`course_lib.grading.editions.term.Term`), a
    grader that takes the term's values is planned for them too, on the chosen
    variant's reference, under :func:`course_lib.checks._core.plan_key`. A grader
    that uses the
    student's function other than through ``call_student`` makes its module
    unplannable: its assignment keeps the full library in the grading kernel. (No
    grader does: ex10's training run asks for the student's bias through
    ``call_student`` too.)"""
    import torch

    from course_lib.checks import _record
    from course_lib.checks._errors import CheckFailed
    from course_lib.grading.notebooks.integrity import pristine_graders

    graders = {
        (module, name): fn
        for name, modules in pristine_graders().items()
        if name.startswith("grade_")
        for module, fn in modules.items()
    }
    plans: dict[str, dict[str, list]] = {}
    unplannable: set[str] = set()
    previous_dtype, previous_session = torch.get_default_dtype(), _record._session
    try:
        for dtype in (torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            key = str(dtype).removeprefix("torch.")
            plans[key] = {}
            for (module_name, name), grader in sorted(graders.items()):
                module = sys.modules[module_name]
                for plan, variant, values in _term_calls(
                    grader, name, module_name, term
                ):
                    reference = _plan_reference(module, name, variant)
                    if reference is None:
                        plans[key][plan] = []
                        continue
                    try:
                        planned = _plan_one(grader, reference, values)
                    except _DirectCall:
                        unplannable.add(module_name)
                        continue
                    except CheckFailed as exc:
                        if dtype == torch.float32:
                            raise RuntimeError(
                                f"cannot plan {plan}: it fails on its reference "
                                f"({exc})"
                            ) from exc
                        # the reference itself fails this grader under a float64
                        # default: the kernel uses the float32 plan
                        continue
                    plans[key][plan] = planned
    finally:
        torch.set_default_dtype(previous_dtype)
        _record._session = previous_session
    for key in plans:
        for module_name in unplannable:
            for m, name in graders:
                if m == module_name:
                    for plan in [p for p in plans[key] if p.split("(")[0] == name]:
                        plans[key].pop(plan)
    return plans, unplannable


def _plan_one(grader, reference, values: tuple) -> list:
    """The calls ``grader`` makes of a student's function that answers like
    ``reference``, its term parameters set to ``values``."""
    import contextlib
    import io

    from course_lib.checks import _record
    from course_lib.checks._core import TERM_PARAMS

    params = [
        p for p in inspect.signature(grader).parameters if p not in TERM_PARAMS
    ]
    arguments = (_StandIn(reference),) + (None,) * (len(params) - 1)
    planner = _Planner(arguments)
    previous, _record._session = _record._session, planner
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            grader(*arguments, *values)
    finally:
        _record._session = previous
    return planner.plan


def _deferred_stubs(source: str, planned: set[str]) -> str:
    """The student edition's hidden-grader stubs of a checks module become
    :func:`course_lib.checks._core.deferred_grade` calls (those in ``planned``): the
    student's functions, then the term's values (variant, seed) the cell passes."""
    from course_lib.checks._core import TERM_PARAMS

    tree = ast.parse(source)
    edits = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in planned:
            first, last, indent = _body_span(node)
            params = [a.arg for a in node.args.args if a.arg not in TERM_PARAMS]
            term = [a.arg for a in node.args.args if a.arg in TERM_PARAMS]
            edits.append(
                (
                    first,
                    last,
                    (
                        f"{indent}from ._core import deferred_grade\n"
                        f"{indent}deferred_grade({node.name!r}, "
                        f"({''.join(p + ', ' for p in params)}), "
                        f"({''.join(p + ', ' for p in term)}))\n"
                    ),
                )
            )
    return _replace_lines(source, edits)


def write_grading_edition(
    dest: Path, package: Path = PACKAGE, term=None
) -> tuple[Path, set[str]]:
    """Write the *grading edition* of ``package`` to ``dest/course_lib`` and return
    that folder and the assignments it cannot serve.

    It is the student edition (no reference of an exercise target, public checks on
    stored values) whose hidden graders make the calls their pristine versions make,
    on inputs planned here (:func:`plan_hidden_graders`, stored in
    ``checks/_plans.pt``: inputs only), and leave the verdict to the grading tool's
    replay (:func:`course_lib.checks._core.deferred_grade`). So the kernel holds
    no reference implementation and no hidden expected value. The assignments
    returned (named like their checks module; none today) have a hidden
    grader that uses the student's function directly, which no replay can judge:
    their kernels keep the full library. ``term`` (a
    :class:`course_lib.grading.editions.term.Term`) adds the plans of its variants
    and seed."""
    import compileall

    import torch

    out = write_student_edition(dest, package)
    plans, unplannable = plan_hidden_graders(term)
    planned = {key.split("(")[0] for key in plans["float32"]}
    for path in sorted((out / "checks").glob("ex[0-9]*_*.py")):
        path.write_text(_deferred_stubs(path.read_text(), planned))
        compile(path.read_text(), str(path), "exec")
    torch.save(plans, out / "checks" / "_plans.pt")
    # the sandbox's own start-up script runs from the package folder the kernel sees
    for name in GRADING_KERNEL_MODULES:
        shutil.copyfile(package / "grading" / name, out / "grading" / name)
    compileall.compile_dir(str(out), quiet=2)
    return out, {m.rsplit(".", 1)[-1] for m in unplannable}
