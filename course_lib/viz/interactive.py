r"""Data of the book's interactive figures, computed by ``course_lib`` at build time.

The static book has no kernel, so a figure the reader changes with sliders cannot call
the library. Instead every slider takes its values from a short list, and this module
computes the figure's data for *every* combination of those values with the library's
own functions. The Sphinx extension ``book/_ext/interactive_figures.py`` embeds the
result as JSON next to the sliders, and ``book/_static/interactive/figures.js`` only
looks the current combination up and draws it: the browser runs no copy of an
algorithm, so what is drawn equals the library by construction (``tests/
test_interactive_figures.py`` reads the drawn values back and compares them), and the
class edition hands out numbers, never code of a graded function.

Each ``*_figure_data()`` returns a JSON-ready dict::

    {"kind": ..., "sliders": [{"name", "label", "values", "default"}, ...],
     "data": {key: ...}}

where ``key`` joins the slider values' indices with ``","`` (``"2,10"``: third value of
the first slider, eleventh of the second). Values stored as float32 by the library are
written with the shortest decimal that reads back as the same float32
(:func:`float32_json`); float64 values with Python's ``repr`` (exact).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import torch

from course_lib.alibi import alibi_bias, alibi_slopes
from course_lib.relative import t5_relative_position_bucket
from course_lib.rope import rope_angles, rope_frequencies
from course_lib.rope_scaling import (
    rope_scaled_frequencies,
    yarn_correction_range,
    yarn_ramp,
)

__all__ = [
    "FIGURES",
    "ROPE_HEAD_DIM",
    "ROPE_BASES",
    "ROPE_POSITIONS",
    "ALIBI_HEADS",
    "ALIBI_LEN",
    "T5_NUM_BUCKETS",
    "T5_MAX_DISTANCES",
    "T5_SPAN",
    "YARN_BETA_FAST",
    "YARN_CLASS_BETA_FAST",
    "YARN_BETA_SLOW",
    "YARN_FACTORS",
    "YARN_HEADS",
    "YARN_TRAINING_LENGTH",
    "alibi_figure_data",
    "figure_data",
    "figure_json",
    "float32_json",
    "rope_figure_data",
    "t5_figure_data",
    "yarn_class_figure_data",
    "yarn_figure_data",
]

# RoPE (chapter 4): a head of 14 dimensions, 7 pairs; the bases of the chapter's
# section "The base" among them (10 000 is the paper's, the default). 14, not 16:
# the angles at position 1 are the frequencies, and exercise 4 grades
# rope_frequencies for head sizes 2, 4, 6, 8, 10, 16, 64 and 128 (ex04's checks), so
# a 16-dimensional head (or 12, whose every other pair is the 6-dimensional answer)
# would put a graded answer into the page.
ROPE_HEAD_DIM = 14
ROPE_BASES = (100.0, 1_000.0, 10_000.0, 100_000.0, 500_000.0, 1_000_000.0)
ROPE_POSITIONS = tuple(range(0, 101))

# ALiBi (chapter 5): 1 to 16 heads, causal bias over 10 positions, as the chapter's
# figure fig "The idea in a picture" (8 heads, 10 positions, causal) by default.
ALIBI_HEADS = tuple(range(1, 17))
ALIBI_LEN = 10

# T5 (chapter 6): the chapter's figure uses 32 buckets, max_distance 128, span 160.
# Not 200 or more: ex06 grades the buckets of arange(-200, 201) at 32 buckets and
# max_distance 128 (its public case; arange(-300, 301) with the default arguments), and
# a wider span would hold that answer as a contiguous run.
T5_NUM_BUCKETS = (4, 8, 16, 32, 64)
T5_MAX_DISTANCES = (16, 32, 64, 128, 256)
T5_SPAN = 160

# YaRN (chapter 11): L = 2048, d = 128, b = 10 000, s = 4, beta 32 and 1 by default.
YARN_BETA_FAST = (8.0, 16.0, 32.0, 64.0)
YARN_BETA_SLOW = (0.5, 1.0, 2.0, 4.0)
YARN_FACTORS = (2.0, 4.0, 8.0, 16.0)
YARN_HEADS = ((64, 10_000.0), (128, 10_000.0), (128, 500_000.0))  # (head_dim, base)
YARN_TRAINING_LENGTH = 2048
# The class edition's YaRN figure (chapter 11): no frequencies and no attention factor
# (rope_frequencies and yarn_attention_factor are graded, ex04 and ex11), the slow-down
# of each pair instead; beta_fast without 16, since ex11's hidden correction-range
# case (16, 4, d = 128, base 10 000, L = 2048) would otherwise be one of its settings
# (tests/test_claims_ch11.py checks the grid against the graders' calls).
YARN_CLASS_BETA_FAST = (8.0, 32.0, 64.0)


def float32_json(values: torch.Tensor) -> list[float]:
    """Float32 values as the shortest decimals that read back as the same float32.

    ``float(np.float32(x))`` of such a decimal is exact, so the JSON is about half
    as long as writing the float64 expansion of each float32.

    >>> float32_json(torch.tensor([0.1, 2.0 ** -0.5]))
    [0.1, 0.70710677]
    """
    flat = values.detach().to(torch.float32).flatten().numpy()
    return [float(str(v)) for v in flat]  # numpy prints float32 shortest-first


def _f64(values: torch.Tensor) -> list[float]:
    return [float(v) for v in values.detach().to(torch.float64).flatten().tolist()]


def _slider(name: str, label: str, values, default) -> dict:
    values = list(values)
    if default not in values:
        raise ValueError(f"slider {name}: default {default!r} is not one of its values")
    return {"name": name, "label": label, "values": values,
            "default": values.index(default)}


def _grid(sliders: list[dict]):
    """Every combination of slider indices with its key and values."""
    ranges = [range(len(s["values"])) for s in sliders]
    for idx in itertools.product(*ranges):
        key = ",".join(map(str, idx))
        yield key, [s["values"][i] for s, i in zip(sliders, idx, strict=True)]


def rope_figure_data() -> dict:
    """Angles :math:`m\\theta_i` (float64, radians) of the 7 pairs of a 14-dim head."""
    sliders = [
        _slider("base", "base b", ROPE_BASES, 10_000.0),
        _slider("position", "position m", ROPE_POSITIONS, 10),
    ]
    positions = torch.tensor(ROPE_POSITIONS)
    data = {}
    for b_index, base in enumerate(ROPE_BASES):
        angles = rope_angles(positions, ROPE_HEAD_DIM, base=base)  # (P, d/2)
        for p_index in range(len(ROPE_POSITIONS)):
            data[f"{b_index},{p_index}"] = {"angle": _f64(angles[p_index])}
    frequencies = {
        str(i): _f64(rope_frequencies(ROPE_HEAD_DIM, base=b, dtype=torch.float64))
        for i, b in enumerate(ROPE_BASES)
    }
    return {"kind": "rope", "sliders": sliders, "data": data,
            "head_dim": ROPE_HEAD_DIM, "frequencies": frequencies}


def alibi_figure_data() -> dict:
    """Slopes (float32), causal bias of every head (float32; ``None``: masked)."""
    sliders = [_slider("n_heads", "heads", ALIBI_HEADS, 8)]
    data = {}
    for key, (n,) in _grid(sliders):
        bias = alibi_bias(n, ALIBI_LEN, causal=True)  # (H, S, S), -inf above diagonal
        finite = torch.isfinite(bias)
        if not bool((bias[~finite] < 0).all()):
            raise ValueError("alibi_bias: a non-finite entry that is not -inf")
        values = float32_json(torch.where(finite, bias, torch.zeros_like(bias)))
        flat = finite.flatten().tolist()
        cells = [v if ok else None for v, ok in zip(values, flat, strict=True)]
        per_head = ALIBI_LEN * ALIBI_LEN
        data[key] = {
            "slopes": float32_json(alibi_slopes(n)),
            "bias": [cells[h * per_head:(h + 1) * per_head] for h in range(n)],
        }
    return {"kind": "alibi", "sliders": sliders, "data": data, "length": ALIBI_LEN}


def t5_figure_data() -> dict:
    """Bucket of every relative position in ``[-span, span]``, both directions."""
    sliders = [
        _slider("num_buckets", "num_buckets", T5_NUM_BUCKETS, 32),
        _slider("max_distance", "max_distance", T5_MAX_DISTANCES, 128),
    ]
    delta = torch.arange(-T5_SPAN, T5_SPAN + 1)
    data = {}
    for key, (n, dist) in _grid(sliders):
        entry = {}
        for name, bidirectional in (("bidirectional", True), ("causal", False)):
            exact = (n // 2 if bidirectional else n) // 2
            if dist <= exact:  # the library refuses it; the figure says so
                entry[name] = None
                continue
            buckets = t5_relative_position_bucket(
                delta, bidirectional=bidirectional, num_buckets=n, max_distance=dist
            )
            entry[name] = [int(b) for b in buckets.tolist()]
        data[key] = entry
    return {"kind": "t5", "sliders": sliders, "data": data, "span": T5_SPAN}


def _yarn_settings(beta_fast: list) -> tuple[list[dict], Iterator[tuple]]:
    """The YaRN figures' sliders (``beta_fast`` values, then beta_slow, factor and
    head) and, per setting, ``(key, fast, slow, s, d, base, low, high, ramp)``: the
    correction range of YaRN's ramp and the ramp itself (float64)."""
    heads = [f"d={d}, b={b:,.0f}" for d, b in YARN_HEADS]
    sliders = [
        _slider("beta_fast", "beta_fast", beta_fast, 32.0),
        _slider("beta_slow", "beta_slow", YARN_BETA_SLOW, 1.0),
        _slider("factor", "factor s", YARN_FACTORS, 4.0),
        _slider("head", "head_dim, base", heads, heads[1]),
    ]

    def settings() -> Iterator[tuple]:
        for key, (fast, slow, s, head) in _grid(sliders):
            d, base = YARN_HEADS[heads.index(head)]
            low, high = yarn_correction_range(fast, slow, d, base,
                                              YARN_TRAINING_LENGTH)
            ramp = _f64(yarn_ramp(low, high, d // 2))
            yield key, fast, slow, s, d, base, low, high, ramp

    return sliders, settings()


def yarn_figure_data() -> dict:
    """YaRN's ramp (float64) and the scaled frequencies (float32) per setting.

    ``theta[h]`` holds the unscaled frequencies (float32) of head choice ``h``.
    """
    sliders, settings = _yarn_settings(YARN_BETA_FAST)
    L = YARN_TRAINING_LENGTH
    data = {}
    for key, fast, slow, s, d, base, low, high, ramp in settings:
        inv, attention = rope_scaled_frequencies(
            d, base=base, method="yarn", factor=s, original_max_position=L,
            beta_fast=fast, beta_slow=slow,
        )
        data[key] = {"low": low, "high": high, "ramp": ramp,
                     "scaled": float32_json(inv), "attention": attention}
    theta = {str(i): float32_json(rope_frequencies(d, base=b))
             for i, (d, b) in enumerate(YARN_HEADS)}
    return {"kind": "yarn", "sliders": sliders, "data": data,
            "training_length": L, "theta": theta}


def yarn_class_figure_data() -> dict:
    r"""The class edition's YaRN figure: the ramp (float64) and the slow-down
    :math:`\theta_i/\theta_i'` of each pair (float64) per setting, without the
    frequencies themselves or the attention factor (both graded answers)."""
    sliders, settings = _yarn_settings(YARN_CLASS_BETA_FAST)
    L = YARN_TRAINING_LENGTH
    data = {}
    for key, fast, slow, s, d, base, low, high, ramp in settings:
        inv, _ = rope_scaled_frequencies(
            d, base=base, method="yarn", factor=s, original_max_position=L,
            beta_fast=fast, beta_slow=slow, dtype=torch.float64,
        )
        theta = rope_frequencies(d, base=base, dtype=torch.float64)
        data[key] = {"low": low, "high": high, "ramp": ramp,
                     "slowdown": _f64(theta / inv)}
    return {"kind": "yarn_class", "sliders": sliders, "data": data,
            "training_length": L}


FIGURES = {
    "rope": rope_figure_data,
    "alibi": alibi_figure_data,
    "t5": t5_figure_data,
    "yarn": yarn_figure_data,
    "yarn_class": yarn_class_figure_data,
}


def figure_data(kind: str) -> dict:
    """The data of one interactive figure (``rope``, ``alibi``, ``t5``, ``yarn`` or
    ``yarn_class``)."""
    if kind not in FIGURES:
        raise ValueError(
            f"unknown interactive figure {kind!r}; choose one of "
            f"{', '.join(FIGURES)}"
        )
    return FIGURES[kind]()


def figure_json(kind: str) -> str:
    """:func:`figure_data` as compact JSON, safe inside an HTML ``<script>`` element."""
    text = json.dumps(figure_data(kind), separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/")
