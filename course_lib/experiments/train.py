"""Train every position method on every task at length ``L``, test at ``L .. 8L``.

One *run* is one (task, method, seed): a :class:`~.model.TinyTransformer` trained
from scratch at the training length, then scored on fresh sequences of every
evaluation length. Runs are independent, so :func:`run_lab` spreads them over worker
processes (one thread each: on a small CPU, two single-threaded runs in parallel beat
one run with two threads). The summary reports, per task, method and length, the mean
accuracy over seeds with a 95 % confidence interval from Student's t distribution:

.. math::

    \\bar a \\pm t_{0.975,\\, n-1} \\, \\frac{s}{\\sqrt n}

Reproducibility: weights are initialised under ``torch.manual_seed(seed)`` inside
:func:`torch.random.fork_rng` (the caller's random state is untouched), training data
come from a generator seeded with ``seed``, and evaluation data from a generator
seeded with ``eval_seed`` and the length, the same for every method and seed (a
paired comparison). With one thread, the same seed gives bit-identical numbers.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import datetime as dt
import functools
import hashlib
import json
import math
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .._validate import fail, require_int, require_positive_int
from ..rope import RotaryEmbedding
from ..rope_scaling import yarn_attention_factor
from .model import CUSTOM, METHOD_LABELS, METHODS, ModelConfig, TinyTransformer
from .tasks import TASKS

__all__ = [
    "CANARY",
    "RESULTS_PATH",
    "ROPE_EXTENSIONS",
    "LabConfig",
    "TemperedRotary",
    "canary",
    "canary_matches",
    "cell_at_chance",
    "chance_level",
    "code_version",
    "evaluate",
    "EQUIVALENCE_MARGIN",
    "compare_paired",
    "equivalence_verdict",
    "evaluate_sequences",
    "extension_rotary",
    "format_table",
    "lab_interval",
    "lab_verdict",
    "load_results",
    "main",
    "extrapolation_category",
    "mean_ci",
    "order_pairs",
    "paired_difference",
    "rope_turning_pairs",
    "rope_turns",
    "rerun_rope_extensions",
    "row_index",
    "run_lab",
    "save_results",
    "separated",
    "stored_results",
    "summarize",
    "summarize_rope",
    "t_quantile",
    "test_set",
    "train_run",
    "trajectory",
    "variant_runs",
    "yarn_betas",
]

ROPE_EXTENSIONS: dict[str, dict[str, Any]] = {
    "pi": {"method": "linear"},
    "pi+t": {"method": "linear", "temperature": True},
    "ramp": {"method": "yarn", "alpha": 1.0, "attention_factor": 1.0},
    "yarn": {"method": "yarn", "alpha": 1.0},
    "yarn a=1/4": {"method": "yarn", "alpha": 0.25},
}
"""Inference-only context extensions applied to every trained RoPE model at the
lengths past ``L``, with factor ``s = n / L`` (``course_lib.rope_scaling``):

* ``pi``: position interpolation (Chen et al. 2023), every pair divided by ``s``;
* ``pi+t``: PI with YaRN's temperature (attention factor ``0.1 ln s + 1``) and no
  ramp;
* ``ramp``: YaRN's ramp with no temperature (attention factor 1);
* ``yarn``: ramp and temperature (Peng et al. 2023), the ramp's ends set from the
  turn counts at ``L`` by :func:`yarn_betas` with ``alpha = 1``;
* ``yarn a=1/4``: the same with the slow end at a quarter of a turn.

``pi``, ``pi+t``, ``ramp`` and ``yarn`` are the 2 x 2 ablation that separates the
temperature from the ramp. A spec is turned into a rotary module by
:func:`extension_rotary`."""


def rope_turns(head_dim: int, length: int, *, base: float = 10000.0) -> list[float]:
    """Turns of every RoPE pair over ``length`` tokens: ``r_i = length theta_i / 2 pi``.

    ``theta_i = base^(-2i/d)``, so pair 0 turns ``length / 2 pi`` times, the most any
    pair can (YaRN's ``beta_fast`` and ``beta_slow`` are counts of these turns).

    >>> [round(r, 3) for r in rope_turns(16, 16)[:3]]  # the lab: d = 16, L = 16
    [2.546, 0.805, 0.255]
    """
    return [length * base ** (-2 * i / head_dim) / (2 * math.pi)
            for i in range(head_dim // 2)]


def yarn_betas(train_length: int, alpha: float = 1.0) -> dict[str, float]:
    """YaRN's ramp ends set from the turn counts at the training length.

    Peng et al. (2023, section 3.2) keep the pairs that turn more than ``beta`` times
    in ``L`` and interpolate those that turn fewer than ``alpha`` times, and tune the
    two per model (``alpha = 1``, ``beta = 32`` for LLaMA, whose fastest pair turns
    ``4096 / 2 pi`` = 652 times). At ``L`` = 16 no pair turns 32 times (at most
    ``L / 2 pi`` = 2.5), so the lab sets the kept end at the fastest pair,
    ``beta_fast = L / 2 pi`` (at least ``2 alpha``, so the ramp has a width), and
    the interpolated end at ``beta_slow = alpha`` turns.

    >>> {k: round(v, 3) for k, v in yarn_betas(16).items()}
    {'beta_fast': 2.546, 'beta_slow': 1.0}
    """
    if not alpha > 0:
        fail("yarn_betas", f"alpha must be a positive number of turns, got {alpha!r}")
    return {"beta_fast": max(train_length / (2 * math.pi), 2 * alpha),
            "beta_slow": float(alpha)}


class TemperedRotary(RotaryEmbedding):
    """A :class:`~course_lib.rope.RotaryEmbedding` whose cos and sin tables are also
    multiplied by ``extra`` (so the logits by ``extra ** 2``): position interpolation
    with YaRN's temperature, one cell of the ablation of :data:`ROPE_EXTENSIONS`."""

    def __init__(self, *args: Any, extra: float, **kwargs: Any) -> None:
        self.extra = float(extra)
        super().__init__(*args, **kwargs)

    def _scaled(self, scaling: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
        inv_freq, attention = super()._scaled(scaling, seq_len)
        return inv_freq, attention * self.extra


def extension_rotary(head_dim: int, spec: dict[str, Any], *, factor: float,
                     train_length: int, base: float = 10000.0,
                     max_seq_len: int | None = None) -> RotaryEmbedding:
    """The rotary module of one context extension (a value of :data:`ROPE_EXTENSIONS`).

    ``spec["method"]`` is a :func:`course_lib.rope_scaling.rope_scaled_frequencies`
    method; for ``"yarn"`` the ramp's ends come from :func:`yarn_betas` with
    ``spec["alpha"]`` (and ``attention_factor`` is passed on when given);
    ``temperature=True`` multiplies the tables by YaRN's attention factor at
    ``factor`` (:class:`TemperedRotary`).
    """
    spec = dict(spec)
    temperature = spec.pop("temperature", False)
    alpha = spec.pop("alpha", None)
    scaling: dict[str, Any] = {**spec, "factor": factor}
    if spec["method"] != "linear":
        scaling["original_max_position"] = train_length
    if spec["method"] == "yarn":
        scaling.update(yarn_betas(train_length, 1.0 if alpha is None else alpha))
    n = train_length if max_seq_len is None else max_seq_len
    if temperature:
        return TemperedRotary(head_dim, base=base, max_seq_len=n, scaling=scaling,
                              extra=yarn_attention_factor(factor))
    return RotaryEmbedding(head_dim, base=base, max_seq_len=n, scaling=scaling)


_ROOT = Path(__file__).resolve().parents[2]
RESULTS_PATH = Path(__file__).resolve().parents[1] / "data" / "lab_results.json"
"""Where the stored results of the full lab live (read by chapter 10)."""

# Files whose contents determine the numbers: the lab and the library it uses.
_SOURCES = (
    "experiments/model.py",
    "experiments/tasks.py",
    "experiments/train.py",
    "attention.py",
    "sinusoidal.py",
    "rope.py",
    "rope_scaling.py",
    "alibi.py",
    "relative.py",
    "transformer_xl.py",
    "da.py",
)


@dataclass(frozen=True)
class LabConfig:
    """Every setting of the lab (stored with the results).

    Attributes:
        tasks: task names (keys of ``TASKS``).
        methods: position methods (see ``METHODS``).
        seeds: one run per seed and (task, method).
        train_length: ``L``.
        multipliers: evaluation lengths are ``L * m``.
        steps: optimiser steps per run.
        batch_size: training sequences per step.
        lr: peak learning rate (AdamW; linear warm-up over ``warmup`` of the steps,
            then cosine decay to 0).
        warmup: fraction of the steps used for warm-up.
        weight_decay: AdamW weight decay.
        grad_clip: gradient-norm clipping.
        d_model: model width.
        n_heads: heads.
        n_layers: blocks.
        d_ff: feed-forward width.
        eval_sequences: test sequences per length.
        eval_seed: seed of the test sequences (shared by all runs).
        rope_bases: extra RoPE runs with these bases (the main runs use the
            library's default base 10000): every task and seed once per base.
    """

    tasks: tuple[str, ...] = ("ascending", "recall", "copy")
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    train_length: int = 16
    multipliers: tuple[int, ...] = (1, 2, 4, 8)
    steps: int = 500
    batch_size: int = 64
    lr: float = 3e-3
    warmup: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    eval_sequences: int = 512
    eval_seed: int = 2024
    rope_bases: tuple[float, ...] = (10.0, 100.0)

    def __post_init__(self) -> None:
        fn = "LabConfig"
        for t in self.tasks:
            if t not in TASKS:
                fail(fn, f"tasks must be among {', '.join(TASKS)}, got {t!r}")
        for m in self.methods:
            if m not in METHODS:
                fail(fn, f"methods must be among {', '.join(METHODS)}, got {m!r}")
        if not (self.tasks and self.methods and self.seeds and self.multipliers):
            fail(fn, "tasks, methods, seeds and multipliers must not be empty, got "
                     f"{self.tasks}, {self.methods}, {self.seeds}, {self.multipliers}")
        for name in ("train_length", "steps", "batch_size", "eval_sequences"):
            require_positive_int(fn, name, getattr(self, name))
        for m in self.multipliers:
            require_positive_int(fn, "multipliers", m)
        for b in self.rope_bases:
            if not isinstance(b, (int, float)) or not b > 1:
                fail(fn, f"rope_bases must be numbers above 1, got {b!r}")
        if self.train_length % 2 or self.train_length < 4:
            fail(fn, f"train_length must be even and at least 4, got "
                     f"{self.train_length}")

    @property
    def lengths(self) -> tuple[int, ...]:
        """Evaluation lengths ``L * m``."""
        return tuple(self.train_length * m for m in self.multipliers)

    def model_config(self, task: str, method: str) -> ModelConfig:
        """The :class:`ModelConfig` of one run."""
        t = TASKS[task]
        return ModelConfig(
            vocab_size=t.vocab_size,
            n_classes=t.n_classes,
            method=method,
            train_length=self.train_length,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            d_ff=self.d_ff,
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in d.items() if k in names})


def _schedule(step: int, steps: int, warmup: float) -> float:
    warm = max(1, int(warmup * steps))
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def test_set(task: str, length: int, *, n_sequences: int, seed: int,
             chunk: int = 128) -> list[Any]:
    """The test batches of ``task`` at ``length``: the same for every model.

    The generator is seeded with ``seed * 1_000_003 + length``, so each length has its
    own sequences and every method and seed is scored on the same ones (a paired
    comparison).

    Returns:
        list of :class:`~.tasks.Batch` of at most ``chunk`` sequences each,
        ``n_sequences`` in all.
    """
    t = TASKS[task]
    g = torch.Generator().manual_seed(seed * 1_000_003 + length)
    return [t.sample(min(chunk, n_sequences - start), length, generator=g)
            for start in range(0, n_sequences, chunk)]


def chance_level(task: str, length: int, *, n_sequences: int, seed: int
                 ) -> dict[str, Any]:
    """What a model that ignores its input scores on this test set.

    The best *constant* answer: the class that is most often the target of a scored
    position, and the fraction of scored positions it gets right,

    .. math::

        \\mathrm{chance} = \\max_c \\frac{\\#\\{\\text{scored positions with
        target } c\\}}{\\#\\{\\text{scored positions}\\}}

    (a uniform guess scores ``1 / n_classes`` on average, never more than this).

    Returns:
        ``{"chance": float, "constant": class, "uniform": 1/n_classes,
        "scored": [scored positions per sequence]}``.
    """
    t = TASKS[task]
    counts = torch.zeros(t.n_classes, dtype=torch.long)
    scored: list[int] = []
    for b in test_set(task, length, n_sequences=n_sequences, seed=seed):
        counts += torch.bincount(b.targets[b.eval_mask], minlength=t.n_classes)
        scored += b.eval_mask.sum(dim=1).tolist()
    best = int(counts.argmax())
    return {"chance": float(counts[best]) / max(sum(scored), 1), "constant": best,
            "uniform": 1 / t.n_classes, "scored": scored}


@torch.no_grad()
def evaluate_sequences(
    model: TinyTransformer,
    task: str,
    length: int,
    *,
    n_sequences: int,
    seed: int,
    chunk: int = 128,
) -> tuple[list[int], list[int]]:
    """Right and scored positions of every test sequence (see :func:`test_set`).

    Returns:
        ``(right, scored)``: two lists of ``n_sequences`` integers.
    """
    was_training = model.training
    model.eval()
    right: list[int] = []
    scored: list[int] = []
    for b in test_set(task, length, n_sequences=n_sequences, seed=seed, chunk=chunk):
        pred = model(b.tokens).argmax(dim=-1)  # (B, S)
        right += ((pred == b.targets) & b.eval_mask).sum(dim=1).tolist()  # (B,)
        scored += b.eval_mask.sum(dim=1).tolist()
    model.train(was_training)
    return right, scored


def evaluate(
    model: TinyTransformer,
    task: str,
    length: int,
    *,
    n_sequences: int,
    seed: int,
    chunk: int = 128,
) -> float:
    """Accuracy of ``model`` on ``n_sequences`` fresh sequences of ``length``.

    .. math::

        \\mathrm{acc} = \\frac{\\#\\{\\text{scored positions predicted right}\\}}
        {\\#\\{\\text{scored positions}\\}}

    Args:
        model: a trained model.
        task: task name.
        length: sequence length.
        n_sequences: test sequences.
        seed: seed of the test data (the length is added, so each length has its own
            sequences and every model sees the same ones).
        chunk: sequences per forward pass.

    Returns:
        accuracy in ``[0, 1]``.
    """
    right, scored = evaluate_sequences(model, task, length, n_sequences=n_sequences,
                                       seed=seed, chunk=chunk)
    return sum(right) / max(sum(scored), 1)


def rope_turning_pairs(head_dim: int, length: int, *, base: float = 10000.0) -> int:
    """How many RoPE pairs complete at least one full turn within ``length`` tokens.

    Pair ``i`` turns by ``theta_i = base^(-2i/d)`` per position; over positions
    ``0 .. length-1`` it reaches the angle ``(length - 1) theta_i``, a full turn when
    that is at least ``2 pi``. The other pairs show the model only an arc of their
    circle in training, and longer inputs bring angles it never saw.

    >>> rope_turning_pairs(16, 16)  # the lab: base 10000, head_dim 16, L = 16
    1
    """
    freqs = [base ** (-2 * i / head_dim) for i in range(head_dim // 2)]
    return sum((length - 1) * f >= 2 * math.pi for f in freqs)


def train_run(
    task: str,
    method: str,
    seed: int,
    config: LabConfig | None = None,
    *,
    bias_fn: Callable[[int, int], torch.Tensor] | None = None,
    rope_base: float | None = None,
) -> dict[str, Any]:
    """Train one model at ``config.train_length`` and score it at every length.

    Args:
        task: task name.
        method: position method.
        seed: seed of the weights and the training data.
        config: settings (default :class:`LabConfig`).
        bias_fn: the attention bias of ``method="custom"`` (see
            :class:`~.model.TinyTransformer`).
        rope_base: only with ``method="rope"``: the rotary base (default: the
            library's 10000). The rotary module has no weights, so the initial
            weights are those of the default base.

    Returns:
        dict with ``task``, ``method``, ``seed``, ``accuracy`` (``{length: acc}``,
        lengths as strings for JSON), ``right`` (``{length: [right positions of
        every test sequence]}``), for RoPE ``rope_base`` and ``extended``
        (``{"pi"|"yarn": {"accuracy": ..., "right": ...}}`` at the lengths past
        ``L``, the same trained model run with :data:`ROPE_EXTENSIONS`),
        ``final_loss`` (mean training loss of the last
        10 % of the steps), ``loss_curve`` (mean loss of consecutive blocks of steps),
        ``train_seconds``, ``eval_seconds`` (wall clock), ``cpu_seconds`` (CPU time
        of this process: the cost of the run whatever else the machine is doing) and
        ``parameters``.
    """
    cfg = LabConfig() if config is None else config
    if task not in TASKS:
        fail("train_run", f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if method not in (*METHODS, CUSTOM):
        fail("train_run", f"method must be one of {', '.join(METHODS)} or "
                          f"{CUSTOM!r}, got {method!r}")
    seed = require_int("train_run", "seed", seed, minimum=0)
    if rope_base is not None and (method != "rope" or not rope_base > 1):
        fail("train_run", f"rope_base must be a number above 1 and only given with "
                          f"method='rope', got rope_base={rope_base!r} for "
                          f"method={method!r}")
    t = TASKS[task]
    start = time.perf_counter()
    cpu_start = time.process_time()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyTransformer(cfg.model_config(task, method), bias_fn=bias_fn)
    head_dim = cfg.d_model // cfg.n_heads
    if method == "rope":
        base = 10000.0 if rope_base is None else float(rope_base)
        model.shared["rope"] = RotaryEmbedding(head_dim, base=base,
                                               max_seq_len=cfg.train_length)
    data = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr,
                            weight_decay=cfg.weight_decay, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: _schedule(s, cfg.steps, cfg.warmup)
    )
    losses = torch.empty(cfg.steps)
    model.train()
    for step in range(cfg.steps):
        b = t.sample(cfg.batch_size, cfg.train_length, generator=data)
        logits = model(b.tokens)  # (B, S, C)
        loss = F.cross_entropy(logits[b.train_mask], b.targets[b.train_mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        losses[step] = loss.detach()
    train_seconds = time.perf_counter() - start
    right: dict[str, list[int]] = {}
    accuracy: dict[str, float] = {}
    for n in cfg.lengths:
        r, scored = evaluate_sequences(model, task, n, n_sequences=cfg.eval_sequences,
                                       seed=cfg.eval_seed)
        right[str(n)], accuracy[str(n)] = r, sum(r) / max(sum(scored), 1)
    extra: dict[str, Any] = {}
    if method == "rope":
        extra["rope_base"] = base
        plain = model.shared["rope"]
        extended: dict[str, Any] = {}
        for name, scaling in ROPE_EXTENSIONS.items():
            acc_ext: dict[str, float] = {}
            right_ext: dict[str, list[int]] = {}
            for n in cfg.lengths:
                if n <= cfg.train_length:
                    continue
                model.shared["rope"] = extension_rotary(
                    head_dim, scaling, factor=n / cfg.train_length,
                    train_length=cfg.train_length, base=base, max_seq_len=n)
                r, scored = evaluate_sequences(
                    model, task, n, n_sequences=cfg.eval_sequences,
                    seed=cfg.eval_seed)
                right_ext[str(n)], acc_ext[str(n)] = r, sum(r) / max(sum(scored), 1)
            extended[name] = {"accuracy": acc_ext, "right": right_ext}
        model.shared["rope"] = plain
        extra["extended"] = extended
    block = max(1, cfg.steps // 20)
    curve = losses[: cfg.steps // block * block].view(-1, block).mean(dim=1)
    tail = max(1, cfg.steps // 10)
    return {
        "task": task,
        "method": method,
        "seed": seed,
        "accuracy": accuracy,
        "right": right,
        **extra,
        "final_loss": float(losses[-tail:].mean()),
        "loss_curve": [round(float(x), 5) for x in curve],
        "train_seconds": round(train_seconds, 3),
        "eval_seconds": round(time.perf_counter() - start - train_seconds, 3),
        "cpu_seconds": round(time.process_time() - cpu_start, 3),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


# ----------------------------------------------------------------------------- stats


def _t_cdf(x: float, df: int) -> float:
    """Student-t CDF at ``x >= 0`` by Simpson's rule on the density."""
    log_c = (math.lgamma((df + 1) / 2) - math.lgamma(df / 2)
             - 0.5 * math.log(df * math.pi))
    n = 2000  # even
    h = x / n
    total = 0.0
    for i in range(n + 1):
        u = i * h
        f = math.exp(log_c - (df + 1) / 2 * math.log1p(u * u / df))
        total += f * (1 if i in (0, n) else 4 if i % 2 else 2)
    return 0.5 + total * h / 3


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t distribution with ``df`` degrees of freedom.

    .. math::

        F_\\nu(t_{p,\\nu}) = p, \\qquad
        F_\\nu(x) = \\tfrac12 + \\int_0^x
        \\frac{\\Gamma(\\frac{\\nu+1}{2})}{\\sqrt{\\nu\\pi}\\,\\Gamma(\\frac{\\nu}{2})}
        \\Big(1 + \\frac{u^2}{\\nu}\\Big)^{-\\frac{\\nu+1}{2}} du

    solved by bisection (the integral by Simpson's rule), accurate to about 1e-6.

    Args:
        p: probability in ``(0.5, 1)``.
        df: degrees of freedom, at least 1.

    Returns:
        ``t`` with ``P(T <= t) = p``.

    >>> round(t_quantile(0.975, 2), 4)  # df = 2: t = (2p - 1) sqrt(2 / (4p(1 - p)))
    4.3027
    """
    df = require_positive_int("t_quantile", "df", df)
    if not 0.5 < p < 1:
        fail("t_quantile", f"p must be in (0.5, 1), got {p!r}")
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def mean_ci(values: Sequence[float], confidence: float = 0.95, *,
            bounds: tuple[float, float] | None = None
            ) -> tuple[float, float, float]:
    """Mean and two-sided t confidence interval ``(mean, low, high)``.

    ``bounds=(a, b)``: the metric's range (``(0, 1)`` for an accuracy); the interval
    is intersected with it. The mean of such a metric always lies in ``[a, b]``, so
    every ``[a, b]``-valued mean that the t-interval covers, the intersection covers
    too: the coverage is unchanged, and the interval no longer claims values the
    metric cannot take (with ``n = 3``, ``t = 4.30`` pushes it past 0 and 1).

    .. math::

        \\bar a \\pm t_{(1+c)/2,\\, n-1}\\, s / \\sqrt{n}, \\qquad
        s^2 = \\frac{1}{n-1}\\sum_i (a_i - \\bar a)^2

    With one value the interval is that value (no spread can be estimated).

    >>> [round(x, 4) for x in mean_ci([0.5, 0.7, 0.9])]  # s = 0.2, t = 4.3027
    [0.7, 0.2032, 1.1968]
    >>> [round(x, 4) for x in mean_ci([0.5, 0.7, 0.9], bounds=(0.0, 1.0))]
    [0.7, 0.2032, 1.0]
    """
    vals = [float(v) for v in values]
    if not vals:
        fail("mean_ci", "values must not be empty, got []")
    if bounds is not None:
        lo_b, hi_b = bounds
        if not lo_b < hi_b or any(not lo_b <= v <= hi_b for v in vals):
            fail("mean_ci", f"values must lie in the metric's range {bounds}, got "
                            f"{vals}")
    n = len(vals)
    mean = sum(vals) / n
    if n == 1:
        return mean, mean, mean
    s = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = t_quantile((1 + confidence) / 2, n - 1) * s / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return mean, low, high


@functools.lru_cache(maxsize=16)
def _resample_counts(sizes: tuple[int, ...], n_boot: int, boot_seed: int
                     ) -> tuple[torch.Tensor, ...]:
    """The bootstrap resamples of :func:`lab_interval` and :func:`paired_difference`
    as counts: for each test set of ``sizes`` in turn, ``n_boot`` draws of ``size``
    indices with replacement (``torch.randint`` from one generator seeded with
    ``boot_seed``), returned as an ``(n_boot, size)`` float64 matrix ``C`` whose
    ``C[b, j]`` counts how often sequence ``j`` was drawn in resample ``b``.

    A sum over a resample, ``x[idx[b]].sum()``, is then ``(C @ x)[b]``: exactly the
    same number when ``x`` holds whole counts (every product and partial sum is an
    integer below 2**53, so no order of summation rounds), computed as one matrix
    product instead of gathering ``n_boot x size`` entries per call. The chapters
    compare hundreds of cells on the same test sets, so the draws are made once per
    set of sizes (cached) rather than once per comparison."""
    g = torch.Generator().manual_seed(boot_seed)
    out = []
    for size in sizes:
        idx = torch.randint(0, size, (n_boot, size), generator=g)
        counts = torch.zeros(n_boot, size, dtype=torch.float64)
        counts.scatter_add_(1, idx, torch.ones(n_boot, size, dtype=torch.float64))
        out.append(counts)
    return tuple(out)


def lab_interval(
    rights: Sequence[Sequence[int]],
    scored: Sequence[int],
    confidence: float = 0.95,
    *,
    n_boot: int = 2000,
    boot_seed: int = 0,
) -> dict[str, float]:
    """Mean accuracy over seeds and a confidence interval with both noise sources.

    Every seed ``i`` is scored on the same ``N`` test sequences; ``rights[i][j]`` is
    the number of positions of sequence ``j`` it got right and ``scored[j]`` the
    number scored, so its accuracy is ``a_i = sum_j rights[i][j] / sum_j scored[j]``.
    The mean ``a = mean_i a_i`` varies with the seeds (weights, training data) *and*
    with the test sequences drawn. Two half-widths, one per source:

    * seeds: ``t_{(1+c)/2, n-1} s / sqrt(n)``, ``s`` the standard deviation of the
      ``a_i`` (0 with one seed);
    * test sequences: ``z_{(1+c)/2}`` times the standard deviation of ``a`` over
      ``n_boot`` bootstrap resamples of the sequences, the same resample for every
      seed (the test set is shared, so its error is common to all seeds);

    combined as ``sqrt(h_seed^2 + h_test^2)``, the half-width of a sum of the two
    independent errors, and intersected with ``[0, 1]`` (see :func:`mean_ci`). A model
    that gives the same answer with every seed still gets an interval from the test
    sequences (with one test set and seeds alone, tied seeds gave a zero-width one).

    Returns:
        ``{"mean", "low", "high", "seed_half", "test_half"}``.

    >>> out = lab_interval([[1, 0, 1, 1], [1, 1, 0, 1]], [1, 1, 1, 1])
    >>> round(out["mean"], 3), out["seed_half"] == 0.0, out["test_half"] > 0
    (0.75, True, True)
    """
    fn = "lab_interval"
    if not 0 < confidence < 1:
        fail(fn, f"confidence must be in (0, 1), got {confidence!r}")
    r = torch.as_tensor([list(x) for x in rights], dtype=torch.float64)  # (n, N)
    tot = torch.as_tensor(list(scored), dtype=torch.float64)  # (N,)
    if r.ndim != 2 or r.shape[0] == 0 or r.shape[1] != tot.shape[0] or not len(tot):
        fail(fn, f"rights must be seeds x sequences matching scored, got "
                 f"{tuple(r.shape)} and {tuple(tot.shape)}")
    if bool((r < 0).any()) or bool((r > tot).any()) or not float(tot.sum()) > 0:
        fail(fn, "every right count must lie in 0..scored of its sequence")
    acc = r.sum(dim=1) / tot.sum()  # (n,)
    n = acc.shape[0]
    mean = float(acc.mean())
    seed_half = 0.0
    if n > 1:
        s = float(acc.std(unbiased=True))
        seed_half = t_quantile((1 + confidence) / 2, n - 1) * s / math.sqrt(n)
    (counts,) = _resample_counts((tot.shape[0],), n_boot, boot_seed)
    boot = ((r @ counts.T) / (counts @ tot)).mean(dim=0)  # (n_boot,)
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    test_half = z * float(boot.std(unbiased=True))
    half = math.hypot(seed_half, test_half)
    return {"mean": mean, "low": max(0.0, mean - half), "high": min(1.0, mean + half),
            "seed_half": seed_half, "test_half": test_half}


EQUIVALENCE_MARGIN = 0.05
"""Chapter 10's equivalence margin: two accuracies whose paired difference has its
whole 95 % interval inside ``(-0.05, 0.05)`` count as equivalent (five points of
accuracy; fixed before the verdicts were computed)."""


def paired_difference(
    rights_a: Sequence[Sequence[int]],
    scored_a: Sequence[int],
    rights_b: Sequence[Sequence[int]],
    scored_b: Sequence[int] | None = None,
    confidence: float = 0.95,
    *,
    n_boot: int = 2000,
    boot_seed: int = 0,
) -> dict[str, float]:
    """Mean paired difference of accuracies ``a - b`` and its interval.

    ``rights_a[i][j]`` is what seed ``i`` of ``a`` got right on test sequence ``j``
    (of ``scored_a[j]`` scored positions), likewise for ``b``; seed ``i`` of ``a`` is
    paired with seed ``i`` of ``b`` (same seed: the same training data and initial
    weights where the two share an architecture). The estimate is
    ``D = mean_i (a_i - b_i)``, with two half-widths:

    * seeds: ``t_{(1+c)/2, n-1} s_d / sqrt(n)``, ``s_d`` the standard deviation of
      the per-seed differences (what pairing buys: the seed effect common to both
      cancels);
    * test sequences: ``z_{(1+c)/2}`` times the standard deviation of ``D`` over
      ``n_boot`` bootstrap resamples. ``scored_b=None``: ``a`` and ``b`` were scored
      on the *same* test sequences (two methods at one length), resampled jointly;
      otherwise on two test sets (one model at two lengths), resampled
      independently;

    combined as ``sqrt(h_seed^2 + h_test^2)`` (as :func:`lab_interval`).

    Returns:
        ``{"diff", "low", "high", "seed_half", "test_half", "n"}``.

    >>> d = paired_difference([[1, 1], [1, 0]], [1, 1], [[0, 1], [0, 0]])
    >>> d["diff"], d["seed_half"]  # per-seed differences 0.5 and 0.5
    (0.5, 0.0)
    """
    fn = "paired_difference"
    if not 0 < confidence < 1:
        fail(fn, f"confidence must be in (0, 1), got {confidence!r}")

    def arrays(rights: Sequence[Sequence[int]], scored: Sequence[int], name: str
               ) -> tuple[torch.Tensor, torch.Tensor]:
        r = torch.as_tensor([list(x) for x in rights], dtype=torch.float64)
        tot = torch.as_tensor(list(scored), dtype=torch.float64)
        if (r.ndim != 2 or r.shape[0] == 0 or r.shape[1] != tot.shape[0]
                or not len(tot) or not float(tot.sum()) > 0):
            fail(fn, f"rights_{name} must be seeds x sequences matching scored, got "
                     f"{tuple(r.shape)} and {tuple(tot.shape)}")
        if bool((r < 0).any()) or bool((r > tot).any()):
            fail(fn, f"every right count of {name} must lie in 0..scored")
        return r, tot

    ra, ta = arrays(rights_a, scored_a, "a")
    rb, tb = arrays(rights_b, scored_a if scored_b is None else scored_b, "b")
    if ra.shape[0] != rb.shape[0]:
        fail(fn, f"a and b must have the same seeds (paired), got {ra.shape[0]} and "
                 f"{rb.shape[0]}")
    d = ra.sum(dim=1) / ta.sum() - rb.sum(dim=1) / tb.sum()  # (n,)
    n = d.shape[0]
    seed_half = 0.0
    if n > 1:
        seed_half = (t_quantile((1 + confidence) / 2, n - 1)
                     * float(d.std(unbiased=True)) / math.sqrt(n))
    if scored_b is None:  # one resample of the shared test set
        ca = cb = _resample_counts((ta.shape[0],), n_boot, boot_seed)[0]
    else:
        ca, cb = _resample_counts((ta.shape[0], tb.shape[0]), n_boot, boot_seed)
    boot = (((ra @ ca.T) / (ca @ ta))
            - ((rb @ cb.T) / (cb @ tb))).mean(dim=0)  # (n_boot,)
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    test_half = z * float(boot.std(unbiased=True))
    half = math.hypot(seed_half, test_half)
    diff = float(d.mean())
    return {"diff": diff, "low": diff - half, "high": diff + half,
            "seed_half": seed_half, "test_half": test_half, "n": n}


def equivalence_verdict(d: dict[str, float], margin: float = EQUIVALENCE_MARGIN
                        ) -> str:
    """The verdict of a paired difference ``d`` (``{"low", "high"}``) with a margin.

    ``"equivalent"``: the whole interval lies inside ``(-margin, margin)`` (any
    difference is smaller than the margin, even if the interval excludes 0);
    ``"higher"`` / ``"lower"``: the interval lies above / below 0 and reaches past
    the margin; ``"undecided"``: it contains 0 and reaches past the margin (neither
    a difference nor an equivalence is shown).

    >>> equivalence_verdict({"low": -0.02, "high": 0.03})
    'equivalent'
    >>> equivalence_verdict({"low": 0.01, "high": 0.2})
    'higher'
    >>> equivalence_verdict({"low": -0.01, "high": 0.2})
    'undecided'
    """
    if not margin > 0:
        fail("equivalence_verdict", f"margin must be positive, got {margin!r}")
    if d["low"] > d["high"]:
        fail("equivalence_verdict", f"low must not exceed high, got {d}")
    if -margin < d["low"] and d["high"] < margin:
        return "equivalent"
    if d["low"] > 0:
        return "higher"
    if d["high"] < 0:
        return "lower"
    return "undecided"


def variant_runs(results: dict[str, Any], task: str, variant: str
                 ) -> list[dict[str, Any]]:
    """The runs of one method or RoPE variant on ``task``, ordered by seed.

    ``variant``: a method of the main comparison (``"alibi"``, ...), ``"base B"``
    (RoPE trained with base ``B``; ``"base 10000"`` is the main RoPE run) or
    ``"base B + E"`` (that model run with the extension ``E`` of
    :data:`ROPE_EXTENSIONS` past ``L``). Each run has ``accuracy`` and ``right``.
    """
    base, _, ext = variant.partition(" + ")
    if not base.startswith("base "):
        runs = [r for r in results["runs"]
                if (r["task"], r["method"]) == (task, variant)]
    else:
        b = float(base.split()[1])
        pool = [r for r in results["runs"] if r["method"] == "rope"]
        pool += results.get("rope_sweep", [])
        runs = [r for r in pool
                if r["task"] == task and r.get("rope_base", 10000.0) == b]
        if ext:
            runs = [{"seed": r["seed"], **r["extended"][ext]} for r in runs
                    if ext in r.get("extended", {})]
    if not runs:
        fail("variant_runs", f"no runs for task {task!r} and variant {variant!r}")
    return sorted(runs, key=lambda r: r["seed"])


def compare_paired(results: dict[str, Any], task: str, a: str, b: str,
                   length: int, length_b: int | None = None, *,
                   margin: float = EQUIVALENCE_MARGIN) -> dict[str, Any]:
    """:func:`paired_difference` of two variants (or one at two lengths) and its
    :func:`equivalence_verdict`.

    ``a`` at ``length`` minus ``b`` at ``length_b`` (default ``length``: the same
    test sequences); variants as in :func:`variant_runs`, seeds paired.

    Returns:
        the difference dict plus ``"verdict"``, ``"a"``, ``"b"``, ``"lengths"``.
    """
    lb = length if length_b is None else length_b
    ra, rb = variant_runs(results, task, a), variant_runs(results, task, b)
    if [r["seed"] for r in ra] != [r["seed"] for r in rb]:
        fail("compare_paired", f"{a} and {b} have different seeds on {task}")
    sets = results["meta"]["test_sets"][task]
    d = paired_difference([r["right"][str(length)] for r in ra],
                          sets[str(length)]["scored"],
                          [r["right"][str(lb)] for r in rb],
                          None if lb == length else sets[str(lb)]["scored"])
    return {**d, "verdict": equivalence_verdict(d, margin), "a": a, "b": b,
            "lengths": (length, lb)}


def cell_at_chance(results: dict[str, Any], task: str, variant: str, length: int,
                   *, margin: float = EQUIVALENCE_MARGIN) -> bool:
    """Whether a cell is shown to sit at chance: its :func:`lab_interval` (seeds and
    test sequences) lies wholly inside ``chance +- margin``, the test set's chance
    level (best constant answer) with chapter 10's equivalence margin.

    A model at chance has collapsed: two such models are not "equivalent" in any
    sense that says something about their position methods (:func:`lab_verdict`).
    """
    if not margin > 0:
        fail("cell_at_chance", f"margin must be positive, got {margin!r}")
    runs = variant_runs(results, task, variant)
    info = results["meta"]["test_sets"][task][str(length)]
    cell = lab_interval([r["right"][str(length)] for r in runs], info["scored"])
    return (info["chance"] - margin < cell["low"]
            and cell["high"] < info["chance"] + margin)


def lab_verdict(results: dict[str, Any], task: str, a: str, b: str, length: int,
                length_b: int | None = None, *,
                margin: float = EQUIVALENCE_MARGIN) -> dict[str, Any]:
    """Chapter 10's verdict on ``a`` at ``length`` minus ``b`` at ``length_b``:
    :func:`compare_paired` with two refinements.

    * ``"both at chance"`` when both cells are at chance (:func:`cell_at_chance`):
      two collapsed models are not called equivalent, nor ordered;
    * ``"higher"`` / ``"lower"`` only when the interval lies beyond 0 *and* the
      estimate lies beyond the margin; an interval beyond 0 whose estimate is inside
      the margin (and whose interval reaches past it) is ``"undecided"``: a
      difference is shown, but neither that it matters nor that it is negligible.

    Returns:
        :func:`compare_paired`'s dict with ``"verdict"`` replaced and the rule's own
        verdict kept as ``"rule_verdict"``.
    """
    c = compare_paired(results, task, a, b, length, length_b, margin=margin)
    verdict = c["verdict"]
    if verdict in ("higher", "lower") and abs(c["diff"]) < margin:
        verdict = "undecided"
    lb = length if length_b is None else length_b
    if (cell_at_chance(results, task, a, length, margin=margin)
            and cell_at_chance(results, task, b, lb, margin=margin)):
        verdict = "both at chance"
    return {**c, "verdict": verdict, "rule_verdict": c["verdict"]}


def _rows(groups: dict[tuple[str, str, int], list[dict[str, Any]]],
          test_sets: dict[str, Any] | None, order: Callable[[tuple], Any]
          ) -> list[dict[str, Any]]:
    rows = []
    for key in sorted(groups, key=order):
        task, label, length = key
        runs = groups[key]
        vals = [r["accuracy"][str(length)] for r in runs]
        info = (test_sets or {}).get(task, {}).get(str(length))
        row = {"task": task, "method": label, "length": length, "n": len(vals),
               "values": vals}
        if info is not None and all("right" in r for r in runs):
            row.update(lab_interval([r["right"][str(length)] for r in runs],
                                    info["scored"]))
            row["chance"] = info["chance"]
        else:  # results without per-sequence counts: seeds only
            mean, low, high = mean_ci(vals, bounds=(0.0, 1.0))  # accuracies
            row.update(mean=mean, low=low, high=high)
        rows.append(row)
    return rows


def summarize(runs: Iterable[dict[str, Any]],
              test_sets: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Group runs by (task, method, length): mean accuracy and 95 % interval.

    Args:
        runs: as returned by :func:`train_run`.
        test_sets: ``results["meta"]["test_sets"]`` (scored positions per test
            sequence and the chance level, by task and length); with it and the
            runs' per-sequence counts the interval is :func:`lab_interval` (seeds and
            test sequences), without it the seeds-only :func:`mean_ci`.

    Returns:
        rows ``{"task", "method", "length", "mean", "low", "high", "n", "values"}``
        (plus ``"seed_half"``, ``"test_half"``, ``"chance"`` with ``test_sets``) in
        task, method (as in ``METHODS``) and length order.
    """
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in runs:
        for length in r["accuracy"]:
            groups.setdefault((r["task"], r["method"], int(length)), []).append(r)
    order = {m: i for i, m in enumerate(METHODS)}
    task_order = {t: i for i, t in enumerate(TASKS)}
    return _rows(groups, test_sets,
                 lambda k: (task_order.get(k[0], 99), order.get(k[1], 99), k[2]))


def summarize_rope(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows like :func:`summarize` for the RoPE variants of the lab.

    Variants (the ``"method"`` of a row): ``"base B"`` for the RoPE models trained with
    base ``B`` (the main runs have base 10000), and ``"base B + pi"`` / ``"base B +
    yarn"`` for the same trained models run past ``L`` with position interpolation or
    YaRN (inference only).
    """
    runs = [r for r in results["runs"] if r["method"] == "rope"]
    runs += results.get("rope_sweep", [])
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in runs:
        base = f"base {r.get('rope_base', 10000.0):g}"
        for length in r["accuracy"]:
            groups.setdefault((r["task"], base, int(length)), []).append(r)
        for name, ext in r.get("extended", {}).items():
            pseudo = {"accuracy": ext["accuracy"], "right": ext["right"]}
            for length in ext["accuracy"]:
                groups.setdefault((r["task"], f"{base} + {name}", int(length)),
                                  []).append(pseudo)
    task_order = {t: i for i, t in enumerate(TASKS)}

    def order(k: tuple) -> Any:
        base, _, ext = k[1].partition(" + ")
        return (task_order.get(k[0], 99), float(base.split()[1]), ext, k[2])

    return _rows(groups, results.get("meta", {}).get("test_sets"), order)


def separated(a: dict[str, Any], b: dict[str, Any]) -> int:
    """The overlap rule: ``1`` if row ``a``'s interval lies wholly above row ``b``'s,
    ``-1`` if wholly below, ``0`` if they overlap (not shown to differ).

    Chapter 10 no longer draws verdicts from it (two overlapping intervals show
    neither a difference nor an equality); its verdicts are :func:`lab_verdict`'s.

    >>> separated({"low": 0.8, "high": 0.9}, {"low": 0.5, "high": 0.79})
    1
    >>> separated({"low": 0.8, "high": 0.9}, {"low": 0.5, "high": 0.8})
    0
    """
    if a["low"] > b["high"]:
        return 1
    if a["high"] < b["low"]:
        return -1
    return 0


def row_index(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str, int],
                                                     dict[str, Any]]:
    """``{(task, method, length): row}`` of summary rows."""
    return {(r["task"], r["method"], r["length"]): r for r in rows}


def extrapolation_category(row: dict[str, Any], at_l: dict[str, Any],
                           chance: float) -> str:
    """Where a method stands at a longer length, by the overlap rule (:func:`separated`;
    chapter 10 uses :func:`lab_verdict` instead).

    ``"undecided"``: the interval reaches down to the chance level *and* overlaps the
    interval at the training length (it cannot tell the two apart); ``"chance"``: it
    reaches the chance level and lies below the interval at ``L`` (not shown above
    chance); ``"kept"``: it overlaps the interval at ``L`` and lies above chance (no
    loss shown); ``"lower"``: below the interval at ``L`` and above chance;
    ``"higher"``: above the interval at ``L``.

    >>> extrapolation_category({"low": 0.5, "high": 0.7}, {"low": 0.9, "high": 1.0},
    ...                        0.55)
    'chance'
    >>> extrapolation_category({"low": 0.5, "high": 0.95}, {"low": 0.9, "high": 1.0},
    ...                        0.55)
    'undecided'
    >>> extrapolation_category({"low": 0.8, "high": 0.95}, {"low": 0.9, "high": 1.0},
    ...                        0.5)
    'kept'
    """
    side = separated(row, at_l)
    if row["low"] <= chance:
        return "undecided" if side == 0 else "chance"
    return {0: "kept", -1: "lower", 1: "higher"}[side]


def trajectory(rows: Iterable[dict[str, Any]], task: str, method: str
               ) -> dict[int, str]:
    """``{length: extrapolation_category}`` of one method on one task, every length
    past the shortest (the training length) of its rows; the chance level of each
    length is the test set's (``row["chance"]``)."""
    own = sorted((r for r in rows if (r["method"], r["task"]) == (method, task)),
                 key=lambda r: r["length"])
    if not own:
        fail("trajectory", f"no rows for task {task!r} and method {method!r}")
    base = own[0]
    return {r["length"]: extrapolation_category(r, base, r["chance"]) for r in own[1:]}


def order_pairs(rows: Iterable[dict[str, Any]], task: str, length: int,
                methods: Sequence[str]) -> dict[tuple[str, str], int]:
    """:func:`separated` for every pair ``(a, b)`` of ``methods`` (``a`` listed
    first) on ``task`` at ``length``."""
    idx = row_index(rows)
    return {(a, b): separated(idx[(task, a, length)], idx[(task, b, length)])
            for i, a in enumerate(methods) for b in methods[i + 1:]}


# --------------------------------------------------------------------- provenance


def code_version() -> dict[str, Any]:
    """Fingerprint of the code that produces the numbers.

    Returns:
        ``{"source_sha256": ..., "git_commit": ..., "git_dirty": ...}``: a SHA-256 over
        the lab's and the used library modules' sources, the current git commit (None
        outside a checkout) and whether those files differ from it.
    """
    lib = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for rel in _SOURCES:
        h.update(rel.encode())
        h.update((lib / rel).read_bytes())
    commit = dirty = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=lib, capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", *(str(lib / r) for r in _SOURCES)],
            cwd=lib, capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        dirty = bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return {"source_sha256": h.hexdigest(), "git_commit": commit, "git_dirty": dirty}


CANARY = LabConfig(tasks=("recall",), steps=6, batch_size=16, train_length=8,
                   multipliers=(1, 2), d_model=16, n_heads=2, d_ff=32,
                   eval_sequences=16)
"""The tiny configuration of :func:`canary`."""


def canary() -> dict[str, list[float]]:
    """A few training steps of every method on a tiny configuration.

    The stored results keep these numbers. Recomputing them later tells whether the
    current code still computes what produced the results, whatever edits (comments,
    refactors) changed the source files since: a source fingerprint changes with every
    edit, the canary only when the numbers do.

    Returns:
        ``{method: training loss of each step}`` for every method of
        ``METHODS`` (seed 0, associative recall, ``CANARY``).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {m: train_run("recall", m, 0, CANARY)["loss_curve"] for m in METHODS}
    finally:
        torch.set_num_threads(threads)


def canary_matches(results: dict[str, Any], *, atol: float = 1e-4) -> bool | None:
    """Whether the current code reproduces the canary stored with ``results``.

    Returns:
        True or False, or None when the results hold no canary.
    """
    stored = results.get("meta", {}).get("canary")
    if not stored:
        return None
    now = canary()
    return set(now) == set(stored) and all(
        len(now[m]) == len(stored[m])
        and all(abs(a - b) <= atol for a, b in zip(now[m], stored[m], strict=True))
        for m in now
    )


def _init_worker() -> None:
    torch.set_num_threads(1)


def _job(args: tuple[str, str, int, dict[str, Any], float | None]) -> dict[str, Any]:
    task, method, seed, cfg, base = args
    run = train_run(task, method, seed, LabConfig.from_dict(cfg), rope_base=base)
    if base is not None:
        run["sweep"] = True
    return run


def _run_jobs(jobs: list[tuple[str, str, int, dict[str, Any], float | None]],
              workers: int, progress: bool) -> list[dict[str, Any]]:
    """Run :func:`_job` on every job, in ``workers`` processes of one thread each."""
    from tqdm.auto import tqdm

    runs: list[dict[str, Any]] = []
    bar = tqdm(total=len(jobs), desc="lab", unit="model", disable=not progress,
               file=sys.stderr)
    if workers == 1:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for job in jobs:
                bar.set_postfix_str(f"{job[0]}/{job[1]}/seed {job[2]}")
                runs.append(_job(job))
                bar.update()
        finally:
            torch.set_num_threads(threads)
    else:
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(workers, mp_context=ctx,
                                    initializer=_init_worker) as pool:
            futures = [pool.submit(_job, job) for job in jobs]
            for fut in cf.as_completed(futures):
                r = fut.result()
                runs.append(r)
                bar.set_postfix_str(f"{r['task']}/{r['method']}/seed {r['seed']}")
                bar.update()
    bar.close()
    return runs


def rerun_rope_extensions(path: str | Path | None = None, *, workers: int = 2,
                          progress: bool = True, replace: bool = False
                          ) -> dict[str, Any]:
    """Re-train every stored RoPE model and re-run :data:`ROPE_EXTENSIONS` on it.

    The trained models are not stored, so a new set of inference-only extensions
    needs the RoPE runs again (the main runs with base 10000 and the base sweep, 27
    models with the default settings). Training is deterministic (one thread, the
    same seeds), so each re-trained model must reproduce its stored accuracies
    exactly, sequence by sequence; if one does not, nothing is written and a
    ``RuntimeError`` says which, unless ``replace=True``: then every RoPE run is
    replaced by its re-run as a whole (the other methods' runs are kept), and
    ``meta["rope_extensions"]["changed"]`` records, per replaced run, how many test
    sequences changed their count and the largest change of an accuracy. Otherwise
    each stored run's ``extended`` field is replaced. ``meta["rope_extensions"]``
    records the extensions, the code version, the CPU time and when it ran. The file
    is rewritten in place.

    Returns:
        the updated results.
    """
    p = RESULTS_PATH if path is None else Path(path)
    if not p.exists():
        fail("rerun_rope_extensions", f"no results at {p}", FileNotFoundError)
    results = json.loads(p.read_text())
    cfg = results["meta"]["settings"]
    workers = require_positive_int("rerun_rope_extensions", "workers", workers)
    old = [r for r in results["runs"] if r["method"] == "rope"]
    old += results.get("rope_sweep", [])
    jobs = [(r["task"], "rope", r["seed"], cfg,
             r["rope_base"] if r.get("sweep") else None) for r in old]
    version = code_version()
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    start = time.perf_counter()
    new = _run_jobs(jobs, workers, progress)
    key = {(r["task"], r["seed"], r["rope_base"], bool(r.get("sweep"))): r
           for r in new}
    changed: dict[str, Any] = {}
    for r in old:
        fresh = key[(r["task"], r["seed"], r.get("rope_base", 10000.0),
                     bool(r.get("sweep")))]
        if fresh["right"] != r["right"]:
            name = f"{r['task']}/seed {r['seed']}/base {r.get('rope_base', 10000.0):g}"
            if not replace:
                raise RuntimeError(
                    f"rerun_rope_extensions: the re-trained RoPE model ({name}) does "
                    "not reproduce its stored answers; re-run the whole lab, or "
                    "replace the RoPE runs (replace=True)")
            changed[name] = {
                "sequences": sum(a != b for n in r["right"]
                                 for a, b in zip(r["right"][n], fresh["right"][n],
                                                 strict=True)),
                "max_accuracy_change": max(abs(r["accuracy"][n] - fresh["accuracy"][n])
                                           for n in r["accuracy"]),
            }
        if replace:
            r.clear()
            r.update(fresh)
        else:
            r["extended"] = fresh["extended"]
    results["meta"]["rope_extensions"] = {
        "extensions": ROPE_EXTENSIONS,
        "code_version": version,
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds_total": round(sum(r["cpu_seconds"] for r in new), 1),
        "models": len(new),
        "workers": workers,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "reproduced": not changed,
        "replaced": replace,
        "changed": changed,
    }
    results["summary"] = summarize(results["runs"], results["meta"].get("test_sets"))
    save_results(results, p)
    return results


def run_lab(
    config: LabConfig | None = None,
    *,
    workers: int = 2,
    progress: bool = True,
    note: str = "",
) -> dict[str, Any]:
    """Run every (task, method, seed) of ``config`` and collect the results.

    Args:
        config: settings (default :class:`LabConfig`).
        workers: processes; each runs one model at a time on one thread. ``1`` runs
            everything in this process (temporarily with one thread).
        progress: show a tqdm progress bar (on stderr).
        note: free text stored with the results (e.g. how busy the machine was).

    Returns:
        ``{"meta": {...}, "runs": [...], "rope_sweep": [...], "summary": [...]}``,
        ready for :func:`save_results`; ``runs`` are the (task, method, seed) runs,
        ``rope_sweep`` the RoPE runs with the other bases of ``config.rope_bases``;
        ``meta`` records the code version, the :func:`canary`, settings, seeds,
        timings, machine, load average before and after, and ``test_sets``
        (:func:`chance_level` of every task and length: the chance level of the test
        set and the scored positions of each test sequence).
    """
    cfg = LabConfig() if config is None else config
    workers = require_positive_int("run_lab", "workers", workers)
    jobs = [(t, m, s, cfg.to_dict(), None)
            for t in cfg.tasks for m in cfg.methods for s in cfg.seeds]
    if "rope" in cfg.methods:  # the base sweep
        jobs += [(t, "rope", s, cfg.to_dict(), float(b))
                 for t in cfg.tasks for b in cfg.rope_bases for s in cfg.seeds]
    version = code_version()  # before the runs: the code that produces them
    check = canary()
    load_before = os.getloadavg()
    started = dt.datetime.now(dt.UTC)
    start = time.perf_counter()
    runs = _run_jobs(jobs, workers, progress)
    wall = time.perf_counter() - start
    key = {(t, m, s, b): i for i, (t, m, s, _, b) in enumerate(jobs)}
    runs.sort(key=lambda r: key[(r["task"], r["method"], r["seed"],
                                 r["rope_base"] if r.get("sweep") else None)])
    sweep = [r for r in runs if r.get("sweep")]
    runs = [r for r in runs if not r.get("sweep")]
    test_sets = {t: {str(n): chance_level(t, n, n_sequences=cfg.eval_sequences,
                                          seed=cfg.eval_seed)
                     for n in cfg.lengths} for t in cfg.tasks}
    per_model = [r["train_seconds"] + r["eval_seconds"] for r in runs + sweep]
    cpu = [r["cpu_seconds"] for r in runs + sweep]
    meta = {
        "code_version": version,
        "canary": check,
        "settings": cfg.to_dict(),
        "seeds": list(cfg.seeds),
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_seconds": round(wall, 1),
        "model_seconds_max": round(max(per_model), 2),
        "model_seconds_mean": round(sum(per_model) / len(per_model), 2),
        "model_cpu_seconds_max": round(max(cpu), 2),
        "model_cpu_seconds_mean": round(sum(cpu) / len(cpu), 2),
        "cpu_seconds_total": round(sum(cpu), 1),
        "workers": workers,
        "threads_per_worker": 1,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu_count": os.cpu_count(),
        },
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "note": note,
        "test_sets": test_sets,
    }
    out = {"meta": meta, "runs": runs, "rope_sweep": sweep}
    out["summary"] = summarize(runs, test_sets)
    return out


def save_results(results: dict[str, Any], path: str | Path | None = None) -> Path:
    """Write ``results`` as JSON (default ``RESULTS_PATH``); returns the path."""
    p = RESULTS_PATH if path is None else Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=1)
    # lists of numbers on one line each (the per-sequence counts are long)
    text = re.sub(r"\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]",
                  lambda m: "[" + re.sub(r",\s+", ",", m.group(1)) + "]", text)
    p.write_text(text + "\n")
    return p


def load_results(path: str | Path | None = None) -> dict[str, Any]:
    """Read results written by :func:`save_results` (default ``RESULTS_PATH``)."""
    p = RESULTS_PATH if path is None else Path(path)
    if not p.exists():
        fail("load_results", f"no results at {p}; run `python -m "
             "course_lib.experiments` (or `course lab`) to create them",
             FileNotFoundError)
    data = json.loads(p.read_text())
    if "runs" in data:  # intervals by the current rule
        data["summary"] = summarize(data["runs"], data.get("meta", {}).get("test_sets"))
    return data


def stored_results(path: str | Path | None = None, *, recompute: bool | None = None,
                   workers: int = 2) -> dict[str, Any]:
    """The lab's results: stored ones, or a fresh run when asked.

    Args:
        path: results file (default ``RESULTS_PATH``).
        recompute: run the full lab and overwrite the file; default: True when the
            environment variable ``COURSE_LAB_RECOMPUTE`` is ``1``.
        workers: processes for a recomputation.

    Returns:
        the results dict (see :func:`run_lab`).
    """
    if recompute is None:
        recompute = os.environ.get("COURSE_LAB_RECOMPUTE", "") == "1"
    if recompute:
        results = run_lab(workers=workers, note="recomputed at book build")
        save_results(results, path)
        return results
    return load_results(path)


def format_table(results: dict[str, Any], *, task: str | None = None,
                 digits: int = 2, rows: Sequence[dict[str, Any]] | None = None,
                 methods: Sequence[str] | None = None,
                 labels: dict[str, str] | None = None) -> str:
    """Markdown table of mean accuracy [95 % CI] per method (rows) and length.

    Args:
        results: from :func:`run_lab` or :func:`load_results`.
        task: one task, or None for all (a task column is added).
        digits: decimals.
        rows: summary rows to show (default ``results["summary"]``), e.g. those of
            :func:`summarize_rope`.
        methods: the methods (row labels of the summary) in table order (default:
            ``METHODS``, or the order of ``rows`` when they are given).
        labels: display names (default ``METHOD_LABELS``; other names as they are).
    """
    src = results["summary"] if rows is None else rows
    rows = [r for r in src if task is None or r["task"] == task]
    if methods is None:
        methods = METHODS if src is results.get("summary") else list(
            dict.fromkeys(r["method"] for r in rows))
    labels = METHOD_LABELS if labels is None else labels
    lengths = sorted({r["length"] for r in rows})
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    cell = {(r["task"], r["method"], r["length"]): r for r in rows}
    head = (["task"] if task is None else []) + ["method"] + [f"n = {n}"
                                                              for n in lengths]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in tasks:
        for m in methods:
            if not any((t, m, n) in cell for n in lengths):
                continue
            vals = []
            for n in lengths:
                r = cell.get((t, m, n))
                vals.append("" if r is None else
                            f"{r['mean']:.{digits}f} [{r['low']:.{digits}f}, "
                            f"{r['high']:.{digits}f}]")
            first = [t] if task is None else []
            lines.append("| " + " | ".join(first + [labels.get(m, m)] + vals) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="course lab",
        description="Train every position method on every task at length L and "
                    "measure accuracy at L, 2L, 4L and 8L (the chapter 10 lab).",
    )
    p.add_argument("--out", type=Path, default=None,
                   help=f"results file (default: {RESULTS_PATH}; with --quick: "
                        "lab_results_quick.json in the current directory)")
    p.add_argument("--workers", type=int, default=2,
                   help="worker processes, one thread each (default 2)")
    p.add_argument("--tasks", nargs="+", choices=list(TASKS), default=None)
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=None)
    p.add_argument("--seeds", nargs="+", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="optimiser steps per model")
    p.add_argument("--rope-bases", nargs="*", type=float, default=None,
                   help="extra RoPE runs with these bases (default 10 100; none: "
                        "--rope-bases with no value)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: one seed, 100 steps, 64 test sequences")
    p.add_argument("--note", default="", help="free text stored with the results")
    p.add_argument("--replace-rope-runs", action="store_true",
                   help="with --rope-extensions: replace RoPE runs that the "
                        "re-training does not reproduce exactly")
    p.add_argument("--rope-extensions", action="store_true",
                   help="re-train only the stored RoPE models (they must reproduce "
                        "their stored answers) and re-run the inference-only "
                        "extensions on them, updating the results file in place")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the lab, write the results file, print the table.

    ``python -m course_lib.experiments --help`` (also ``course lab``) lists the
    options. Returns the exit status.
    """
    args = _parser().parse_args(argv)
    if args.rope_extensions:
        try:
            res = rerun_rope_extensions(args.out, workers=args.workers,
                                        progress=not args.no_progress,
                                        replace=args.replace_rope_runs)
        except (RuntimeError, ValueError, FileNotFoundError) as exc:
            print(f"course lab: {exc}", file=sys.stderr)
            return 1
        info = res["meta"]["rope_extensions"]
        print(f"re-ran {info['models']} RoPE models with extensions "
              f"{', '.join(ROPE_EXTENSIONS)}: wall {info['wall_seconds']} s, CPU "
              f"{info['cpu_seconds_total']} s")
        return 0
    changes: dict[str, Any] = {}
    if args.quick:
        changes.update(seeds=(0,), steps=100, eval_sequences=64, rope_bases=())
    for name in ("tasks", "methods", "seeds"):
        if getattr(args, name) is not None:
            changes[name] = tuple(getattr(args, name))
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.rope_bases is not None:
        changes["rope_bases"] = tuple(args.rope_bases)
    try:
        cfg = dataclasses.replace(LabConfig(), **changes)
    except (TypeError, ValueError) as exc:
        print(f"course lab: {exc}", file=sys.stderr)
        return 2
    out = args.out
    if out is None:
        out = Path("lab_results_quick.json") if args.quick else RESULTS_PATH
    n_runs = len(cfg.tasks) * len(cfg.methods) * len(cfg.seeds)
    n_sweep = (len(cfg.tasks) * len(cfg.rope_bases) * len(cfg.seeds)
               if "rope" in cfg.methods else 0)
    print(f"lab: {n_runs} models ({len(cfg.tasks)} tasks x {len(cfg.methods)} "
          f"methods x {len(cfg.seeds)} seeds) and {n_sweep} RoPE base-sweep models, "
          f"{cfg.steps} steps each, {args.workers} worker(s)")
    results = run_lab(cfg, workers=args.workers, progress=not args.no_progress,
                      note=args.note)
    path = save_results(results, out)
    meta = results["meta"]
    print(format_table(results))
    print(f"\nwrote {path}\nwall time {meta['wall_seconds']} s; per model: mean "
          f"{meta['model_seconds_mean']} s, max {meta['model_seconds_max']} s "
          f"(CPU time: mean {meta['model_cpu_seconds_mean']} s, max "
          f"{meta['model_cpu_seconds_max']} s, total {meta['cpu_seconds_total']} s); "
          f"load average before {meta['load_average_before'][0]}, after "
          f"{meta['load_average_after'][0]}")
    return 0

