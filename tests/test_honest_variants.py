"""Every honest slow variant (benchmarks/honest_variants.py) is a correct answer:
its public and hidden graders pass, run in-process on the solution notebook's other
answers, as the grading kernel runs the cells. The per-cell limits are set above
the slowest of these variants (tests/test_time_limits.py), so each must be one a
limit may never cut off: correct, and as slow as students really write them.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

from benchmarks import honest_variants as hv
from benchmarks.solution_cost import assignments

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    (a, f, v)
    for a in sorted(hv.VARIANTS)
    for f in hv.VARIANTS[a]
    for v in hv.VARIANTS[a][f]
]


@pytest.fixture(autouse=True)
def _one_thread():
    """The graders of ex10 train a tiny model: one thread, as in the kernel."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_every_graded_function_has_honest_variants():
    """Every assignment, every graded function (an ``<name>__answer`` cell with a
    ``<name>__public`` test), at least two variants; and nothing stale."""
    assert sorted(hv.VARIANTS) == assignments(ROOT)
    for a in assignments(ROOT):
        functions = hv.graded_functions(a, ROOT)
        assert functions, a
        assert sorted(hv.VARIANTS[a]) == sorted(functions), (
            f"{a}: variants for {sorted(hv.VARIANTS[a])}, graded functions "
            f"{sorted(functions)}"
        )
        for f in functions:
            assert len(hv.VARIANTS[a][f]) >= 2, (a, f)
            assert hv.graded_cells(a, f, ROOT), (a, f)


def _run(a: str, f: str, v: str | None) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        hv.run_in_process(a, f, v, ROOT)
    return out.getvalue()


@pytest.mark.parametrize(("assignment", "function", "variant"), CASES)
def test_variant_gets_full_marks(assignment, function, variant):
    """The public and the hidden test cell both pass: full marks (nbgrader gives a
    test cell its points when it raises nothing)."""
    printed = _run(assignment, function, variant)
    # the graders say so in words, once per test cell
    assert printed.count("passed") >= len(hv.graded_cells(assignment, function, ROOT))


@pytest.mark.parametrize(("assignment", "function", "variant"), CASES)
def test_variant_is_its_own_code(assignment, function, variant):
    """A variant replaces the solution's answer (not the same source), defines the
    names that answer defines, and imports nothing from course_lib (which the
    graders would give no marks)."""
    src = hv.VARIANTS[assignment][function][variant]
    solution = hv.answer_cells(assignment, ROOT)[function]
    assert src.strip() != solution.strip()
    assert "course_lib" not in src
    assert "BEGIN SOLUTION" not in src
    ns_variant: dict = {}
    ns_solution: dict = {}
    for code, ns in ((src, ns_variant), (solution, ns_solution)):
        exec(compile(hv.PRELUDE, "<set-up>", "exec"), ns)
        for other, other_src in hv.answer_cells(assignment, ROOT).items():
            if other != function:
                exec(compile(other_src, "<other>", "exec"), ns)
        before = set(ns)
        exec(compile(code, "<answer>", "exec"), ns)
        ns["__defined__"] = set(ns) - before
    tests = "\n".join(hv.graded_cells(assignment, function, ROOT))
    wanted = {n for n in ns_solution["__defined__"] if re.search(rf"\b{n}\b", tests)}
    assert wanted, "the test cells use nothing the answer defines"
    assert wanted <= ns_variant["__defined__"], (
        f"the variant does not define {sorted(wanted - ns_variant['__defined__'])}"
    )


def test_a_wrong_variant_fails_in_process():
    """The in-process run can fail: a sign error in alibi_bias raises."""
    a, f = "ex05_alibi", "alibi_bias"
    name = "python_lists_then_tensor"
    good = hv.VARIANTS[a][f][name]
    wrong = good.replace("[[[-slopes[h]", "[[[slopes[h]")
    assert wrong != good
    hv.VARIANTS[a][f]["__wrong_sign"] = wrong
    try:
        with pytest.raises(Exception, match="positive"):
            _run(a, f, "__wrong_sign")
    finally:
        del hv.VARIANTS[a][f]["__wrong_sign"]


def test_rounds_put_each_variant_in_once():
    """``solution_cost --variants`` runs round k with every function's k-th
    variant: over the rounds each variant is put in exactly once."""
    for a in hv.VARIANTS:
        functions = hv.graded_functions(a, ROOT)
        seen = {f: [] for f in functions}
        for k in range(hv.rounds(a, ROOT)):
            answers = hv.variant_answers(a, k, ROOT)
            for f in functions:
                name = hv.variant_of_round(a, f, k)
                if name is None:
                    assert answers[f] == hv.answer_cells(a, ROOT)[f]
                else:
                    assert answers[f] == hv.VARIANTS[a][f][name]
                    seen[f].append(name)
        for f, names in seen.items():
            assert names == list(hv.VARIANTS[a][f]), (a, f)
