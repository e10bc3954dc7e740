"""Hidden cases drawn per term (issue 34 item 3): "a list of last term's hidden cases
does not carry over".

Every hidden grader of ``course_lib.checks`` that takes the term's ``seed`` (found
here, not listed) is run on the instructor's solution (the source notebook, as
``course_lib.checks._stored`` runs it) under a recorder of the calls it makes of the
student's functions (``course_lib.checks._record``, as a grading kernel records
them): the solution passes for each seed; two seeds draw different calls, the same
seed the same ones; without a seed (the open edition) the calls are those pinned
in :data:`OPEN_EDITION_CALLS`, recorded from the graders before they took a seed
(so the open edition's cases and the stored values that depend on them have not
moved). tests/test_variants.py checks the same draws on the library's references
(the grading kernel's plans); this file checks the solution students are graded
against, exercises without variants included.

A grader whose inputs are fixed by their nature (the student passes numbers, no
function: ex03's hand computation) takes the term's values and draws nothing: it
passes with every seed and makes no call.

The drawing functions of ex01, ex03, ex07, ex08, ex09, ex10 and ex11 keep, for any
seed, the properties their fixed cases were chosen for (their docstrings say which);
the last tests check those over 50 seeds (ex11's: off every setting chapter 11
shows, too), and that the bug zoos of ex09 and ex11 are judged with drawn cases as
with the fixed ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import io
import json
import math
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import course_lib.checks as checks
from course_lib.checks import _record, _stored
from course_lib.checks._core import TERM_PARAMS

ROOT = Path(__file__).resolve().parent.parent
SEED = 20270101

# sha256 of the calls each hidden grader makes of the instructor's solution without
# a term (its fixed cases): each call as its message names it, with its arguments as
# the grading kernel records them (see _calls and _digest). Each recorded from the
# commit named above it, the last before its grader took a seed (the grader and
# solution of that commit, run the same way). A grader that gets a seed adds its
# line here, recorded from the commit before.
OPEN_EDITION_CALLS: dict[str, str] = {
    # ex02_sinusoidal, before eb1778b: recorded from 2547f75
    "grade_position_ids_from_attention_mask":
        "454edd2012c452a0a93858251f625d00b98a69f2453f62a0efb452d4ab6f19ed",
    "grade_sinusoidal_encoding":
        "66551bbd3c14934d4d1ce35243bf75c824d6504d194d764ced86a5538a2771c2",
    # ex04_rope, before c519da7: recorded from 1cc9da7
    "grade_apply_rope":
        "e7e79a13a458899f2ac41b2101b87a7c7be93946756c45dd45a18b1b7348fc81",
    "grade_interleaved_to_half_weights":
        "fcbc73b8081d4f9edf6e842b9de91ea9041f6cc0077e59fbc0a1905325133618",
    "grade_rope_frequencies":
        "e316a03640ff7db9eaf40d24211af2aa7af7e4932ba0f49f2744572840893414",
    # ex05_alibi, before ca48427: recorded from 97be807
    "grade_alibi_bias":
        "d028c8295b60d3012340c9ebba585700e7090dd8d61b2b6ef59aaac8d87eaf58",
    "grade_alibi_slopes":
        "2ff4dc450bcafb534f589fbf1957e18ae227a9e0930162e70806852bc618b228",
    # ex06_relative, before 3b314ea: recorded from abcfd5e
    "grade_shaw_relative_attention":
        "c67c9f8b2b16aa7d0c1dafa630fe55d9351fcf15921931c344a3ece46d1a1361",
    "grade_t5_relative_position_bucket":
        "451c78ef2f1e35bc59b0daa086c7030a486bf119d08c6dddb976934c87acebbc",
    # ex01, ex03, ex07, ex08: recorded from 4ab73c0
    "grade_permutation_matrix":
        "c9e91089166e02899fd5e1aace0caa8f14577eea48e5fdddcea011d435b76a20",
    "grade_self_attention":
        "8e48cf6fc3e5de13f83d110cf81b02f000e2e6d003e7be4ca959a1dc330de2fd",
    "grade_hand_computation":
        "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
    "grade_offset_matrix":
        "ad288676c039c68d0d7a3908dc54b9e823928acc16eaf394c1f719a8e67cd670",
    "grade_rel_attention_scores":
        "fb267338ac4089afde2ebba10a582fb6639b23151cbb588e59575424d8b692a9",
    "grade_rel_shift":
        "b6f82334d1fe8381205ce3134e49fe0b95f89cf7ae7b9aee2e1d536087f75e20",
    "grade_rel_shift_bidirectional":
        "a965c6586c3090675dd665505befb649a309b1932d7094d84b9b86762389f6bc",
    "grade_da_attention":
        "27936fe6ede2c128da493245f3d18eaa7a912b52c0d8351d42b8ab7f24b0c8c9",
    "grade_da_rescale":
        "031426a13d8b6e5d822d59b1c080be0efb62ccf806acb259b8d0e9f2548e01e4",
    # ex09, ex10, ex11, before f330241: recorded from 4609fcd
    "grade_fixed_decode_position_ids":
        "6c7934622a414b242057ee95169273415ce4e6c9bed63dc120016c60221b560e",
    "grade_fixed_rope_cos_sin":
        "2f555f76adde6e6170ab89dd4506bb9ac0c0d99fbded9140138b9d55cd1bb34e",
    "grade_fixed_sliding_window_mask":
        "5e29271fc78295e92cec26c48c5bebb7a0f5a75cd5fa590c6c7dafb1ba7c6384",
    "grade_log_distance_bias":
        "8a8877b4028a3169237cd7f2defcae1d378f0351019b740496278d94004b8cee",
    "grade_retained_skill":
        "c1d287e8c905cb251da6ad6d58be7249d6d911ac3e67c47b88bd0aacd2f257f0",
    "grade_llama3_scaled_frequencies":
        "1c09b01bf3b1b9d43895f08dd6cda1f071cffd1272c9697bb50ae4c5d71d2527",
    "grade_yarn_attention_factor":
        "139c16a60faee96ef6713e32c9e8fb5e14fb82f3256341aacec1f312f258f621",
    # re-pinned when its first fixed case moved off chapter 11's ratio figure
    # (Llama 3's base at 12000, not the figure's 8192)
    "grade_yarn_correction_range":
        "f18a9aaac575a0a7db11212f8e03a0df990f768772b506e4cb356c767badedf5",
}


def _graders_with_seed() -> list[tuple[str, str]]:
    out = []
    for info in pkgutil.iter_modules(checks.__path__):
        if not re.fullmatch(r"ex\d+_\w+", info.name):
            continue
        module = importlib.import_module(f"{checks.__name__}.{info.name}")
        for name in module.__all__:
            params = inspect.signature(getattr(module, name)).parameters
            if name.startswith("grade_") and "seed" in params:
                out.append((info.name, name))
    return sorted(out)


GRADERS = _graders_with_seed()


def _student_args(grader, namespace: dict) -> list:
    """The student's values a grader takes, from a solution's namespace: the graded
    function (a grader of one function) or each parameter's namesake."""
    params = [p for p in inspect.signature(grader).parameters if p not in TERM_PARAMS]
    function = grader.__name__.removeprefix("grade_")
    return [namespace[function if len(params) == 1 else p] for p in params]


def _calls(grader, args: list, values: tuple) -> list[tuple[str, str]]:
    """``[(call, its arguments)]``: the calls ``grader(*args, *values)`` makes of the
    student's functions, recorded as a grading kernel records them; a failing
    grader fails the test."""
    recorder = _record._Recorder()
    previous, _record._session = _record._session, recorder
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            grader(*args, *values)
    finally:
        _record._session = previous
    return [(e["call"], json.dumps(e["args"], sort_keys=True)) for e in recorder.events]


def _digest(calls: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps(calls).encode()).hexdigest()


def test_every_grader_with_a_seed_is_found_and_takes_the_term_last() -> None:
    names = {name for _a, name in GRADERS}
    assert {"grade_self_attention", "grade_permutation_matrix", "grade_offset_matrix",
            "grade_hand_computation", "grade_rel_shift", "grade_rel_attention_scores",
            "grade_rel_shift_bidirectional", "grade_da_rescale",
            "grade_da_attention"} <= names
    for assignment, name in GRADERS:
        params = list(inspect.signature(
            getattr(importlib.import_module(f"course_lib.checks.{assignment}"), name)
        ).parameters.values())
        assert [p.name for p in params[-2:]] == ["variant", "seed"], name
        assert all(p.default is None for p in params[-2:]), name


@pytest.mark.parametrize("assignment,name", GRADERS)
def test_the_seed_draws_the_hidden_calls_of_the_solution(assignment, name) -> None:
    grader = getattr(importlib.import_module(f"course_lib.checks.{assignment}"), name)
    args = _student_args(grader, _stored._solution_namespace(ROOT, assignment))
    fixed = _calls(grader, args, (None, None))
    # the open edition's cell passes no term values: the same calls
    assert name in OPEN_EDITION_CALLS, (
        f"{name}: pin its open edition's calls, recorded from the commit before it "
        f"took a seed (now: {_digest(fixed)})"
    )
    assert _digest(fixed) == OPEN_EDITION_CALLS[name], "the fixed cases moved"
    first = _calls(grader, args, ("default", SEED))  # the solution passes
    other = _calls(grader, args, ("default", SEED + 1))
    if not any(callable(a) for a in args):
        # numbers, no function: nothing to draw, and the docstring says so
        assert fixed == first == other == []
        assert "nothing to draw" in " ".join(grader.__doc__.split())
        return
    assert first and other
    assert first == _calls(grader, args, ("default", SEED))  # same term, same cases
    assert first != other  # last term's list does not carry over
    assert first != fixed  # nor the open edition's


def test_an_unknown_variant_is_refused_by_a_grader_without_variants() -> None:
    from course_lib.checks import ex07_transformer_xl as g07

    shift = _stored._solution_namespace(ROOT, "ex07_transformer_xl")["rel_shift"]
    with pytest.raises(ValueError, match="ex07_transformer_xl has no variant 'causal'"):
        g07.grade_rel_shift(shift, "causal", SEED)


SEEDS = range(50)


def test_ex01_draws_keep_the_fixed_cases_properties() -> None:
    from course_lib.checks import ex01_permutation as g01

    for seed in SEEDS:
        cases, perms = g01._hidden_attention_cases(seed)
        assert len(cases) == 6
        batches = [c[1] for c in cases]
        assert 3 in batches and None in batches
        assert any(c[2] == 1 for c in cases)  # one token
        square = [c for c in cases if c[3] == c[4] == c[5]]
        assert len(square) == 1 and square[0][1] is not None
        assert all(c[4] != c[3] for c in cases if c not in square)
        doubles = [c for c in cases if c[6] == torch.float64]
        assert len(doubles) == 2 and {c[1] is None for c in doubles} == {True, False}
        assert any(c[5] == 1 for c in doubles)
        assert [len(p) for _s, p in perms][1] == 3 and 6 <= len(perms[0][1]) <= 9
        for _s, perm in perms:
            assert sorted(perm) == list(range(len(perm))) and perm != sorted(perm)
        perms, prop = g01._hidden_permutations(seed)
        assert len(perms) == 8 and perms[0] == [0]
        assert perms[1] == list(range(len(perms[1])))  # the identity
        for perm in perms:
            assert sorted(perm) == list(range(len(perm)))

        def inverse(p):
            return [p.index(i) for i in range(len(p))]

        swap, reverse, cycle = perms[2], perms[3], perms[4]
        assert sum(a != b for a, b in zip(swap, sorted(swap), strict=True)) == 2
        assert reverse == sorted(reverse)[::-1] and len(reverse) >= 4
        assert inverse(swap) == swap and inverse(reverse) == reverse
        assert inverse(cycle) != cycle
        assert all(p != sorted(p) and 6 <= len(p) <= 14 for p in perms[5:])
        assert prop != sorted(prop) and 5 <= len(prop) <= 8
    assert g01._hidden_permutations(1) != g01._hidden_permutations(2)


def test_ex03_draws_keep_the_fixed_cases_properties() -> None:
    from course_lib.checks import ex03_rotation as g03

    for seed in SEEDS:
        cases, shifts, (k1, k2, width) = g03._hidden_offset_cases(seed)
        ks = [k for k, _d in cases]
        assert 0 in ks and sum(k < 0 for k in ks) == 2 and any(k >= 20 for k in ks)
        assert any(d == 2 for _k, d in cases) and any(d >= 48 for _k, d in cases)
        assert all(abs(k) <= 64 for k in ks)  # the tolerance's bound
        assert all(d % 2 == 0 for _k, d in (*cases, *shifts, (0, width)))
        assert shifts[0][0] > 0 > shifts[1][0]
        assert all(abs(k) <= 10 for k, _d in shifts)  # 30 rows of 40 or more
        assert k1 > 0 and k2 > 0
    # the hand computation has one right answer: the seed changes nothing
    assert "nothing to draw" in " ".join(g03.grade_hand_computation.__doc__.split())


def test_ex07_draws_keep_the_fixed_cases_properties() -> None:
    from course_lib.checks import ex07_transformer_xl as g07

    for seed in SEEDS:
        _gen, shapes, labels = g07._hidden_shift_cases(seed)
        qk = [s[-2:] for s in shapes]
        assert all(q <= k for q, k in qk)
        assert (1, 1) in qk and any(q == 1 < k for q, k in qk)
        assert {len(s) for s in shapes} >= {2, 3, 4, 5}  # leading dimensions
        assert any(k >= 2 * q and q >= 5 for q, k in qk)  # a long memory
        assert any(q == k > 1 for q, k in qk) and any(1 < q < k for q, k in qk)
        assert labels[0][0] == labels[0][1] and labels[1][0] == 1
        assert labels[2][1] - labels[2][0] >= 5
        _gen, sizes = g07._hidden_scores_cases(seed)
        assert (1, 1, 1, 1) == sizes[2][:4] and sizes[3][2] == 1 < sizes[3][3]
        assert any(h >= 3 and k > q for _b, h, q, k, _d in sizes)
        assert any(d == 2 for *_s, d in sizes)
        assert any(k >= q + 10 for _b, _h, q, k, _d in sizes)
        assert all(q <= k and d % 2 == 0 for _b, _h, q, k, d in sizes)
        _gen, shapes, labels = g07._hidden_bidirectional_cases(seed)
        qk = [(s[-2], s[-1] - s[-2] + 1) for s in shapes]  # width k + q - 1
        assert all(q <= k for q, k in qk)
        assert (1, 1) in qk and any(q == 1 < k for q, k in qk)
        assert any(q == k > 1 and len(s) == 3 for (q, k), s in zip(qk, shapes,
                                                                     strict=True))
        assert any(len(s) == 5 and q < k for (q, k), s in zip(qk, shapes, strict=True))
        assert any(k >= 2 * q and q >= 5 for q, k in qk)
        assert labels[0][0] == 1 and labels[1][0] == labels[1][1]
        assert labels[2][1] - labels[2][0] >= 6


def test_ex08_draws_keep_the_fixed_cases_properties() -> None:
    from course_lib.checks import ex08_da as g08

    for seed in SEEDS:
        first, (w, v), cases = g08._hidden_rescale_cases(seed)
        assert float(first[1]) > 0 and float(first[2]) > 0
        assert w.shape == v.shape == (4, 1) and bool((w > 0).all())
        scalars = [(d, float(w), float(v)) for d, w, v in cases if w.ndim == 0]
        far = [(w, v) for d, w, v in scalars if float(d.max()) >= 900]
        assert any(w > 0.1 for w, _v in far) and any(w < -0.1 for w, _v in far)
        assert any(0 < w < 0.01 for w, _v in far)
        assert any(-0.01 < w < 0 for w, _v in far)
        assert any(w < 0 and d.ndim == 1 for d, w, _v in scalars if d.max() < 900)
        assert any(w < 0 and d.ndim == 2 for d, w, _v in scalars)
        assert any(bool((d == 0).all()) for d, _w, _v in cases)
        # e^v overflows float32 (88.7), float32 only, and float64 (709.8)
        assert any(88.7 < v < 100 for _d, _w, v in scalars)
        assert any(300 <= v < 709 for _d, _w, v in scalars)
        assert any(v > 709.8 for _d, _w, v in scalars)
        assert any(w.ndim == 3 for _d, w, _v in cases)  # a w per head
        cases, causal, cache = g08._hidden_attention_cases(seed)
        qs = [c[0].shape[2] for c in cases]
        assert 1 in qs and max(qs) >= 20
        assert any(c[2].shape[-1] != c[0].shape[-1] for c in cases)  # value width
        assert any(bool((c[3] < 0).all()) for c in cases)  # negative w
        mixed = [c[3] for c in cases if bool((c[3] < 0).any() and (c[3] > 0).any())]
        assert mixed and bool((mixed[0] == 0).any())
        assert bool((causal[0][3] < 0).all())
        assert causal[1][1].shape[2] > causal[1][0].shape[2]  # a cache, causal
        assert causal[1][2].shape[-1] != causal[1][0].shape[-1]
        assert causal[2][0].shape[2] == 1 < causal[2][1].shape[2]  # one step
        assert cache[1].shape[2] >= 2 * cache[0].shape[2]


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def test_ex09_draws_keep_the_fixed_cases_properties() -> None:
    from course_lib.checks import ex09_bug_zoo as g09

    half = (torch.float16, torch.bfloat16)
    for seed in SEEDS:
        cases = g09._hidden_cos_sin_cases(seed)
        assert len(cases) == 8 and cases[0][1:] == (8, torch.float32)
        assert cases[0][0].tolist() == list(range(6))  # the public case stays
        assert all(int(p.max()) <= 5000 and d % 2 == 0 for p, d, _t in cases)
        assert any(d == 2 and len(p) == 1 for p, d, _t in cases)
        assert any(t == torch.float64 for _p, _d, t in cases)
        listed = [p.tolist() for p, _d, t in cases if t in half]
        assert any(values != sorted(values) for values in listed)  # unsorted
        # each half-precision case has positions its dtype cannot hold (float16: odd
        # past 2048, bfloat16: most past 256), where rounded positions go wrong
        for p, _d, t in cases:
            if t in half:
                assert bool((p.to(t).double() != p.double()).any()), (seed, p, t)
        f16 = [p.tolist() for p, _d, t in cases if t == torch.float16]
        assert any(min(values) < 2048 < max(values) for values in f16)  # across 2048
        bf16 = [p.tolist() for p, _d, t in cases if t == torch.bfloat16]
        assert any(max(values) >= 4500 and min(values) <= 10 for values in bf16)

        decode = g09._hidden_decode_cases(seed)
        assert len(decode) == 8
        for mask, n_new in decode:
            row = mask.long()
            # left padding: each row is zeros, then ones
            assert bool((row.diff(dim=1) >= 0).all()) and 1 <= n_new <= row.shape[1]
        assert any(m.dtype == torch.bool for m, _n in decode)
        assert any(m.shape[0] == 1 and bool((m == 0).any()) and n > 1
                   for m, n in decode)  # one padded row, several new tokens
        assert any(bool(m.all()) and n == m.shape[1] > 1 for m, n in decode)  # prompt
        real = [(m.long().sum(1), m.shape[1], n) for m, n in decode if m.shape[0] == 2]
        padded_and_full = [n for r, width, n in real if r.min() < width == r.max()]
        assert {n == 1 for n in padded_and_full} == {True, False}
        left = decode[-1][0]
        assert decode[-1][1] == left.shape[1] and decode[-2][0] is left
        assert bool((left.sum(1) * 2 >= left.shape[1]).all())  # half the row real
        assert 1 < decode[-2][1] <= int(left.sum(1).min())  # new tokens all real

        window = g09._hidden_window_cases(seed)
        assert window[:2] == ((7, 7, 3), (2, 9, 4))  # the public cases stay
        assert all(1 <= q <= k for q, k, _w in window)
        assert any(w == 1 < q == k for q, k, w in window)
        assert any(q == k < w for q, k, w in window)
        assert (1, 1, 1) in window and any(q == 1 < w < k for q, k, w in window)
        assert any(q == w < k for q, k, w in window)  # a chunk after a cache
        assert any(q == k == w >= 10 for q, k, w in window)


def test_ex10_draws_keep_the_fixed_cases_properties() -> None:
    from course_lib.checks import ex10_lab as g10

    for seed in SEEDS:
        shapes = g10._hidden_bias_shapes(seed)
        assert shapes[:3] == ((4, 6), (1, 3), (8, 5))  # the public shapes stay
        assert all(_power_of_two(h) for h, _s in shapes)  # as the task says
        assert any(s == 1 for _h, s in shapes) and any(h >= 16 for h, _s in shapes)
        assert any(s > 32 for _h, s in shapes)  # far past the lab's length 8
        seeds, chosen, flat = g10._hidden_retained_cases(seed)
        assert len(set(seeds)) == 2 and len(chosen) == 2
        for cases in chosen:
            chances = sorted(c for _t, _m, c in cases)
            assert chances[0] == 0.0 and 0.05 <= chances[1] <= 0.125
            assert 0.25 <= chances[2] <= 0.5
            assert len({(t, m) for t, m, _c in cases}) == 3
        # a method flat at chance: not above chance at L, nan everywhere
        assert len({r["mean"] for r in flat}) == 1 and len(flat) == 3
        lengths = [r["length"] for r in flat]
        assert lengths == [lengths[0], 2 * lengths[0], 4 * lengths[0]]
    assert g10._hidden_retained_cases(1) != g10._hidden_retained_cases(2)


def _ex11_lengths_shown() -> set[int]:
    """The training lengths chapter 11 shows: its cells' 512, 2048 and 8192, its
    figures' (interactive.YARN_TRAINING_LENGTH) and the lab's."""
    from course_lib.experiments import stored_results
    from course_lib.viz import interactive

    lab = stored_results()["meta"]["settings"]["train_length"]
    return {512, 2048, 8192, interactive.YARN_TRAINING_LENGTH, lab}


def test_ex11_draws_stay_off_chapter_11_and_keep_the_fixed_cases_properties() -> None:
    from course_lib.checks import ex11_long_context as g11
    from course_lib.rope_scaling import (
        llama3_scaled_frequencies,
        yarn_attention_factor,
        yarn_correction_dim,
        yarn_correction_range,
    )

    shown = _ex11_lengths_shown()
    assert all(_power_of_two(n) for n in shown)  # the rule the draws rely on
    for seed in SEEDS:
        ranges = g11._hidden_range_cases(seed)
        assert len(ranges) == 7
        for fast, slow, d, base, L, truncate in ranges:
            assert not _power_of_two(L) and L not in shown
            for r in (fast, slow):  # float32 rounds each end the same way
                x = yarn_correction_dim(r, d, base, L)
                assert abs(x - round(x)) >= 0.01, (seed, r, x)
            expected = yarn_correction_range(fast, slow, d, base, L, truncate=truncate)
            for m in g11._range_mistakes(fast, slow, d, base, L, truncate):
                gap = max(abs(a - e) for a, e in zip(m.answer, expected, strict=True))
                assert gap == 0.0 or gap >= 100 * g11._RANGE_ATOL, (seed, m.mistake)
        fractional = [c for c in ranges if not c[5]]
        assert len(fractional) == 1
        fast, _slow, d, base, L, _t = fractional[0]
        assert L < 2 * math.pi * fast  # even pair 0 turns fewer than beta_fast times
        assert yarn_correction_range(*fractional[0][:5], truncate=False)[0] == 0
        assert any(base >= 500000 for _f, _s, _d, base, _L, _t in ranges)
        assert any(not _power_of_two(d) for _f, _s, d, _b, _L, _t in ranges)
        assert any(d >= 256 for _f, _s, d, _b, _L, _t in ranges)
        assert any((f, s) != (32.0, 1.0) and f not in (8, 16, 32, 64)
                   for f, s, *_ in ranges)  # betas off the figure's sliders

        factors = g11._hidden_attention_cases(seed)
        assert len(factors) == 7 and factors[0] == (1.0, None, None)
        for s, m1, m2 in factors:
            assert s == 1.0 or s != int(s)  # chapter 11's factors are whole numbers
            expected = yarn_attention_factor(s, m1, m2)
            for m in g11._attention_mistakes(s, m1, m2):
                gap = abs(m.answer - expected)
                assert gap <= 1e-15 or gap >= 1000 * g11._ATTENTION_ATOL, (seed, m)
        plain = [s for s, m1, m2 in factors if m1 is None and m2 is None]
        assert any(s < 1 for s in plain) and any(1 < s < 4 for s in plain)
        assert any(s > 64 for s in plain)
        scaled = [(m1, m2) for _s, m1, m2 in factors if m1 is not None]
        assert any(m1 == m2 for m1, m2 in scaled)
        assert any(m1 != m2 and abs(m1 - m2) >= 0.2 for m1, m2 in scaled)
        assert any(m1 is None and m2 is not None for _s, m1, m2 in factors)

        bands = g11._band_hidden_cases(seed)
        assert len(bands) == 4 and sum(c[1] == 1.0 for c in bands) == 1
        for inv_freq, s, L, alpha, beta, _label in bands:
            assert not _power_of_two(L) and L not in shown
            assert s == 1.0 or s != int(s)
            expected = llama3_scaled_frequencies(inv_freq, s, L, alpha, beta).double()
            gaps = [((m.answer.double() - expected).abs() / expected).max().item()
                    for m in g11._band_mistakes(inv_freq, s, L, alpha, beta)]
            if s == 1.0:
                assert inv_freq.dtype == torch.float32 and max(gaps) <= 1e-6
            else:  # every known mistake is met, far outside the tolerance
                assert min(gaps) >= 1000 * g11._FREQ_RTOL, (seed, gaps)
        assert any(s >= 16 for _i, s, *_ in bands)
        assert any((alpha, beta) != (1.0, 4.0) for _i, _s, _L, alpha, beta, _l in bands)
        scattered = bands[-1][0]
        assert scattered.dtype == torch.float32 and len(scattered) == 40
        ratios = scattered[1:].double() / scattered[:-1].double()
        assert float(ratios.max() - ratios.min()) > 0.1  # not a geometric sequence


def _zoo_params(assignment: str) -> list:
    zoo = importlib.import_module(f"zoo.{assignment}")
    return [
        pytest.param(assignment, name, fn, fragment, id=f"{name}-{fn.__name__}")
        for name, fns in zoo.CORRECT.items() for fn in fns
        for fragment in (None,)
    ] + [
        pytest.param(assignment, name, fn, fragment, id=f"{name}-{fn.__name__}")
        for name, entries in zoo.WRONG.items() for fn, fragment, _public in entries
    ]


@pytest.mark.parametrize("assignment,name,fn,fragment",
                         _zoo_params("ex09_bug_zoo") + _zoo_params("ex11_long_context"))
def test_the_drawn_cases_judge_the_zoo_as_the_fixed_ones(assignment, name, fn,
                                                          fragment) -> None:
    """Each correct implementation of tests/zoo passes the hidden grader with a
    term's seed, each wrong one is rejected with the message that names its
    mistake, as with the fixed cases."""
    from course_lib.checks import CheckFailed

    grade = getattr(importlib.import_module(f"course_lib.checks.{assignment}"),
                    f"grade_{name}")
    for seed in (SEED, SEED + 1, 7):
        with contextlib.redirect_stdout(io.StringIO()):
            if fragment is None:
                grade(fn, "default", seed)
                continue
            with pytest.raises(CheckFailed) as failed:
                grade(fn, "default", seed)
        assert fragment in str(failed.value), (seed, str(failed.value))
