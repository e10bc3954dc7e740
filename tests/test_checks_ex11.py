"""The graders of exercise 11 (longer contexts for RoPE) are themselves tested.

For every graded function (ntk_scaled_base, yarn_ramp, llama3_scaled_frequencies):
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
    ntk_scaled_base,
    rope_scaled_frequencies,
    yarn_ramp,
)

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "ex11_long_context"
PAIRS = [(g11, z11)]
GRADED = ["ntk_scaled_base", "yarn_ramp", "llama3_scaled_frequencies"]
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


@pytest.mark.parametrize(
    "base,factor,head_dim", g11._NTK_PUBLIC + g11._NTK_HIDDEN
)
def test_ntk_base_slows_the_slowest_pair_by_exactly_the_factor(
    base, factor, head_dim
) -> None:
    new = ntk_scaled_base(base, factor, head_dim)
    i = torch.arange(head_dim // 2, dtype=F64)
    theta = base ** (-2 * i / head_dim)
    scaled = new ** (-2 * i / head_dim)
    assert scaled[0] == theta[0] == 1.0  # pair 0 is unchanged whatever the base
    # theta / scaled = s^(2i/(d-2)): a few float64 roundings of pow and divide, with
    # exponents up to ~1.1 and logarithms up to ~15: 1e-12 relative is far above them
    ratio = theta[-1] / scaled[-1]
    assert math.isclose(float(ratio), factor, rel_tol=1e-12)
    assert torch.allclose(theta / scaled, factor ** (2 * i / (head_dim - 2)),
                          rtol=1e-12, atol=0)


@pytest.mark.parametrize("low,high,n_pairs", g11._RAMP_PUBLIC + g11._RAMP_HIDDEN)
def test_ramp_is_zero_below_low_one_above_high_and_linear_between(
    low, high, n_pairs
) -> None:
    gamma = yarn_ramp(low, high, n_pairs)
    assert gamma.shape == (n_pairs,) and gamma.dtype == F64
    width = high - low if high != low else 0.001  # the reference code's widening
    for i, g in enumerate(gamma.tolist()):
        if i <= low:
            assert g == 0.0, (i, g)
        elif i >= low + width:
            assert g == 1.0, (i, g)
        else:  # one subtraction and one division: a few ulps of a value below 1
            assert math.isclose(g, (i - low) / width, rel_tol=4 * EPS64), (i, g)


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


@pytest.mark.parametrize(
    "base,factor,head_dim", g11._NTK_PUBLIC + g11._NTK_HIDDEN
)
def test_ntk_mistakes_are_either_right_or_far_outside_the_tolerance(
    base, factor, head_dim
) -> None:
    expected = ntk_scaled_base(base, factor, head_dim)
    for value, text in g11._ntk_mistakes(base, factor, head_dim):
        gap = abs(value - expected) / expected
        # factor 1 makes most mistakes right (s^x = 1): those are never reported
        assert gap <= 1e-12 or gap >= 100 * g11._BASE_RTOL, (text, gap)


@pytest.mark.parametrize("low,high,n_pairs", g11._RAMP_PUBLIC + g11._RAMP_HIDDEN)
def test_ramp_mistakes_are_either_right_or_far_outside_the_tolerance(
    low, high, n_pairs
) -> None:
    expected = yarn_ramp(low, high, n_pairs)
    for answer, text in g11._ramp_mistakes(low, high, n_pairs):
        gap = (answer - expected).abs().nan_to_num(nan=math.inf).max().item()
        assert gap == 0.0 or gap >= 100 * g11._RAMP_ATOL, (text, gap)


@pytest.mark.parametrize(
    "case", [*g11._band_public_cases(), *g11._band_hidden_cases()],
    ids=lambda case: case[-1],
)
def test_band_mistakes_are_either_right_or_far_outside_the_tolerance(case) -> None:
    inv_freq, factor, original, alpha, beta, _ = case
    expected = llama3_scaled_frequencies(inv_freq, factor, original, alpha, beta)
    expected = expected.double()
    met = 0
    for answer, text in g11._band_mistakes(inv_freq, factor, original, alpha, beta):
        gap = ((answer.double() - expected).abs() / expected).max().item()
        # right (factor 1: every rule gives theta, up to float32 rounding of the
        # input) or wrong by far more than the tolerance
        assert gap <= 1e-6 or gap >= 1000 * g11._FREQ_RTOL, (text, gap)
        met += gap > 1e-6
    assert met == (0 if factor == 1.0 else len(g11._band_mistakes(
        inv_freq, factor, original, alpha, beta)))


def test_every_ntk_and_ramp_mistake_is_met_by_some_case() -> None:
    """No known mistake is dead code: each differs from the answer in some case."""
    for cases, mistakes, ref in (
        (g11._NTK_PUBLIC + g11._NTK_HIDDEN, g11._ntk_mistakes, ntk_scaled_base),
        (g11._RAMP_PUBLIC + g11._RAMP_HIDDEN, g11._ramp_mistakes, yarn_ramp),
    ):
        met = set()
        for case in cases:
            expected = ref(*case)
            for answer, text in mistakes(*case):
                if isinstance(answer, torch.Tensor):
                    if not torch.allclose(answer, expected, equal_nan=False):
                        met.add(text)
                elif abs(answer - expected) > 1e-12 * expected:
                    met.add(text)
        every = {t for case in cases for _, t in mistakes(*case)}
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
    (the exponent d/(d-1)) fails that public cell with the mistake named."""
    nb = nbformat.read(_release_path(), 4)
    for cell in nb.cells:
        if _meta(cell).get("grade_id") == "ntk_scaled_base__answer":
            cell.source = (
                "def ntk_scaled_base(base, factor, head_dim):\n"
                "    return base * factor ** (head_dim / (head_dim - 1))\n"
            )
    results = _run(nb)
    assert "the exponent is d/(d-1)" in results["ntk_scaled_base__public"]
    assert "still the stub" in results["yarn_ramp__public"]


def test_a_wrong_answer_never_passes_silently(capsys) -> None:
    """A ramp with one entry off by 1e-3 (above the 1e-6 tolerance) fails with the
    index and both values, though it is no known mistake."""
    def almost(low, high, n_pairs):
        out = z11.ramp_clamp(low, high, n_pairs).clone()
        out[5] += 1e-3
        return out

    # the first public case is yarn_ramp(3, 10, 16): gamma_5 = (5 - 3)/(10 - 3) = 2/7
    with pytest.raises(CheckFailed,
                       match=r"index \(5,\): expected 0\.285714, got 0\.286714"):
        g11.check_yarn_ramp(almost)
    assert capsys.readouterr().err == ""


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
    # the ramp without the widening at low == high: only the hidden cases find it
    wrong = dict(answers)
    wrong["yarn_ramp__answer"] = (
        "def yarn_ramp(low, high, n_pairs):\n"
        "    i = torch.arange(n_pairs, dtype=torch.float64)\n"
        "    return ((i - low) / (high - low)).clamp(0.0, 1.0)\n"
    )
    inbox = tmp_path / "inbox"
    write_submission(inbox, "perfect", ASSIGNMENT, student_notebook(rel, answers))
    write_submission(inbox, "unwidened", ASSIGNMENT, student_notebook(rel, wrong))
    assert not collect(course, inbox, ASSIGNMENT).not_placed
    run = subprocess.run([sys.executable, "-c", _GRADE_SCRIPT, str(course.root)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(result["outcomes"]) == [
        ["perfect", "graded", ""], ["unwidened", "graded", ""]]
    full = {f"{n}__{k}": float(p) for n in GRADED
            for k, p in (("public", 1), ("hidden", 2))}
    assert result["scores"]["perfect"] == full
    assert result["scores"]["unwidened"] == full | {"yarn_ramp__hidden": 0.0}
