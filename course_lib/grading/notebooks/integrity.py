"""Test cells judged outside the student's kernel, and a cap on notebook output.

:class:`VerifiedExecute` is nbgrader's ``Execute`` step as ``course autograde`` runs
it. It differs in four ways:

* every kernel starts with :func:`course_lib.checks._record.start` (IPython's
  ``exec_lines``, before any cell), so the graders record what they gave the
  student's functions and what came back;
* after each test cell that calls graders (``check_<name>(...)``,
  ``grade_<name>(...)``), it asks the kernel for that cell's record, runs the same
  graders again in this process, where no student code ever ran, on the recorded
  answers (:func:`course_lib.checks._record.replaying`), and writes *that* verdict
  into the cell: the output nbgrader scores. The cell passes only if it passed in
  the kernel, the replay passes, and the kernel saw no tampering. Any sign of
  tampering fails the cell with a ``TamperingDetected`` error that says what was
  seen;
* a test cell that checks a function which already ran into the per-cell time limit
  in an earlier cell is not run (:data:`HUNG_BEFORE`): an infinite loop costs the
  run one wait, not one per cell that calls it;
* a cell's output is cut after :attr:`VerifiedExecute.max_cell_output` bytes (and a
  notebook's after :attr:`VerifiedExecute.max_notebook_output`): a submission that
  prints megabytes cannot bloat the gradebook, the feedback or the grader's memory;
* every failed test cell gets a *judgement* (:data:`JUDGEMENT_KEY` in its metadata,
  read back by :func:`judgements`): the function it checks and why it failed, from
  the replay in this process: the known mistake that matched (``alibi_bias:bloom-form``
  and its explanation), else ``unrecognised`` with the wrong answer as an example, or
  what happened instead (the stub, an exception, a time limit, tampering). The key is
  removed from every test cell before it runs and written only here, so nothing the
  notebook prints or stores can name a mistake.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import pkgutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbclient.util import ensure_async, run_sync
from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute
from traitlets import Integer

from ..kernels.execute import GradingExecute

__all__ = [
    "HUNG_BEFORE",
    "JUDGEMENT_KEY",
    "GraderCall",
    "Judgement",
    "VerifiedExecute",
    "autograde_preprocessors",
    "grader_calls",
    "judged_cells",
    "judgements",
    "pristine_graders",
]

_START = (
    "import course_lib.checks as _c, course_lib.checks._record as _r; "
    "_r.start(); del _c, _r"
)
_EXEC_LINES = f"--IPKernelApp.exec_lines={_START}"
# The kernel copies every message it sends. Above ``Session.copy_threshold`` (64 KiB
# by default, jupyter_client/session.py ``Session.send``) pyzmq sends without copying
# and starts its garbage-collector thread (zmq/utils/garbage.py) on first use: a
# new thread, which a kernel at its process limit (RLIMIT_NPROC, the sandbox's
# ``max_processes``) cannot start, so the reply to the grading tool's check (a
# record of ~170 KB for ex05's hidden (1, 180) case) was never sent. Measured:
# 52 sleeping children + the kernel's 11 threads + the sandbox's init = 64.
_COPY_ALWAYS = f"--Session.copy_threshold={1 << 62}"
_RECORD = "course_lib.checks._record"
# The error of a test cell not run because a function it checks already ran into
# the time limit in an earlier cell.
HUNG_BEFORE = "TimeLimitEarlier"
# Errors after which the kernel may still be busy with the cell.
_BUSY = {"CellTimeoutError", "DeadKernelError", "UnresponsiveKernelError"}
# The cell metadata key of a failed test cell's judgement (see :class:`Judgement`).
JUDGEMENT_KEY = "course_judgement"
_MAX_EXAMPLE = 300


@dataclass(frozen=True)
class Judgement:
    """Why one test cell failed, as judged outside the kernel.

    ``kind`` is ``"mistake"`` (a known mistake matched: ``mistake`` is its id,
    ``"<function>:<slug>"``, and ``explanation`` its text), ``"unrecognised"`` (a
    wrong answer that matches no known mistake; ``example`` shows it), or what
    happened instead of an answer: ``"not-attempted"`` (the stub), ``"raised"`` (the
    function raised; ``example`` is the message), ``"calls-library"``,
    ``"changed-input"``, ``"time-limit"`` or ``"tampering"``.
    """

    grade_id: str
    function: str
    kind: str
    mistake: str = ""
    explanation: str = ""
    example: str = ""

    def to_json(self) -> dict[str, str]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: Any) -> Judgement | None:
        if not isinstance(data, dict):
            return None
        fields = ("grade_id", "function", "kind", "mistake", "explanation", "example")
        return cls(**{f: str(data.get(f) or "") for f in fields})


def _function_of(grader: str) -> str:
    return grader.removeprefix("check_").removeprefix("grade_")


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line[:_MAX_EXAMPLE]


def judged_cells(notebook: NotebookNode) -> list[tuple[NotebookNode, Judgement]]:
    """``(cell, judgement)`` for every test cell of a graded notebook that
    :class:`VerifiedExecute` judged, in cell order. Only test cells are read: the key
    is cleared on each of them before it runs, so what a student puts in their
    metadata never counts."""
    out = []
    for cell in notebook.cells:
        if _is_test_cell(cell):
            judged = Judgement.from_json(cell.get("metadata", {}).get(JUDGEMENT_KEY))
            if judged is not None and judged.kind:
                out.append((cell, judged))
    return out


def judgements(notebook: NotebookNode) -> list[Judgement]:
    """The judgements of a graded notebook's test cells (:func:`judged_cells`)."""
    return [judged for _, judged in judged_cells(notebook)]


def pristine_graders() -> dict[str, dict[str, Callable]]:
    """name -> {module name -> grader} for every ``check_*``/``grade_*`` exported by
    a ``course_lib.checks`` module, imported in this (trusted) process."""
    import course_lib.checks as package

    out: dict[str, dict[str, Callable]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name, None)
            if name.startswith(("check_", "grade_")) and callable(obj):
                out.setdefault(name, {})[module.__name__] = obj
    return out


@dataclass(frozen=True)
class GraderCall:
    """One grader call of a test cell: ``grader(*args)``; each argument is
    ``("name", identifier)`` (a value of the notebook) or ``("const", literal)``."""

    grader: str
    module: str | None
    args: tuple[tuple[str, Any], ...]


def grader_calls(
    source: str, graders: dict[str, dict[str, Callable]], imported: dict[str, str]
) -> list[GraderCall] | None:
    """The grader calls of a test cell, or ``None`` when the cell is anything else
    than imports from ``course_lib.checks`` and calls ``grader(name, ...)`` (such a
    cell keeps the kernel's verdict). ``imported`` maps names to the module they
    were imported from in earlier cells; this cell's imports are added to it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    calls: list[GraderCall] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            module = stmt.module or ""
            if stmt.level or not module.startswith("course_lib.checks"):
                return None
            for alias in stmt.names:
                if alias.asname is None:
                    imported[alias.name] = module
            continue
        if not (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id in graders
            and not stmt.value.keywords
        ):
            return None
        args: list[tuple[str, Any]] = []
        for arg in stmt.value.args:
            if isinstance(arg, ast.Name):
                args.append(("name", arg.id))
            elif isinstance(arg, ast.Constant):
                args.append(("const", arg.value))
            else:
                return None
        name = stmt.value.func.id
        module = imported.get(name)
        if module not in graders[name]:
            if len(graders[name]) != 1:
                return None
            module = next(iter(graders[name]))
        calls.append(GraderCall(name, module, tuple(args)))
    return calls or None


def _is_test_cell(cell: NotebookNode) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return (
        cell.get("cell_type") == "code"
        and bool(meta.get("grade"))
        and not meta.get("solution")
    )


def _failure(ename: str, message: str) -> NotebookNode:
    return new_output(
        "error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"]
    )


# Evaluated in the kernel beside the check: the names of the kernel's child processes
# (field 4 of /proc/PID/stat is the parent's pid; proc(5)). Only for a note.
_CHILDREN = (
    "(lambda os: [s.partition('(')[2].rpartition(')')[0] for s in "
    "(open(f'/proc/{p}/stat').read() for p in os.listdir('/proc') if p.isdigit()) "
    "if s.rpartition(')')[2].split()[1] == str(os.getpid())])(__import__('os'))"
)
# Words in the error of a check that did not answer, and the limit they point to.
_LIMITS = (
    ("MemoryError", "memory"),
    ("Cannot allocate memory", "memory"),
    ("can't start new thread", "processes/threads"),
    ("Resource temporarily unavailable", "processes/threads"),
    ("Too many open files", "open files"),
)


def _limit_named(text: str) -> str:
    """The limit an error's text points to (``"memory"``, ...), else ``""``."""
    return next((limit for words, limit in _LIMITS if words in text), "")


def _children_note(children: Any) -> str:
    """A line for the cell about processes the student's code left running."""
    if not isinstance(children, list) or not children:
        return ""
    names: dict[str, int] = {}
    for child in children:
        name = str(child)[:40]
        names[name] = names.get(name, 0) + 1
    if len(names) == 1:
        what = next(iter(names))
    else:
        what = ", ".join(f"{n} x{k}" for n, k in sorted(names.items()))
    plural = "es" * (len(children) != 1)
    return (
        f"note from the grader: {len(children)} child process{plural} still "
        f"running ({what[:300]}) when the check ran; they count against the "
        "kernel's limit of processes and threads\n"
    )


def _stdout(text: str) -> NotebookNode:
    return new_output("stream", name="stdout", text=text)


def _message_size(msg: dict[str, Any]) -> int:
    content = msg.get("content", {})
    if msg.get("msg_type") == "stream":
        return len(content.get("text", ""))
    size = 0
    for value in (content.get("data") or {}).values():
        size += len(value) if isinstance(value, str) else len(json.dumps(value))
    return size


class VerifiedExecute(GradingExecute):
    """``Execute`` with test cells judged outside the kernel and output capped
    (see the module docstring)."""

    max_cell_output = Integer(
        1 << 20, help="bytes of output kept per cell; the rest is dropped"
    ).tag(config=True)
    max_notebook_output = Integer(
        8 << 20, help="bytes of output kept per notebook; the rest is dropped"
    ).tag(config=True)

    # ------------------------------------------------------------------ set-up

    @contextlib.contextmanager
    def setup_kernel(self, **kwargs):
        for argument in (_EXEC_LINES, _COPY_ALWAYS):
            if argument not in self.extra_arguments:
                self.extra_arguments = [*self.extra_arguments, argument]
        self._graders = pristine_graders()
        self._imported: dict[str, str] = {}
        self._output_cell: int | None = None
        self._cell_bytes = 0
        self._notebook_bytes = 0
        self._truncated: set[int] = set()
        self._verified, self._verify_seconds = 0, 0.0
        self._hung: dict[str, str] = {}  # function -> the cell where it hung
        with super().setup_kernel(**kwargs):
            yield
        self.log.info(
            "verified %d test cells outside the kernel in %.3f s",
            self._verified,
            self._verify_seconds,
        )

    # ------------------------------------------------------------- output cap

    def output(self, outs, msg, display_id, cell_index):
        if msg.get("msg_type") == "error":
            content = msg.get("content", {})
            content["evalue"] = str(content.get("evalue", ""))[:4000]
            content["traceback"] = [
                str(line)[:2000] for line in (content.get("traceback") or [])[:200]
            ]
            return super().output(outs, msg, display_id, cell_index)
        if cell_index != self._output_cell:
            self._output_cell, self._cell_bytes = cell_index, 0
        size = _message_size(msg)
        self._cell_bytes += size
        self._notebook_bytes += size
        if (
            self._cell_bytes > self.max_cell_output
            or self._notebook_bytes > self.max_notebook_output
        ):
            if cell_index not in self._truncated:
                self._truncated.add(cell_index)
                outs.append(
                    _stdout(
                        "\n[output truncated by the grader: a cell may show "
                        f"{self.max_cell_output >> 10} KiB and a notebook "
                        f"{self.max_notebook_output >> 20} MiB of output]\n"
                    )
                )
            return None
        return super().output(outs, msg, display_id, cell_index)

    # ------------------------------------------------------- verified test cells

    def preprocess_cell(self, cell, resources, index):
        test = _is_test_cell(cell)
        if test:
            # only this class writes a judgement: whatever the notebook brought goes
            cell.setdefault("metadata", {}).pop(JUDGEMENT_KEY, None)
            if self._skip_hung(cell):
                self._write_judgement(cell, None, None)
                return cell, resources
        cell, resources = super().preprocess_cell(cell, resources, index)
        if test:
            calls = grader_calls(cell.source, self._graders, self._imported)
            self._note_hung(cell, calls)
            judged = None
            if calls is not None:
                start = time.perf_counter()
                judged = self._verify(cell, calls)
                self._verified += 1
                self._verify_seconds += time.perf_counter() - start
            self._write_judgement(cell, calls, judged)
        elif cell.get("cell_type") == "code":
            # Imports in any cell tell which module a grader name comes from.
            grader_calls(cell.source, self._graders, self._imported)
        return cell, resources

    # ------------------------------------------------- functions that never return

    def _checked(self, cell: NotebookNode, calls: list[GraderCall] | None) -> list[str]:
        """The student's functions a test cell checks: the names its grader calls
        pass, else the one its grade id names (``<function>__public``)."""
        names = [v for c in calls or () for kind, v in c.args if kind == "name"]
        if not names:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
            if "__" in grade_id:
                names = [grade_id.rsplit("__", 1)[0]]
        return names

    def _note_hung(self, cell: NotebookNode, calls: list[GraderCall] | None) -> None:
        """After a test cell ran into the time limit: remember the functions it
        checks, and say in its error that they did not return."""
        timeouts = [
            o
            for o in cell.get("outputs", [])
            if o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"
        ]
        if not timeouts:
            return
        names = self._checked(cell, calls)
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "?")
        for name in names:
            self._hung.setdefault(name, grade_id)
        if names:
            said = " / ".join(f"`{n}`" for n in names)
            timeouts[0]["evalue"] = f"{said} did not return"
            timeouts[0]["traceback"] = [f"CellTimeoutError: {said} did not return"]

    def _skip_hung(self, cell: NotebookNode) -> bool:
        """Whether a test cell checks a function that already ran into the time
        limit: then it is not run (no second wait) and fails with that reason."""
        calls = grader_calls(cell.source, self._graders, dict(self._imported))
        hung = [n for n in self._checked(cell, calls) if n in self._hung]
        if not hung:
            return False
        cell.outputs = [
            _failure(
                HUNG_BEFORE,
                f"`{hung[0]}` did not return in cell `{self._hung[hung[0]]}`; "
                "not run again",
            )
        ]
        cell.execution_count = None
        return True

    def _verify(self, cell: NotebookNode, calls: list[GraderCall]) -> Judgement | None:
        """Replace the cell's outputs by the verdict of the replay (see the module
        docstring); the judgement of a failed cell when the replay gives one."""
        errors = [
            o.get("ename", "")
            for o in cell.get("outputs", [])
            if o.get("output_type") == "error"
        ]
        if any(e in _BUSY for e in errors):
            return None  # the kernel may still be running the cell: no probe
        try:
            report = self._probe(cell, calls)
        except Exception as exc:  # noqa: BLE001 - any failure of the probe
            if errors:
                return None  # failed in the kernel anyway: its error stays
            # No answer is no evidence of tampering: say which limit it points to.
            said = f"{type(exc).__name__}: {str(exc)[:300]}"
            limit = _limit_named(said)
            cell.outputs = [
                _failure(
                    "ResourceLimitReached" if limit else "KernelDidNotAnswer",
                    "the kernel did not answer the grading tool's check after this "
                    f"test ({said})"
                    + (f": it reached its limit of {limit}" if limit else "")
                    + "; the test cannot be judged",
                )
            ]
            return None
        tampering = self._tampering(report)
        if tampering is not None:
            cell.outputs = [tampering]
            return None
        note = _children_note(report.get("children"))
        if note:
            # the verdict below is the graders'; this only says what was left running
            self.log.warning("test cell %s: %s", _grade_id(cell), note.strip())
        replay = self._replay(calls, report)
        if errors:
            # Failed in the kernel: zero points whatever the replay says; the
            # replay only says why.
            return self._judgement(cell, replay)
        judged = self._judge(replay, report)
        if judged is None:
            self.log.info(
                "test cell %s judged in the kernel only: its grader uses the "
                "student's function directly",
                cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"),
            )
            return None
        cell.outputs = judged + [_stdout(note)] * bool(note)
        if any(o.get("ename") == "TamperingDetected" for o in judged):
            return None  # its error says tampering: no mistake of the student's
        return self._judgement(cell, replay)

    def _write_judgement(
        self,
        cell: NotebookNode,
        calls: list[GraderCall] | None,
        judged: Judgement | None,
    ) -> None:
        """Store why a failed test cell failed (nothing for a cell that passed):
        the replay's judgement, else what its error output shows."""
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not errors:
            return
        if judged is None:
            judged = self._judgement_from_error(cell, calls, errors[0])
        cell.metadata[JUDGEMENT_KEY] = judged.to_json()

    def _judgement_from_error(
        self, cell: NotebookNode, calls: list[GraderCall] | None, error: NotebookNode
    ) -> Judgement:
        """A failed cell the replay did not judge: a time limit, tampering, or an
        error the graders cannot replay (its message as the example)."""
        ename = str(error.get("ename", ""))
        if ename in _BUSY or ename == HUNG_BEFORE:
            kind = "time-limit"
        elif ename == "TamperingDetected":
            kind = "tampering"
        else:
            kind = "unrecognised"
        example = "" if kind == "time-limit" else f"{ename}: {error.get('evalue', '')}"
        return Judgement(
            _grade_id(cell),
            self._function(cell, calls, None),
            kind,
            example=_first_line(example),
        )

    @staticmethod
    def _function(
        cell: NotebookNode, calls: list[GraderCall] | None, grader: str | None
    ) -> str:
        """The function a test cell checks: the grader's (``check_alibi_bias`` ->
        ``alibi_bias``), else the one its grade id names (``<function>__public``)."""
        if grader is None and calls:
            grader = calls[0].grader
        if grader is not None:
            return _function_of(grader)
        return _grade_id(cell).rsplit("__", 1)[0]

    def _judgement(self, cell: NotebookNode, replay: _Replayed) -> Judgement | None:
        """Why the replay failed the cell, from the exception of the pristine
        grader (never from anything the kernel printed)."""
        from course_lib.checks import _record
        from course_lib.checks._errors import CAUSES, CheckFailed

        exc = replay.error
        if isinstance(exc, _record.Unreplayable):
            return None
        function = self._function(cell, None, replay.grader)
        grade_id = _grade_id(cell)
        if exc is None:
            return None
        if isinstance(exc, _record.Tampered | ValueError):
            return Judgement(grade_id, function, "tampering", example=_first_line(exc))
        if not isinstance(exc, CheckFailed):
            return Judgement(
                grade_id,
                function,
                "unrecognised",
                example=_first_line(f"{type(exc).__name__}: {exc}"),
            )
        slug = getattr(exc, "mistake", None)
        if slug:
            return Judgement(
                grade_id,
                function,
                "mistake",
                mistake=f"{function}:{slug}",
                explanation=str(getattr(exc, "explanation", "") or ""),
                example=_first_line(getattr(exc, "answer", "") or ""),
            )
        cause = getattr(exc, "cause", None)
        if cause in CAUSES:
            return Judgement(grade_id, function, cause, example=_first_line(exc))
        answer = getattr(exc, "answer", None)
        example = _first_line(exc) + (f" [answer: {answer}]" if answer else "")
        return Judgement(grade_id, function, "unrecognised", example=example[:600])

    def _probe(self, cell: NotebookNode, calls: list[GraderCall]) -> dict[str, Any]:
        names = [v for c in calls for kind, v in c.args if kind == "name"]
        graders = [c.grader for c in calls]
        count = int(cell.get("execution_count") or -1)
        expression = (
            f"__import__({_RECORD!r}, fromlist=['probe']).probe("
            f"{count}, {graders!r}{''.join(', ' + n for n in names)})"
        )
        reply = run_sync(self._async_probe)(cell, expression)
        if reply is None:
            raise TimeoutError("no reply in time")
        content = reply.get("content", {})
        answers = content.get("user_expressions") or {}
        result = answers.get("probe") or {}
        if content.get("status") != "ok" or result.get("status") != "ok":
            error = result.get("ename") or content.get("ename") or "no result"
            raise RuntimeError(f"{error}: {str(result.get('evalue', ''))[:200]}")
        text = ast.literal_eval(result["data"]["text/plain"])
        report = json.loads(text)
        if not isinstance(report, dict):
            raise ValueError("the answer is not a JSON object")
        report["names"] = names
        children = answers.get("children") or {}
        if children.get("status") == "ok":
            with contextlib.suppress(ValueError, SyntaxError, KeyError, TypeError):
                report["children"] = ast.literal_eval(children["data"]["text/plain"])
        return report

    async def _async_probe(self, cell: NotebookNode, expression: str):
        msg_id = await ensure_async(
            self.kc.execute(
                "",
                silent=True,
                store_history=False,
                user_expressions={"probe": expression, "children": _CHILDREN},
                allow_stdin=False,
            )
        )
        return await self.async_wait_for_reply(msg_id, cell)

    @staticmethod
    def _tampering(report: dict[str, Any]) -> NotebookNode | None:
        """The failure to show when the kernel reports tampering, else ``None``."""
        if not report.get("active"):
            return _failure(
                "TamperingDetected",
                "tampering detected: the grading recorder in the kernel was "
                "stopped or replaced by code in the notebook (or failed to "
                "start), so this test cannot be trusted",
            )
        tamper = [str(t)[:120] for t in report.get("tamper") or []][:8]
        if tamper:
            return _failure(
                "TamperingDetected",
                "tampering detected: code in the notebook replaced "
                f"{', '.join(tamper)}; the graders cannot trust this kernel",
            )
        return None

    def _replay(self, calls: list[GraderCall], report: dict[str, Any]) -> _Replayed:
        """Run the pristine graders of the cell in this process on the answers the
        kernel recorded; what they printed and the exception that stopped them."""
        from course_lib.checks import _record

        values = dict(zip(report["names"], report.get("args") or [], strict=False))
        events = report.get("events")
        if not isinstance(events, list):
            events = []
        out = io.StringIO()
        current = None
        try:
            with (
                _record.replaying(events, str(report.get("default_dtype"))),
                contextlib.redirect_stdout(out),
            ):
                for call in calls:
                    current = call.grader
                    grader = self._graders[call.grader][call.module]
                    args = []
                    for kind, value in call.args:
                        if kind == "const":
                            args.append(value)
                        elif value in values:
                            args.append(_record.decode(values[value]))
                        else:
                            raise _record.Tampered(
                                f"the kernel did not report the value of {value}"
                            )
                    grader(*args)
        except (Exception, _record.Unreplayable) as exc:  # noqa: BLE001 - judged
            return _Replayed(out.getvalue(), exc, current)
        return _Replayed(out.getvalue(), None, current)

    @staticmethod
    def _judge(replay: _Replayed, report: dict[str, Any]) -> list[NotebookNode] | None:
        """The outputs the cell is scored by: the pristine graders' verdict
        (``None``: the grader cannot be replayed, the kernel's verdict stands; the
        tampering checks have passed)."""
        from course_lib.checks import _record
        from course_lib.checks._errors import CheckFailed

        deferred = report.get("deferred")
        deferred = set(deferred) if isinstance(deferred, list) else set()
        printed = [_stdout(replay.stdout)] * bool(replay.stdout)
        exc = replay.error
        if exc is None:
            return [_stdout(replay.stdout)]
        if isinstance(exc, _record.Unreplayable):
            if replay.grader in deferred:
                # the kernel's grader gave no verdict: nothing else can judge this
                return [
                    _failure(
                        "TamperingDetected",
                        "tampering detected: this test cannot be judged from the "
                        "notebook's record and its kernel gave no verdict",
                    )
                ]
            return None
        if isinstance(exc, _record.Tampered):
            return printed + [
                _failure("TamperingDetected", f"tampering detected: {exc}")
            ]
        if isinstance(exc, CheckFailed):
            if replay.grader in deferred:
                # The kernel's hidden grader holds no expected value and left the
                # verdict to this replay (the grading edition): an honest failure.
                return printed + [_failure(type(exc).__name__, str(exc)[:2000])]
            return printed + [
                _failure(
                    "TamperingDetected",
                    "tampering detected: this test passed inside the notebook but "
                    f"fails when checked outside it: {exc}",
                )
            ]
        if isinstance(exc, ValueError):
            return [
                _failure(
                    "TamperingDetected",
                    f"tampering detected: the kernel's record is malformed ({exc})",
                )
            ]
        # a grader failing on odd values
        return [_failure(type(exc).__name__, str(exc)[:2000])]


@dataclass(frozen=True)
class _Replayed:
    """What the replay of a test cell's graders gave: their stdout, the exception
    that stopped them (``None``: they passed) and the grader that raised it."""

    stdout: str
    error: BaseException | None
    grader: str | None


def _grade_id(cell: NotebookNode) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "?")


def autograde_preprocessors(configured: list | None = None) -> list:
    """nbgrader's autograde preprocessors (``configured``, else nbgrader's default)
    with ``Execute`` replaced by :class:`VerifiedExecute` (test cells judged outside
    the student's kernel, output capped)."""
    if configured is None:
        configured = Autograde.class_traits()["autograde_preprocessors"].default()
    names = {
        "Execute",
        "nbgrader.preprocessors.Execute",
        "nbgrader.preprocessors.execute.Execute",
    }
    return [
        VerifiedExecute
        if pp is Execute or (isinstance(pp, str) and pp in names)
        else pp
        for pp in configured
    ]
