"""Graders for ex10_lab: a new attention bias in the lab's harness, and reading results.

``check_*`` run in the students' notebooks (public cells); ``grade_*`` run at grading
(hidden cells). The bias exercise asks for a logarithmic distance penalty (the fixed
form of KERPLE's "log" kernel, Chi et al. 2022)

.. math::

    B_h[i, j] = -m_h \\ln(1 + (i - j)) \\text{ for } j \\le i, \\qquad
    B_h[i, j] = -\\infty \\text{ for } j > i,

with ALiBi's slopes :math:`m_h = 2^{-8h/H}` (``H`` a power of two); the hidden grade
also trains a tiny model of :mod:`course_lib.experiments` with it. The results exercise
asks for the share of above-chance accuracy a method keeps at longer lengths:

.. math::

    r(n) = \\frac{a(n) - c}{a(L) - c}

with ``a`` the mean accuracy, ``c`` chance and ``L`` the shortest (training) length.

The exercise has no variants (:data:`VARIANTS` is empty). The hidden graders take the
term's ``variant`` (only ``"default"``) and ``seed`` (issue 34 item 3): with a seed,
the bias's hidden shapes and the retained-skill summaries, their tasks and their
chance levels are drawn from it; the training run that judges the bias in the lab's
harness stays the same every term (its accuracy threshold was set for that run).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import torch

from course_lib.alibi import alibi_slopes as _ref_alibi_slopes

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    known_mistake,
    passed,
    term_rng,
    variant_named,
)

__all__ = [
    "check_log_distance_bias",
    "check_retained_skill",
    "grade_log_distance_bias",
    "grade_retained_skill",
]

EXERCISE = "ex10_lab"
# No variants: the bias and the ratio are asked the same way every term.
VARIANTS: dict[str, Variant] = {}

# Tolerances, from the arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8.
# A bias entry is m_h * ln(1 + (i - j)): one log (log1p or log, a few ulps apart)
# and one product, within ~4 u relative; rtol 1e-4 is 400x that, so float32 or
# float64, log1p or log(1 + x) all pass. atol 1e-5 is for the zeros on the
# diagonal. The known mistakes (log2, linear, positive) are off by >= 30 %.
_ATOL = 1e-5
_RTOL = 1e-4


def _reference_bias(n_heads: int, seq_len: int) -> torch.Tensor:
    slopes = _ref_alibi_slopes(n_heads).double()[:, None, None]  # (H, 1, 1)
    pos = torch.arange(seq_len, dtype=torch.float64)
    back = pos[:, None] - pos[None, :]  # (S, S): i - j
    bias = -slopes * torch.log1p(back.clamp(min=0))  # (H, S, S)
    return bias.masked_fill(back < 0, float("-inf"))


def _bias_mistakes(n_heads: int, seq_len: int) -> list[Mistake]:
    slopes = _ref_alibi_slopes(n_heads).double()[:, None, None]
    pos = torch.arange(seq_len, dtype=torch.float64)
    back = pos[:, None] - pos[None, :]
    future = back < 0
    dist = back.clamp(min=0)

    def causal(x: torch.Tensor) -> torch.Tensor:
        return x.expand(n_heads, seq_len, seq_len).masked_fill(future, float("-inf"))

    out = [
        Mistake(
            causal(-slopes * dist),
            "this is ALiBi's linear penalty -m_h (i - j); the exercise asks for "
            "the logarithmic one, -m_h ln(1 + (i - j))",
            "linear-penalty",
        ),
        Mistake(
            causal(slopes * torch.log1p(dist)),
            "the bias is positive: distant keys must be penalised, so the bias is "
            "-m_h ln(1 + (i - j))",
            "positive-sign",
        ),
        Mistake(
            causal(-slopes * torch.log2(1 + dist)),
            "this uses log base 2; use the natural logarithm (torch.log1p)",
            "log-base-2",
        ),
        Mistake(
            (-slopes * torch.log1p(back.abs())).expand(n_heads, seq_len, seq_len),
            "the causal mask is missing: keys after the query (j > i) must get "
            "-inf",
            "no-causal-mask",
        ),
        Mistake(
            causal(-slopes.flip(0) * torch.log1p(dist)),
            "the slopes are in reversed order: head h = 1 has the largest slope "
            "2^(-8/H)",
            "reversed-heads",
        ),
        Mistake(
            causal(-(2.0 ** (-8.0 * torch.arange(n_heads, dtype=torch.float64)
                              / n_heads))[:, None, None] * torch.log1p(dist)),
            "the slopes start at 2^0 = 1: the first slope is 2^(-8/H) (h counts "
            "from 1)",
            "starts-at-one",
        ),
    ]
    expected = _reference_bias(n_heads, seq_len)
    return [m for m in out if not (
        m.answer.shape == expected.shape
        and torch.allclose(m.answer, expected, atol=_ATOL, rtol=_RTOL, equal_nan=True)
    )]


def _check_bias(fn: Callable, n_heads: int, seq_len: int) -> None:
    expected = _reference_bias(n_heads, seq_len)
    mistakes = _bias_mistakes(n_heads, seq_len)
    call = f"log_distance_bias({n_heads}, {seq_len})"
    got = call_student(fn, n_heads, seq_len, call=call)
    expect_close(got, expected, what=call, atol=_ATOL, rtol=_RTOL, mistakes=mistakes,
                 dtype="float")


def _through_call_student(fn: Callable) -> Callable[[int, int], torch.Tensor]:
    """The student's bias as the lab's model asks for it: each ``(n_heads, seq)``
    is asked of ``fn`` once, through ``call_student``, and a copy of that answer is
    given to every later forward pass.

    The model never calls ``fn`` itself, so every answer it trains with is in the
    kernel's record. The grading tool replays this grader on that record, outside
    the student's kernel: the training run that judges the bias happens there too,
    and the kernel needs no reference of this exercise (no full library)."""
    answers: dict[tuple[int, int], Any] = {}

    def bias_fn(n_heads: int, seq: int) -> torch.Tensor:
        if (n_heads, seq) not in answers:
            answers[n_heads, seq] = call_student(
                fn, n_heads, seq, call=f"log_distance_bias({n_heads}, {seq})"
            )
        got = answers[n_heads, seq]
        return got.clone() if isinstance(got, torch.Tensor) else got

    return bias_fn


def _runs_in_harness(fn: Callable) -> None:
    """A forward pass of the lab's model with the student's bias, past ``L``."""
    from course_lib.experiments import ModelConfig, TinyTransformer

    cfg = ModelConfig(vocab_size=16, n_classes=8, method="custom", train_length=8,
                      d_model=32, n_heads=4, d_ff=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = TinyTransformer(cfg, bias_fn=_through_call_student(fn))
    tokens = torch.randint(0, 16, (2, 32), generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad():
            logits = model(tokens)
    except CheckFailed:
        raise  # the student's function itself raised: call_student said so
    except Exception as exc:  # noqa: BLE001 - any error of the student's code
        raise CheckFailed(
            f"the lab's TinyTransformer with bias_fn=log_distance_bias raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not bool(torch.isfinite(logits).all()):
        raise CheckFailed(
            "the lab's TinyTransformer with your bias gives non-finite logits: "
            "a row of the bias must have at least one finite entry (j = i)"
        )


def check_log_distance_bias(log_distance_bias: Callable) -> None:
    """Public check: 4 heads at length 6, 1 head, 8 heads; a forward pass in the lab."""
    for n_heads, seq_len in ((4, 6), (1, 3), (8, 5)):
        _check_bias(log_distance_bias, n_heads, seq_len)
    _runs_in_harness(log_distance_bias)
    passed("log_distance_bias", public=True)


def _hidden_bias_shapes(seed: int | None) -> tuple[tuple[int, int], ...]:
    """The hidden ``(n_heads, seq_len)`` shapes: fixed without a term seed; else drawn
    by the seed with the same properties. The three public shapes stay first; then
    length 1 (only the diagonal; 2 or 4 heads), many heads (16 or 32, lengths 6 to
    12) and a long sequence (2 or 4 heads, 33 to 64 positions, distances far past the
    lab's training length 8). Head counts are powers of two, as the task says."""
    public = ((4, 6), (1, 3), (8, 5))
    if seed is None:
        return (*public, (2, 1), (16, 9), (4, 40))
    rng = term_rng(seed, "grade_log_distance_bias")
    return (*public, (rng.choice((2, 4)), 1),
            (rng.choice((16, 32)), rng.randint(6, 12)),
            (rng.choice((2, 4)), rng.randint(33, 64)))


def grade_log_distance_bias(log_distance_bias: Callable, variant: str | None = None,
                            seed: int | None = None) -> None:
    """Hidden grade: more shapes (drawn by the term's ``seed`` when there is one),
    then a short training run in the lab's harness.

    The model (4 heads, width 32) trains for 150 steps on associative recall at length
    8 with the student's bias; it must reach at least 60 % accuracy at length 8
    (chance is 12.5 %). About a second on one core (one thread, see below). The run
    is the same for every seed: what it judges is the bias in the harness, and its
    threshold was set for this run.
    """
    from course_lib.experiments import LabConfig, train_run

    variant_named(VARIANTS, variant, EXERCISE)
    for n_heads, seq_len in _hidden_bias_shapes(seed):
        _check_bias(log_distance_bias, n_heads, seq_len)
    _runs_in_harness(log_distance_bias)
    cfg = LabConfig(steps=150, train_length=8, multipliers=(1,), d_model=32,
                    n_heads=4, d_ff=64, eval_sequences=128)
    # One thread: the model is tiny, so its thousands of small operations gain nothing
    # from a second thread, and on a busy machine every operation then waits for the
    # descheduled thread (8.8 s instead of 1.1 s here with one core taken by another
    # process; issue 10 saw 102 s). Restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = train_run("recall", "custom", 0, cfg,
                        bias_fn=_through_call_student(log_distance_bias))
    finally:
        torch.set_num_threads(threads)
    acc = run["accuracy"]["8"]
    if not acc >= 0.6:
        raise CheckFailed(
            f"a tiny model with your bias reaches only {acc:.2f} accuracy on recall "
            "at the training length (a correct bias reaches more than 0.6; chance is "
            "0.125). Check the sign and scale of the bias."
        )
    passed("log_distance_bias", public=False,
           detail=f"9 shapes; recall accuracy {acc:.2f} after 150 steps")


# ------------------------------------------------------------------ retained skill


def _reference_retained(summary: list[dict], task: str, method: str,
                        chance: float) -> dict[int, float]:
    rows = sorted((r["length"], r["mean"]) for r in summary
                  if r["task"] == task and r["method"] == method)
    base = rows[0][1]
    if base <= chance:
        return {n: math.nan for n, _ in rows}
    return {n: (a - chance) / (base - chance) for n, a in rows}


def _retained_mistakes(summary, task, method, chance) -> list[Mistake]:
    rows = sorted((r["length"], r["mean"]) for r in summary
                  if r["task"] == task and r["method"] == method)
    base, last = rows[0][1], rows[-1][1]
    out = [Mistake({n: a / base for n, a in rows},
            "this is a(n) / a(L): subtract chance from both accuracies first, "
            "r(n) = (a(n) - c) / (a(L) - c)", "no-chance-subtracted")]
    if chance < 1:
        out.append(Mistake(
            {n: (a - chance) / (1 - chance) for n, a in rows},
            "this divides by (1 - c), the skill of a perfect model; divide by "
            "a(L) - c, the skill this method has at the training length",
            "divided-by-perfect",
        ))
    if last != chance:
        out.append(Mistake(
            {n: (a - chance) / (last - chance) for n, a in rows},
            "the reference is the longest length; it must be the shortest "
            "(the training length L)",
            "longest-reference",
        ))
    return out


def _same(got: dict, want: dict) -> bool:
    if set(got) != set(want):
        return False
    for n, w in want.items():
        g = got[n]
        if math.isnan(w):
            if not (isinstance(g, float) and math.isnan(g)):
                return False
        elif not (isinstance(g, int | float) and abs(g - w) <= 1e-6):
            return False
    return True


def _check_retained(fn: Callable, summary: list[dict], task: str, method: str,
                    chance: float) -> None:
    want = _reference_retained(summary, task, method, chance)
    mistakes = _retained_mistakes(summary, task, method, chance)
    call = f"retained_skill(summary, {task!r}, {method!r}, {chance:.4g})"
    got = call_student(fn, [dict(r) for r in summary], task, method, chance,
                       call=call)
    if not isinstance(got, dict):
        raise CheckFailed(f"{call} should return a dict {{length: ratio}}, got "
                          f"{type(got).__name__}")
    if set(got) != set(want):
        if {str(n) for n in want} == set(got):
            raise CheckFailed(f"{call}: the keys must be the lengths as ints "
                              f"{sorted(want)}, got strings")
        raise CheckFailed(f"{call}: expected the keys {sorted(want)}, got "
                          f"{sorted(got, key=str)}")
    for m in mistakes:
        if _same(got, m.answer) and not _same(m.answer, want):
            raise known_mistake(call, m, got=got)
    for n, w in sorted(want.items()):
        g = got[n]
        if math.isnan(w):
            if not (isinstance(g, float) and math.isnan(g)):
                raise CheckFailed(
                    f"{call}: at the training length the accuracy is not above "
                    f"chance, so the ratio is undefined: expected nan for length "
                    f"{n}, got {g!r}")
            continue
        if isinstance(g, torch.Tensor) and g.numel() == 1:
            g = g.item()
        if not isinstance(g, int | float) or isinstance(g, bool):
            raise CheckFailed(f"{call}[{n}] should be a number, got "
                              f"{type(g).__name__}")
        if not abs(g - w) <= 1e-6:
            raise CheckFailed(f"{call}[{n}]: expected {w:.6g}, got {g:.6g}")


def _synthetic_summary(seed: int) -> list[dict[str, Any]]:
    """A made-up summary (two tasks, three methods, four lengths)."""
    rng = random.Random(seed)
    rows = []
    for task in ("alpha", "beta"):
        for method in ("m1", "m2", "m3"):
            for n in (12, 24, 48, 96):  # listed in a shuffled order below
                rows.append({"task": task, "method": method, "length": n,
                             "mean": round(rng.uniform(0.05, 1.0), 4),
                             "low": 0.0, "high": 1.0, "n": 3})
    rng.shuffle(rows)
    return rows


def _public_retained(fn: Callable) -> None:
    rows = [
        {"task": "copy", "method": "alibi", "length": n, "mean": a}
        for n, a in ((16, 0.9), (32, 0.7), (64, 0.4), (128, 0.2))
    ] + [
        {"task": "copy", "method": "learned", "length": n, "mean": a}
        for n, a in ((16, 1.0), (32, 0.15), (64, 0.1), (128, 0.0625))
    ]
    _check_retained(fn, rows, "copy", "alibi", 1 / 16)
    _check_retained(fn, rows, "copy", "learned", 1 / 16)
    # A summary in no particular order (a(L) is the shortest length's accuracy, not
    # the first row's), and a method not above chance at L (the ratio is nan).
    mixed = [
        {"task": "copy", "method": m, "length": n, "mean": a}
        for m, n, a in (("rope", 64, 0.3), ("nope", 32, 0.05), ("rope", 16, 0.85),
                        ("nope", 16, 0.0625), ("rope", 128, 0.1), ("rope", 32, 0.6),
                        ("nope", 64, 0.07))
    ]
    _check_retained(fn, mixed, "copy", "rope", 1 / 16)
    _check_retained(fn, mixed, "copy", "nope", 1 / 16)


def check_retained_skill(retained_skill: Callable) -> None:
    """Public check: a small hand-made summary of two methods, a summary in no
    particular order, and a method not above chance at the training length."""
    _public_retained(retained_skill)
    passed("retained_skill", public=True)


def _hidden_retained_cases(seed: int | None) -> tuple:
    """The hidden cases ``(summary seeds, [(task, method, chance)] per summary, flat
    summary)``: fixed without a term seed; else drawn by the seed with the same
    properties. Two shuffled synthetic summaries (:func:`_synthetic_summary`, from
    seeds the term draws), three (task, method) pairs of each, one at a high chance
    level (1/2, 1/3 or 1/4: some methods start at or below it, so nan is due), one
    at a low one (1/8, 1/10 or 1/16), one at chance 0; and a method flat at chance
    over three lengths L, 2L, 4L (nan everywhere; L 8 with a fixed case, 8 to 24
    with a seed)."""
    if seed is None:
        tasks = (("alpha", "m1", 0.5), ("beta", "m3", 0.125), ("alpha", "m2", 0.0))
        flat = [{"task": "t", "method": "m", "length": n, "mean": 0.5}
                for n in (8, 16, 32)]
        return (1, 2), (tasks, tasks), flat
    rng = term_rng(seed, "grade_retained_skill")
    seeds = (rng.randrange(2**31), rng.randrange(2**31))
    pairs = [(t, m) for t in ("alpha", "beta") for m in ("m1", "m2", "m3")]
    chosen = []
    for _ in seeds:
        chances = [rng.choice((0.5, 1 / 3, 0.25)), rng.choice((0.125, 0.1, 1 / 16)),
                   0.0]
        rng.shuffle(chances)
        chosen.append(tuple((t, m, c) for (t, m), c in zip(rng.sample(pairs, 3),
                                                            chances, strict=True)))
    level, start = rng.choice((0.5, 0.25, 0.1)), rng.randint(8, 24)
    flat = [{"task": "t", "method": "m", "length": n, "mean": level}
            for n in (start, 2 * start, 4 * start)]
    return seeds, tuple(chosen), flat


def grade_retained_skill(retained_skill: Callable, variant: str | None = None,
                         seed: int | None = None) -> None:
    """Hidden grade: shuffled synthetic summaries, other chance levels, and a method
    that is not above chance at the training length (the answer is nan); drawn by
    the term's ``seed`` when there is one."""
    variant_named(VARIANTS, variant, EXERCISE)
    _public_retained(retained_skill)
    seeds, chosen, flat = _hidden_retained_cases(seed)
    for summary_seed, cases in zip(seeds, chosen, strict=True):
        rows = _synthetic_summary(summary_seed)
        for task, method, chance in cases:
            _check_retained(retained_skill, rows, task, method, chance)
    level = flat[0]["mean"]
    _check_retained(retained_skill, flat, "t", "m", level)
    passed("retained_skill", public=False, detail="8 summaries")
