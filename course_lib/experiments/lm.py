"""The ALiBi paper's experiment on real text: train short, evaluate long.

Press et al. (2022) train causal language models at length ``L`` and plot validation
perplexity at longer lengths. This module repeats that experiment in miniature on
the English documentation text shipped with CPython (``pydoc_data.topics``), so it
runs on every machine without a download. Tokens are bytes, so every perplexity here
is per byte: it is not comparable with the word-level perplexities of the paper's
WikiText-103 models.

* :func:`load_corpus` returns the text, its SHA-256 and a deterministic 90/10
  train/validation split (by topic name, so no topic straddles the split).
* :func:`train_lm` trains a
  :class:`~course_lib.experiments.model.TinyTransformer` at length ``L``.
* :func:`nll_blocks` scores any length, with non-overlapping windows or with a
  sliding window that scores only the last ``stride`` tokens of each window, and
  returns the negative log-likelihood summed per block of the text;
  :func:`perplexity` is its exponentiated mean.
* :func:`extension_scaling` and :func:`rope_extension` rebuild the rotary cache of a
  RoPE model with one of the context-extension methods of
  :mod:`course_lib.rope_scaling`, at inference.
* :func:`run_lm_experiment` runs every method and seed and returns the JSON record
  that ``course lab --lm`` writes to ``course_lib/data/lm_extrapolation.json``.

Intervals (:func:`contrast`) cover two sources of noise: the training seed and the
sample of text. On the log scale (the mean negative log-likelihood per token, in
nats) the seed part is the Student-t part of chapter 10's ``mean_ci``; the text part
is a bootstrap over blocks of the validation text (the same resampled blocks for
every seed, since every model reads the same text). The two variances add, the
degrees of freedom follow Welch and Satterthwaite, and the interval is
exponentiated, so it lies in ``[1, inf)``, the range of a perplexity.

>>> text, digest, (train, val) = load_corpus()
>>> len(digest), len(train) > 6 * len(val) > 0
(64, True)
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from course_lib._validate import fail
from course_lib.experiments.model import ModelConfig, TinyTransformer
from course_lib.experiments.train import extension_rotary, t_quantile
from course_lib.rope import RotaryEmbedding

__all__ = [
    "LM_METHODS",
    "RESULTS_PATH",
    "code_hash",
    "EXTENSION_METHODS",
    "FINE_TUNED",
    "LMConfig",
    "load_corpus",
    "encode",
    "train_lm",
    "nll_blocks",
    "perplexity",
    "dynamic_ntk_scale",
    "extension_factor",
    "extension_scaling",
    "rope_extension",
    "contrast",
    "log_interval",
    "run_lm_experiment",
    "merge_records",
]

LM_METHODS: tuple[str, ...] = (
    "none", "sinusoidal", "learned", "rope", "rope+yarn", "t5", "alibi"
)
"""Methods of the perplexity experiment (``rope+yarn`` is the RoPE model with YaRN
applied at inference, factor = evaluation length / L)."""

EXTENSION_METHODS: tuple[str, ...] = (
    "linear", "pi+t", "ramp", "ntk", "dynamic", "yarn", "llama3"
)
"""RoPE context-extension methods applied at inference to the trained RoPE model:
position interpolation, PI with YaRN's temperature (``pi+t``), YaRN's ramp without
its temperature (``ramp``), static NTK (one factor for every length), NTK with the
factor ``T / L`` of the window (``dynamic``: what dynamic NTK applies to a prompt of
``T`` tokens processed in one pass; the factor does not grow token by token here),
YaRN (ramp ends from the turn counts at ``L``:
:func:`course_lib.experiments.yarn_betas`), Llama 3.1's bands. ``linear``,
``pi+t``, ``ramp`` and ``yarn`` separate the temperature from the ramp."""

FINE_TUNED: tuple[str, ...] = ("linear", "yarn", "plain")
"""Fine-tuned at the longer length: PI and YaRN (whose papers fine-tune briefly), and
``plain``, the control: the RoPE model fine-tuned the same steps at the same length
with no rescaling."""


@dataclass(frozen=True)
class LMConfig:
    """Settings of the language-model experiment (defaults: the committed run).

    ``eval_tokens=None`` scores the whole validation split; ``block_tokens=None``
    makes the bootstrap blocks as long as the longest evaluation window.
    ``static_ntk_factor=None`` sets static NTK's one factor to the largest extension
    multiplier. Reference models (Press et al.'s baseline) are trained at
    ``reference_multiplier * L`` on the same number of tokens per step and scored with
    non-overlapping windows. The sliding window (stride ``L``) is run at
    ``sliding_multipliers`` for the main models and at
    ``extension_sliding_multipliers`` for the extensions; fine-tunes run at
    ``fine_tune_multipliers`` with batches of ``fine_tune_batch_size`` windows. (The
    sliding window costs ``T / L`` forward passes per scored token and a fine-tune
    step at ``T`` costs ``T / L`` times a training step: these settings keep the run
    to a few CPU-minutes.)
    """

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
    eval_tokens: int | None = None
    block_tokens: int | None = None
    bootstrap: int = 2000
    bootstrap_seed: int = 0
    sliding_multipliers: tuple[int, ...] = (1, 2, 4, 8)
    short_stride: int | None = None
    extension_sliding_multipliers: tuple[int, ...] = (2, 4)
    fine_tune_steps: int = 40
    fine_tune_lr: float = 1e-3
    fine_tune_batch_size: int = 8
    fine_tune_multipliers: tuple[int, ...] = (2, 4)
    fine_tune_methods: tuple[str, ...] = FINE_TUNED
    static_ntk_factor: float | None = None
    reference_methods: tuple[str, ...] = ("sinusoidal", "rope")
    reference_multiplier: int = 4
    methods: tuple[str, ...] = field(default=LM_METHODS)

    def __post_init__(self) -> None:
        for m in (*self.methods, *self.reference_methods):
            if m not in LM_METHODS or m == "rope+yarn" and m in self.reference_methods:
                fail("LMConfig", f"methods must be among {', '.join(LM_METHODS)}, "
                                 f"got {m!r}")
        for m in self.fine_tune_methods:
            if m not in FINE_TUNED:
                fail("LMConfig", f"fine_tune_methods must be among "
                                 f"{', '.join(FINE_TUNED)}, got {m!r}")
        if self.short_stride is not None and not (
                1 <= self.short_stride <= self.train_length):
            fail("LMConfig", f"short_stride must lie in 1..train_length="
                             f"{self.train_length}, got {self.short_stride}")
        if self.train_length < 4:
            fail("LMConfig", f"train_length must be at least 4, got "
                             f"{self.train_length}")
        if min(self.multipliers) < 1 or min(self.extension_multipliers, default=2) < 2:
            fail("LMConfig", "multipliers must be >= 1 and extension multipliers "
                             ">= 2")
        if not (set(self.sliding_multipliers) <= set(self.multipliers)
                and set(self.extension_sliding_multipliers)
                | set(self.fine_tune_multipliers) <= set(self.extension_multipliers)):
            fail("LMConfig", "sliding multipliers must be among the multipliers, and "
                             "extension sliding and fine-tune multipliers among the "
                             "extension multipliers")
        if self.reference_methods and (
                self.reference_multiplier < 2
                or self.batch_size % self.reference_multiplier):
            fail("LMConfig", f"reference_multiplier must be >= 2 and divide "
                             f"batch_size={self.batch_size} (same tokens per step), "
                             f"got {self.reference_multiplier}")

    @property
    def stride_at_L(self) -> int:
        """The sliding window's stride at ``T = L``: ``short_stride`` or ``L // 8``."""
        if self.short_stride is not None:
            return self.short_stride
        return max(1, self.train_length // 8)

    @property
    def static_factor(self) -> float:
        """Static NTK's factor: ``static_ntk_factor``, else the largest multiplier."""
        if self.static_ntk_factor is not None:
            return float(self.static_ntk_factor)
        return float(max(self.extension_multipliers, default=2))


def load_corpus() -> tuple[str, str, tuple[str, str]]:
    """``(text, sha256, (train_text, val_text))`` from CPython's pydoc topics.

    Topics are sorted by name. The validation split takes whole topics in the order
    of the SHA-256 of their names until it holds at least a tenth of the bytes (a
    rule fixed before looking at any score; 58.5 kB of the 465 kB with
    CPython 3.11's topics), so no topic is in both splits and the validation text
    is a tenth of the corpus, not a tenth of the topics (every tenth topic by name
    held only 2 % of the bytes). Text is normalised to printable ASCII plus newline.
    """
    from pydoc_data.topics import topics

    names = sorted(topics)
    parts = []
    for name in names:
        body = topics[name].encode("ascii", "replace").decode("ascii")
        parts.append((name, body))
    text = "\n".join(body for _, body in parts)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    total = sum(len(b) for _, b in parts)
    by_hash = sorted(parts, key=lambda nb: hashlib.sha256(nb[0].encode()).hexdigest())
    val_names: set[str] = set()
    held = 0
    for name, body in by_hash:
        if held * 10 >= total:
            break
        val_names.add(name)
        held += len(body)
    train = "\n".join(b for n, b in parts if n not in val_names)
    val = "\n".join(b for n, b in parts if n in val_names)
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

    Batches of ``cfg.batch_size`` windows of ``length`` (default ``cfg.train_length``)
    tokens, drawn by a generator seeded with ``10_000 + seed``; the weights of a new
    model are drawn under ``torch.manual_seed(seed)``.

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
    """Replace the rotary cache of a RoPE ``model`` (``scaling=None``: plain RoPE).

    ``scaling`` is a spec of :func:`extension_scaling`: a ``RotaryEmbedding``
    scaling dict with ``factor``, for ``"yarn"`` with the ramp's ``alpha`` in turns,
    and ``temperature=True`` for PI with YaRN's temperature (built by
    :func:`course_lib.experiments.extension_rotary`).
    """
    if model.config.method != "rope":
        fail("rope_extension", f"the model must use RoPE, got "
                               f"{model.config.method!r}")
    head_dim = model.config.d_model // model.config.n_heads
    L = model.config.train_length
    if scaling is None:
        model.shared["rope"] = RotaryEmbedding(head_dim, max_seq_len=L)
        return
    spec = {k: v for k, v in scaling.items()
            if k not in ("factor", "original_max_position")}
    model.shared["rope"] = extension_rotary(head_dim, spec, factor=scaling["factor"],
                                            train_length=L)


def dynamic_ntk_scale(length: int, train_length: int) -> float:
    r"""Dynamic NTK's factor for a forward pass over ``length`` tokens.

    .. math::

        s(\ell) = \max(1, \ell / L)

    the factor grows with the current length :math:`\ell` and needs no target
    factor (emozilla 2023; Peng et al. 2023, section 3.3). In one forward pass over
    a window of :math:`T` tokens every token uses :math:`s(T)`: this is how a
    prompt is processed; during token-by-token generation the factor grows as the
    text does.

    >>> [dynamic_ntk_scale(n, 32) for n in (16, 32, 64, 128, 256)]
    [1.0, 1.0, 2.0, 4.0, 8.0]
    """
    if length < 1 or train_length < 1:
        fail("dynamic_ntk_scale", f"lengths must be positive, got {length} and "
                                  f"{train_length}")
    return max(1.0, length / train_length)


def extension_factor(method: str, length: int, cfg: LMConfig) -> float:
    """The factor ``s`` that ``method`` uses when it evaluates ``length`` tokens.

    ``ntk`` (static): ``cfg.static_factor`` at every length; ``dynamic``:
    :func:`dynamic_ntk_scale`; ``plain``: 1; the others: ``length / L``, the
    target ratio (the factor their papers set for a target context).
    """
    if method == "ntk":
        return cfg.static_factor
    if method == "dynamic":
        return dynamic_ntk_scale(length, cfg.train_length)
    if method == "plain":
        return 1.0
    if method not in EXTENSION_METHODS:
        fail("extension_factor", f"method must be one of "
                                 f"{', '.join(EXTENSION_METHODS)} or 'plain', got "
                                 f"{method!r}")
    return length / cfg.train_length


def extension_scaling(method: str, length: int, cfg: LMConfig) -> dict | None:
    """``RotaryEmbedding`` scaling dict of ``method`` at evaluation length ``length``.

    Static and dynamic NTK are both the library's ``"ntk"`` rule,
    :math:`b' = b\\,s^{d/(d-2)}`, with the factor of :func:`extension_factor`: for a
    window of fixed length, dynamic NTK *is* NTK at :math:`s = \\max(1, T/L)`. (The
    library's ``"dynamic"`` method takes a target factor and applies Hugging Face's
    rule :math:`s\\max(\\ell, L)/L - (s - 1)`; passing the target ratio :math:`T/L`
    there, with :math:`\\ell = T`, gives :math:`(T/L)^2 - T/L + 1`, not :math:`T/L`.)
    ``yarn`` and ``ramp`` carry the ramp's slow end ``alpha = 1`` turn (the fast end
    follows from ``L``: :func:`course_lib.experiments.yarn_betas`), ``ramp``
    with attention factor 1; ``pi+t`` is PI with ``temperature=True``. ``plain``
    returns ``None`` (no rescaling).
    """
    s = extension_factor(method, length, cfg)
    if method == "plain":
        return None
    if method in ("ntk", "dynamic"):
        return {"method": "ntk", "factor": s}
    if method == "linear":
        return {"method": "linear", "factor": s}
    if method == "pi+t":
        return {"method": "linear", "factor": s, "temperature": True}
    if method == "ramp":
        return {"method": "yarn", "factor": s, "alpha": 1.0, "attention_factor": 1.0}
    if method == "yarn":
        return {"method": "yarn", "factor": s, "alpha": 1.0}
    return {"method": method, "factor": s, "original_max_position": cfg.train_length}


@torch.no_grad()
def nll_blocks(model: TinyTransformer, data: torch.Tensor, length: int,
               *, stride: int | None = None, block: int | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood (nats) and token count per block of ``data``.

    ``stride=None``: non-overlapping windows of ``length`` tokens, every token of
    each window scored once (early tokens of each window see little context; the
    tail after the last whole window is not scored). ``stride=s``: windows of
    ``length`` tokens move by ``s`` and score only their last ``s`` tokens, except
    the first window, which scores all of its tokens; every other scored token sees
    at least ``length - s`` tokens of context. A prediction is assigned to the block
    ``i // block`` of its input position ``i`` (default: one block).

    Returns ``(sums, counts)``, float64 tensors of shape ``(n_blocks,)``.
    """
    n = data.numel() - 1
    if length > n:
        fail("perplexity", f"length {length} exceeds the {n} evaluation tokens")
    if stride is not None and not 1 <= stride <= length:
        fail("perplexity", f"stride must lie in 1..{length}, got {stride}")
    block = n if block is None else block
    n_blocks = -(-n // block)
    sums = torch.zeros(n_blocks, dtype=torch.float64)
    counts = torch.zeros(n_blocks, dtype=torch.float64)
    step = length if stride is None else stride
    starts = torch.arange(0, n - length + 1, step)
    per_batch = max(1, 8192 // length)
    offsets = torch.arange(length)
    for b in range(0, starts.numel(), per_batch):
        st = starts[b:b + per_batch]
        idx = st[:, None] + offsets  # (B, length): input positions
        chunk = data[torch.cat((idx, idx[:, -1:] + 1), dim=1)]  # (B, length+1)
        logits = model(chunk[:, :-1])
        nll = F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:],
                              reduction="none").double()  # (B, length)
        keep = torch.ones_like(nll, dtype=torch.bool)
        if stride is not None:
            keep = (offsets >= length - stride)[None, :] | (st == 0)[:, None]
        blk = idx[keep] // block
        sums.index_add_(0, blk, nll[keep])
        counts.index_add_(0, blk, torch.ones_like(nll[keep]))
    return sums, counts


def perplexity(model: TinyTransformer, data: torch.Tensor, length: int,
               *, stride: int | None = None) -> float:
    """Perplexity of ``model`` on ``data`` with windows of ``length`` tokens.

    ``exp`` of the mean NLL over the tokens :func:`nll_blocks` scores, so ``>= 1``.
    """
    sums, counts = nll_blocks(model, data, length, stride=stride)
    return math.exp(float(sums.sum() / counts.sum()))


def log_interval(values: list[float], confidence: float = 0.95) -> dict:
    """Geometric mean and t-interval of perplexities across seeds only.

    The t-interval of ``log(ppl)`` (a mean NLL), exponentiated, lower bound clipped
    at log-perplexity 0. This is the seed part of :func:`contrast` alone.

    >>> r = log_interval([2.0, 2.0, 2.0])
    >>> (round(r["mean"], 12), round(r["low"], 12), round(r["high"], 12))
    (2.0, 2.0, 2.0)
    """
    if not values or any(not math.isfinite(v) or v < 1 for v in values):
        fail("log_interval", f"values must be finite perplexities >= 1, got {values}")
    logs = [math.log(v) for v in values]
    n = len(logs)
    mu = sum(logs) / n
    half = 0.0
    if n > 1:
        sd = math.sqrt(sum((x - mu) ** 2 for x in logs) / (n - 1))
        half = t_quantile((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
    return {"mean": math.exp(mu), "low": math.exp(max(0.0, mu - half)),
            "high": math.exp(mu + half), "n": n}


def _bootstrap_weights(n_blocks: int, replicates: int, seed: int) -> torch.Tensor:
    """``(replicates, n_blocks)``: how often each block is drawn in each resample."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n_blocks, (replicates, n_blocks), generator=gen)
    w = torch.zeros(replicates, n_blocks, dtype=torch.float64)
    return w.scatter_add_(1, idx, torch.ones_like(w))


def contrast(a: dict, b: dict | None = None, *, paired: bool = False,
             replicates: int = 2000, seed: int = 0, confidence: float = 0.95) -> dict:
    r"""Perplexity of cell ``a`` (or the ratio ``a / b``) with its interval.

    A cell holds, per seed, the NLL summed per text block (``"blocks"``) and the
    tokens per block (``"counts"``). Per seed :math:`k` the log-perplexity is
    :math:`\ell_k = \sum_j A_{kj} / \sum_j c_j`; the estimate is
    :math:`\bar\ell` (for a ratio, :math:`\bar\ell_a - \bar\ell_b`).

    * Seeds: :math:`V_s = s^2/n` of the per-seed values (``paired=True``: of the
      per-seed differences, for two cells measured on the same models, e.g. one
      model at two lengths); unpaired, :math:`s_a^2/n_a + s_b^2/n_b`.
    * Text: :math:`V_t`, the variance over ``replicates`` bootstrap resamples of the
      blocks (with replacement, the same resample for both cells and every seed) of
      the seed-averaged estimate.
    * Interval: :math:`\hat\ell \pm t_{(1+c)/2,\nu}\sqrt{V_s + V_t}`, with
      Welch-Satterthwaite degrees of freedom :math:`\nu` (the text part counts as
      known, so :math:`\nu \ge n - 1`), exponentiated.

    Blocks that no cell scored (count 0) are left out of the resample. Returns
    ``{"ratio", "low", "high", "sd_seed", "se_text", "df"}`` (``ratio`` is the
    perplexity itself when ``b`` is None; ``sd_seed`` and ``se_text`` on the log
    scale).
    """
    def arrays(cell):
        blocks = torch.tensor(cell["blocks"], dtype=torch.float64)  # (seeds, n)
        counts = torch.tensor(cell["counts"], dtype=torch.float64)  # (n,)
        return blocks, counts

    A, cA = arrays(a)
    if b is None:
        B, cB = torch.zeros_like(A[:1]), torch.ones_like(cA)
    else:
        B, cB = arrays(b)
        if B.shape[1] != A.shape[1]:
            fail("contrast", "the two cells must use the same text blocks")
        if paired and B.shape[0] != A.shape[0]:
            fail("contrast", "paired cells need the same seeds")
    used = (cA > 0) & (cB > 0)
    A, B, cA, cB = A[:, used], B[:, used], cA[used], cB[used]
    la, lb = A.sum(1) / cA.sum(), B.sum(1) / cB.sum()  # (seeds,)
    est = float(la.mean() - lb.mean())

    def var(x):
        return float(x.var()) if x.numel() > 1 else 0.0

    parts = []  # (variance of the mean, degrees of freedom)
    if b is not None and paired:
        parts.append((var(la - lb) / la.numel(), la.numel() - 1))
    else:
        parts.append((var(la) / la.numel(), la.numel() - 1))
        if b is not None:
            parts.append((var(lb) / lb.numel(), lb.numel() - 1))
    w = _bootstrap_weights(A.shape[1], replicates, seed)
    rep = (w @ A.mean(0)) / (w @ cA) - (
        0.0 if b is None else (w @ B.mean(0)) / (w @ cB))  # (replicates,)
    v_text = float(rep.var())
    v_seed = sum(v for v, _ in parts)
    total = v_seed + v_text
    denom = sum(v * v / df for v, df in parts if df > 0 and v > 0)
    df = total * total / denom if denom > 0 else math.inf
    df_int = 10_000 if df > 10_000 else max(1, math.floor(df))
    half = t_quantile((1 + confidence) / 2, df_int) * math.sqrt(total)
    low = est - half
    if b is None:
        low = max(0.0, low)  # a log-perplexity is >= 0
    return {"ratio": math.exp(est), "low": math.exp(low), "high": math.exp(est + half),
            "sd_seed": math.sqrt(v_seed * la.numel()), "se_text": math.sqrt(v_text),
            "df": df}


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


def run_lm_experiment(cfg: LMConfig = LMConfig(), *, log=print,
                      checkpoint: Path | None = None) -> dict:
    """Run every method and seed; return the JSON-ready record.

    Layout: ``perplexity[kind][method][T]`` (``kind`` ``"nonoverlap"`` or
    ``"sliding"``), ``extension[kind]["no_fine_tune" | "fine_tune"][method][T]``,
    ``reference[kind][method][T]`` (models trained at ``reference_multiplier * L``),
    and ``factors[method][T]``, the factor each extension method used at ``T``. A
    cell holds the per-seed perplexities (``values``), the per-seed NLL sums per text
    block (``blocks``), the tokens per block (``counts``) and its interval
    (``mean``, ``low``, ``high``: :func:`contrast` of the cell alone).
    """
    import os
    import platform
    import resource

    wall0, cpu0 = time.perf_counter(), time.process_time()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    _, digest, (train_text, val_text) = load_corpus()
    train_data, val_data = encode(train_text), encode(val_text)
    if cfg.eval_tokens is not None:
        val_data = val_data[: cfg.eval_tokens + 1]
    L = cfg.train_length
    lengths = [m * L for m in cfg.multipliers]
    block = cfg.block_tokens or max(lengths)
    kinds = (("nonoverlap", None), ("sliding", L))
    raw: dict = {k: {} for k, _ in kinds}
    ext_raw: dict = {k: {"no_fine_tune": {}, "fine_tune": {}} for k, _ in kinds}
    ref_raw: dict = {k: {} for k, _ in kinds}
    factors: dict = {}
    phase = {"train": 0.0, "evaluate": 0.0, "fine_tune": 0.0, "reference": 0.0}
    train_time: dict = {}

    def clock(name, t0):
        phase[name] += time.process_time() - t0

    def score(model, store, name, T, sliding):
        t0 = time.process_time()
        for kind, stride in kinds:
            if stride is not None and not sliding:
                continue
            if stride is not None and T == L:
                stride = cfg.stride_at_L  # else the sliding score would be the other
            sums, counts = nll_blocks(model, val_data, T, stride=stride, block=block)
            cell = store[kind].setdefault(name, {}).setdefault(
                str(T), {"blocks": [], "counts": [round(float(c)) for c in counts]})
            cell["blocks"].append([round(float(x), 4) for x in sums])
        clock("evaluate", t0)

    def done(what):
        log(f"[{time.perf_counter() - wall0:7.1f} s] {what}")
        if checkpoint is not None:  # the raw numbers so far, in case the run dies
            import json
            Path(checkpoint).write_text(json.dumps(
                {"perplexity": raw, "extension": ext_raw, "reference": ref_raw,
                 "factors": factors}))

    for method in cfg.methods:
        if method == "rope+yarn":
            continue  # evaluated from the trained RoPE models below
        for seed in cfg.seeds:
            c0 = time.process_time()
            model, losses = train_lm(method, seed, cfg, train_data)
            train_time[f"{method}/{seed}"] = time.process_time() - c0
            clock("train", c0)
            slide = {m * L for m in cfg.sliding_multipliers}
            for T in lengths:
                score(model, raw, method, T, T in slide)
            if method == "rope" and "rope+yarn" in cfg.methods:
                for T in lengths:
                    rope_extension(model, None if T == L else
                                   extension_scaling("yarn", T, cfg))
                    score(model, raw, "rope+yarn", T, T in slide)
                rope_extension(model, None)
            done(f"{method} seed {seed}: final train loss {losses[-1]:.3f}")
            if method != "rope":
                continue
            state = {k: v.clone() for k, v in model.state_dict().items()}
            for ext in EXTENSION_METHODS:
                for mult in cfg.extension_multipliers:
                    T = mult * L
                    factors.setdefault(ext, {})[str(T)] = extension_factor(ext, T, cfg)
                    rope_extension(model, extension_scaling(ext, T, cfg))
                    score(model, {k: v["no_fine_tune"] for k, v in ext_raw.items()},
                          ext, T, mult in cfg.extension_sliding_multipliers)
                rope_extension(model, None)
            done(f"rope seed {seed}: extensions at inference")
            ft_cfg = replace(cfg, batch_size=cfg.fine_tune_batch_size,
                             reference_methods=())
            for ext in cfg.fine_tune_methods:
                for mult in cfg.fine_tune_multipliers:
                    T = mult * L
                    factors.setdefault(f"{ext}, fine-tuned", {})[str(T)] = (
                        extension_factor(ext, T, cfg))
                    rope_extension(model, extension_scaling(ext, T, cfg))
                    t0 = time.process_time()
                    train_lm("rope", seed, ft_cfg, train_data, model=model, length=T,
                             steps=cfg.fine_tune_steps, lr=cfg.fine_tune_lr)
                    clock("fine_tune", t0)
                    score(model, {k: v["fine_tune"] for k, v in ext_raw.items()},
                          ext, T, mult in cfg.extension_sliding_multipliers)
                    model.load_state_dict(state)
                    rope_extension(model, None)
                done(f"rope seed {seed}: fine-tuned {ext}")
    R = cfg.reference_multiplier
    ref_cfg = replace(cfg, train_length=R * L, batch_size=cfg.batch_size // R,
                      reference_methods=())
    for method in cfg.reference_methods:
        for seed in cfg.seeds:
            c0 = time.process_time()
            model, losses = train_lm(method, seed, ref_cfg, train_data)
            clock("reference", c0)
            for T in lengths:
                score(model, ref_raw, method, T, False)
            done(f"reference {method} at {R * L}, seed {seed}: final train loss "
                 f"{losses[-1]:.3f}")

    def summarise(d):
        out = {}
        for m, per in d.items():
            out[m] = {}
            for T, cell in per.items():
                c = contrast(cell, replicates=cfg.bootstrap, seed=cfg.bootstrap_seed)
                values = [math.exp(sum(row) / sum(cell["counts"]))
                          for row in cell["blocks"]]
                out[m][T] = {"values": values, "mean": c["ratio"], "low": c["low"],
                             "high": c["high"], "n": len(values),
                             "sd_seed": c["sd_seed"], "se_text": c["se_text"],
                             **cell}
        return out

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
        "sliding_stride_at_L": cfg.stride_at_L,
        "block_tokens": block,
        "static_ntk_factor": cfg.static_factor,
        "reference_length": R * L,
        "interval": (
            "95% interval of the log-perplexity, exponentiated: seed variance "
            "(Student t over seeds) plus text-sampling variance (bootstrap over "
            f"blocks of {block} validation tokens, {cfg.bootstrap} resamples), "
            "Welch-Satterthwaite degrees of freedom; lower bound clipped at "
            "log-perplexity 0"),
        "factors": factors,
        "perplexity": {k: summarise(v) for k, v in raw.items()},
        "extension": {k: {f: summarise(v) for f, v in per.items()}
                      for k, per in ext_raw.items()},
        "reference": {k: summarise(v) for k, v in ref_raw.items()},
        "timing": {
            "cpu_seconds": cpu,
            "user_seconds": ru1.ru_utime - ru0.ru_utime,
            "system_seconds": ru1.ru_stime - ru0.ru_stime,
            "wall_seconds": time.perf_counter() - wall0,
            "torch_threads": torch.get_num_threads(),
            "load_average": list(os.getloadavg()),
            "cpu_seconds_by_phase": phase,
            "train_cpu_seconds": train_time,
        },
    }


# Where ``course lab --lm`` writes the record and chapter 12 reads it: package data, so
# the chapter also runs where ``course_lib`` is installed from a wheel (Colab).
RESULTS_PATH = Path(__file__).resolve().parents[1] / "data" / "lm_extrapolation.json"


def merge_records(records: list[dict]) -> dict:
    """One record from runs of the same settings over disjoint sets of methods.

    ``course lab --lm --methods ...`` runs part of the experiment (e.g. one process
    per group of methods, to use several cores); every cell depends only on its own
    method's models, so the parts merge into the record one run would write. The
    parts must share the code, the corpus and every setting but ``methods`` and
    ``reference_methods``; the merged timing adds the CPU times and keeps the
    longest wall time.
    """
    if not records:
        fail("merge_records", "records must not be empty")
    first = records[0]
    free = ("methods", "reference_methods")
    for r in records[1:]:
        for key in ("code_sha256", "corpus_sha256", "train_tokens", "eval_tokens",
                    "seeds", "block_tokens"):
            if r[key] != first[key]:
                fail("merge_records", f"the parts differ in {key}")
        a = {k: v for k, v in r["settings"].items() if k not in free}
        b = {k: v for k, v in first["settings"].items() if k not in free}
        if a != b:
            fail("merge_records", "the parts differ in their settings: "
                 + ", ".join(k for k in a if a[k] != b.get(k)))
    methods = [m for m in LM_METHODS
               if any(m in r["settings"]["methods"] for r in records)]
    refs = [m for m in LM_METHODS
            if any(m in r["settings"]["reference_methods"] for r in records)]
    taken = [m for r in records for m in r["settings"]["methods"]]
    taken += [f"ref {m}" for r in records for m in r["settings"]["reference_methods"]]
    if len(taken) != len(set(taken)):
        fail("merge_records", "a method is in more than one part")
    out = {k: v for k, v in first.items()
           if k not in ("perplexity", "extension", "reference", "factors", "timing")}
    out["settings"] = {**first["settings"], "methods": methods,
                       "reference_methods": refs}
    out["factors"] = {}
    out["perplexity"], out["reference"] = {}, {}
    out["extension"] = {}
    for kind in first["perplexity"]:
        out["perplexity"][kind] = {m: c for m in LM_METHODS for r in records
                                   for mm, c in r["perplexity"][kind].items()
                                   if mm == m}
        out["reference"][kind] = {m: c for m in LM_METHODS for r in records
                                  for mm, c in r["reference"][kind].items()
                                  if mm == m}
        out["extension"][kind] = {}
        for stage in first["extension"][kind]:
            out["extension"][kind][stage] = {}
            for r in records:
                out["extension"][kind][stage].update(r["extension"][kind][stage])
    for r in records:
        out["factors"].update(r["factors"])
    timing = {"cpu_seconds": 0.0, "user_seconds": 0.0, "system_seconds": 0.0,
              "wall_seconds": 0.0, "cpu_seconds_by_phase": {},
              "train_cpu_seconds": {}, "parts": len(records)}
    for r in records:
        t = r["timing"]
        for key in ("cpu_seconds", "user_seconds", "system_seconds"):
            timing[key] += t[key]
        timing["wall_seconds"] = max(timing["wall_seconds"], t["wall_seconds"])
        for ph, v in t["cpu_seconds_by_phase"].items():
            timing["cpu_seconds_by_phase"][ph] = (
                timing["cpu_seconds_by_phase"].get(ph, 0.0) + v)
        timing["train_cpu_seconds"].update(t["train_cpu_seconds"])
        timing["torch_threads"] = t["torch_threads"]
        timing["load_average"] = t["load_average"]
    out["timing"] = timing
    return out


def lm_main(argv=None) -> int:
    """``python -m course_lib.experiments --lm`` / ``course lab --lm``: run, save.

    ``--methods`` and ``--reference-methods`` run a part of the experiment;
    ``--merge A.json B.json ...`` writes the record of the parts
    (:func:`merge_records`) to ``--out``.
    """
    import argparse
    import json

    p = argparse.ArgumentParser(prog="course lab --lm")
    p.add_argument("--lm", action="store_true", help="run this experiment")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--methods", nargs="+", default=None,
                   help="only these methods (a part of the experiment)")
    p.add_argument("--reference-methods", nargs="*", default=None,
                   help="only these reference models (none: no value)")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="merge the records of parts into --out")
    args = p.parse_args(argv)
    out = args.out or RESULTS_PATH
    if args.merge:
        try:
            record = merge_records([json.loads(f.read_text()) for f in args.merge])
        except (OSError, ValueError, KeyError) as exc:
            print(f"course lab --lm: {exc}")
            return 2
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {out} from {len(args.merge)} parts")
        return 0
    changes = {}
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.seeds is not None:
        changes["seeds"] = tuple(args.seeds)
    if args.methods is not None:
        changes["methods"] = tuple(args.methods)
    if args.reference_methods is not None:
        changes["reference_methods"] = tuple(args.reference_methods)
    torch.set_num_threads(args.threads)
    try:
        cfg = LMConfig(**changes)
    except (TypeError, ValueError) as exc:
        print(f"course lab --lm: {exc}")
        return 2
    record = run_lm_experiment(cfg, log=lambda msg: print(msg, flush=True),
                               checkpoint=out.with_suffix(".partial.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    t = record["timing"]
    print(f"wrote {out}; wall {t['wall_seconds']:.0f} s, CPU {t['cpu_seconds']:.0f} s")
    return 0
