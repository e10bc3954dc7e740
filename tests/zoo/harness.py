"""What the grader tests of every assignment share: find the graders of a function
and turn the zoos (``CORRECT`` and ``WRONG`` tables of each tests/zoo module) into
pytest parameters, one per implementation."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

Pairs = list[tuple[ModuleType, ModuleType]]  # (grader module, zoo module)


def graders(pairs: Pairs, name: str) -> tuple[Callable, Callable]:
    """``(check_<name>, grade_<name>)`` from whichever grader module defines them."""
    for grader, _ in pairs:
        if hasattr(grader, f"check_{name}"):
            return getattr(grader, f"check_{name}"), getattr(grader, f"grade_{name}")
    raise KeyError(name)


def names(pairs: Pairs) -> list[str]:
    """Every graded function that has a zoo."""
    return [name for _, zoo in pairs for name in zoo.CORRECT]


def correct_params(pairs: Pairs) -> list:
    """``(name, fn)`` for every correct implementation."""
    return [
        pytest.param(name, fn, id=f"{name}-{fn.__name__}")
        for _, zoo in pairs
        for name, fns in zoo.CORRECT.items()
        for fn in fns
    ]


def wrong_params(pairs: Pairs) -> list:
    """``(name, fn, message fragment, caught by the public check)`` per known bug."""
    return [
        pytest.param(name, fn, fragment, public, id=f"{name}-{fn.__name__}")
        for _, zoo in pairs
        for name, entries in zoo.WRONG.items()
        for fn, fragment, public in entries
    ]


def calls_library_params(pairs: Pairs) -> list:
    """``(name, fn)`` for every implementation that only calls course_lib."""
    params = []
    for _, zoo in pairs:
        for name, fns in zoo.CALLS_LIBRARY.items():
            for fn in fns if isinstance(fns, list | tuple) else [fns]:
                params.append(pytest.param(name, fn, id=f"{name}-{fn.__name__}"))
    return params
