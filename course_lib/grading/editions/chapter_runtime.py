"""What a class-edition chapter notebook runs in its set-up, in a student's kernel.

The student wheel stubs every exercise target (``alibi_bias is exercise 5``) and the
library code built on it, and has no ``myst_nb``. A chapter notebook of the class
edition (:func:`course_lib.grading.editions.launch.chapter_notebook` with
``class_edition=True``) starts with a call of :func:`start_chapter`, which

* puts a small ``myst_nb`` in place when the real one is missing: its ``glue(name,
  value, display=True)`` shows the value when asked to (the book's ``{glue}`` roles are
  in the markdown, which a notebook does not render anyway);
* uses the student's own answers: each exercise notebook found next to the chapter
  (the published tree's ``../../notebooks/exNN_*/``, the working folder, or the home
  folder where nbgrader fetches assignments) has its answer cells run, and each
  answer that passes its public check replaces the library's stub for the rest of
  the chapter;
* lets a cell that needs an exercise the student has not solved (a stub raising
  "... is exercise N ...") end with a note naming the exercise and the course's
  stored output of that cell: what the book's build printed and drew with the
  course's library (``course_lib/data/chapter_outputs.json``, written by ``course
  publish`` from the build's executed notebooks; never code). A cell that fails
  after such a cell (it uses that cell's results) is treated the same way; any other
  error is raised as usual.

``course publish`` ships this module in the student wheel as
``course_lib.chapter_runtime``.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import io
import json
import sys
import types
from pathlib import Path

__all__ = ["cell_key", "find_exercise_notebooks", "start_chapter", "use_answers"]

STORED_OUTPUTS = "data/chapter_outputs.json"  # inside the course_lib package
_FALLBACK = "__course_fallback__"
_SHOW = "__course_show__"


def cell_key(source: str) -> str:
    """The key of a code cell's stored output: a hash of its source (trailing
    spaces and blank edges ignored, so the notebook's and the build's copy agree)."""
    text = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


# --- glue without myst_nb -------------------------------------------------------


def _glue(name: str, variable, display: bool = True) -> None:
    """``myst_nb.glue`` for a notebook outside the book: shows ``variable`` when
    ``display`` (the book would show it there too); nothing is stored."""
    if display:
        from IPython.display import display as show

        show(variable)


def install_glue() -> bool:
    """Make ``from myst_nb import glue`` work where myst_nb is not installed;
    returns whether the stand-in was put in place."""
    if "myst_nb" in sys.modules or importlib.util.find_spec("myst_nb") is not None:
        return False
    module = types.ModuleType("myst_nb")
    module.__doc__ = "Stand-in for myst_nb.glue outside the book (course_lib)."
    module.glue = _glue
    sys.modules["myst_nb"] = module
    return True


# --- the student's own answers ----------------------------------------------------


def find_exercise_notebooks(start: Path | None = None) -> list[Path]:
    """Exercise notebooks (``exNN_*.ipynb``) where a student keeps them: the home
    folder's ``exNN_*/`` (nbgrader's fetch), the published tree's
    ``../../notebooks/*/`` from ``start`` (the chapter notebook's folder), and
    ``start`` itself. Where two have the same name the first wins: on a class hub
    the fetched copy, the one the student submits, not the copy the JupyterHub
    button pulled with the chapters."""
    start = Path(start or Path.cwd()).resolve()
    found: dict[str, Path] = {}
    places = [Path.home(), start / "../../notebooks", start]
    for place in places:
        for pattern in ("ex[0-9][0-9]_*.ipynb", "ex[0-9][0-9]_*/ex[0-9][0-9]_*.ipynb"):
            for path in sorted(place.glob(pattern)):
                if ".ipynb_checkpoints" not in path.parts:
                    found.setdefault(path.name, path.resolve())
    return [found[name] for name in sorted(found)]


def _answer_namespace(path: Path) -> dict:
    """Run a notebook's imports and answer cells (nbgrader ``solution`` cells) in a
    fresh namespace; no test cell, no other code."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": f"answers_{path.stem}"}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {})
        if "course-setup" in (meta.get("tags") or []):
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        if meta.get("nbgrader", {}).get("solution"):
            code = tree
        elif not meta.get("nbgrader", {}).get("grade"):
            imports = [
                n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
            ]
            code = ast.Module(body=imports, type_ignores=[])
        else:
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, str(path), "exec"), namespace)  # noqa: S102
    return namespace


def _public_checks() -> dict[str, object]:
    """``name -> check_<name>`` of every exercise's public checks."""
    import pkgutil

    import course_lib.checks as checks

    found = {}
    for info in pkgutil.iter_modules(checks.__path__):
        if info.name[:2] == "ex" and info.name[2:4].isdigit():
            module = importlib.import_module(f"course_lib.checks.{info.name}")
            for attr, value in vars(module).items():
                if attr.startswith("check_") and callable(value):
                    found[attr.removeprefix("check_")] = value
    return found


def _replace_everywhere(old, new) -> None:
    for name, module in list(sys.modules.items()):
        if name == "course_lib" or name.startswith("course_lib."):
            for attr, value in list(vars(module).items()):
                if value is old:
                    setattr(module, attr, new)


def use_answers(notebooks: list[Path]) -> tuple[list[str], list[str]]:
    """Replace the library's stub of each exercise target by the student's function
    of the same name, where it passes its public check; returns (lines saying what
    was used, lines saying what was not and why)."""
    import course_lib

    checks = _public_checks()
    used, unused = [], []
    for path in notebooks:
        try:
            namespace = _answer_namespace(path)
        except Exception as exc:  # noqa: BLE001 - a student's notebook, any error
            unused.append(f"{path.name}: its answer cells raised {exc!r}")
            continue
        for name, check in sorted(checks.items()):
            fn = namespace.get(name)
            stub = getattr(course_lib, name, None)
            if not callable(fn) or stub is None:
                continue
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    check(fn)
            except Exception as exc:  # noqa: BLE001 - CheckFailed and the like
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                if "still the stub" not in first:  # an attempt that does not pass
                    unused.append(f"{name} ({path.name}): {first}")
                continue
            _replace_everywhere(stub, fn)
            used.append(f"{name} ({path.name})")
    return used, unused


# --- the stored outputs -------------------------------------------------------------


def _stored(chapter: str) -> dict[str, list]:
    import course_lib

    path = Path(course_lib.__file__).parent / STORED_OUTPUTS
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get(chapter, {})


class _Chapter:
    def __init__(self, chapter: str, shell) -> None:
        self.chapter = chapter
        self.shell = shell
        self.stored = _stored(chapter)
        self.missing: list[str] = []

    def fallback(self, exc: BaseException) -> None:
        """Called by every cell that raised: a stub's error (or an error after one)
        ends with a note and the stored output; anything else goes on as usual."""
        message = str(exc)
        if isinstance(exc, NotImplementedError) and "exercise" in message:
            why = message.split(": implement it")[0]
            self.missing.append(why)
            note = (
                f"[course] This cell needs an exercise you have not solved here: {why}."
            )
        elif isinstance(exc, ModuleNotFoundError) and exc.name:
            top = exc.name.split(".")[0]
            self.missing.append(f"the package {top}")
            note = (
                f"[course] This cell needs the package {top}, which the course's "
                f"student package does not install (`pip install {top}` to run it)."
            )
        elif isinstance(exc, FileNotFoundError) and _course_file(exc.filename):
            self.missing.append(f"the file {Path(exc.filename).name}")
            note = (
                f"[course] This cell reads {Path(exc.filename).name}, a file of the "
                "course's repository that the student package does not ship."
            )
        elif self.missing:
            note = (
                f"[course] This cell uses results of an earlier cell that could not "
                f"run here (it needed {self.missing[-1]}); it raised "
                f"{type(exc).__name__}."
            )
        else:
            raise exc
        raw = self.shell.history_manager.input_hist_raw[-1]
        outputs = self.stored.get(cell_key(raw))
        if outputs is None:
            print(note + " No stored output of this cell is installed.")
            return
        if isinstance(exc, NotImplementedError):
            note += (
                " Solve it in its exercise notebook (on a class hub, the copy the "
                "Assignments tab fetched into your home folder; else "
                "../../notebooks/ from this chapter's folder) and run the chapter "
                "again to use your answer."
            )
        print(note + " Below, the course's stored output of this cell:")
        _replay(outputs)


def _course_file(filename) -> bool:
    """Whether ``filename`` is a path next to the installed ``course_lib`` (where
    the course's repository has files the student package leaves out)."""
    import course_lib

    if not filename:
        return False
    home = Path(course_lib.__file__).resolve().parent.parent
    return Path(filename).resolve().is_relative_to(home)


def _replay(outputs: list[dict]) -> None:
    from IPython.display import display

    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            text = out.get("text", "")
            print("".join(text) if isinstance(text, list) else text, end="")
        elif kind in ("display_data", "execute_result"):
            data = {
                k: "".join(v) if isinstance(v, list) else v
                for k, v in out.get("data", {}).items()
            }
            display(data, raw=True, metadata=out.get("metadata") or {})


class _Guard(ast.NodeTransformer):
    """Each cell's code runs inside ``try``; its last expression is shown through
    the display hook as IPython would show it."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        body = list(node.body)
        if not body or any(
            isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in body
        ):
            return node
        if isinstance(body[-1], ast.Expr):
            body[-1] = ast.Expr(
                ast.Call(ast.Name(_SHOW, ast.Load()), [body[-1].value], [])
            )
        guarded = ast.Try(
            body=body,
            handlers=[
                ast.ExceptHandler(
                    type=ast.Name("Exception", ast.Load()),
                    name="__course_error__",
                    body=[
                        ast.Expr(
                            ast.Call(
                                ast.Name(_FALLBACK, ast.Load()),
                                [ast.Name("__course_error__", ast.Load())],
                                [],
                            )
                        )
                    ],
                )
            ],
            orelse=[],
            finalbody=[],
        )
        return ast.fix_missing_locations(ast.Module(body=[guarded], type_ignores=[]))


def _show(value) -> None:
    sys.displayhook(value)


def start_chapter(chapter: str, *, start: Path | None = None) -> None:
    """The set-up of a class-edition chapter notebook (see the module's text)."""
    from IPython import get_ipython

    install_glue()
    shell = get_ipython()
    used, unused = use_answers(find_exercise_notebooks(start))
    if used:
        print("[course] Using your answers (they pass their public checks):")
        print("  " + ", ".join(used))
    for line in unused:
        print(f"[course] Not used, as it fails its public check: {line}")
    if shell is None:
        return
    state = _Chapter(chapter, shell)
    shell.user_ns[_FALLBACK] = state.fallback
    shell.user_ns[_SHOW] = _show
    shell.ast_transformers[:] = [
        t for t in shell.ast_transformers if not isinstance(t, _Guard)
    ] + [_Guard()]
    print(
        "[course] A cell that needs an exercise you have not solved shows a note "
        "and the course's stored output instead of an error."
    )
