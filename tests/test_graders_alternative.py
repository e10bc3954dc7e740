"""Graders are not fragile: correct answers that differ in the last bits still pass.

Another CPU's math library (vectorised ``exp``/``sin``/``pow`` differ between Intel and
AMD, by up to a few ulps), another formula (``torch.sigmoid`` instead of ``exp``,
``torch.polar`` instead of ``cos``/``sin``) or another precision (float64 cast to
float32) all give a correct answer that is not bit-identical to the reference. The zoo's
``CORRECT`` tables (tests/zoo/) hold such alternative implementations of every graded
function of ex01-ex09 and ex11; test_checks_ex01_05.py, _ex06_09.py and _ex11.py
grade them unchanged. Here:

- every graded function must have at least two correct implementations in the zoo, so
  that no grader is only ever tested against the formula it was written with;
- every one of them, with its floating-point output perturbed by a few ulps (multiplied
  by ``1 + 4 eps``, ``1 - 4 eps``, or by both in an alternating pattern, ``eps`` of the
  output's own dtype), must still score full marks in the public ``check_*`` and the
  hidden ``grade_*``. Four ulps is what a chain of a few faithfully rounded ops (each
  <= 1 ulp) can move a value on another CPU. Integer and boolean outputs (indices,
  buckets, masks, permutations) are exact by construction and left untouched.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from zoo import ex01_permutation as z01
from zoo import ex02_sinusoidal as z02
from zoo import ex03_rotation as z03
from zoo import ex04_rope as z04
from zoo import ex05_alibi as z05
from zoo import ex06_relative as z06
from zoo import ex07_transformer_xl as z07
from zoo import ex08_da as z08
from zoo import ex09_bug_zoo as z09
from zoo import ex11_long_context as z11
from zoo import harness

from course_lib.checks import ex01_permutation as g01
from course_lib.checks import ex02_sinusoidal as g02
from course_lib.checks import ex03_rotation as g03
from course_lib.checks import ex04_rope as g04
from course_lib.checks import ex05_alibi as g05
from course_lib.checks import ex06_relative as g06
from course_lib.checks import ex07_transformer_xl as g07
from course_lib.checks import ex08_da as g08
from course_lib.checks import ex09_bug_zoo as g09
from course_lib.checks import ex11_long_context as g11

PAIRS = [
    (g01, z01),
    (g02, z02),
    (g03, z03),
    (g04, z04),
    (g05, z05),
    (g06, z06),
    (g07, z07),
    (g08, z08),
    (g09, z09),
    (g11, z11),
]
ULPS = 4


def _graded_names() -> set[str]:
    """Every function of ex01-ex09 and ex11 that has both a public check and a
    hidden grade."""
    names = set()
    for grader, _ in PAIRS:
        for attr in dir(grader):
            if attr.startswith("check_") and hasattr(grader, "grade_" + attr[6:]):
                names.add(attr[6:])
    return names


def test_every_graded_function_has_alternative_correct_implementations() -> None:
    zoo = {name: fns for _, z in PAIRS for name, fns in z.CORRECT.items()}
    # hand_computation grades three numbers, not a function: see the test below
    graded = _graded_names() - {"hand_computation"}
    assert graded, "no graders found"
    missing = sorted(graded - zoo.keys())
    assert not missing, (
        f"graded functions without a correct zoo implementation: {missing}"
    )
    single = sorted(name for name in graded if len(zoo[name]) < 2)
    assert not single, (
        f"graded functions with only one correct implementation: {single}"
    )


def _perturb(value, mode: str):
    """``value``, each floating entry scaled by 1 +- ``ULPS`` eps of its dtype."""
    if isinstance(value, torch.Tensor):
        if not (value.is_floating_point() or value.is_complex()):
            return value  # integer/bool answers are exact by construction
        eps = torch.finfo(value.dtype).eps
        if mode == "up":
            sign = torch.ones(value.shape, dtype=torch.float64)
        elif mode == "down":
            sign = -torch.ones(value.shape, dtype=torch.float64)
        else:  # alternating: neighbours move apart, as SIMD body and tail may
            sign = 1.0 - 2.0 * (torch.arange(value.numel()) % 2).double()
            sign = sign.reshape(value.shape)
        factor = (1 + ULPS * eps * sign).to(value.real.dtype)
        out = value * factor
        assert not torch.equal(out, value) or not value.any(), (
            "the perturbation is a no-op"
        )
        return out
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return _perturb(torch.from_numpy(value), mode).numpy()
    if isinstance(value, tuple):
        return tuple(_perturb(v, mode) for v in value)
    if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
        eps = np.finfo(np.float64).eps
        return [v * (1 + ULPS * eps * (1 if mode != "down" else -1)) for v in value]
    return value


def _perturbed(fn, mode: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _perturb(fn(*args, **kwargs), mode)

    return wrapper


# Answers that are exact by construction in every formula and on every CPU: a
# permutation matrix holds only 0 and 1 (no rounding op produces them), and a converted
# checkpoint (ex04's interleaved_to_half_weights) only moves the stored numbers, so
# their graders compare exactly (atol = rtol = 0) and a perturbed copy is rightly not
# the answer. Any other floating answer involves exp/sin/pow/softmax/matmul and gets
# the few-ulp perturbation below.
EXACT_BY_CONSTRUCTION = {"permutation_matrix", "interleaved_to_half_weights"}
PERTURBABLE = [
    p for p in harness.correct_params(PAIRS) if p.values[0] not in EXACT_BY_CONSTRUCTION
]


def test_exact_by_construction_answers_are_exactly_0_and_1() -> None:
    """The exemption above holds: every correct permutation matrix is bit-exact 0/1,
    and every correct weight conversion holds exactly the entries it was given."""
    for fn in z01.CORRECT["permutation_matrix"]:
        got = torch.as_tensor(fn([2, 0, 3, 1]))
        assert torch.equal(got, torch.eye(4)[[2, 0, 3, 1]].to(got.dtype)), fn.__name__
    w = torch.randn(24, 10, generator=torch.Generator().manual_seed(0))
    for fn in z04.CORRECT["interleaved_to_half_weights"]:
        got = fn(w, 3)
        assert torch.equal(got.sort(0).values, w.sort(0).values), fn.__name__


@pytest.mark.parametrize("mode", ["up", "down", "alternating"])
@pytest.mark.parametrize("name,fn", PERTURBABLE)
def test_correct_answer_off_by_a_few_ulps_scores_full_marks(
    name, fn, mode, capsys
) -> None:
    check, grade = harness.graders(PAIRS, name)
    student = _perturbed(fn, mode)
    check(student)
    out, err = capsys.readouterr()
    assert "all public checks passed" in out and err == ""
    grade(student)
    assert capsys.readouterr().err == ""


_OMEGA6 = (1.0, 10000.0 ** (-2 / 6), 10000.0 ** (-4 / 6))  # d_model = 6


def _dots_closed_form() -> tuple[float, float, float]:
    """PE(p) . PE(q) = sum_i cos((p - q) w_i), w_i = 10000^(-2i/6), float64 math."""
    return tuple(
        sum(math.cos((p - q) * w) for w in _OMEGA6)
        for p, q in ((1, 3), (30, 32), (1, 4))
    )


def _dots_float32_tensors() -> tuple[float, float, float]:
    """The same dots from float32 sin/cos encodings and a float32 matmul."""
    pos = torch.arange(33, dtype=torch.float32)[:, None]  # (33, 1)
    omega = torch.tensor(_OMEGA6, dtype=torch.float32)  # (3,)
    angles = pos * omega  # (33, 3)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (33, 6)
    return tuple(float(pe[p] @ pe[q]) for p, q in ((1, 3), (30, 32), (1, 4)))


def _dots_complex() -> tuple[float, float, float]:
    """Re(sum_i e^(i p w_i) conj(e^(i q w_i))) with torch.polar, in complex128."""
    omega = torch.tensor(_OMEGA6, dtype=torch.float64)
    z = torch.polar(
        torch.ones(33, 3, dtype=torch.float64),
        torch.arange(33, dtype=torch.float64)[:, None] * omega,
    )  # (33, 3)
    return tuple(
        float((z[p] * z[q].conj()).sum().real) for p, q in ((1, 3), (30, 32), (1, 4))
    )


@pytest.mark.parametrize("ulps", [0, -ULPS, ULPS])
@pytest.mark.parametrize(
    "compute", [_dots_closed_form, _dots_float32_tensors, _dots_complex]
)
def test_hand_computation_by_other_formulas_scores_full_marks(
    compute, ulps, capsys
) -> None:
    # float32 answers carry about 8 float32 ulps of rounding (six products and five
    # sums of values <= 3, about 1e-6 in all); the grader's 5e-6 leaves 5x room.
    # A further ulps * eps64 relative move simulates another CPU's libm.
    eps = np.finfo(np.float64).eps
    values = [v * (1 + ulps * eps) for v in compute()]
    from course_lib.checks import ex03_rotation as g03r

    g03r.check_hand_computation(*values)
    g03r.grade_hand_computation(*values)
    out, err = capsys.readouterr()
    assert "all public checks passed" in out and err == ""
