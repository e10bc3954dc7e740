"""Shared machinery of the exercise graders: run a student's function, compare its
answer with the reference, and explain what is wrong in words a student understands.

A grader is a plain function that raises :class:`CheckFailed` (an ``AssertionError``,
so nbgrader marks the test cell as failed) with a teaching message, and prints one
line to *stdout* when everything passes. Nothing here writes to stderr: nbgrader gives
zero points to a test cell that does.

Three rules every grader follows:

* expected values are computed *before* the student's code runs, from references
  captured when this module was imported, so student code that patches ``course_lib``
  later cannot change them;
* the student's function runs inside :func:`reference_trap`, which replaces every
  public ``course_lib`` callable (in the library's modules and in the student's own
  globals) by a trap: a function that merely calls the reference earns nothing;
* a wrong answer is compared with the known mistakes of the exercise, so the message
  can say "this is the concatenated [sin | cos] layout" instead of "wrong value".

Every known mistake has a slug, a short kebab-case id that does not depend on the
inputs (its explanation may), unique among the mistakes of one graded function: the
failure that names it (:func:`known_mistake`) carries it as ``exc.mistake``, so the
grading tool can count across a class how many students made which mistake (its id
is ``"<function>:<slug>"``). A failure that is not a wrong value carries its
``cause`` instead (:data:`~course_lib.checks._errors.CAUSES`), and one that is a wrong
value a short preview of it (``exc.answer``, :func:`preview`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import course_lib

from . import _record
from ._errors import CAUSES, CheckFailed

# The package is lazy; the reference trap and the pristine identities must see
# every library module (course_lib.conventions is imported by no grader).
course_lib._load_all()

__all__ = [
    "DEFAULT_VARIANT",
    "TERM_PARAMS",
    "CheckFailed",
    "Mistake",
    "Variant",
    "answer_shown",
    "call_student",
    "deferred_grade",
    "expect_close",
    "expect_equal",
    "expect_scalar",
    "hinted",
    "hints_wanted",
    "known_mistake",
    "passed",
    "preview",
    "plan_key",
    "reference_trap",
    "require_plain",
    "term_rng",
    "variant_named",
    "with_hint",
]

# Captured at import time: later monkeypatching of torch by student code does not
# reach the comparisons below.
_allclose = torch.allclose
_isclose = torch.isclose
_equal = torch.equal
_Tensor = torch.Tensor
_WIDE_FLOATS = (torch.float32, torch.float64)
_WIDE_INTEGERS = (torch.int32, torch.int64)


class _ReferenceCalled(BaseException):
    """Raised by a trapped reference. A BaseException, so that a student's
    ``except Exception`` cannot swallow it."""


# a slug: lower-case words of letters and digits joined by single hyphens
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SLUG_MAX = 40


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer: the value it gives (a tensor, a number, ...), the
    sentence explaining it, and its slug (see the module docstring). The slug has no
    default: a mistake without one fails when it is made.

    ``hint``, when given, is the fix, kept apart from the explanation: where the fix
    is the very step the exercise asks for, the explanation says only what is wrong,
    the message points to the chapter's section, and the hint is shown only when the
    student asks for it (:func:`hints_wanted`)."""

    answer: Any
    explanation: str
    slug: str
    hint: str = ""

    def __post_init__(self) -> None:
        if (
            not isinstance(self.slug, str)
            or len(self.slug) > _SLUG_MAX
            or not _SLUG.fullmatch(self.slug)
        ):
            raise ValueError(
                f"a known mistake's slug must be kebab-case (a-z, 0-9, single "
                f"hyphens), at most {_SLUG_MAX} characters: got {self.slug!r}"
            )


_NOTHING: Any = object()

# --------------------------------------------------------------------------------------
# variants: answers that change each term (the course configuration's CourseTerm)

DEFAULT_VARIANT = "default"
# The grader parameters a term sets, in this order, after the student's functions: a
# public check may take ``variant``; a hidden grader ``variant`` and ``seed``.
# ``course release`` writes their values into the test cells as constants
# (:func:`course_lib.grading.editions.term.grader_values`); ``None`` is the open edition's.
TERM_PARAMS = ("variant", "seed")


@dataclass(frozen=True)
class Variant:
    """A variant of an exercise: what a term may ask instead of the default answer.

    A checks module declares ``VARIANTS = {name: Variant(...)}`` (kebab-case names,
    never ``"default"``). ``summary`` is one line for the instructor (``course term``
    lists it); ``references`` maps each graded function whose right answer changes
    to the name of the checks module's function that computes the variant's answer
    (a private ``_reference_...`` function, stored for the student edition's public
    checks); the hidden grader is planned with it (the grading edition) and tests
    compare the variant's solution with it. ``sections`` maps a graded function to
    the :class:`~course_lib.checks.sections.Section` that teaches the variant, when it
    is not the one :data:`~course_lib.checks.sections.SECTIONS` gives."""

    summary: str
    references: dict[str, str]
    sections: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.references:
            raise ValueError("a variant changes the answer of at least one function")


# the Section of each graded function whose variant teaches it elsewhere, for the
# grader running now (set by variant_named)
_variant_sections: dict[str, Any] = {}


def variant_named(variants: dict[str, Variant], variant: str | None,
                  exercise: str) -> str:
    """The variant a grader was asked for: ``DEFAULT_VARIANT`` for ``None``, else
    ``variant`` when ``variants`` (the checks module's ``VARIANTS``) declares it; any
    other name is a ``ValueError`` that lists the known ones."""
    global _variant_sections
    if variant is None or variant == DEFAULT_VARIANT:
        _variant_sections = {}
        return DEFAULT_VARIANT
    if variant not in variants:
        known = ", ".join([DEFAULT_VARIANT, *sorted(variants)])
        raise ValueError(
            f"{exercise} has no variant {variant!r}; its variants: {known}"
        )
    # the sections a hint points to follow the variant (every grader of an
    # exercise with variants starts here, so this is never another grader's)
    _variant_sections = dict(variants[variant].sections)
    return variant


def term_rng(seed: int, grader: str):
    """The random source of a hidden grader's cases for a term's ``seed``: a
    ``random.Random`` seeded with the seed and the grader's name (two graders of one
    term draw different cases; the same seed gives the same cases on every machine
    and Python version, as string seeding is stable)."""
    import random

    return random.Random(f"{int(seed)}:{grader}")


def plan_key(grader: str, values: Sequence[Any]) -> str:
    """The key of a hidden grader's planned calls in the grading edition: its name
    for the open edition's call (every term value ``None``), else the name and the
    term values the hidden cell passes (``grade_alibi_bias('causal', 7)``)."""
    values = tuple(values)
    if all(v is None for v in values):
        return grader
    return f"{grader}{values!r}"


# The second level of a message: set to 1 by ``course check --hint``, or by the
# student (``os.environ["COURSE_HINTS"] = "1"`` in the notebook), read at each failure.
HINTS_VARIABLE = "COURSE_HINTS"


def hints_wanted() -> bool:
    """Whether the student asked for hints (the environment variable
    :data:`HINTS_VARIABLE` is ``1``, ``true`` or ``yes``)."""
    import os

    return os.environ.get(HINTS_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def _section_pointer(what: str) -> str:
    """"Reread ..." for the graded function that ``what`` names (its call), from
    :data:`course_lib.checks.sections.SECTIONS` (or the running variant's own
    section, :class:`Variant`); empty when none is named."""
    from .sections import SECTIONS

    table = {**SECTIONS, **_variant_sections}
    found = [
        (what.find(f"{name}("), name)
        for name in table
        if re.search(rf"(?<![A-Za-z0-9_]){name}\(", what)
    ]
    if not found:
        return ""
    section = table[min(found)[1]]
    chapter = section.page.removeprefix("book/")
    number = chapter.split("-", 1)[0].lstrip("0")
    return (
        f" Reread the section \"{section.title}\" of chapter {number} "
        f"({chapter})."
    )


def with_hint(message: str, hint: str, what: str = "") -> str:
    """``message``, then where to look (the section of the function ``what`` names),
    then the hint when the student asked for hints, else how to ask for one."""
    if not hint:
        return message
    text = message.rstrip()
    if not text.endswith((".", "!", "?", ")")):
        text += "."
    text += _section_pointer(what or message)
    if hints_wanted():
        return f"{text} Hint: {hint}"
    return (
        f"{text} (For a hint: `course check --hint <notebook>`, or run "
        f'`import os; os.environ["{HINTS_VARIABLE}"] = "1"` in the notebook and '
        "rerun this cell.)"
    )


def hinted(mistake: Mistake, hint: str) -> Mistake:
    """``mistake`` with its fix as the hint (see :class:`Mistake`)."""
    return dataclasses.replace(mistake, hint=hint)


def known_mistake(what: str, mistake: Mistake, *, got: Any = _NOTHING) -> CheckFailed:
    """The failure for an answer that is ``mistake``: the message names it, and
    ``exc.mistake`` (the slug) and ``exc.explanation`` carry it for the grading
    tool's records; ``got``, when given, the student's answer, is previewed in
    ``exc.answer``. A mistake with a hint adds where to look and the hint or how to
    ask for it (:func:`with_hint`)."""
    # With a hint, what follows the explanation (where to look, the hint or how to
    # ask for it) is part of what the student was told, and recorded with it.
    told = with_hint(mistake.explanation, mistake.hint, what)
    exc = CheckFailed(f"{what} is wrong in a known way: {told}")
    exc.mistake = mistake.slug
    exc.explanation = told
    if got is not _NOTHING:
        exc.answer = preview(got)
    return exc


_PREVIEW_MAX = 200
_PREVIEW_VALUES = 6


def _short(v: Any) -> str:
    """A plain number as text; anything else (a subclass too) by its type's name."""
    if type(v) in (bool, int):
        return str(v)
    if type(v) is float:
        if math.isinf(v) or math.isnan(v):
            return str(v)
        return f"{v:.4g}"
    if type(v) is complex:
        return f"({_short(v.real)}{'+' if v.imag >= 0 else '-'}{_short(abs(v.imag))}j)"
    return type(v).__name__


def preview(value: Any) -> str:
    """A short plain-text preview of a student's answer, at most 200 characters:
    a tensor's shape, dtype and first values (``"tensor of shape (4, 5, 5),
    float32: 0, -0.5, -1, -1.5, -2, -2.5, ..."``), a number itself, anything else
    its type's name; a tuple, list or dict shows its first items so (nothing of the
    student's code runs: no ``repr``)."""
    try:
        text = _preview(value)
    except Exception:  # noqa: BLE001 - an odd tensor: say what it is at least
        text = type(value).__name__
    return text if len(text) <= _PREVIEW_MAX else text[: _PREVIEW_MAX - 3] + "..."


@contextlib.contextmanager
def answer_shown(got: Any) -> Iterator[None]:
    """A failure raised inside this block judged the wrong value ``got``: it gets
    ``got``'s preview as ``exc.answer`` (unless it has one), as the failures of
    :func:`expect_close` do (for a grader's own checks of a value's properties)."""
    try:
        yield
    except CheckFailed as exc:
        if exc.answer is None:
            exc.answer = preview(got)
        raise


def _preview(value: Any) -> str:
    if isinstance(value, _Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            head = (
                f"tensor of shape {tuple(value.shape)}, "
                f"{str(value.dtype).removeprefix('torch.')}"
            )
            if (
                value.is_nested
                or value.layout != torch.strided
                or value.device.type == "meta"
            ):
                layout = "nested" if value.is_nested else str(value.layout)
                return f"{head} ({layout.removeprefix('torch.')}, {value.device})"
            flat = value.detach().to("cpu").reshape(-1)
            n = flat.numel()
            shown = [_short(v) for v in flat[:_PREVIEW_VALUES].tolist()]
        more = ", ..." if n > _PREVIEW_VALUES else ""
        return f"{head}: {', '.join(shown)}{more}" if n else f"{head}: empty"
    if type(value) in (tuple, list):
        items = [_preview(v) for v in value[:3]]
        more = ", ..." if len(value) > 3 else ""
        return f"{type(value).__name__} of {len(value)}: ({'; '.join(items)}{more})"
    if type(value) is dict:
        items = [f"{_short(k)}: {_short(v)}" for k, v in list(value.items())[:4]]
        more = ", ..." if len(value) > 4 else ""
        return f"dict of {len(value)}: {{{', '.join(items)}{more}}}"
    return _short(value)


def _fmt_shape(x: Any) -> str:
    if isinstance(x, _Tensor):
        return str(tuple(x.shape))
    return type(x).__name__


def _fmt(v: float) -> str:
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return str(v)
    return f"{v:.6g}"


class _DidNotReturn(BaseException):
    """Raised into a student's function that ran past its time limit. A
    BaseException, so that a student's ``except Exception`` cannot swallow it."""


# function name -> (that function, the call of it that did not return in time);
# a function defined again (its cell run again) is a new object and runs again
_HUNG: dict[str, tuple[Callable[..., Any], str]] = {}


def call_student(fn: Callable[..., Any], *args: Any, call: str, **kwargs: Any) -> Any:
    """Run the student's ``fn(*args, **kwargs)`` inside :func:`reference_trap`.

    ``call`` is how the call reads in a message, e.g. ``"alibi_bias(4, 5)"``.
    Exceptions become :class:`CheckFailed` that say which call raised what.
    At grading the call is also recorded, and the test is judged again outside the
    student's kernel from that record (see :mod:`course_lib.checks._record`).

    Outside grading (a student's notebook, ``course check``) the call gets the
    assignment's time limit (:mod:`course_lib._time_limits`): a function that
    does not return within it fails its check with a message that says so, and a
    later check of the same function fails at once instead of waiting again. At
    grading, the grading tool keeps the time limit, outside the kernel.
    """
    active = _record.session()
    if active is not None:
        result, notes = active.call(_call_student, fn, args, kwargs, call)
    else:
        limit = _limit_for(sys._getframe(1).f_globals.get("__name__", ""))
        with _time_limit(fn, call, limit):
            result, notes = _call_student(fn, args, kwargs, call)
    for note in notes:
        print(note)
    return result


def _limit_for(module: str) -> tuple[str, float | None]:
    """The assignment a grader module checks, and its time limit."""
    from .._time_limits import check_time_limit

    assignment = module.rsplit(".", 1)[-1] if module.startswith(__package__) else ""
    return assignment, check_time_limit(assignment)


@contextlib.contextmanager
def _time_limit(
    fn: Callable[..., Any], call: str, limit: tuple[str, float | None]
) -> Iterator[None]:
    """Let ``fn`` run at most the limit (a SIGALRM timer: the main thread only,
    as Jupyter runs a cell); otherwise :class:`CheckFailed` saying that it did not
    return, and the function is remembered (:data:`_HUNG`)."""
    import signal
    import threading

    from .._time_limits import SOLUTION_CHECK_SECONDS

    assignment, seconds = limit
    name = getattr(fn, "__name__", "the function")
    if name in _HUNG and _HUNG[name][0] is fn:
        raise _failure(
            f"not run: {_HUNG[name][1]} did not return in an earlier check, and this "
            f"check calls `{name}` too. Fix that first (then run its cell again).",
            "time-limit",
        )
    if (
        seconds is None
        or threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "setitimer")
    ):
        yield
        return

    def stop(signum, frame):
        raise _DidNotReturn()

    previous = signal.signal(signal.SIGALRM, stop)
    # again every second, should the student's code swallow the first one
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    except _DidNotReturn:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _HUNG[name] = (fn, call)
        cost = SOLUTION_CHECK_SECONDS.get(assignment, {}).get(name)
        reference = (
            f" (the course's solution passes this whole check in {cost:g} s)"
            if cost
            else ""
        )
        raise _failure(
            f"{call} did not return within {seconds:g} s{reference}: look for a "
            "loop that never ends, or a size that grows with every step.",
            "time-limit",
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _failure(message: str, cause: str) -> CheckFailed:
    """A failure that is not a wrong value: ``cause`` is one of :data:`CAUSES`."""
    assert cause in CAUSES, cause
    exc = CheckFailed(message)
    exc.cause = cause
    return exc


def _call_student(
    fn: Callable[..., Any], args: tuple, kwargs: dict, call: str
) -> tuple[Any, list[str]]:
    """:func:`call_student`'s work: the result, and the notes to print after it."""
    if not callable(fn):
        raise CheckFailed(f"expected a function, got {type(fn).__name__}")
    inputs = _snapshot(fn, args, kwargs)
    with (
        reference_trap(fn) as trap,
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stderr(sys.stdout),
    ):
        # Warnings and prints to stderr would reach stderr, and nbgrader scores a test
        # cell that writes to stderr zero: collect the warnings and repeat them on
        # stdout, and send the student's own stderr to stdout.
        warnings.simplefilter("always")
        try:
            result = fn(*args, **kwargs)
        except _ReferenceCalled as exc:
            trap.called.append(str(exc))
            result = None
        except NotImplementedError:
            raise _failure(
                f"{call} raised NotImplementedError: the function is still the stub. "
                "Replace `raise NotImplementedError()` with your implementation.",
                "not-attempted",
            ) from None
        except CheckFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - any error of the student's code
            raise _failure(
                f"{call} raised {type(exc).__name__}: {exc}", "raised"
            ) from exc
    notes = [f"note: {call} warned: {w.category.__name__}: {w.message}" for w in caught]
    if trap.called:
        for note in notes:
            print(note)
        raise _failure(
            f"{call} calls the course_lib reference (the call reached "
            f"{trap.called[0]}). "
            "The exercise is to write it yourself: a call to the library earns "
            "no points.",
            "calls-library",
        )
    try:
        _check_unchanged(inputs, call)
    except CheckFailed:
        for note in notes:
            print(note)
        raise
    return result, notes


def _snapshot(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(name, argument, copy)`` of every tensor or list argument, to find out after
    the call whether the student's function changed one of them in place."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    out = []
    given = [
        (names[i] if i < len(names) else f"number {i + 1}", a)
        for i, a in enumerate(args)
    ]
    for name, value in [*given, *kwargs.items()]:
        if isinstance(value, _Tensor):
            out.append((name, value, value.detach().clone()))
        elif isinstance(value, list):
            out.append((name, value, copy.deepcopy(value)))
    return out


def _check_unchanged(inputs: list[tuple[str, Any, Any]], call: str) -> None:
    for name, value, before in inputs:
        if isinstance(value, _Tensor):
            now = value.detach()
            same = (
                now.shape == before.shape
                and now.dtype == before.dtype
                and bool(((now == before) | ((now != now) & (before != before))).all())
            )
        else:
            same = value == before
        if not same:
            raise _failure(
                f"{call} changed its input {name} in place; leave the inputs as "
                "they are and return a new tensor (x * 2, not x *= 2 or x.mul_(2)): "
                "the caller still uses them",
                "changed-input",
            )


class _Trap:
    def __init__(self) -> None:
        self.called: list[str] = []


def _course_modules() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """The loaded course_lib modules, in one pass over ``sys.modules`` (it holds
    thousands of modules once torch's compiler, Jupyter or a test run are loaded:
    this runs at every call of a student's function): the library's, graders and
    the grading tool excluded (test cells legitimately call them), and the exercise
    graders (``course_lib.checks.exNN_topic``)."""
    library, graders = [], []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("course_lib"):
            continue
        if name.startswith("course_lib.checks.ex"):
            if _GRADER_MODULE.fullmatch(name):
                graders.append((name, module))
        elif not name.startswith(("course_lib.checks", "course_lib.grading")):
            library.append((name, module))
    return library, graders


# The exercise graders' own answers: a checks module's ``_ref_<name>`` and its
# private expected-value and known-mistake helpers (the names the student edition
# stores, :data:`course_lib.checks._stored._LOCAL`). ex10's answer exists nowhere
# else in the package.
_GRADER_ANSWER = re.compile(r"_ref_\w+|_\w*(reference|expected|variant|mistakes)\w*")
_GRADER_MODULE = re.compile(r"course_lib\.checks\.ex\d+_\w+")


def _public_callables(
    modules: list[tuple[str, Any]], graders: list[tuple[str, Any]]
) -> dict[int, str]:
    """id -> qualified name of every callable of the loaded course_lib modules
    (``modules`` and ``graders``, from :func:`_course_modules`): the public ones
    (``__all__``) and the private helpers defined there, which would otherwise do
    part of the exercise (``course_lib.relative._relative_positions``)."""
    found: dict[int, str] = {}
    for _, module in modules:
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name, None)
            if callable(obj):
                found.setdefault(id(obj), f"course_lib.{name}")
    for modname, module in modules:
        for name, obj in list(vars(module).items()):
            if (
                callable(obj)
                and str(getattr(obj, "__module__", "")).startswith("course_lib")
                and not isinstance(obj, type(sys))
            ):
                found.setdefault(id(obj), f"{modname}.{name}")
    for modname, module in graders:
        for name, obj in list(vars(module).items()):
            # defined in the package: the grader's own, or (student edition) the
            # stored answers that stand in for it
            if (
                _GRADER_ANSWER.fullmatch(name)
                and callable(obj)
                and str(getattr(obj, "__module__", "")).startswith("course_lib")
            ):
                found.setdefault(id(obj), f"{modname}.{name}")
    return found


@contextlib.contextmanager
def reference_trap(fn: Callable[..., Any]) -> Iterator[_Trap]:
    """Replace every public course_lib callable, in the library's modules and in the
    globals of ``fn``, by a trap that records the call; restore them afterwards."""
    trap = _Trap()
    library, graders = _course_modules()
    targets = _public_callables(library, graders)
    saved: list[tuple[dict[str, Any], str, Any]] = []

    def make_trap(qualname: str) -> Callable[..., Any]:
        def trapped(*_a: Any, **_k: Any) -> Any:
            trap.called.append(qualname)
            raise _ReferenceCalled(qualname)

        return trapped

    namespaces: list[dict[str, Any]] = [vars(m) for _, m in [*library, *graders]]
    student_globals = getattr(fn, "__globals__", None)
    if isinstance(student_globals, dict):
        namespaces.append(student_globals)
    for ns in namespaces:
        for key, value in list(ns.items()):
            if id(value) in targets and callable(value):
                saved.append((ns, key, value))
                ns[key] = make_trap(targets[id(value)])
    try:
        yield trap
    finally:
        for ns, key, value in reversed(saved):
            ns[key] = value


def _first_wrong(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float):
    close = _isclose(
        got.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True
    )
    wrong = (~close).nonzero()
    return wrong, int((~close).sum())


def _matches(got: Any, answer: Any, atol: float, rtol: float) -> bool:
    if isinstance(answer, _Tensor):
        return (
            isinstance(got, _Tensor)
            and got.shape == answer.shape
            and bool(
                _allclose(
                    got.double(), answer.double(), atol=atol, rtol=rtol, equal_nan=True
                )
            )
        )
    return False


def require_plain(got: torch.Tensor, what: str) -> None:
    """A dense tensor on the CPU, as the inputs are: a sparse, nested or meta tensor
    would make the comparisons fail with an obscure PyTorch error instead."""
    if got.is_nested or got.layout != torch.strided or got.device.type != "cpu":
        layout = "nested" if got.is_nested else str(got.layout).replace("torch.", "")
        raise CheckFailed(
            f"{what} should be an ordinary dense tensor on the CPU, like the inputs; "
            f"got a {layout} tensor on {got.device}"
        )


def expect_close(
    got: Any,
    expected: torch.Tensor,
    *,
    what: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    mistakes: Sequence[Mistake] = (),
    dtype: str | torch.dtype | None = None,
    dtype_reason: str = "",
) -> None:
    """Compare a student's tensor with the expected one.

    ``what`` names the answer ("sinusoidal_encoding(6, 4)"); ``mistakes`` are known
    wrong answers whose explanation is added when the student's answer equals one
    of them (unless it coincides with the right answer). ``dtype`` is ``"float"``
    (float32 or float64: half precision cannot meet the tolerances), ``"integer"``
    (int32 or int64: narrower integers wrap around on long inputs), or an exact
    ``torch.dtype`` the task asks for; ``dtype_reason`` says why it matters. An
    exact dtype is checked after the values, so that a right answer in the wrong
    dtype is told just that. Every failure carries a preview of ``got``
    (``exc.answer``).
    """
    with answer_shown(got):
        _expect_close(got, expected, what, atol, rtol, mistakes, dtype, dtype_reason)


def _expect_close(
    got: Any,
    expected: torch.Tensor,
    what: str,
    atol: float,
    rtol: float,
    mistakes: Sequence[Mistake],
    dtype: str | torch.dtype | None,
    dtype_reason: str,
) -> None:
    if not isinstance(got, _Tensor):
        raise CheckFailed(
            f"{what} should return a torch.Tensor of shape {tuple(expected.shape)}, "
            f"got {type(got).__name__}"
        )
    require_plain(got, what)
    # A right answer is never compared with the mistakes: one that lies within the
    # tolerance of both the right answer and a mistake is right.
    right = _matches(got, expected, atol, rtol)
    for m in () if right else mistakes:
        # A "mistake" that coincides with the right answer for these inputs (e.g.
        # power-of-two slopes for 8 heads) says nothing and must not reject.
        if _matches(got, m.answer, atol, rtol) and not _matches(
            expected, m.answer, atol, rtol
        ):
            raise known_mistake(what, m)
    if got.shape != expected.shape:
        raise CheckFailed(
            f"{what} has the wrong shape: expected {tuple(expected.shape)}, "
            f"got {tuple(got.shape)}"
        )
    exact = dtype if isinstance(dtype, torch.dtype) else None
    integer = dtype == "integer" or (exact is not None and not exact.is_floating_point)
    floating = dtype == "float" or (exact is not None and exact.is_floating_point)
    if integer and got.dtype not in _WIDE_INTEGERS:
        if got.is_floating_point() or got.is_complex():
            raise CheckFailed(
                f"{what} should hold integers (torch.long), got {got.dtype}"
            )
        raise CheckFailed(
            f"{what} should be a torch.long tensor, got {got.dtype}"
            + (
                ""
                if got.dtype == torch.bool
                else f" (it wraps around beyond {int(torch.iinfo(got.dtype).max)})"
            )
        )
    if floating and got.dtype not in _WIDE_FLOATS:
        if not got.is_floating_point():
            raise CheckFailed(
                f"{what} should be a floating-point tensor, got {got.dtype}"
            )
        raise CheckFailed(
            f"{what} is {got.dtype}, which is too coarse for these numbers: "
            "use float32 (or float64)"
        )
    wrong, n_wrong = _first_wrong(got, expected, atol, rtol)
    if n_wrong:
        idx = tuple(int(i) for i in wrong[0])
        e = expected[idx].item()
        g = got[idx].item()
        note = ""
        if exact is not None and got.dtype != exact:
            note = f" (and the dtype should be {exact}, got {got.dtype})"
        raise CheckFailed(
            f"{what} has {n_wrong} wrong entr{'y' if n_wrong == 1 else 'ies'} "
            f"of {expected.numel()}; the first is at index {idx}: "
            f"expected {_fmt(e)}, got {_fmt(g)}{note}"
        )
    if exact is not None and got.dtype != exact:
        raise CheckFailed(
            f"{what} has the right values, but its dtype is {got.dtype} instead of "
            f"{exact}" + (f"; {dtype_reason}" if dtype_reason else "")
        )


def expect_equal(
    got: Any, expected: torch.Tensor, *, what: str, mistakes: Sequence[Mistake] = ()
) -> None:
    """Exact comparison, for integer answers such as indices and buckets (int64 or
    int32; bool and narrower integers are rejected)."""
    expect_close(
        got, expected, what=what, atol=0.0, rtol=0.0, mistakes=mistakes, dtype="integer"
    )


def expect_scalar(
    got: Any,
    expected: float,
    *,
    what: str,
    atol: float = 1e-4,
    mistakes: Sequence[Mistake] = (),
) -> None:
    """Compare a number (Python float or 0-d tensor) with the expected value;
    ``mistakes`` are known wrong numbers (``Mistake(value, explanation, slug)``).
    Every failure carries a preview of ``got`` (``exc.answer``)."""
    with answer_shown(got):
        _expect_scalar(got, expected, what, atol, mistakes)


def _expect_scalar(
    got: Any, expected: float, what: str, atol: float, mistakes: Sequence[Mistake]
) -> None:
    if isinstance(got, _Tensor):
        if got.numel() != 1:
            raise CheckFailed(
                f"{what} should be a single number, got a tensor of "
                f"shape {tuple(got.shape)}"
            )
        got = got.item()
    if not isinstance(got, int | float) or isinstance(got, bool):
        raise CheckFailed(f"{what} should be a number, got {type(got).__name__}")
    if abs(got - expected) <= atol:
        return
    for m in mistakes:
        if abs(got - m.answer) <= atol and abs(expected - m.answer) > atol:
            raise known_mistake(what, m, got=got)
    raise CheckFailed(
        f"{what}: expected {_fmt(float(expected))}, got {_fmt(float(got))}"
    )


def passed(name: str, *, public: bool, detail: str = "") -> None:
    """Print the one success line (stdout only)."""
    extra = f" ({detail})" if detail else ""
    if public:
        print(
            f"{name}: all public checks passed{extra}. "
            "More (hidden) tests run when your work is graded."
        )
    else:
        print(f"{name}: passed{extra}.")


# --------------------------------------------------------------------------------------
# the grading edition's hidden graders: make the planned calls, leave the verdict

_plans: dict[str, Any] | None = None


def deferred_grade(grader: str, arguments: tuple, term: tuple = ()) -> None:
    """A hidden grader of the *grading edition* (the ``course_lib`` a sandboxed
    grading kernel sees,
    :func:`course_lib.grading.editions.library.write_grading_edition`): it holds no
    reference and no expected value. It makes the calls the pristine grader makes
    (``call_student`` with the planned inputs, stored in ``checks/_plans.pt``), so they
    are recorded, and gives no verdict: the grading tool's replay judges them, outside
    the kernel. The planned calls are made until
    one raises (a wrong answer does not stop them: only the replay knows it is
    wrong); the replay reads as far as its grader goes. ``term`` holds the values of
    the grader's :data:`TERM_PARAMS` (the variant and seed the hidden cell passes):
    each has its own plan (:func:`plan_key`)."""
    global _plans
    if _plans is None:
        path = __file__.rsplit("/", 1)[0] + "/" + _record.PLANS_FILE
        _plans = torch.load(path, weights_only=False)
    dtype = str(torch.get_default_dtype()).removeprefix("torch.")
    key = plan_key(grader, term)
    plan = _plans.get(dtype, {}).get(key, _plans["float32"].get(key))
    if plan is None:
        raise RuntimeError(
            f"the grading edition has no plan for {key}: it was written for "
            "another term (course autograde writes it for the course's CourseTerm)"
        )
    active = _record.session()
    if isinstance(active, _record._Recorder):
        active.deferred.add(grader)
    for position, call, args, kwargs in plan:
        # a fresh copy per call: the student's function may change its inputs
        args, kwargs = _copy_value(args), _copy_value(kwargs)
        try:
            call_student(arguments[position], *args, call=call, **kwargs)
        except CheckFailed:
            # The student's function raised (or was caught calling a reference):
            # the pristine grader stops there too, as no grader catches CheckFailed.
            return


def _copy_value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if type(value) in (list, tuple):
        return type(value)(_copy_value(v) for v in value)
    if type(value) is dict:
        return {k: _copy_value(v) for k, v in value.items()}
    return value
