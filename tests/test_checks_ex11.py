"""The graders of exercise 11 (longer contexts for RoPE) are themselves tested.

For every graded function (yarn_correction_range, yarn_attention_factor,
llama3_scaled_frequencies):
correct implementations in several styles pass the public check and the hidden grader;
every wrong implementation of the bug zoo (tests/zoo/ex11_long_context.py) is rejected
(tests/test_graders_common.py runs the zoo's WRONG table for every exercise); the
references the graders compare with satisfy the chapter's defining equations; the
tolerances separate the right answer from every known mistake; the source notebook
has the contracted cells, its worked examples are true, the solution passes every test
cell and the release fails every public cell until it is solved.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import inspect
import io
import json
import math
import re
from dataclasses import astuple
from pathlib import Path

import nbformat
import pytest
import torch
from zoo import ex11_long_context as z11
from zoo import harness

from course_lib import rope_scaling
from course_lib.checks import CheckFailed
from course_lib.checks import ex11_long_context as g11
from course_lib.rope_scaling import (
    llama3_scaled_frequencies,
    rope_scaled_frequencies,
    yarn_attention_factor,
    yarn_correction_dim,
    yarn_correction_range,
)

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "ex11_long_context"
PAIRS = [(g11, z11)]
GRADED = ["yarn_correction_range", "yarn_attention_factor", "llama3_scaled_frequencies"]
F64 = torch.float64
EPS64 = torch.finfo(F64).eps


def test_every_graded_function_has_a_zoo() -> None:
    assert harness.names(PAIRS) == GRADED
    assert set(g11.__all__) == {f"{k}_{n}" for n in GRADED for k in ("check", "grade")}
    for name in GRADED:
        assert len(z11.WRONG[name]) >= 3, name
        assert len(z11.CORRECT[name]) >= 3, name
        assert len(z11.CALLS_LIBRARY[name]) == 2, name
        # at least three mistakes are caught already by the public check
        assert sum(public for _, _, public in z11.WRONG[name]) >= 3, name


@pytest.mark.parametrize("name,fn", harness.correct_params(PAIRS))
def test_correct_variant_passes(name, fn, capsys) -> None:
    check, grade = harness.graders(PAIRS, name)
    check(fn)
    grade(fn)
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.strip().splitlines()
    assert lines[0] == (
        f"{name}: all public checks passed. More (hidden) tests run when your work "
        "is graded."
    )
    assert re.fullmatch(rf"{name}: passed \(\d+ [a-z ]+\)\.", lines[1])
    assert len(lines) == 2


# --- the references satisfy the chapter's equations (derived here, not copied)


def _turns(i: float, head_dim: int, base: float, L: int) -> float:
    """How often pair i turns in L tokens: L theta_i / (2 pi), theta_i = b^(-2i/d)."""
    return L * base ** (-2 * i / head_dim) / (2 * math.pi)


RANGE_CASES = g11._RANGE_PUBLIC + g11._RANGE_HIDDEN


@pytest.mark.parametrize("fast,slow,d,base,L,truncate", RANGE_CASES)
def test_range_ends_are_the_pairs_that_turn_beta_fast_and_beta_slow_times(
    fast, slow, d, base, L, truncate
) -> None:
    """Derived from the turn counts, not from the formula: low is the last pair that
    turns at least beta_fast times (0 if none does), high the first that turns at
    most beta_slow times, at most d - 1 (the reference code's clip)."""
    low, high = yarn_correction_range(fast, slow, d, base, L, truncate=truncate)
    if not truncate:
        for end, r in ((low, fast), (high, slow)):
            if 0 < end < d - 1:  # not clipped: the pair (fractional) turns r times
                assert math.isclose(_turns(end, d, base, L), r, rel_tol=1e-12)
        return
    assert isinstance(low, int) and isinstance(high, int)
    if low > 0:
        assert _turns(low, d, base, L) >= fast > _turns(low + 1, d, base, L)
    else:
        assert _turns(1, d, base, L) < fast  # the fractional end was below 1
    if high < d - 1:
        assert _turns(high, d, base, L) <= slow < _turns(high - 1, d, base, L)
    else:  # clipped (pair d - 1 still turns more than beta_slow times) or exact
        assert _turns(d - 1, d, base, L) > slow or (
            _turns(d - 1, d, base, L) <= slow < _turns(d - 2, d, base, L))


@pytest.mark.parametrize("fast,slow,d,base,L,truncate", RANGE_CASES)
def test_every_range_case_is_safe_for_float32(fast, slow, d, base, L, truncate):
    """Each fractional end lies at least 0.01 from an integer (a float32 computation,
    ~1e-5 off, rounds it the same way), as the graders' tolerance assumes."""
    for r in (fast, slow):
        x = yarn_correction_dim(r, d, base, L)
        assert abs(x - round(x)) >= 0.01, (r, x)


@pytest.mark.parametrize("factor", (0.25, 0.5, 1.0, 1.5, 4.0, 32.0, 128.0))
def test_attention_factor_is_the_papers_root_of_the_temperature(factor) -> None:
    """YaRN section 3.4: sqrt(1/t) = 0.1 ln(s) + 1, so (a - 1) / ln(s) = 0.1 for
    s > 1, and nothing changes for s <= 1."""
    a = yarn_attention_factor(factor)
    if factor <= 1:
        assert a == 1.0
    else:
        assert math.isclose((a - 1) / math.log(factor), 0.1, rel_tol=1e-12)
    # the scales are used only together (Hugging Face's rule), as a ratio
    assert yarn_attention_factor(factor, 0.5, None) == a
    both = yarn_attention_factor(factor, 1.2, 0.7)
    ratio = (yarn_attention_factor(factor, 1.2, 1.0)
             / yarn_attention_factor(factor, 0.7, 1.0))  # get(1.2) / get(0.7)
    assert math.isclose(both, ratio, rel_tol=1e-12)
    assert yarn_attention_factor(factor, 0.9, 0.9) == 1.0


def _band_loop(theta: list[float], s: float, L: int, alpha: float, beta: float):
    """Llama 3.1's rule pair by pair, as the Llama 3.1 release's apply_scaling does:
    the band from the wavelength, then the blend."""
    out = []
    for t in theta:
        wavelength = 2 * math.pi / t
        if wavelength < L / beta:
            out.append(t)
        elif wavelength > L / alpha:
            out.append(t / s)
        else:
            smooth = (L / wavelength - alpha) / (beta - alpha)
            out.append((1 - smooth) * t / s + smooth * t)
    return out


@pytest.mark.parametrize(
    "head_dim,base,s,L,alpha,beta",
    [(128, 500000.0, 8.0, 8192, 1.0, 4.0), (64, 500000.0, 32.0, 8192, 1.0, 4.0),
     (32, 10000.0, 4.0, 256, 2.0, 8.0), (16, 10000.0, 4.0, 64, 1.0, 4.0)],
)
def test_llama3_bands_match_a_loop_and_join_continuously(
    head_dim, base, s, L, alpha, beta
) -> None:
    theta = base ** (-2 * torch.arange(head_dim // 2, dtype=F64) / head_dim)
    got = llama3_scaled_frequencies(theta, s, L, alpha, beta)
    want = torch.tensor(_band_loop(theta.tolist(), s, L, alpha, beta), dtype=F64)
    # the same float64 operations in another order: a few ulps
    assert torch.allclose(got, want, rtol=8 * EPS64, atol=0)
    # the three pieces join: at the band edges the blend equals theta and theta / s
    edges = torch.tensor([2 * math.pi * beta / L, 2 * math.pi * alpha / L], dtype=F64)
    at_edges = llama3_scaled_frequencies(edges, s, L, alpha, beta)
    assert torch.allclose(at_edges, torch.stack([edges[0], edges[1] / s]),
                          rtol=16 * EPS64, atol=0)
    # rope_scaled_frequencies' "llama3" method is this function on b^(-2i/d)
    inv, attention = rope_scaled_frequencies(
        head_dim, base=base, method="llama3", factor=s, original_max_position=L,
        low_freq_factor=alpha, high_freq_factor=beta, dtype=F64)
    assert torch.equal(inv, got) and attention == 1.0


def test_llama3_keeps_the_input_dtype() -> None:
    theta = 10000.0 ** (-torch.arange(8, dtype=torch.float32) / 8)
    got = llama3_scaled_frequencies(theta, 4.0, 64)
    assert got.dtype == torch.float32 and got.shape == (8,)


@pytest.mark.parametrize(
    "args,exc,fragment",
    [
        (([1.0, 0.1], 2.0, 64), TypeError, "inv_freq must be a 1-D floating tensor"),
        ((torch.ones(2, 2), 2.0, 64), TypeError, "1-D floating tensor"),
        ((torch.tensor([1, 2]), 2.0, 64), TypeError, "1-D floating tensor"),
        ((torch.tensor([1.0, -0.1]), 2.0, 64), ValueError, "greater than 0"),
        ((torch.tensor([1.0, float("nan")]), 2.0, 64), ValueError, "finite"),
        ((torch.tensor([1.0]), 0.5, 64), ValueError, "factor must be at least 1"),
        ((torch.tensor([1.0]), 2.0, 0), ValueError, "original_max_position must be"),
        ((torch.tensor([1.0]), 2.0, 64, 4.0, 1.0), ValueError,
         "high_freq_factor must be larger than low_freq_factor"),
    ],
)
def test_llama3_bad_input_gets_a_clear_error(args, exc, fragment) -> None:
    with pytest.raises(exc, match="^llama3_scaled_frequencies: ") as info:
        llama3_scaled_frequencies(*args)
    assert fragment in str(info.value) and "\n" not in str(info.value)


# --- the tolerances separate the right answer from every known mistake


@pytest.mark.parametrize("case", RANGE_CASES)
def test_range_mistakes_are_either_right_or_far_outside_the_tolerance(case) -> None:
    expected = yarn_correction_range(*case[:5], truncate=case[5])
    for answer, text, *_ in map(astuple, g11._range_mistakes(*case)):
        gap = max(abs(a - e) for a, e in zip(answer, expected, strict=True))
        assert gap == 0.0 or gap >= 100 * g11._RANGE_ATOL, (text, gap)


ATTENTION_CASES = g11._ATTENTION_PUBLIC + g11._ATTENTION_HIDDEN


@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention_mistakes_are_either_right_or_far_outside_the_tolerance(case):
    expected = yarn_attention_factor(*case)
    for value, text, *_ in map(astuple, g11._attention_mistakes(*case)):
        gap = abs(value - expected)
        assert gap <= 1e-15 or gap >= 1000 * g11._ATTENTION_ATOL, (text, gap)


@pytest.mark.parametrize(
    "case", [*g11._band_public_cases(), *g11._band_hidden_cases()],
    ids=lambda case: case[-1],
)
def test_band_mistakes_are_either_right_or_far_outside_the_tolerance(case) -> None:
    inv_freq, factor, original, alpha, beta, _ = case
    expected = llama3_scaled_frequencies(inv_freq, factor, original, alpha, beta)
    expected = expected.double()
    met = 0
    mistakes = g11._band_mistakes(inv_freq, factor, original, alpha, beta)
    for answer, text, *_ in map(astuple, mistakes):
        gap = ((answer.double() - expected).abs() / expected).max().item()
        # right (factor 1: every rule gives theta, up to float32 rounding of the
        # input) or wrong by far more than the tolerance
        assert gap <= 1e-6 or gap >= 1000 * g11._FREQ_RTOL, (text, gap)
        met += gap > 1e-6
    assert met == (0 if factor == 1.0 else len(g11._band_mistakes(
        inv_freq, factor, original, alpha, beta)))


def test_every_range_and_attention_mistake_is_met_by_some_case() -> None:
    """No known mistake is dead code: each differs from the answer in some case."""
    met, every = set(), set()
    for case in RANGE_CASES:
        expected = list(yarn_correction_range(*case[:5], truncate=case[5]))
        for answer, text, *_ in map(astuple, g11._range_mistakes(*case)):
            every.add(text.split(" (rounding")[0])
            if list(answer) != expected:
                met.add(text.split(" (rounding")[0])
    for case in ATTENTION_CASES:
        expected = yarn_attention_factor(*case)
        for value, text, *_ in map(astuple, g11._attention_mistakes(*case)):
            every.add(text)
            if abs(value - expected) > 1e-12:
                met.add(text)
    assert met == every


# --- the notebooks


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _source() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4)


def _release_path() -> Path:
    return ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def test_source_notebook_has_the_contracted_cells() -> None:
    nb = _source()
    nbformat.validate(nb)
    cells = nb.cells
    by_id = {_meta(c)["grade_id"]: c for c in cells if _meta(c)}
    assert len(by_id) == 3 * len(GRADED)
    for name in GRADED:
        answer, public, hidden = (
            by_id[f"{name}__{kind}"] for kind in ("answer", "public", "hidden")
        )
        assert _meta(answer)["solution"] and not _meta(answer)["grade"]
        assert f"def {name}(" in answer.source
        assert "### BEGIN SOLUTION" in answer.source
        assert _meta(public) == {
            "grade": True, "grade_id": f"{name}__public", "locked": True,
            "points": 1, "schema_version": 3, "solution": False, "task": False,
        }
        assert public.source.rstrip().endswith(f"\ncheck_{name}({name})")
        assert _meta(hidden)["points"] == 2 and _meta(hidden)["locked"]
        assert hidden.source == (
            f"### BEGIN HIDDEN TESTS\ngrade_{name}({name})\n### END HIDDEN TESTS"
        )
        task = cells[cells.index(answer) - 1]
        assert task.cell_type == "markdown" and f"{name}(" in task.source
        assert cells.index(answer) < cells.index(public) < cells.index(hidden)
        # the student writes the library's function: same parameters, same names
        node = ast.parse(answer.source).body[0]
        library = inspect.signature(getattr(rope_scaling, name))
        assert [a.arg for a in node.args.args] == list(library.parameters), name
    intro = next(c for c in cells if c.cell_type == "markdown")
    assert "(../../book/11-long-context.md)" in intro.source
    assert "file: book/11-long-context\n" in (ROOT / "_toc.yml").read_text()


def test_worked_examples_in_the_task_cells_are_true() -> None:
    namespace: dict = {"__name__": "notebook_ex11"}
    for cell in _source().cells:
        if cell.cell_type == "code" and (
            not _meta(cell) or _meta(cell).get("solution")
        ) and "course-setup" not in cell.metadata.get("tags", []):
            exec(compile(cell.source, ASSIGNMENT, "exec"), namespace)  # noqa: S102
    blocks = [
        block
        for cell in _source().cells if cell.cell_type == "markdown"
        for block in re.findall(r"```python\n(.*?)```", cell.source, flags=re.S)
        if ">>>" in block
    ]
    assert len(blocks) == len(GRADED)
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    saved = torch._tensor_str.PRINT_OPTS.__dict__.copy()
    torch.set_printoptions(precision=4, sci_mode=False)
    try:
        for block in blocks:
            test = parser.get_doctest(block, dict(namespace), ASSIGNMENT, None, 0)
            result = runner.run(test, out=lambda s: None)
            assert result.attempted > 0 and result.failed == 0, block
    finally:
        torch._tensor_str.PRINT_OPTS.__dict__.update(saved)


def _run(nb) -> dict[str, str | None]:
    """Run the code cells (not the set-up cell) in one namespace like a kernel: per
    graded cell, None when it passed, else the error. Nothing may reach stderr."""
    namespace: dict = {"__name__": "__main__"}
    results: dict[str, str | None] = {}
    out, err = io.StringIO(), io.StringIO()
    for cell in nb.cells:
        if cell.cell_type != "code" or "course-setup" in cell.metadata.get("tags", []):
            continue
        grade_id = _meta(cell).get("grade_id", "<cell>")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exec(compile(cell.source, grade_id, "exec"), namespace)  # noqa: S102
            error = None
        except Exception as exc:  # noqa: BLE001 - a failing cell is a result here
            error = f"{type(exc).__name__}: {exc}"
        if _meta(cell).get("grade"):
            results[grade_id] = error
    assert err.getvalue() == ""
    return results


def test_solution_passes_every_test_cell() -> None:
    results = _run(_source())
    assert len(results) == 2 * len(GRADED)
    assert all(error is None for error in results.values()), results


def test_release_is_a_stub_that_fails_every_public_cell() -> None:
    text = _release_path().read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text
    nb = nbformat.read(_release_path(), 4)
    answers = [c for c in nb.cells if _meta(c).get("solution")]
    assert len(answers) == len(GRADED)
    for cell in answers:
        assert cell.source.rstrip().endswith("raise NotImplementedError()")
    results = _run(nb)
    public = {k: v for k, v in results.items() if k.endswith("__public")}
    assert len(public) == len(GRADED)
    for grade_id, error in public.items():
        assert error is not None and "still the stub" in error, (grade_id, error)
    hidden = [c for c in nb.cells if _meta(c).get("grade_id", "").endswith("__hidden")]
    assert len(hidden) == len(GRADED) and all(c.source.strip() == "" for c in hidden)


def test_a_known_mistake_in_the_release_fails_its_public_cell_with_its_name() -> None:
    """The student's view: the released notebook with one function filled in wrongly
    (high clipped to the last pair) fails that public cell with the mistake named."""
    nb = nbformat.read(_release_path(), 4)
    for cell in nb.cells:
        if _meta(cell).get("grade_id") == "yarn_correction_range__answer":
            cell.source = (
                "def yarn_correction_range(beta_fast, beta_slow, head_dim, base,\n"
                "                          original_max_position, truncate=True):\n"
                "    def dim(r):\n"
                "        return head_dim * math.log(original_max_position / (\n"
                "            2 * math.pi * r)) / (2 * math.log(base))\n"
                "    low, high = dim(beta_fast), dim(beta_slow)\n"
                "    if truncate:\n"
                "        low, high = math.floor(low), math.ceil(high)\n"
                "    return max(low, 0), min(high, head_dim // 2 - 1)\n"
            )
    results = _run(nb)
    assert "clipped to the last pair" in results["yarn_correction_range__public"]
    assert "still the stub" in results["yarn_attention_factor__public"]


def test_a_wrong_answer_never_passes_silently(capsys) -> None:
    """An attention factor off by 1e-4 (above the 1e-6 tolerance) fails with both
    values, though it is no known mistake."""
    def almost(factor, mscale=None, mscale_all_dim=None):
        return z11.attention_formula(factor, mscale, mscale_all_dim) + 1e-4

    # the first public case is s = 4: 0.1 ln 4 + 1 = 1.138629...
    with pytest.raises(CheckFailed, match=r"expected 1\.13863, got 1\.13873"):
        g11.check_yarn_attention_factor(almost)
    assert capsys.readouterr().err == ""


def test_a_range_that_is_no_pair_fails_with_a_clear_message() -> None:
    for bad, fragment in (((20,), "should return the pair (low, high)"),
                          ((20, "46"), "high should be a number"),
                          (20.5, "should return the pair")):
        with pytest.raises(CheckFailed, match=re.escape(fragment)):
            g11.check_yarn_correction_range(lambda *a, _b=bad, **k: _b)


# --- through nbgrader (slow): a known mistake loses exactly its function's points

_GRADE_SCRIPT = """
import json, sys
from course_lib.grading.autograde import AutogradeOptions, autograde
from course_lib.grading.course import Course
from course_lib.grading.gradebook import read_status
course = Course(sys.argv[1])
s = autograde(course, "ex11_long_context", AutogradeOptions(jobs=2, progress=False))
out = {"outcomes": [(o.student, o.status, o.reason) for o in s.outcomes], "scores": {}}
with course.gradebook() as gb:
    for o in s.outcomes:
        sub = gb.find_submission("ex11_long_context", o.student)
        out["scores"][o.student] = {
            g.name: g.auto_score for nb in sub.notebooks for g in nb.grades
            if g.name.endswith(("__public", "__hidden"))
        }
print(json.dumps(out))
"""


@pytest.mark.slow
def test_autograde_solution_full_marks_and_a_zoo_mistake_loses_its_points(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    from course_lib.grading.collect import collect
    from course_lib.grading.release import release
    from course_lib.grading.synthetic import (
        scratch_course,
        solution_answers,
        student_notebook,
        write_submission,
    )

    course = scratch_course(tmp_path / "course", ROOT, [ASSIGNMENT])
    release(course, ASSIGNMENT)
    src = course.source_dir / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    rel = course.release_dir / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    answers = solution_answers(src)
    # Llama 3.1's alpha = 1 and beta = 4 hard-coded: a public and the hidden cases
    # find it, so the function loses all its points and nothing else
    wrong = dict(answers)
    wrong["llama3_scaled_frequencies__answer"] = (
        "def llama3_scaled_frequencies(inv_freq, factor, original_max_position,\n"
        "                              low_freq_factor=1.0, high_freq_factor=4.0):\n"
        "    theta = inv_freq.double()\n"
        "    wl = 2 * math.pi / theta\n"
        "    L, s = original_max_position, factor\n"
        "    mu = (L / wl - 1.0) / (4.0 - 1.0)\n"
        "    out = torch.where(wl < L / 4.0, theta, torch.where(\n"
        "        wl > L / 1.0, theta / s, (1 - mu) * theta / s + mu * theta))\n"
        "    return out.to(inv_freq.dtype)\n"
    )
    inbox = tmp_path / "inbox"
    write_submission(inbox, "perfect", ASSIGNMENT, student_notebook(rel, answers))
    write_submission(inbox, "fixed_bands", ASSIGNMENT, student_notebook(rel, wrong))
    assert not collect(course, inbox, ASSIGNMENT).not_placed
    run = subprocess.run([sys.executable, "-c", _GRADE_SCRIPT, str(course.root)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(result["outcomes"]) == [
        ["fixed_bands", "graded", ""], ["perfect", "graded", ""]]
    full = {f"{n}__{k}": float(p) for n in GRADED
            for k, p in (("public", 1), ("hidden", 2))}
    assert result["scores"]["perfect"] == full
    assert result["scores"]["fixed_bands"] == full | {
        "llama3_scaled_frequencies__public": 0.0,
        "llama3_scaled_frequencies__hidden": 0.0}
