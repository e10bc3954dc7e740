"""The ALiBi paper's experiment on real text: train short, evaluate long.

Press et al. (2022) train causal language models at length ``L`` and plot validation
perplexity at longer lengths. This module repeats that experiment in miniature on
the English documentation text shipped with CPython (``pydoc_data.topics``), so it
runs on every machine without a download. Tokens are characters.

* :func:`load_corpus` returns the text, its SHA-256 and a deterministic 90/10
  train/validation split (by topic name, so no topic straddles the split).
* :func:`train_lm` trains a
  :class:`~course_lib.experiments.model.TinyTransformer` at length ``L``.
* :func:`perplexity` evaluates at any length, with non-overlapping windows or with a
  sliding window that scores only the last ``stride`` tokens of each window.
* :func:`rope_extension` rebuilds the rotary cache of a RoPE model with one of the
  context-extension methods of :mod:`course_lib.rope_scaling`, at inference.
* :func:`run_lm_experiment` runs every method and seed and returns the JSON record
  that ``course lab --lm`` writes to ``course_lib/data/lm_extrapolation.json``.

Intervals over seeds are Student-t intervals on the log-perplexity (the mean
negative log-likelihood per token, in nats), exponentiated: the log scale is
where seed-to-seed variation is roughly symmetric, and the exponential maps any
interval of a non-negative NLL into ``[1, inf)``, the range of a perplexity.

>>> text, digest, (train, val) = load_corpus()
>>> len(digest), len(train) > 8 * len(val) > 0
(64, True)
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from course_lib._validate import fail
from course_lib.experiments.model import ModelConfig, TinyTransformer
from course_lib.experiments.train import mean_ci
from course_lib.rope import RotaryEmbedding

__all__ = [
    "LM_METHODS",
    "RESULTS_PATH",
    "code_hash",
    "EXTENSION_METHODS",
    "LMConfig",
    "load_corpus",
    "encode",
    "train_lm",
    "perplexity",
    "rope_extension",
    "log_interval",
    "run_lm_experiment",
]

LM_METHODS: tuple[str, ...] = (
    "none", "sinusoidal", "learned", "rope", "rope+yarn", "t5", "alibi"
)
"""Methods of the perplexity experiment (``rope+yarn`` is the RoPE model with YaRN
applied at inference, factor = evaluation length / L)."""

EXTENSION_METHODS: tuple[str, ...] = ("linear", "dynamic", "yarn", "llama3")
"""RoPE context-extension methods applied at inference to the trained RoPE model."""

FINE_TUNED: tuple[str, ...] = ("linear", "yarn")
"""Extension methods whose papers fine-tune briefly at the longer length (PI, YaRN)."""


@dataclass(frozen=True)
class LMConfig:
    """Settings of the language-model experiment (defaults: the committed run)."""

    train_length: int = 32
    multipliers: tuple[int, ...] = (1, 2, 4, 8, 16)
    extension_multipliers: tuple[int, ...] = (2, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 400
    batch_size: int = 32
    lr: float = 3e-3
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    eval_tokens: int = 4096
    fine_tune_steps: int = 40
    fine_tune_lr: float = 1e-3
    methods: tuple[str, ...] = field(default=LM_METHODS)

    def __post_init__(self) -> None:
        for m in self.methods:
            if m not in LM_METHODS:
                fail("LMConfig", f"methods must be among {', '.join(LM_METHODS)}, "
                                 f"got {m!r}")
        if self.train_length < 4:
            fail("LMConfig", f"train_length must be at least 4, got "
                             f"{self.train_length}")
        if min(self.multipliers) < 1 or min(self.extension_multipliers, default=2) < 2:
            fail("LMConfig", "multipliers must be >= 1 and extension multipliers "
                             ">= 2")


def load_corpus() -> tuple[str, str, tuple[str, str]]:
    """``(text, sha256, (train_text, val_text))`` from CPython's pydoc topics.

    Topics are sorted by name; every tenth topic (by sorted index) goes to the
    validation split. Text is normalised to printable ASCII plus newline.
    """
    from pydoc_data.topics import topics

    names = sorted(topics)
    parts = []
    for name in names:
        body = topics[name].encode("ascii", "replace").decode("ascii")
        parts.append((name, body))
    text = "\n".join(body for _, body in parts)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    train = "\n".join(b for i, (_, b) in enumerate(parts) if i % 10 != 9)
    val = "\n".join(b for i, (_, b) in enumerate(parts) if i % 10 == 9)
    return text, digest, (train, val)


def encode(text: str) -> torch.Tensor:
    """Bytes of ASCII ``text`` as a long tensor (vocabulary of 128 tokens)."""
    data = text.encode("ascii")
    return torch.tensor(list(data), dtype=torch.long)


def _model_config(method: str, cfg: LMConfig) -> ModelConfig:
    base = "rope" if method == "rope+yarn" else method
    return ModelConfig(vocab_size=128, n_classes=128, method=base,
                       train_length=cfg.train_length, d_model=cfg.d_model,
                       n_heads=cfg.n_heads, n_layers=cfg.n_layers, d_ff=cfg.d_ff)


def _batches(data: torch.Tensor, length: int, batch: int, gen: torch.Generator):
    starts = torch.randint(0, data.numel() - length - 1, (batch,), generator=gen)
    idx = starts[:, None] + torch.arange(length + 1)  # (B, length+1)
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


def train_lm(method: str, seed: int, cfg: LMConfig, train_data: torch.Tensor,
             *, model: TinyTransformer | None = None, length: int | None = None,
             steps: int | None = None, lr: float | None = None
             ) -> tuple[TinyTransformer, list[float]]:
    """Train (or, given ``model``, fine-tune) a character LM; returns it and losses.

    >>> cfg = LMConfig(steps=3, d_model=16, n_heads=2, d_ff=32, batch_size=4)
    >>> m, losses = train_lm("alibi", 0, cfg, encode("hello world " * 20))
    >>> len(losses)
    3
    """
    length = cfg.train_length if length is None else length
    steps = cfg.steps if steps is None else steps
    lr = cfg.lr if lr is None else lr
    if model is None:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = TinyTransformer(_model_config(method, cfg))
    gen = torch.Generator().manual_seed(10_000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, steps // 10))
        * 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    losses = []
    for _ in range(steps):
        x, y = _batches(train_data, length, cfg.batch_size, gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return model, losses


def rope_extension(model: TinyTransformer, scaling: dict | None) -> None:
    """Replace the rotary cache of a RoPE ``model`` (``scaling=None``: plain RoPE)."""
    if model.config.method != "rope":
        fail("rope_extension", f"the model must use RoPE, got "
                               f"{model.config.method!r}")
    head_dim = model.config.d_model // model.config.n_heads
    model.shared["rope"] = RotaryEmbedding(
        head_dim, max_seq_len=model.config.train_length, scaling=scaling)


def _scaling(method: str, factor: float, L: int, length: int) -> dict:
    # the dynamic method reads the current length from the input (RotaryEmbedding)
    return {"method": method, "factor": float(factor), "original_max_position": L}


@torch.no_grad()
def perplexity(model: TinyTransformer, data: torch.Tensor, length: int,
               *, stride: int | None = None) -> float:
    """Perplexity of ``model`` on ``data`` with windows of ``length`` tokens.

    ``stride=None``: non-overlapping windows, every token scored once (early tokens
    of each window see little context). ``stride=s``: windows of ``length`` tokens
    move by ``s`` and score only their last ``s`` tokens (the first window scores
    all), so each scored token sees at least ``length - s`` tokens of context.
    Perplexity is ``exp`` of the mean NLL over scored tokens, so it is ``>= 1``.
    """
    n = data.numel() - 1
    if length > n:
        fail("perplexity", f"length {length} exceeds the {n} evaluation tokens")
    if stride is not None and not 1 <= stride <= length:
        fail("perplexity", f"stride must lie in 1..{length}, got {stride}")
    total, count = 0.0, 0
    step = length if stride is None else stride
    starts = list(range(0, n - length + 1, step))
    for b in range(0, len(starts), 16):
        st = torch.tensor(starts[b:b + 16])
        idx = st[:, None] + torch.arange(length + 1)
        chunk = data[idx]
        logits = model(chunk[:, :-1])
        nll = F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:],
                              reduction="none")  # (B, length)
        if stride is None:
            total += float(nll.sum())
            count += nll.numel()
        else:
            for row, s0 in zip(nll, st.tolist(), strict=True):
                keep = row if s0 == 0 else row[-stride:]
                total += float(keep.sum())
                count += keep.numel()
    return math.exp(total / count)


def log_interval(values: list[float]) -> dict:
    """Mean and 95% interval of perplexities across seeds, on the log scale.

    The t-interval of ``log(ppl)`` (a mean NLL), exponentiated: the geometric mean
    with bounds that stay ``>= 1`` whenever every perplexity is ``>= 1``.

    >>> r = log_interval([2.0, 2.0, 2.0])
    >>> (round(r["mean"], 12), round(r["low"], 12), round(r["high"], 12))
    (2.0, 2.0, 2.0)
    """
    if not values or any(not math.isfinite(v) or v < 1 for v in values):
        fail("log_interval", f"values must be finite perplexities >= 1, got {values}")
    # the log-perplexity (a mean NLL) is >= 0: the t-interval of chapter 10's
    # ``mean_ci``, bounded below at 0 on the log scale (ppl >= 1)
    mu, low, high = mean_ci([math.log(v) for v in values], bounds=(0.0, math.inf))
    return {"mean": math.exp(mu), "low": math.exp(low), "high": math.exp(high),
            "n": len(values)}


def code_hash() -> str:
    """SHA-256 over the syntax trees of this module and the model, docstrings removed.

    Comments, docstrings and formatting do not change the numbers, so they do not
    change the hash either; any change to the code does.
    """
    import ast
    import inspect

    from course_lib.experiments import model as model_mod
    h = hashlib.sha256()
    for mod in (model_mod, inspect.getmodule(train_lm)):
        tree = ast.parse(inspect.getsource(mod))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        h.update(ast.dump(tree).encode())
    return h.hexdigest()


def run_lm_experiment(cfg: LMConfig = LMConfig(), *, log=print) -> dict:
    """Run every method and seed; return the JSON-ready record."""
    import os
    import platform
    import resource

    wall0, cpu0 = time.perf_counter(), time.process_time()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    _, digest, (train_text, val_text) = load_corpus()
    train_data, val_data = encode(train_text), encode(val_text)
    val_data = val_data[: cfg.eval_tokens + 1]
    L = cfg.train_length
    lengths = [m * L for m in cfg.multipliers]
    raw: dict = {"nonoverlap": {}, "sliding": {}}
    ext_raw: dict = {"no_fine_tune": {}, "fine_tune": {}}
    train_time = {}
    for method in cfg.methods:
        if method == "rope+yarn":
            continue  # evaluated from the trained RoPE models below
        for seed in cfg.seeds:
            c0 = time.process_time()
            model, losses = train_lm(method, seed, cfg, train_data)
            train_time[f"{method}/{seed}"] = time.process_time() - c0
            evals = [(method, None)]
            if method == "rope" and "rope+yarn" in cfg.methods:
                evals.append(("rope+yarn", "yarn"))
            for name, ext in evals:
                for T in lengths:
                    if ext is not None:
                        rope_extension(model, None if T == L else
                                       _scaling(ext, T / L, L, T))
                    for kind, stride in (("nonoverlap", None), ("sliding", L)):
                        ppl = perplexity(model, val_data, T, stride=stride)
                        per = raw[kind].setdefault(name, {})
                        per.setdefault(str(T), []).append(ppl)
                if ext is not None:
                    rope_extension(model, None)
            log(f"{method} seed {seed}: final train loss {losses[-1]:.3f}")
            if method == "rope":
                state = {k: v.clone() for k, v in model.state_dict().items()}
                for ext in EXTENSION_METHODS:
                    for mult in cfg.extension_multipliers:
                        T = mult * L
                        rope_extension(model, _scaling(ext, mult, L, T))
                        ppl = perplexity(model, val_data, T)
                        ext_raw["no_fine_tune"].setdefault(ext, {}).setdefault(
                            str(T), []).append(ppl)
                        if ext in FINE_TUNED:
                            train_lm("rope", seed, cfg, train_data, model=model,
                                     length=T, steps=cfg.fine_tune_steps,
                                     lr=cfg.fine_tune_lr)
                            ppl = perplexity(model, val_data, T)
                            ext_raw["fine_tune"].setdefault(ext, {}).setdefault(
                                str(T), []).append(ppl)
                            model.load_state_dict(state)
                        rope_extension(model, None)

    def summarise(d):
        return {m: {T: {"values": v, **log_interval(v)} for T, v in per.items()}
                for m, per in d.items()}

    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = time.process_time() - cpu0
    return {
        "code_sha256": code_hash(),
        "corpus": "pydoc_data.topics.topics (CPython documentation text)",
        "corpus_sha256": digest,
        "train_tokens": int(train_data.numel()),
        "eval_tokens": int(val_data.numel() - 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "seeds": list(cfg.seeds),
        "settings": {k: (list(v) if isinstance(v, tuple) else v)
                     for k, v in asdict(cfg).items()},
        "sliding_stride": L,
        "interval": "95% Student-t interval of log-perplexity over seeds, "
                    "exponentiated (lower bound clipped at log-ppl 0)",
        "perplexity": {k: summarise(v) for k, v in raw.items()},
        "extension": {k: summarise(v) for k, v in ext_raw.items()},
        "timing": {
            "cpu_seconds": cpu,
            "user_seconds": ru1.ru_utime - ru0.ru_utime,
            "system_seconds": ru1.ru_stime - ru0.ru_stime,
            "wall_seconds": time.perf_counter() - wall0,
            "torch_threads": torch.get_num_threads(),
            "load_average": list(os.getloadavg()),
            "train_cpu_seconds": train_time,
        },
    }


# Where ``course lab --lm`` writes the record and chapter 12 reads it: package data, so
# the chapter also runs where ``course_lib`` is installed from a wheel (Colab).
RESULTS_PATH = Path(__file__).resolve().parents[1] / "data" / "lm_extrapolation.json"


def lm_main(argv=None) -> int:
    """``python -m course_lib.experiments --lm`` / ``course lab --lm``: run, save."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="course lab --lm")
    p.add_argument("--lm", action="store_true", help="run this experiment")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    changes = {}
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.seeds is not None:
        changes["seeds"] = tuple(args.seeds)
    torch.set_num_threads(args.threads)
    try:
        cfg = LMConfig(**changes)
    except (TypeError, ValueError) as exc:
        print(f"course lab --lm: {exc}")
        return 2
    out = args.out or RESULTS_PATH
    record = run_lm_experiment(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}; CPU {record['timing']['cpu_seconds']:.0f} s")
    return 0
