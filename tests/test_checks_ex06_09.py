"""The graders of exercises 6-9 are themselves tested.

For every graded function: correct implementations in several styles (and
conventions that are equivalent) pass the public check and the hidden grader; every
wrong implementation of the bug zoo (tests/zoo/ex06_*.py .. ex09_*.py) is rejected by
the hidden grader, and by the public check where marked, with the message that
explains its mistake; a function that only calls course_lib and the untouched stub
earn nothing. Nothing is ever written to stderr (nbgrader scores such a cell 0).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import math
import re
from pathlib import Path

import nbformat
import pytest
import torch
from zoo import ex06_relative as z06
from zoo import ex07_transformer_xl as z07
from zoo import ex08_da as z08
from zoo import ex09_bug_zoo as z09
from zoo import harness

from course_lib.checks import CheckFailed
from course_lib.checks import ex06_relative as g06
from course_lib.checks import ex07_transformer_xl as g07
from course_lib.checks import ex08_da as g08
from course_lib.checks import ex09_bug_zoo as g09
from course_lib.checks._core import call_student

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [(g06, z06), (g07, z07), (g08, z08), (g09, z09)]


NAMES = harness.names(PAIRS)
CORRECT = harness.correct_params(PAIRS)


def _graders(name: str):
    return harness.graders(PAIRS, name)


def test_every_graded_function_has_a_zoo() -> None:
    expected = {
        "shaw_relative_attention",
        "t5_relative_position_bucket",
        "rel_shift",
        "rel_attention_scores",
        "rel_shift_bidirectional",
        "da_rescale",
        "da_attention",
        "fixed_rope_cos_sin",
        "fixed_decode_position_ids",
        "fixed_sliding_window_mask",
    }
    assert set(NAMES) == expected
    for grader, zoo in PAIRS:
        exported = {n for n in grader.__all__}
        assert exported == {
            f"{kind}_{n}" for n in zoo.CORRECT for kind in ("check", "grade")
        }
        for name in zoo.CORRECT:
            assert len(zoo.WRONG[name]) >= 3, name
            assert len(zoo.CORRECT[name]) >= 2, name


@pytest.mark.parametrize("name,fn", CORRECT)
def test_correct_variant_passes(name, fn, capsys) -> None:
    check, grade = _graders(name)
    check(fn)
    grade(fn)
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.strip().splitlines()
    assert lines == [
        f"{name}: all public checks passed. More (hidden) tests run when your work "
        "is graded.",
        lines[1],
    ]
    assert re.fullmatch(rf"{name}: passed \(\d+ [a-z ]+\)\.", lines[1])


# --- the graders' references are right: compared with loops written from the papers


def _t5_loop(rel: int, bidirectional: bool, num_buckets: int, max_distance: int):
    """Mesh TensorFlow's rule for one relative position, in float64 Python."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset = num_buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    exact = num_buckets // 2
    if n < exact:
        return offset + n
    large = exact + int(
        math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    )
    return offset + min(large, num_buckets - 1)


@pytest.mark.parametrize(
    "bidirectional,num_buckets,max_distance",
    [(True, 32, 128), (False, 32, 128), (True, 8, 20)],
)
def test_t5_reference_matches_a_loop_away_from_bucket_edges(
    bidirectional, num_buckets, max_distance
) -> None:
    rel = torch.arange(-400, 401)
    expected, other = g06._t5_expected(rel, bidirectional, num_buckets, max_distance)
    loop = torch.tensor(
        [_t5_loop(int(r), bidirectional, num_buckets, max_distance) for r in rel]
    )
    edge = expected != other
    assert torch.equal(expected[~edge], loop[~edge])
    # At an edge the loop's rounding is one of the two accepted answers.
    assert bool(((loop[edge] == expected[edge]) | (loop[edge] == other[edge])).all())


def _nudged(shift: float):
    """A correct T5 bucketing whose logarithm is nudged by ``shift`` before the floor:
    it rounds bucket edges one way or the other, as float32 or float64 code does."""

    # taken now: looked up during a grader's call, the grader's own helper is trapped
    # (a student's function may not call it)
    variant = g06._t5_variant

    def bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        return variant(
            relative_position, bidirectional, num_buckets, max_distance, shift=shift
        )

    return bucket


def test_t5_edges_exist_and_either_rounding_is_accepted(capsys) -> None:
    """log(n/8)/log(16)*8 is an integer at n = 16, 32, 64: float32 and float64 code
    may round it differently, and a correct answer must not lose points for that."""
    rel = torch.arange(-200, 201)
    expected, other = g06._t5_expected(rel, True, 32, 128)
    edges = set(rel[expected != other].abs().tolist())
    assert {16, 32, 64} <= edges
    down, up = _nudged(-1e-6), _nudged(1e-6)
    assert not torch.equal(down(rel, True, 32, 128), up(rel, True, 32, 128))
    for fn in (down, up):
        g06.check_t5_relative_position_bucket(fn)
        g06.grade_t5_relative_position_bucket(fn)
    assert capsys.readouterr().err == ""


def test_rel_shift_reference_equals_explicit_gather() -> None:
    gen = torch.Generator().manual_seed(0)
    for q_len, k_len in [(1, 1), (3, 3), (2, 7), (5, 9)]:
        x = torch.randn(2, q_len, k_len, generator=gen)
        out = g07._ref_shift(x)
        for i in range(q_len):
            for j in range(i + k_len - q_len + 1):
                assert out[:, i, j].tolist() == x[:, i, j + q_len - 1 - i].tolist()


def test_rel_attention_scores_reference_equals_the_four_terms_loop() -> None:
    gen = torch.Generator().manual_seed(1)
    B, H, Lq, Lk, D = 1, 2, 3, 5, 4
    q, k, r, u, v = g07._random_inputs(gen, B, H, Lq, Lk, D)
    got = g07._ref_scores(q, k, r, u, v)
    for h in range(H):
        for i in range(Lq):
            for j in range(Lk):
                dist = i + Lk - Lq - j
                if dist < 0:
                    assert got[0, h, i, j] == -math.inf
                    continue
                rel = r[h, Lk - 1 - dist]
                want = (
                    q[0, h, i] @ k[0, h, j]
                    + q[0, h, i] @ rel
                    + u[h] @ k[0, h, j]
                    + v[h] @ rel
                ) / math.sqrt(D)
                assert math.isclose(
                    got[0, h, i, j].item(), want.item(), rel_tol=1e-5, abs_tol=1e-5
                )


def test_da_references_equal_the_paper_formula() -> None:
    gen = torch.Generator().manual_seed(2)
    q, k, v, w, v_bias = g08._random_case(gen, 1, 2, 4, 3)
    out, weights = g08._ref_attention(q, k, v, w, v_bias)
    for h in range(2):
        scores = torch.empty(4, 4, dtype=torch.float64)
        for i in range(4):
            for j in range(4):
                r_hat = (1 + math.exp(v_bias[h])) / (
                    1 + math.exp(v_bias[h] - w[h] * abs(i - j))
                )
                dot = float(q[0, h, i] @ k[0, h, j])
                scores[i, j] = max(dot, 0.0) * r_hat / math.sqrt(3)
        want = scores.softmax(-1)
        assert torch.allclose(weights[0, h].double(), want, atol=1e-6)
        assert torch.allclose(out[0, h].double(), want @ v[0, h].double(), atol=1e-5)


# --- the grader machinery around these exercises


def test_a_student_that_mutates_its_input_is_told_so() -> None:
    """The answer is right, but the input was zeroed in place: the caller's tensor is
    gone, which is a bug the message names (the expected answer, computed before the
    call, is not affected)."""

    def in_place(x):
        out = z07.shift_pad_reshape(x)
        x.zero_()
        return out

    with pytest.raises(CheckFailed, match="changed its input x in place"):
        g07.check_rel_shift(in_place)


def test_student_exceptions_become_messages_not_tracebacks() -> None:
    def broken(q, k, v, a_k, a_v, max_distance):
        return q @ k  # (B, H, Lq, D) @ (B, H, Lk, D): shapes do not match

    with pytest.raises(
        CheckFailed, match=r"shaw_relative_attention\(q, k, v, a_k, a_v, 2\) .* raised"
    ):
        g06.check_shaw_relative_attention(broken)


def test_hidden_grader_runs_cases_the_public_check_does_not() -> None:
    """A function special-cased to the public inputs passes check_ but not grade_."""
    public = {(q, k, d, m) for _, _, _, q, k, d, m, *_dtype in g06._SHAW_PUBLIC}

    def memorised(q, k, v, a_k, a_v, max_distance):
        if (q.shape[2], k.shape[2], q.shape[3], max_distance) in public:
            return z06.shaw_gather_scatter(q, k, v, a_k, a_v, max_distance)
        return torch.zeros_like(q), torch.zeros(*q.shape[:3], k.shape[2])

    g06.check_shaw_relative_attention(memorised)
    with pytest.raises(CheckFailed):
        g06.grade_shaw_relative_attention(memorised)


def test_call_student_restores_the_library_after_a_trap() -> None:
    import course_lib

    before = course_lib.rel_shift
    with pytest.raises(CheckFailed):
        call_student(z07.shift_calls_library, torch.zeros(2, 3), call="rel_shift(x)")
    assert course_lib.rel_shift is before


# --- the notebooks: buggy cells rejected, worked examples true


def _notebook_namespace(assignment: str, *, kinds=("answer", "locked")) -> dict:
    """Run the first code cell (imports) and the answer and read-only cells of the
    source notebook in a fresh namespace (no kernel, no test cells)."""
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", 4)
    namespace: dict = {"__name__": f"notebook_{assignment}"}
    code = [  # the set-up cell (installs course_lib where missing) is not needed here
        c
        for c in nb.cells
        if c.cell_type == "code" and "course-setup" not in c.metadata.get("tags", [])
    ]
    exec(compile(code[0].source, f"{assignment}[imports]", "exec"), namespace)
    for cell in code[1:]:
        meta = cell.metadata.get("nbgrader", {})
        answer = meta.get("solution", False)
        locked = meta.get("locked", False) and not meta.get("grade", False)
        if ("answer" in kinds and answer) or ("locked" in kinds and locked):
            exec(
                compile(cell.source, f"{assignment}[{meta['grade_id']}]", "exec"),
                namespace,
            )
    return namespace


BUGGY = {
    "buggy_rope_cos_sin": "fixed_rope_cos_sin",
    "buggy_decode_position_ids": "fixed_decode_position_ids",
    "buggy_sliding_window_mask": "fixed_sliding_window_mask",
}


@pytest.mark.parametrize("buggy,fixed", sorted(BUGGY.items()))
def test_the_notebooks_buggy_function_is_named_as_still_buggy(buggy, fixed, capsys):
    namespace = _notebook_namespace("ex09_bug_zoo", kinds=("locked",))
    check, grade = _graders(fixed)
    for grader in (check, grade):
        with pytest.raises(CheckFailed, match="this is still the buggy version"):
            grader(namespace[buggy])
    assert capsys.readouterr().err == ""


ASSIGNMENTS = ["ex06_relative", "ex07_transformer_xl", "ex08_da", "ex09_bug_zoo"]


def _worked_examples(assignment: str) -> list[tuple[str, str]]:
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", 4)
    blocks = []
    for n, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for block in re.findall(r"```python\n(.*?)```", cell.source, flags=re.S):
            if ">>>" in block:
                blocks.append((f"{assignment} cell {n}", block))
    return blocks


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_worked_examples_in_the_task_cells_are_true(assignment) -> None:
    """Every `>>>` example of the task text holds for the solution (which the graders
    compare with course_lib), so the printed numbers cannot drift from the library."""
    examples = _worked_examples(assignment)
    assert examples, "every task cell has a worked example"
    namespace = _notebook_namespace(assignment)
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    )
    saved = torch._tensor_str.PRINT_OPTS.__dict__.copy()
    torch.set_printoptions(precision=4, sci_mode=False)
    try:
        for name, block in examples:
            test = parser.get_doctest(block, dict(namespace), name, None, 0)
            result = runner.run(test, out=lambda s: None)
            assert result.attempted > 0 and result.failed == 0, f"{name}:\n{block}"
    finally:
        torch._tensor_str.PRINT_OPTS.__dict__.update(saved)


GRADED = {
    "ex06_relative": ["shaw_relative_attention", "t5_relative_position_bucket"],
    "ex07_transformer_xl": [
        "rel_shift", "rel_attention_scores", "rel_shift_bidirectional"
    ],
    "ex08_da": ["da_rescale", "da_attention"],
    "ex09_bug_zoo": [
        "fixed_rope_cos_sin",
        "fixed_decode_position_ids",
        "fixed_sliding_window_mask",
    ],
}


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_notebook_has_the_contracted_cells(assignment) -> None:
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", 4)
    nbformat.validate(nb)
    cells = nb.cells
    ids = [_meta(c)["grade_id"] for c in cells if _meta(c)]
    assert len(ids) == len(set(ids)), ids
    by_id = {_meta(c)["grade_id"]: c for c in cells if _meta(c)}
    total = 0
    for name in GRADED[assignment]:
        answer, public, hidden = (
            by_id[f"{name}__{kind}"] for kind in ("answer", "public", "hidden")
        )
        assert _meta(answer)["solution"] and not _meta(answer)["grade"]
        assert not _meta(answer)["locked"]
        assert f"def {name}(" in answer.source
        assert "### BEGIN SOLUTION" in answer.source
        assert "### END SOLUTION" in answer.source
        assert _meta(public) == {
            "grade": True,
            "grade_id": f"{name}__public",
            "locked": True,
            "points": 1,
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
        assert public.source.rstrip().endswith(f"\ncheck_{name}({name})")
        assert f"from course_lib.checks.{assignment} import grade_{name}" in (
            public.source
        )
        assert _meta(hidden)["points"] == 2 and _meta(hidden)["locked"]
        assert hidden.source == (
            f"### BEGIN HIDDEN TESTS\ngrade_{name}({name})\n### END HIDDEN TESTS"
        )
        total += _meta(public)["points"] + _meta(hidden)["points"]
        # The task cell right above the answer gives the exact signature.
        task = cells[cells.index(answer) - 1]
        assert task.cell_type == "markdown" and f"{name}(" in task.source
        assert cells.index(answer) < cells.index(public) < cells.index(hidden)
    assert total == 3 * len(GRADED[assignment])
    intro = next(c for c in cells if c.cell_type == "markdown")  # after the set-up
    chapter = re.search(r"\(\.\./\.\./book/(\d\d-[a-z-]+)\.md\)", intro.source)
    assert chapter and chapter.group(1).startswith(assignment[2:4])
    assert f"file: book/{chapter.group(1)}\n" in (ROOT / "_toc.yml").read_text()


REPORT = re.compile(r"[\w.-]+/[\w.-]+(?:\s+issues?|\s+pull\s+request)?\s+#\d+|"
                    r"[\w.-]+/[\w.-]+#\d+")


def test_the_bug_zoo_takes_reported_bugs_that_chapter_9_does_not_print() -> None:
    """ex09's bugs come from public repositories, cited in the notebook (repository
    and issue or pull request) and in the grader's message that names the bug; none
    of their buggy lines is printed by chapter 9, whose errata come with fixes."""
    nb = nbformat.read(ROOT / "solutions/ex09_bug_zoo/ex09_bug_zoo.ipynb", 4)
    chapter = (ROOT / "book/09-conventions-errata.md").read_text()
    cells = nb.cells
    for grade_id in BUGGY:
        cell = next(c for c in cells if _meta(c).get("grade_id") == grade_id)
        before = cells[cells.index(cell) - 1]
        assert before.cell_type == "markdown" and REPORT.search(before.source), (
            grade_id)
        body = [line.strip() for line in cell.source.splitlines()[2:]
                if line.strip() and not line.strip().startswith(("#", '"""'))]
        for line in body:
            assert line.split("  #")[0] not in chapter, (grade_id, line)
    namespace = _notebook_namespace("ex09_bug_zoo", kinds=("locked",))
    for buggy, fixed in BUGGY.items():
        check, _ = _graders(fixed)
        with pytest.raises(CheckFailed) as info:
            check(namespace[buggy])
        assert REPORT.search(str(info.value)), str(info.value)


def test_the_bug_zoo_buggy_cells_are_read_only_and_released() -> None:
    source = nbformat.read(ROOT / "solutions/ex09_bug_zoo/ex09_bug_zoo.ipynb", 4)
    release = nbformat.read(ROOT / "notebooks/ex09_bug_zoo/ex09_bug_zoo.ipynb", 4)
    for nb in (source, release):
        locked = {
            _meta(c)["grade_id"]: c
            for c in nb.cells
            if _meta(c).get("locked") and not _meta(c).get("grade")
        }
        assert set(locked) == set(BUGGY)
        for grade_id, cell in locked.items():
            assert _meta(cell)["solution"] is False
            assert f"def {grade_id}(" in cell.source


def _run(nb) -> dict[str, str | None]:
    """Run the code cells in one namespace like a kernel: per graded cell, None when it
    passed, else the error. Anything on stderr fails the test."""
    namespace: dict = {"__name__": "__main__"}
    results: dict[str, str | None] = {}
    out, err = io.StringIO(), io.StringIO()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        grade_id = _meta(cell).get("grade_id", "<cell>")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                value = eval_or_exec(cell.source, grade_id, namespace)
            error = None
            assert value is None or not isinstance(value, int | float), grade_id
        except Exception as exc:  # noqa: BLE001 - a failing cell is a result here
            error = f"{type(exc).__name__}: {exc}"
        if _meta(cell).get("grade"):
            results[grade_id] = error
    assert err.getvalue() == ""
    return results


def eval_or_exec(source: str, name: str, namespace: dict):
    """Execute a cell; return the value of its last line when that is an expression
    (what nbgrader would read as partial credit if it were a number)."""
    import ast

    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr):
        tree.body = tree.body[:-1]
        exec(compile(tree, name, "exec"), namespace)
        return eval(compile(ast.Expression(last.value), name, "eval"), namespace)
    exec(compile(tree, name, "exec"), namespace)
    return None


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_passes_every_test_cell(assignment) -> None:
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", 4)
    results = _run(nb)
    assert len(results) == 2 * len(GRADED[assignment])
    assert all(error is None for error in results.values()), results


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_is_a_stub_that_fails_every_public_cell(assignment) -> None:
    path = ROOT / "notebooks" / assignment / f"{assignment}.ipynb"
    text = path.read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text
    nb = nbformat.read(path, 4)
    answers = [c for c in nb.cells if _meta(c).get("solution")]
    assert len(answers) == len(GRADED[assignment])
    for cell in answers:
        assert cell.source.rstrip().endswith("raise NotImplementedError()")
    results = _run(nb)
    public = {k: v for k, v in results.items() if k.endswith("__public")}
    assert len(public) == len(GRADED[assignment])
    for grade_id, error in public.items():
        assert error is not None and "still the stub" in error, (grade_id, error)
    hidden = [c for c in nb.cells if _meta(c).get("grade_id", "").endswith("__hidden")]
    assert all(c.source.strip() == "" for c in hidden)
