"""The class edition gives no graded answer away, not even as an inline formula.

``test_publish.py`` looks for ``def name(`` of a graded function in the published
pages. A chapter can give the answer away without one: a cell that computes the
graded quantity inline (the YaRN ramp as ``((i - low) / (high - low)).clamp(0, 1)``)
and then checks it against the library. This test runs each chapter as the class
edition has it and watches what its cells compute:

1. The chapter's class-edition notebook is built as ``course publish`` builds it
   (:func:`course_lib.grading.editions.launch.chapter_notebook` with
   ``class_edition=True``: the ``{only} not class_edition`` blocks removed); its code
   cells run in a fresh IPython shell in a process of its own (forked from one that
   has loaded the library and computed the answers, :func:`serve`), with the
   chapter's folder as working directory.
2. The answers: every graded function's reference (the function its hidden grader is
   planned with, :func:`course_lib.grading.editions.library._plan_reference`) on the
   inputs of its public check and hidden grade, and on the inputs the chapter itself
   gives the library's version of the function (every call from a chapter cell is
   recorded: "the graded function's output on the same inputs").
3. After each cell, every tensor (and float) in the notebook's namespace, also
   inside lists, tuples and dicts, is compared with the answers. A match is a leak
   unless it comes from the library: what a library function returned to the
   chapter, or a copy, view or dtype conversion of it (a ``TorchFunctionMode``
   follows each operation): a chapter may use the library, whose call earns no
   points. A formula applied to library values is the chapter's own computation.
   Answers that say nothing are left out: fewer than 4 entries, an arithmetic
   progression (``arange``, a constant), a float that is a multiple of 1/64.

A finding names the chapter line of the cell, the variable and the answer it equals.
What this cannot see: a value only printed or asserted, never kept in a variable; a
computation on inputs that neither the graders nor the chapter's library calls use;
hand-graded answers (ex10's questions) and ex03's hand computation (no reference).

Run alone on a chapter file (e.g. an older version from git)::

    python tests/test_class_edition_answers.py book/11-long-context.md
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from giveaway_scan import counterparts

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(p.name for p in BOOK.glob("[0-9][0-9]-*.md"))
TIMEOUT = 900


# --------------------------------------------------------------------------------------
# the subprocess: run one chapter's class-edition cells and compare


def _answers_from_graders() -> list[tuple[str, object]]:
    """``(label, reference output)`` for every call of every public check and hidden
    grade, made with the grader's planned reference."""
    import contextlib
    import copy
    import io

    import torch

    from course_lib.checks import _record
    from course_lib.grading.editions.library import _plan_reference
    from course_lib.grading.notebooks.integrity import pristine_graders

    found: list[tuple[str, object]] = []

    class _Stand:
        def __init__(self, reference) -> None:
            self.reference = reference

        def __call__(self, *args, **kwargs):
            raise RuntimeError("only call_student may call it")

    class _Session:
        def call(self, impl, fn, args, kwargs, call):
            if not isinstance(fn, _Stand):
                raise RuntimeError(call)
            out = fn.reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            found.append((call, out))
            return out, []

    previous = _record._session
    graders = pristine_graders()
    for name, modules in sorted(graders.items()):
        if not name.startswith("grade_"):
            continue
        for module_name, grade in modules.items():
            module = sys.modules[module_name]
            try:
                reference = _plan_reference(module, name)
            except AttributeError:
                continue
            if reference is None:
                continue
            check = graders.get("check_" + name.removeprefix("grade_"), {}).get(
                module_name
            )
            for grader in (check, grade):
                if grader is None:
                    continue
                import inspect

                n = len(inspect.signature(grader).parameters)
                _record._session = _Session()
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        grader(_Stand(reference), *([None] * (n - 1)))
                except Exception:  # noqa: BLE001 - a grader that cannot be planned
                    pass
                finally:
                    _record._session = previous
    torch.set_default_dtype(torch.float32)
    return found


def _flat(value, path: str, depth: int = 0):
    """``(path, tensor or float)`` for the value and what it holds."""
    import torch

    if isinstance(value, torch.Tensor):
        yield path, value
    elif type(value) is float:
        yield path, value
    elif depth < 2 and isinstance(value, list | tuple):
        for i, v in enumerate(value[:64]):
            yield from _flat(v, f"{path}[{i}]", depth + 1)
    elif depth < 2 and type(value) is dict:
        for k, v in list(value.items())[:64]:
            yield from _flat(v, f"{path}[{k!r}]", depth + 1)


def _says_nothing(answer) -> bool:
    import torch

    if isinstance(answer, float):
        return not (answer == answer) or abs(answer * 64 - round(answer * 64)) < 1e-9
    if not isinstance(answer, torch.Tensor) or answer.numel() < 4:
        return True
    if answer.is_complex() or answer.layout != torch.strided:
        return True
    flat = answer.detach().reshape(-1).double()
    if not bool(torch.isfinite(flat).all()):
        flat = flat[torch.isfinite(flat)]
        if flat.numel() < 4:
            return True
    steps = flat[1:] - flat[:-1]
    first = steps[:1].expand_as(steps)
    return bool(torch.allclose(steps, first, rtol=1e-9, atol=1e-12))


def _same(value, answer) -> bool:
    import torch

    if isinstance(answer, float):
        return isinstance(value, float) and abs(value - answer) <= 1e-9 * abs(answer)
    if not isinstance(value, torch.Tensor) or value.shape != answer.shape:
        return False
    if value.is_complex() or value.layout != torch.strided or value.is_meta:
        return False
    v, a = value.detach().double(), answer.detach().double()
    finite = a[torch.isfinite(a)]
    scale = float(finite.abs().max()) if finite.numel() else 1.0
    return bool(torch.allclose(v, a, rtol=1e-6, atol=1e-9 * max(scale, 1.0),
                               equal_nan=True))


# Operations that keep a tensor's values (a copy, a view, another dtype): what they
# make of a library result is still the library's result. Arithmetic is not
# followed: a formula applied to library values (theta / s where the wavelength is
# long) is the chapter's own computation.
_KEEPS_VALUES = frozenset(
    "clone detach contiguous to double float half bfloat16 long int cpu type view "
    "view_as reshape reshape_as __getitem__ squeeze unsqueeze expand expand_as "
    "permute transpose movedim flatten unflatten narrow select t tensor as_tensor "
    "requires_grad_ detach_".split()
)


def _prepare() -> list[tuple[str, object]]:
    """The library loaded and the graders' answers that say something: what every
    chapter's run starts from (:func:`serve` computes it once, then forks)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import IPython.core.interactiveshell  # noqa: F401 - loaded before a fork
    import torch.overrides  # noqa: F401

    import course_lib
    import course_lib.grading.editions.launch  # noqa: F401

    course_lib._load_all()
    return [(label, a) for label, a in _answers_from_graders()
            if not _says_nothing(a)]


def run_chapter(md_path: Path, answers: list | None = None) -> list[dict]:
    """Run the class edition of the chapter at ``md_path``; the leaks found.
    ``answers``: :func:`_prepare`'s, computed in this process (a fork of it)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import contextlib
    import functools
    import inspect
    import io
    import weakref

    import torch
    from IPython.core.interactiveshell import InteractiveShell
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    import course_lib
    from course_lib.grading.editions.launch import (
        chapter_notebook,
        is_setup_cell,
        read_settings,
    )

    answers = list(_prepare() if answers is None else answers)
    graded = {id(fn) for fn in counterparts().values()}
    library_dir = str(Path(course_lib.__file__).resolve().parent)
    # What the library's functions returned to the chapter, and its copies, views
    # and conversions (a TorchFunctionMode follows each operation): tensors by
    # identity (weak references), floats by identity (kept alive, so that no id is
    # reused).
    tainted: dict[int, object] = {}
    returned_floats: dict[int, float] = {}

    def taint(t) -> None:
        key = id(t)
        if key not in tainted:
            tainted[key] = weakref.ref(t, lambda _, key=key: tainted.pop(key, None))

    def is_tainted(v) -> bool:
        if isinstance(v, torch.Tensor):
            ref = tainted.get(id(v))
            return ref is not None and ref() is v
        return returned_floats.get(id(v)) is v

    class Follow(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if tainted and getattr(func, "__name__", "") in _KEEPS_VALUES:
                first = next((t for t in tree_leaves((args, kwargs or {}))
                              if isinstance(t, torch.Tensor)), None)
                if first is not None and is_tainted(first):
                    for t in tree_leaves(out):
                        if isinstance(t, torch.Tensor):
                            taint(t)
            return out

    def record(fn):
        is_graded = id(fn) in graded

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            out = fn(*args, **kwargs)
            caller = sys._getframe(1).f_code.co_filename
            if os.path.abspath(caller).startswith(library_dir):
                return out
            call = f"{fn.__name__}(...) as the chapter calls it"
            for _, v in _flat(out, ""):
                if isinstance(v, torch.Tensor):
                    taint(v)
                    v = v.detach().clone()
                else:
                    returned_floats[id(v)] = v
                if is_graded and not _says_nothing(v):
                    answers.append((call, v))
            return out

        return wrapper

    # every function of the library (not the graders nor the grading tool)
    library = [
        module for name, module in list(sys.modules.items())
        if module is not None and name.startswith("course_lib")
        and not name.startswith(("course_lib.checks", "course_lib.grading"))
    ]
    wrappers: dict[int, object] = {}
    for module in library:
        for value in list(vars(module).values()):
            if (inspect.isfunction(value)
                    and str(value.__module__).startswith("course_lib")
                    and id(value) not in wrappers):
                wrappers[id(value)] = record(value)
    for module in library:
        for key, value in list(vars(module).items()):
            if id(value) in wrappers and inspect.isfunction(value):
                setattr(module, key, wrappers[id(value)])

    root = md_path.resolve().parent.parent
    page = f"book/{md_path.stem}"
    if md_path.resolve().parent != BOOK:  # a chapter from elsewhere (git show)
        tmp = Path(tempfile.mkdtemp())
        (tmp / "book").mkdir()
        (tmp / "book" / md_path.name).write_text(md_path.read_text())
        root = tmp
    nb = json.loads(chapter_notebook(root, page, read_settings(ROOT),
                                     class_edition=True))
    chapter_lines = md_path.read_text().splitlines()
    os.chdir(BOOK)
    shell = InteractiveShell.instance()
    # what a cell displays is never read here (only its namespace is): no figure
    # is rendered to PNG, SVG or HTML (seconds per chapter); text/plain only
    for mime, formatter in shell.display_formatter.formatters.items():
        formatter.enabled = mime == "text/plain"
    findings: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or is_setup_cell(cell):
            continue
        source = "".join(cell["source"])
        out = io.StringIO()
        quiet = contextlib.redirect_stdout(out), contextlib.redirect_stderr(out)
        with quiet[0], quiet[1], Follow():
            shell.run_cell(source, store_history=False)
        first = next((s for s in source.splitlines() if s.strip()), "")
        line = next((i + 1 for i, s in enumerate(chapter_lines) if s == first), 0)
        for var, value in list(shell.user_ns.items()):
            if var.startswith("_") or var in ("In", "Out"):
                continue
            for path, v in _flat(value, var):
                if is_tainted(v):
                    continue
                for label, answer in answers:
                    if (path, label) in seen:
                        continue
                    if _same(v, answer):
                        seen.add((path, label))
                        findings.append({"line": line, "variable": path,
                                         "equals": label, "cell": first[:80]})
                        break
    return findings


def serve() -> None:
    """Run chapters one after another, each in a fork of this process.

    This process loads the library and computes the graders' answers once
    (:func:`_prepare`, seconds: ex10's grader trains a model); each chapter then runs
    in a child forked from it, so that it starts exactly where a fresh process that
    had just done the same would start (the library unpatched, no chapter run
    before it), and what it patches or leaves behind dies with it. Requests on
    stdin, one per line: ``CHAPTER.md<TAB>FINDINGS.json<TAB>STDERR.log``; the
    answer on stdout: the child's exit status (a child that runs past ``TIMEOUT``
    is ended by SIGALRM)."""
    import signal

    import torch

    torch.set_num_threads(1)  # no OpenMP pool across the fork
    answers = _prepare()
    for line in sys.stdin:
        md, out, err = line.rstrip("\n").split("\t")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: one chapter
            status = 1
            try:
                fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                signal.alarm(TIMEOUT)
                found = run_chapter(Path(md), answers)
                Path(out).write_text(json.dumps(found))
                status = 0
            except BaseException:  # noqa: BLE001 - reported through the log
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


class ChapterRunner:
    """A :func:`serve` process of this file (one per test module)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = (tmp / "serve.log").open("w")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
               "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            text=True, env=env, cwd=ROOT,
        )
        self.n = 0

    def check(self, md_path: Path) -> list[dict]:
        """:func:`run_chapter` on ``md_path`` in a fork of the server."""
        import select

        self.n += 1
        out = self.tmp / f"findings-{self.n}.json"
        err = self.tmp / f"chapter-{self.n}.log"
        self.proc.stdin.write(f"{md_path}\t{out}\t{err}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 2 * TIMEOUT)
        answer = self.proc.stdout.readline() if ready else ""
        log = err.read_text()[-4000:] if err.is_file() else ""
        if not answer:
            self.log.flush()
            raise AssertionError("the chapter server stopped or hung:\n"
                                 + (self.tmp / "serve.log").read_text()[-4000:] + log)
        assert int(answer) == 0, log
        return json.loads(out.read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def describe(name: str, findings: list[dict]) -> str:
    lines = [f"{name}: {len(findings)} class-edition value(s) equal a graded answer"]
    lines += [
        f"  {name}:{f['line']} {f['variable']} = {f['equals']}   [{f['cell']}]"
        for f in findings
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# the tests

pytestmark = pytest.mark.slow

LEAKY = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
import torch
import course_lib as cl
library = cl.alibi_slopes(6)
converted = library.double()[None, :].clone()  # still the library's answer
```

```{code-cell} ipython3
n = 6
closest = 4
by_rule = torch.cat([2.0 ** (-8.0 * torch.arange(1, closest + 1) / closest),
                     2.0 ** (-4.0 * torch.arange(1, 2 * (n - closest), 2) / closest)])
assert torch.allclose(by_rule, library)
```
"""


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    r = ChapterRunner(tmp_path_factory.mktemp("class-edition"))
    yield r
    r.close()


def test_an_inline_answer_is_found_and_a_library_call_is_not(
    tmp_path: Path, runner: ChapterRunner
) -> None:
    """The detector itself: ALiBi's slopes for 6 heads by the paper's rule, inline,
    are a leak; the same numbers from ``cl.alibi_slopes`` are not."""
    chapter = tmp_path / "book" / "99-leaky.md"
    chapter.parent.mkdir()
    chapter.write_text(LEAKY)
    findings = runner.check(chapter)
    assert [f["variable"] for f in findings] == ["by_rule"], describe("99", findings)
    assert "alibi_slopes" in findings[0]["equals"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_class_edition_computes_no_graded_answer(
    chapter: str, runner: ChapterRunner
) -> None:
    findings = runner.check(BOOK / chapter)
    assert not findings, describe(chapter, findings)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve()
        sys.exit(0)
    md = Path(sys.argv[1]).resolve()
    found = run_chapter(md)
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(found))
    else:
        sys.stdout.write(describe(md.name, found) + "\n")
