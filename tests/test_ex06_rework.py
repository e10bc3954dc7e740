"""Issue 19, exercise 6 reworked: the chapter teaches the idea, the exercise asks for a
step the chapter does not print.

ex06 grades Shaw et al.'s relative attention in the form that builds no
``(q_len, k_len, head_dim)`` tensor (chapter 6 gives the two sums as equations and
checks properties of the library; the tensor program is the exercise) and T5's bucket
function, specified by its bucket starts (chapter 6 gives the grid of starts; the closed
form of a distance's bucket, floor and cap included, is the exercise). Here:

- the class edition of chapter 6 has none of the graded computation: no gather or
  scatter-add of the key and value terms, no literal four-dimensional formula, no
  closed-form logarithmic bucket, in its code cells or its text;
- the task texts state the specification and not the solution;
- the solution (and every correct zoo style but the one-hot one) keeps the memory
  bound the task sets, measured on the tensors it allocates, and the literal formula
  of the open edition does not: the measurement can fail;
- the open edition's literal listing equals the library, and the graders' own
  reference of each mistake differs from the answer on the public cases (so the public
  check can name it);
- the bucket starts the task and chapter state are those of the library.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from zoo import ex06_relative as z06

import course_lib as cl
from course_lib.checks import ex06_relative as g06
from course_lib.grading.editions.launch import strip_open_only

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "book" / "06-relative.md"
SOLUTION = ROOT / "solutions" / "ex06_relative" / "ex06_relative.ipynb"
RELEASE = ROOT / "notebooks" / "ex06_relative" / "ex06_relative.ipynb"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _solution_namespace() -> dict:
    namespace: dict = {"__name__": "ex06_solution", "math": math, "torch": torch}
    for cell in _cells(SOLUTION):
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            exec(compile(_source(cell), "ex06 answer", "exec"), namespace)
    return namespace


# --- the class edition of chapter 6 and the task texts print no answer

# The graded computations, as they would be written (each pattern is tried on a
# sample below, so a pattern that matches nothing cannot pass silently).
GRADED_CODE = {
    "gather of the key term": r"\.gather\(\s*-1",
    "scatter-add of the weights": r"scatter_add|index_add",
    "one-hot rows": r"one_hot\(",
    "literal edge tensors": r"w_k\[rows\]|a_k\[rows\]",
    "literal key einsum": r"bhijd",
    "closed-form log bucket": r"(math|torch)\.log2?\(\s*\w+\s*/\s*\w+\s*\)\s*/",
}
SAMPLES = {
    "gather of the key term": "position = (q @ a_k.T).gather(-1, idx)",
    "scatter-add of the weights": "bins.scatter_add(-1, idx, weights)",
    "one-hot rows": "F.one_hot(rows, 2 * K + 1)",
    "literal edge tensors": "a_k, a_v = w_k[rows], w_v[rows]",
    "literal key einsum": 'torch.einsum("bhid,bhijd->bhij", q, k + a_k)',
    "closed-form log bucket": "torch.log(n / E) / math.log(D / E) * (B - E)",
}
# The closed form in the prose: a floor of a logarithm of the distance.
GRADED_MATH = r"\\lfloor[^$]*\\ln|\\ln\s*\(?\s*r\s*/\s*E"


def test_the_patterns_match_what_they_stand_for() -> None:
    for name, pattern in GRADED_CODE.items():
        assert re.search(pattern, SAMPLES[name]), name
    old_step_3 = (
        r"E + \left\lfloor \frac{\ln(r / E)}{\ln(D / E)}\,(B - E) \right\rfloor"
    )
    assert re.search(GRADED_MATH, old_step_3)


def _code_cells(text: str) -> list[str]:
    return re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S)


def test_class_edition_of_chapter_6_computes_none_of_the_graded_steps() -> None:
    text = strip_open_only(CHAPTER.read_text())
    cells = _code_cells(text)
    assert len(cells) >= 6
    found = [
        name for name, p in GRADED_CODE.items() for c in cells if re.search(p, c)
    ]
    assert found == []
    assert not re.search(GRADED_MATH, text)
    # the listing of the graded function is in the open edition only
    assert ":pyobject: shaw_relative_attention" not in text
    assert ":pyobject: t5_relative_position_bucket" not in text


def test_open_edition_keeps_the_literal_formula_and_the_solutions() -> None:
    text = CHAPTER.read_text()
    assert "def shaw_literal(" in text
    assert ":pyobject: shaw_relative_attention" in text
    assert "def shaw_literal(" not in strip_open_only(text)


def _task(name: str) -> str:
    cells = _cells(RELEASE)
    answer = next(
        i for i, c in enumerate(cells)
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        == f"{name}__answer"
    )
    return _source(cells[answer - 1])


def test_task_texts_state_the_specification_not_the_solution() -> None:
    shaw = _task("shaw_relative_attention")
    t5 = _task("t5_relative_position_bucket")
    for text in (shaw, t5):
        for name, pattern in GRADED_CODE.items():
            assert not re.search(pattern, text), name
    assert "(q_len, k_len, head_dim)" in shaw and "last" in shaw
    assert not re.search(GRADED_MATH, t5)
    assert "r_b = \\left\\lceil E" in t5  # the starts are the specification
    # the release holds the stubs, not the solutions
    stubs = [
        _source(c) for c in _cells(RELEASE)
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    ]
    assert len(stubs) == 2
    assert all("raise NotImplementedError()" in s for s in stubs)
    assert not any(re.search(GRADED_CODE["gather of the key term"], s) for s in stubs)


# --- the memory bound the task sets


class _LargestAllocation(TorchDispatchMode):
    """The largest storage (in elements) any operation creates."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                size = t.untyped_storage().nbytes() // t.element_size()
                self.largest = max(self.largest, size)
        return out


def _largest(fn, batch=1, heads=2, q_len=48, k_len=64, dim=32, K=4) -> tuple[int, int]:
    q, k, v, a_k, a_v, _ = g06._shaw_case(9, batch, heads, q_len, k_len, dim, K)
    with _LargestAllocation() as mode:
        fn(q, k, v, a_k, a_v, K)
    return mode.largest, q_len * k_len * dim


def _literal(q, k, v, w_k, w_v, K):
    namespace = {"cl": cl, "torch": torch, "math": math}
    listing = re.search(
        r"```python\n(def shaw_literal\(.*?)```", CHAPTER.read_text(), re.S
    ).group(1)
    exec(compile(listing, "chapter 6 listing", "exec"), namespace)
    return namespace["shaw_literal"](q, k, v, w_k, w_v, K)


def test_the_solution_builds_no_tensor_of_the_literal_size() -> None:
    solution = _solution_namespace()["shaw_relative_attention"]
    largest, literal_size = _largest(solution)
    assert largest < literal_size / 4
    for fn in (
        z06.shaw_gather_scatter, z06.shaw_loop_over_rows, cl.shaw_relative_attention
    ):
        assert _largest(fn)[0] < literal_size / 4, fn.__name__
    # the measurement sees the literal formula's edge tensors
    largest, literal_size = _largest(_literal)
    assert largest >= literal_size


@pytest.mark.parametrize(
    "case",
    [(1, 1, 3, 3, 4, 1), (2, 3, 4, 7, 8, 2), (1, 2, 3, 9, 5, 6), (2, 1, 1, 6, 3, 2)],
)
def test_literal_listing_and_solution_equal_the_library(case) -> None:
    batch, heads, q_len, k_len, dim, K = case
    q, k, v, a_k, a_v, _ = g06._shaw_case(5, batch, heads, q_len, k_len, dim, K,
                                          torch.float64)
    want_out, want_weights = cl.shaw_relative_attention(q, k, v, a_k, a_v, K)
    solution = _solution_namespace()["shaw_relative_attention"]
    for fn in (_literal, solution):
        out, weights = fn(q, k, v, a_k, a_v, K)
        # float64, sums over at most 9 keys of O(1) terms: 1e-12 is ~5000 ulps
        assert torch.allclose(weights, want_weights, rtol=0, atol=1e-12)
        assert torch.allclose(out, want_out, rtol=0, atol=1e-12)


# --- the graders' references


@pytest.mark.parametrize("case", g06._SHAW_PUBLIC)
def test_graders_reference_and_mistakes_on_the_public_cases(case) -> None:
    """The grader's one-hot form without a mistake is the library's answer; every
    mistake that the public case can show differs from it by far more than the
    tolerance (so the public check can name it), and the queries-first mistake is
    shown exactly by the cache case."""
    q, k, v, a_k, a_v, K = g06._shaw_case(*case)
    out_ref, weights_ref = cl.shaw_relative_attention(q, k, v, a_k, a_v, K)
    out, weights = g06._shaw_variant(q, k, v, a_k, a_v, K)
    assert torch.allclose(out, out_ref, atol=1e-5) and torch.allclose(
        weights, weights_ref, atol=1e-6
    )
    shown = set()
    for mistake in g06._SHAW_MISTAKES:
        out_m, weights_m = g06._shaw_variant(q, k, v, a_k, a_v, K, mistake)
        gap = max((out_m - out_ref).abs().max(), (weights_m - weights_ref).abs().max())
        if gap > 1e-6:
            assert gap > 1e-2, mistake
            shown.add(mistake)
    q_len, k_len = q.shape[2], k.shape[2]
    assert ("queries_first" in shown) == (q_len < k_len)
    assert ("clip_off_by_one" in shown) == (k_len - 1 >= K)


def test_every_shaw_mistake_is_shown_by_some_public_case() -> None:
    shown = set()
    for case in g06._SHAW_PUBLIC:
        q, k, v, a_k, a_v, K = g06._shaw_case(*case)
        out_ref, _ = cl.shaw_relative_attention(q, k, v, a_k, a_v, K)
        for mistake in g06._SHAW_MISTAKES:
            out_m, _ = g06._shaw_variant(q, k, v, a_k, a_v, K, mistake)
            if not torch.allclose(out_m, out_ref, atol=1e-4):
                shown.add(mistake)
    assert shown == set(g06._SHAW_MISTAKES)


# --- the bucket starts stated by the task and the chapter are the library's


@pytest.mark.parametrize(
    "bidirectional,num_buckets,max_distance",
    [(True, 32, 128), (False, 32, 128), (True, 8, 16), (False, 8, 16), (False, 12, 40),
     (True, 64, 256), (True, 6, 9)],
)
def test_bucket_starts_define_the_library_buckets(
    bidirectional, num_buckets, max_distance
) -> None:
    """beta(n) = the largest b with r_b <= n (exact below E, capped at B - 1), built
    from the task's starts by a search (not the closed form), equals the library
    away from the float edges, where the closed form may round either way."""
    B = num_buckets // 2 if bidirectional else num_buckets
    E = B // 2
    starts = [float(b) for b in range(E)] + [
        E * (max_distance / E) ** ((b - E) / (B - E)) for b in range(E, B)
    ]  # exact starts r_b before the ceiling
    n = torch.arange(0, 4 * max_distance)
    by_search = torch.tensor(
        [max(b for b in range(B) if starts[b] <= d) for d in n.tolist()]
    )
    edge = torch.tensor([
        any(abs(d - s) < 1e-9 for s in starts[E:]) for d in n.tolist()
    ])
    got = cl.t5_relative_position_bucket(
        -n, bidirectional=bidirectional, num_buckets=num_buckets,
        max_distance=max_distance,
    )
    assert torch.equal(got[~edge], by_search[~edge])
    assert bool(((got[edge] - by_search[edge]).abs() <= 1).all())
    assert int(got.max()) == B - 1
