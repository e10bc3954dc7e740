"""Graders whose verdict student code cannot change: record in the kernel, judge
outside it.

A test cell runs in the student's kernel, after the student's own code. Whatever
runs there can be changed by that code: a grader can be redefined, ``torch.allclose``
replaced, an IPython input transformer can blank the hidden cell, an exception
handler can hide the failure nbgrader looks for. So at grading
(``course autograde``) the verdict of a test cell is not taken from the kernel:

1. The kernel is started with :func:`start` (before any cell): every
   :func:`~course_lib.checks._core.call_student` then also *records* what it gave the
   student's function and what came back (or which error it reported), and the
   identities of the grader, ``course_lib``, ``torch`` and builtin functions are
   remembered while they are still pristine.
2. After each test cell the grading tool asks the kernel for the record of that cell,
   the values of the cell's arguments and any tampering it can see (:func:`probe`).
3. The grading tool, in its own process where no student code ever ran, calls the
   *pristine* grader with :func:`replaying`: ``call_student`` then returns the
   recorded answers instead of calling anything, and every comparison, reference
   value and message comes from the trusted process. The record is plain JSON
   (tensors as dtype, shape and bytes), decoded strictly (:func:`decode`): nothing
   from the kernel is ever executed or unpickled.

A tampered kernel can only lie about what the student's function returned, which is
what a student controls anyway; if it hides calls, changes the grader's inputs or
stops recording, the replay finds out and the cell fails with "tampering detected".
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._errors import CAUSES, CheckFailed

__all__ = [
    "StudentFunction",
    "Tampered",
    "Unreplayable",
    "decode",
    "encode",
    "probe",
    "replaying",
    "session",
    "start",
]

# Captured at import: student code that patches torch later does not reach these.
_Tensor = torch.Tensor
_allclose = torch.allclose
_equal = torch.equal
_frombuffer = torch.frombuffer
_empty = torch.empty

_DTYPES = {
    str(dt).removeprefix("torch."): dt
    for dt in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    )
}
_NUMPY_KINDS = "biufc"
MAX_RECORD_BYTES = 64 << 20  # per cell; larger answers are recorded as opaque
_MAX_DEPTH = 12
_KEY_TYPES = (str, int, float, bool, type(None))
_MAX_TEXT = 4000


class Tampered(Exception):
    """The kernel's record does not match what the pristine grader does."""


class Unreplayable(BaseException):
    """The grader used the student's function other than through ``call_student``
    (e.g. inside a model it trains): the record cannot answer that. A
    ``BaseException``, so that a grader's ``except Exception`` lets it through."""


class _Budget:
    def __init__(self, limit: int = MAX_RECORD_BYTES) -> None:
        self.left = limit

    def take(self, n: int) -> bool:
        if n > self.left:
            return False
        self.left -= n
        return True


# --------------------------------------------------------------------------------------
# encoding (in the kernel) and strict decoding (in the grader's process)


def _tensor_bytes(t: torch.Tensor) -> bytes:
    flat = t.reshape(-1)
    if flat.numel() == 0:
        return b""
    return bytes(flat.view(torch.uint8).numpy())


def encode(value: Any, budget: _Budget | None = None, depth: int = 0) -> Any:
    """A JSON-ready description of ``value``: numbers, strings and None as they are;
    tensors, NumPy arrays and containers as one-key objects; anything else only by
    its type name (``{"opaque": "MyClass"}``).

    >>> encode((torch.tensor([1, 2], dtype=torch.int8), 0.5, float("inf")))
    {'tuple': [{'tensor': ['int8', [2], 'AQI=']}, 0.5, {'float': 'inf'}]}
    >>> decode(encode({8: 0.5}))
    {8: 0.5}
    """
    budget = budget or _Budget()
    if depth > _MAX_DEPTH:
        return {"opaque": "nested too deeply"}
    if value is None or isinstance(value, bool):
        return value
    if type(value) is int:
        return value if abs(value) < 2**63 else {"opaque": "int (too large)"}
    if type(value) is float:
        if math.isfinite(value):
            return value
        return {"float": repr(value)}
    if type(value) is str:
        return value[:_MAX_TEXT]
    if isinstance(value, _Tensor):
        return _encode_tensor(value, budget)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic):
        if value.dtype.kind in _NUMPY_KINDS:
            item = value.item()
            return {"npscalar": [str(value.dtype), encode(item, budget, depth + 1)]}
        return {"opaque": type(value).__name__}
    if np is not None and isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMPY_KINDS or value.dtype.hasobject:
            return {"opaque": "ndarray"}
        raw = np.ascontiguousarray(value).tobytes()
        if not budget.take(len(raw)):
            return {"opaque": "ndarray (too large to record)"}
        return {
            "ndarray": [
                value.dtype.str,
                list(value.shape),
                base64.b64encode(raw).decode(),
            ]
        }
    if type(value) in (tuple, list):
        key = "tuple" if type(value) is tuple else "list"
        return {key: [encode(v, budget, depth + 1) for v in value[:10_000]]}
    if type(value) is dict and all(type(k) in _KEY_TYPES for k in value):
        return {
            "dict": [
                [encode(k, budget, depth + 1), encode(v, budget, depth + 1)]
                for k, v in value.items()
            ]
        }
    if callable(value):
        return {"callable": str(getattr(value, "__qualname__", type(value).__name__))}
    return {"opaque": type(value).__name__}


def _encode_tensor(value: torch.Tensor, budget: _Budget) -> Any:
    with torch._C.DisableTorchFunctionSubclass():
        if value.layout != torch.strided or value.is_quantized:
            return {"opaque": f"Tensor ({value.layout})"}
        name = str(value.dtype).removeprefix("torch.")
        if name not in _DTYPES:
            return {"opaque": f"Tensor ({name})"}
        t = value.detach().to("cpu").contiguous()
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        raw = _tensor_bytes(t)
    if not budget.take(len(raw)):
        return {"opaque": "Tensor (too large to record)"}
    return {"tensor": [name, list(t.shape), base64.b64encode(raw).decode()]}


def _opaque_type(name: Any) -> type:
    text = re.sub(r"[^0-9A-Za-z_ ()]", "", str(name))[:80] or "object"
    return type(text, (), {"__repr__": lambda self: f"<{text}>"})


def _shape(obj: Any) -> list[int]:
    if not isinstance(obj, list) or len(obj) > 16:
        raise ValueError("bad shape")
    if not all(type(n) is int and 0 <= n < 2**40 for n in obj):
        raise ValueError("bad shape")
    return obj


def decode(obj: Any, budget: _Budget | None = None, depth: int = 0) -> Any:
    """The value :func:`encode` described, checked at every step: a malformed or
    oversized description raises ``ValueError``. Never runs code from ``obj``."""
    budget = budget or _Budget(2 * MAX_RECORD_BYTES)
    if depth > _MAX_DEPTH + 1:
        raise ValueError("nested too deeply")
    if obj is None or type(obj) in (bool, int, float):
        return obj
    if type(obj) is str:
        return obj[:_MAX_TEXT]
    if type(obj) is not dict or len(obj) != 1:
        raise ValueError(f"not an encoded value: {type(obj).__name__}")
    ((tag, body),) = obj.items()
    if tag == "float":
        if body not in ("nan", "inf", "-inf"):
            raise ValueError("bad float")
        return float(body)
    if tag in ("tuple", "list"):
        if type(body) is not list:
            raise ValueError("bad sequence")
        items = [decode(v, budget, depth + 1) for v in body]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        if type(body) is not list:
            raise ValueError("bad dict")
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("bad dict item")
            key = decode(pair[0], budget, depth + 1)
            if type(key) not in _KEY_TYPES:
                raise ValueError("bad dict key")
            out[key] = decode(pair[1], budget, depth + 1)
        return out
    if tag == "tensor":
        name, shape, data = _parts(body)
        if name not in _DTYPES:
            raise ValueError(f"dtype {name!r} not allowed")
        dtype = _DTYPES[name]
        raw = _b64(data, budget)
        numel = math.prod(shape)
        itemsize = _empty((), dtype=dtype).element_size()
        if len(raw) != numel * itemsize:
            raise ValueError("tensor data does not match its shape")
        if numel == 0:
            return _empty(shape, dtype=dtype)
        return _frombuffer(bytearray(raw), dtype=dtype).reshape(shape).clone()
    if tag == "ndarray":
        import numpy as np

        name, shape, data = _parts(body)
        if type(name) is not str or len(name) > 8:
            raise ValueError("bad dtype")
        dtype = np.dtype(name)
        if dtype.kind not in _NUMPY_KINDS or dtype.hasobject:
            raise ValueError(f"dtype {name!r} not allowed")
        raw = _b64(data, budget)
        if len(raw) != math.prod(shape) * dtype.itemsize:
            raise ValueError("array data does not match its shape")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if tag == "npscalar":
        import numpy as np

        if type(body) is not list or len(body) != 2 or type(body[0]) is not str:
            raise ValueError("bad numpy scalar")
        dtype = np.dtype(body[0][:16])
        if dtype.kind not in _NUMPY_KINDS or dtype.hasobject:
            raise ValueError("bad numpy scalar dtype")
        item = decode(body[1], budget, depth + 1)
        if type(item) not in (bool, int, float, complex):
            raise ValueError("bad numpy scalar value")
        return dtype.type(item)
    if tag == "callable":
        return StudentFunction(str(body)[:200])
    if tag == "opaque":
        return _opaque_type(body)()
    raise ValueError(f"unknown tag {tag!r}")


def _parts(body: Any) -> tuple[str, list[int], str]:
    if type(body) is not list or len(body) != 3:
        raise ValueError("bad array")
    name, shape, data = body
    if type(name) is not str or type(data) is not str:
        raise ValueError("bad array")
    return name, _shape(shape), data


def _b64(data: str, budget: _Budget) -> bytes:
    if not budget.take(len(data)):
        raise ValueError("record too large")
    return base64.b64decode(data.encode(), validate=True)


class StudentFunction:
    """Stands for a function of the student's notebook in a replay: graders pass it
    to ``call_student``, which answers from the record instead of calling it."""

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise Unreplayable(
            f"the grader calls {self.__name__} directly, not through call_student"
        )

    def __repr__(self) -> str:
        return f"<student function {self.__name__}>"


# --------------------------------------------------------------------------------------
# the kernel side: record every call_student, remember pristine identities


_session: Any = None  # a _Recorder in a grading kernel, a _Replay while replaying


def session() -> Any:
    """The active recorder or replay (``None`` outside grading)."""
    return _session


def _execution_count() -> int:
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython else None
    shell = get() if get else None
    return int(getattr(shell, "execution_count", -1) or -1)


_BUILTINS = (
    "abs all any bool callable dict enumerate float getattr hasattr int isinstance "
    "issubclass iter len list map max min next print range repr round setattr sorted "
    "str sum super tuple type zip __import__ Exception BaseException AssertionError "
    "NotImplementedError TypeError ValueError"
).split()
_TORCH = (
    "allclose isclose equal abs where isnan isfinite isinf tensor as_tensor zeros ones "
    "full arange linspace randn rand randint randperm stack cat exp log sqrt sin cos "
    "einsum matmul softmax triu tril maximum minimum clamp sort argsort nonzero "
    "Generator get_default_dtype"
).split()
_TENSOR = (
    "double float long abs all any item tolist sum max min nonzero clone detach "
    "contiguous reshape view numel element_size is_floating_point is_complex shape "
    "dtype __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __sub__ __add__ __mul__ "
    "__truediv__ __abs__ __neg__ __getitem__ __bool__ __float__ __len__ __iter__ "
    "__torch_function__"
).split()
_MATH = "isclose isfinite isnan isinf sqrt exp log sin cos pi".split()


def _identities() -> dict[str, tuple[Any, Any]]:
    """name -> (object, its code) for what a grader relies on: the graders and
    their modules' helpers and references, course_lib's public functions, the torch
    functions and Tensor methods, the builtins above. Objects are kept (not ids) so
    a replaced one cannot be collected and its id reused."""
    import builtins

    out: dict[str, tuple[Any, Any]] = {}

    def add(name: str, obj: Any) -> None:
        out[name] = (obj, getattr(obj, "__code__", None))

    for modname, module in list(sys.modules.items()):
        if module is None or not modname.startswith("course_lib"):
            continue
        if modname.startswith("course_lib.grading") or modname == __name__:
            continue
        if modname.startswith("course_lib.checks"):
            names = [k for k, v in vars(module).items() if callable(v)]
        else:
            names = list(getattr(module, "__all__", ()))
        for key in names:
            obj = getattr(module, key, None)
            if callable(obj) and not isinstance(obj, type(sys)):
                add(f"{modname}.{key}", obj)
    for key in _TORCH:
        add(f"torch.{key}", getattr(torch, key, None))
    for key in _TENSOR:
        add(f"torch.Tensor.{key}", _static(torch.Tensor, key))
    for key in _MATH:
        add(f"math.{key}", getattr(math, key, None))
    for key in _BUILTINS:
        add(f"builtins.{key}", getattr(builtins, key, None))
    return out


def _static(cls: type, name: str) -> Any:
    """The attribute as stored in the class hierarchy (``getattr`` would make a new
    bound object for a classmethod at every access)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _same_object(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    return a[0] is b[0] and a[1] is b[1]


class _Recorder:
    """Records the calls of the graders in a grading kernel."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        # the graders of this cell that left their verdict to the replay
        self.deferred: set[str] = set()
        self.pristine = _identities()
        shell = _shell()
        if shell is not None:
            # A cell's record starts empty (probes run silently: no such event).
            shell.events.register("pre_run_cell", self._new_cell)

    def _new_cell(self, *_info: Any) -> None:
        self.events.clear()
        self.deferred.clear()

    def call(self, impl: Callable, fn: Any, args: tuple, kwargs: dict, call: str):
        budget = _Budget()
        event: dict[str, Any] = {
            "count": _execution_count(),  # for the log
            "call": str(call)[:_MAX_TEXT],
            "args": encode([list(args), kwargs], budget),
        }
        before = [json.dumps(a) for a in event["args"]["list"][0]["list"]]
        try:
            result, notes = impl(fn, args, kwargs, call)
        except BaseException as exc:
            if isinstance(exc, CheckFailed):
                event["raised"] = str(exc)[:_MAX_TEXT]
                # why (the stub, an error, a library call, ...): replayed as is
                cause = getattr(exc, "cause", None)
                if type(cause) is str and cause in CAUSES:
                    event["cause"] = cause
                self._add(event)
            raise
        after = encode(list(args), _Budget())["list"]
        event["mutated"] = [
            [i, enc] for i, enc in enumerate(after) if json.dumps(enc) != before[i]
        ]
        event["result"] = encode(result, budget)
        event["notes"] = [str(n)[:_MAX_TEXT] for n in notes]
        self._add(event)
        return result, notes

    def _add(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        del self.events[:-500]

    def tampering(self, graders: list[str]) -> list[str]:
        """What no longer is what it was when the kernel started."""
        now = _identities()
        changed = [
            name
            for name, pristine in self.pristine.items()
            if name not in now or not _same_object(now[name], pristine)
        ]
        shell = _shell()
        if shell is not None:
            for name in graders:
                value = shell.user_ns.get(name)
                if value is not None and not self._is_pristine_grader(name, value):
                    changed.append(f"{name} (the name in the notebook)")
        return sorted(set(changed))

    def _is_pristine_grader(self, name: str, value: Any) -> bool:
        current = (value, getattr(value, "__code__", None))
        return any(
            key.rsplit(".", 1)[-1] == name and _same_object(current, pristine)
            for key, pristine in self.pristine.items()
            if key.startswith("course_lib.checks.")
        )


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython else None
    return get() if get else None


def start() -> None:
    """Start recording in this (grading) kernel; run before any student code, once
    every grader is imported (``import course_lib.checks``): the pristine identities
    are those of the loaded library and graders."""
    global _session
    _session = _Recorder()


def probe(count: int, graders: list[str], *values: Any) -> str:
    """JSON for the grading tool: the calls recorded since the last cell started
    (``count``, the cell's execution count, is for the log), the cell's argument
    values, tampering seen, and the default dtype of the grader's inputs."""
    recorder = _session if isinstance(_session, _Recorder) else None
    budget = _Budget()
    out: dict[str, Any] = {
        "active": recorder is not None,
        "args": [encode(v, budget) for v in values],
        "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
    }
    if recorder is not None:
        out["events"] = list(recorder.events)
        out["count"] = count
        out["tamper"] = recorder.tampering(list(graders))
        out["deferred"] = sorted(recorder.deferred)
        recorder.events.clear()
        recorder.deferred.clear()
    return json.dumps(out)


# --------------------------------------------------------------------------------------
# the grading edition's hidden graders: make the planned calls, leave the verdict

PLANS_FILE = "_plans.pt"  # the grading edition's planned calls (see _core)


# --------------------------------------------------------------------------------------
# the grader's side: answer call_student from the record


def _same(expected: Any, got: Any, path: str = "") -> str | None:
    """Where ``got`` (decoded from the record) differs from ``expected`` (what the
    pristine grader passes), or ``None``."""
    if isinstance(expected, _Tensor):
        if not isinstance(got, _Tensor):
            return f"{path}: a tensor became {type(got).__name__}"
        if got.dtype != expected.dtype or got.shape != expected.shape:
            return (
                f"{path}: {expected.dtype} {tuple(expected.shape)} became "
                f"{got.dtype} {tuple(got.shape)}"
            )
        if expected.is_floating_point() or expected.is_complex():
            ok = _allclose(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            ok = _equal(got, expected)
        return None if ok else f"{path}: different values"
    if isinstance(expected, tuple | list):
        if type(got) is not type(expected) or len(got) != len(expected):
            return f"{path}: a {type(expected).__name__} of {len(expected)} changed"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            where = _same(e, g, f"{path}[{i}]")
            if where:
                return where
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(expected):
            return f"{path}: different keyword arguments"
        for key in expected:
            where = _same(expected[key], got[key], f"{path}[{key!r}]")
            if where:
                return where
        return None
    if isinstance(expected, float) and isinstance(got, float):
        if math.isnan(expected) and math.isnan(got):
            return None
        ok = math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-12)
        return None if ok else f"{path}: {expected!r} became {got!r}"
    if isinstance(expected, bool | int | str | type(None)):
        return (
            None
            if got == expected and type(got) is type(expected)
            else (f"{path}: {expected!r} became {got!r}")
        )
    # Anything else is described by type only; compare that.
    return None if encode(expected) == encode(got) else f"{path}: changed"


class _Replay:
    """Answers ``call_student`` from a kernel's record."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = list(events)
        self.used = 0

    def call(self, impl: Callable, fn: Any, args: tuple, kwargs: dict, call: str):
        if not self.events:
            raise Tampered(
                f"the notebook's run of this test never called {call} (the grader "
                "was replaced, or its run was cut short)"
            )
        event = self.events.pop(0)
        self.used += 1
        if type(event) is not dict or event.get("call") != call:
            recorded = event.get("call") if type(event) is dict else None
            raise Tampered(
                f"the grader called {call} where the notebook's run of this test "
                f"reports {str(recorded)[:200]!r}"
            )
        try:
            recorded_args = decode(event.get("args"))
        except ValueError as exc:
            raise Tampered(f"the record of {call} is malformed ({exc})") from None
        where = _same([list(args), kwargs], recorded_args)
        if where:
            raise Tampered(
                f"the inputs of {call} in the notebook differ from the grader's own "
                f"(argument {where})"
            )
        notes = [str(n)[:_MAX_TEXT] for n in event.get("notes") or []][:20]
        if "raised" in event:
            failed = CheckFailed(str(event["raised"])[:_MAX_TEXT])
            # the kernel's word, checked: one of the known causes or none
            cause = event.get("cause")
            failed.cause = cause if type(cause) is str and cause in CAUSES else None
            raise failed
        try:
            result = decode(event.get("result"))
            for index, encoded in event.get("mutated") or []:
                target = args[index]
                value = decode(encoded)
                if (
                    isinstance(target, _Tensor)
                    and isinstance(value, _Tensor)
                    and value.shape == target.shape
                    and value.dtype == target.dtype
                ):
                    target.copy_(value)
        except (ValueError, TypeError, IndexError) as exc:
            raise Tampered(f"the record of {call} is malformed ({exc})") from None
        return result, notes


@contextlib.contextmanager
def replaying(
    events: list[dict[str, Any]], default_dtype: str = "float32"
) -> Iterator[_Replay]:
    """While active, ``call_student`` answers from ``events`` (see the module
    docstring); the default dtype the kernel's grader made its inputs with is
    restored for the replay (a float64 default is a legitimate choice)."""
    global _session
    replay = _Replay(events)
    dtype = _DTYPES.get(default_dtype, torch.float32)
    if not dtype.is_floating_point or dtype.is_complex:
        dtype = torch.float32
    previous_dtype = torch.get_default_dtype()
    previous, _session = _session, replay
    torch.set_default_dtype(dtype)
    try:
        yield replay
    finally:
        _session = previous
        torch.set_default_dtype(previous_dtype)
