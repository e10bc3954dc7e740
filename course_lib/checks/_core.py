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
"""

from __future__ import annotations

import contextlib
import math
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "CheckFailed",
    "Mistake",
    "call_student",
    "expect_close",
    "expect_equal",
    "expect_scalar",
    "passed",
    "reference_trap",
]

# Captured at import time: later monkeypatching of torch by student code does not
# reach the comparisons below.
_allclose = torch.allclose
_isclose = torch.isclose
_equal = torch.equal
_Tensor = torch.Tensor


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message says what and, where known, why."""


class _ReferenceCalled(BaseException):
    """Raised by a trapped reference. A BaseException, so that a student's
    ``except Exception`` cannot swallow it."""


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer: the tensor it gives and the sentence explaining it."""

    answer: Any
    explanation: str


def _fmt_shape(x: Any) -> str:
    if isinstance(x, _Tensor):
        return str(tuple(x.shape))
    return type(x).__name__


def _fmt(v: float) -> str:
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return str(v)
    return f"{v:.6g}"


def call_student(fn: Callable[..., Any], *args: Any, call: str, **kwargs: Any) -> Any:
    """Run the student's ``fn(*args, **kwargs)`` inside :func:`reference_trap`.

    ``call`` is how the call reads in a message, e.g. ``"alibi_bias(4, 5)"``.
    Exceptions become :class:`CheckFailed` that say which call raised what.
    """
    if not callable(fn):
        raise CheckFailed(f"expected a function, got {type(fn).__name__}")
    with reference_trap(fn) as trap, warnings.catch_warnings(record=True) as caught:
        # Warnings would reach stderr, and nbgrader scores a test cell that writes to
        # stderr zero: collect them and repeat them on stdout instead.
        warnings.simplefilter("always")
        try:
            result = fn(*args, **kwargs)
        except _ReferenceCalled as exc:
            trap.called.append(str(exc))
            result = None
        except NotImplementedError:
            raise CheckFailed(
                f"{call} raised NotImplementedError: the function is still the stub. "
                "Replace `raise NotImplementedError()` with your implementation."
            ) from None
        except CheckFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - any error of the student's code
            raise CheckFailed(f"{call} raised {type(exc).__name__}: {exc}") from exc
    for w in caught:
        print(f"note: {call} warned: {w.category.__name__}: {w.message}")
    if trap.called:
        raise CheckFailed(
            f"{call} calls the course_lib reference ({trap.called[0]}). "
            "The exercise is to write it yourself: a call to the library earns "
            "no points."
        )
    return result


class _Trap:
    def __init__(self) -> None:
        self.called: list[str] = []


def _public_callables() -> dict[int, str]:
    """id -> qualified name of every public callable in the loaded course_lib modules
    (graders excluded: test cells legitimately call them)."""
    found: dict[int, str] = {}
    for modname, module in list(sys.modules.items()):
        if not modname.startswith("course_lib") or module is None:
            continue
        if modname.startswith(("course_lib.checks", "course_lib.grading")):
            continue
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name, None)
            if callable(obj):
                found[id(obj)] = f"course_lib.{name}"
    return found


@contextlib.contextmanager
def reference_trap(fn: Callable[..., Any]) -> Iterator[_Trap]:
    """Replace every public course_lib callable, in the library's modules and in the
    globals of ``fn``, by a trap that records the call; restore them afterwards."""
    trap = _Trap()
    targets = _public_callables()
    saved: list[tuple[dict[str, Any], str, Any]] = []

    def make_trap(qualname: str) -> Callable[..., Any]:
        def trapped(*_a: Any, **_k: Any) -> Any:
            trap.called.append(qualname)
            raise _ReferenceCalled(qualname)

        return trapped

    namespaces: list[dict[str, Any]] = [
        vars(m)
        for n, m in list(sys.modules.items())
        if n.startswith("course_lib")
        and m is not None
        and not n.startswith(("course_lib.checks", "course_lib.grading"))
    ]
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


def expect_close(
    got: Any,
    expected: torch.Tensor,
    *,
    what: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    mistakes: Sequence[Mistake] = (),
    dtype: str | None = None,
) -> None:
    """Compare a student's tensor with the expected one.

    ``what`` names the answer ("sinusoidal_encoding(6, 4)"); ``mistakes`` are known
    wrong answers whose explanation is added when the student's answer equals one
    of them (unless it coincides with the right answer); ``dtype`` is ``"float"``
    or ``"integer"`` when the kind of dtype matters.
    """
    if not isinstance(got, _Tensor):
        raise CheckFailed(
            f"{what} should return a torch.Tensor of shape {tuple(expected.shape)}, "
            f"got {type(got).__name__}"
        )
    for m in mistakes:
        # A "mistake" that coincides with the right answer for these inputs (e.g.
        # power-of-two slopes for 8 heads) says nothing and must not reject.
        if _matches(got, m.answer, atol, rtol) and not _matches(
            expected, m.answer, atol, rtol
        ):
            raise CheckFailed(f"{what} is wrong in a known way: {m.explanation}")
    if got.shape != expected.shape:
        raise CheckFailed(
            f"{what} has the wrong shape: expected {tuple(expected.shape)}, "
            f"got {tuple(got.shape)}"
        )
    if dtype == "integer" and (got.is_floating_point() or got.is_complex()):
        raise CheckFailed(f"{what} should hold integers (torch.long), got {got.dtype}")
    if dtype == "float" and not got.is_floating_point():
        raise CheckFailed(f"{what} should be a floating-point tensor, got {got.dtype}")
    wrong, n_wrong = _first_wrong(got, expected, atol, rtol)
    if n_wrong:
        idx = tuple(int(i) for i in wrong[0])
        e = expected[idx].item()
        g = got[idx].item()
        raise CheckFailed(
            f"{what} has {n_wrong} wrong entr{'y' if n_wrong == 1 else 'ies'} "
            f"of {expected.numel()}; the first is at index {idx}: "
            f"expected {_fmt(e)}, got {_fmt(g)}"
        )


def expect_equal(
    got: Any, expected: torch.Tensor, *, what: str, mistakes: Sequence[Mistake] = ()
) -> None:
    """Exact comparison, for integer answers such as indices and buckets."""
    expect_close(
        got, expected, what=what, atol=0.0, rtol=0.0, mistakes=mistakes, dtype="integer"
    )


def expect_scalar(
    got: Any,
    expected: float,
    *,
    what: str,
    atol: float = 1e-4,
    mistakes: Sequence[tuple[float, str]] = (),
) -> None:
    """Compare a number (Python float or 0-d tensor) with the expected value."""
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
    for value, explanation in mistakes:
        if abs(got - value) <= atol and abs(expected - value) > atol:
            raise CheckFailed(f"{what} is wrong in a known way: {explanation}")
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
