"""ex10's retained_skill: the public check itself catches the two mistakes issue 33
found only the hidden grader caught: a(L) read from the first row listed instead of
the shortest length, and a method at chance at L divided by zero (or by a non-positive
skill) instead of answered with nan."""

from __future__ import annotations

import math

import pytest

from course_lib.checks import CheckFailed
from course_lib.checks import ex10_lab as g10


def retained_sorted(summary, task, method, chance):
    rows = sorted(
        (r["length"], r["mean"])
        for r in summary
        if r["task"] == task and r["method"] == method
    )
    base = rows[0][1]
    if base <= chance:
        return {n: math.nan for n, _ in rows}
    return {n: (a - chance) / (base - chance) for n, a in rows}


def retained_first_row(summary, task, method, chance):
    """a(L) from the first row listed: right only when the rows come sorted."""
    rows = [
        (r["length"], r["mean"])
        for r in summary
        if r["task"] == task and r["method"] == method
    ]
    base = rows[0][1]
    if base <= chance:
        return {n: math.nan for n, _ in rows}
    return {n: (a - chance) / (base - chance) for n, a in rows}


def retained_strict_chance(summary, task, method, chance):
    """nan only below chance: a(L) == c divides by zero."""
    rows = sorted(
        (r["length"], r["mean"])
        for r in summary
        if r["task"] == task and r["method"] == method
    )
    base = rows[0][1]
    if base < chance:
        return {n: math.nan for n, _ in rows}
    return {n: (a - chance) / (base - chance) for n, a in rows}


def test_a_right_answer_passes_public_and_hidden(capsys) -> None:
    g10.check_retained_skill(retained_sorted)
    g10.grade_retained_skill(retained_sorted)
    assert "all public checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("fn", "fragment"),
    [
        (retained_first_row, "retained_skill(summary, 'copy', 'rope', 0.0625)[16]"),
        (retained_strict_chance, "'nope', 0.0625) raised ZeroDivisionError"),
    ],
)
def test_the_public_check_rejects(fn, fragment) -> None:
    with pytest.raises(CheckFailed) as info:
        g10.check_retained_skill(fn)
    assert fragment in str(info.value), str(info.value)
    with pytest.raises(CheckFailed):
        g10.grade_retained_skill(fn)
