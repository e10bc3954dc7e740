"""Tables and computed statements of chapter 12, read from the stored LM record.

Every number and every verdict that chapter 12 states comes from here, computed from
``course_lib/data/lm_extrapolation.json`` when the page is built, so a re-run of
``course lab --lm`` cannot leave the text stale. A comparison is a ratio of
perplexities with the interval of :func:`course_lib.experiments.lm.contrast` (seeds
and text sampling), paired over seeds (every model of the chapter is trained with the
same seeds, so seed ``k`` of one cell is compared with seed ``k`` of the other) and
over the text (the same resampled blocks for both cells). Its verdict uses the
equivalence margin :data:`MARGIN`: ``"equivalent"`` when the whole interval lies
within ``[1/MARGIN, MARGIN]``, ``"lower"`` or ``"higher"`` only when it lies wholly
beyond the margin (below ``1/MARGIN`` or above ``MARGIN``: a difference larger than
the margin), else ``"undecided"``; an interval that excludes 1 but reaches inside the
margin is undecided (its direction is clear, not whether it exceeds the margin).
Two cells that both lie at or above the unigram perplexity
(:func:`unigram_perplexity`, a model that ignores its context) are never called
equivalent: their verdict is ``"collapsed"``. The sliding-window comparisons that ask
whether context beyond ``L`` helps are made only for the methods in
:data:`DISTANCE_ONLY` (see there). Two cells are
compared on the text blocks both of them scored (with non-overlapping windows the
last, short block may hold no whole window at long lengths), so a ratio can differ
slightly from the ratio of the two cells' perplexities in the tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib.experiments.lm import contrast

__all__ = [
    "LABEL",
    "MARGIN",
    "ABSOLUTE",
    "DISTANCE_ONLY",
    "VERDICTS",
    "unigram_perplexity",
    "Comparison",
    "cell",
    "compare",
    "verdict",
    "fmt_cell",
    "perplexity_table",
    "extension_table",
    "reference_table",
    "comparisons",
    "comparison_table",
    "load_dynamic",
    "dynamic_comparisons",
    "all_means",
]

LABEL: dict[str, str] = {
    "none": "NoPE", "sinusoidal": "sinusoidal", "learned": "learned abs.",
    "rope": "RoPE", "rope+yarn": "RoPE + YaRN", "t5": "T5 bias", "alibi": "ALiBi",
    "linear": "position interpolation (PI)", "ntk": "static NTK",
    "dynamic": "NTK at s = T/L (dynamic NTK's factor for a T-token prompt)",
    "yarn": "YaRN", "llama3": "Llama 3.1 bands",
    "pi+t": "PI with YaRN's temperature", "ramp": "YaRN's ramp, no temperature",
    "plain": "plain RoPE (control)",
}

"""Display names of the methods and extension methods."""

MARGIN = 1.02
"""Equivalence margin of chapter 12: two perplexities within 2 % of each other (a
ratio whose whole interval lies in ``[1/1.02, 1.02]``) count as equivalent, and a
ratio counts as lower or higher only when its whole interval lies beyond the margin.
The margin was fixed before the verdicts of the re-run were computed."""

VERDICTS = ("lower", "higher", "equivalent", "undecided", "collapsed")
"""Every verdict :func:`verdict` and :func:`comparisons` can give."""

ABSOLUTE = ("sinusoidal", "learned")
"""Methods whose encoding depends on the absolute position (added to the token
embeddings). Every window of the sliding window restarts at position 0, so a token
scored in a window of ``T`` tokens with stride ``S`` sits at position ``T - S ..
T - 1``: past ``L`` every scored token, and the nearest tokens of its context, are at
positions never trained, and prepending context re-encodes the near context too. The
sliding window then measures positions beyond ``L`` as much as context beyond ``L``
(Press et al. 2022, appendix B.2, report the sinusoidal model's sliding-window
perplexity "explodes" past ``L``, Figure 11 and Table 13, and draw their conclusion
about context for ALiBi and the T5 bias only)."""

DISTANCE_ONLY = ("rope", "t5", "alibi")
"""Methods whose attention depends on the tokens and their distances only, by one
rule for every length (RoPE: the score of query ``m`` and key ``n`` depends on
``m - n``; T5 and ALiBi: a bias of the distance). Prepending context to a window
leaves the encoding of the near context unchanged, so a sliding-window score at
``2L`` against ``L`` (both scoring tokens with at least ``L``
tokens of context, the one at ``L`` with a short stride) isolates what the extra,
distant context does (Press et al. 2022, appendix B.1 and B.2). Not here: RoPE +
YaRN, whose factor ``s = T/L`` changes with the length (``2L`` against ``L``
compares two rescalings, and their temperatures, as well as two contexts), and NoPE,
which has no position signal of its own but infers positions from the length of the
prefix under the causal mask (Haviv et al. 2022), so past ``L`` its implicit
positions are untrained, as the absolute methods' are."""


def cell(record: dict, section: str, kind: str, method: str, length: int,
         stage: str | None = None) -> dict:
    """One stored cell: ``section`` is ``"perplexity"``, ``"extension"`` (with
    ``stage`` ``"no_fine_tune"`` or ``"fine_tune"``) or ``"reference"``."""
    d = record[section][kind]
    if stage is not None:
        d = d[stage]
    return d[method][str(length)]


def verdict(c: dict, margin: float = MARGIN) -> str:
    """The verdict of a ratio ``c`` (``{"low", "high"}``) with the margin.

    ``"equivalent"`` if the interval lies within ``[1/margin, margin]``;
    ``"lower"`` if it lies wholly below ``1/margin``, ``"higher"`` if wholly above
    ``margin`` (a difference larger than the margin); else ``"undecided"``, which
    includes an interval that excludes 1 but reaches inside the margin.

    >>> verdict({"low": 0.99, "high": 1.01}), verdict({"low": 0.9, "high": 0.97})
    ('equivalent', 'lower')
    >>> verdict({"low": 0.97, "high": 1.05}), verdict({"low": 1.007, "high": 1.025})
    ('undecided', 'undecided')
    """
    if not margin > 1:
        raise ValueError(f"verdict: margin must be above 1, got {margin!r}")
    if c["low"] > c["high"]:
        raise ValueError(f"verdict: low must not exceed high, got {c}")
    if 1 / margin < c["low"] and c["high"] < margin:
        return "equivalent"
    if c["high"] < 1 / margin:
        return "lower"
    if c["low"] > margin:
        return "higher"
    return "undecided"


def unigram_perplexity() -> float:
    """Per-byte perplexity, on the validation split, of the byte frequencies of the
    training split (add-one smoothing over the 128 ASCII bytes): the score of a model
    that ignores its context. A cell at or above it has collapsed."""
    from course_lib.experiments.lm import encode, load_corpus

    _, _, (train_text, val_text) = load_corpus()
    train, val = encode(train_text), encode(val_text)
    freq = torch.bincount(train, minlength=128).double() + 1.0
    logp = (freq / freq.sum()).log()
    return math.exp(-float(logp[val[1:]].mean()))


@dataclass(frozen=True)
class Comparison:
    """A ratio ``a / b`` of two cells' perplexities, its interval and verdict."""

    key: str
    text: str
    ratio: float
    low: float
    high: float
    verdict: str
    paired: bool
    se_text: float = 0.0


def compare(record: dict, key: str, text: str, a: dict, b: dict, *,
            paired: bool = True, confidence: float = 0.95,
            floor: float | None = None) -> Comparison:
    """:func:`~course_lib.experiments.lm.contrast` of two cells, as a Comparison.

    ``paired=True`` (the chapter's choice for every comparison): seed ``k`` of ``a``
    against seed ``k`` of ``b``, which share the seed (initial weights where the
    architectures match, and the order of the training batches). ``floor``: the
    unigram perplexity; two cells whose geometric means both reach it are
    ``"collapsed"``, never equivalent.
    """
    boot = record["settings"]
    c = contrast(a, b, paired=paired, replicates=boot["bootstrap"],
                 seed=boot["bootstrap_seed"], confidence=confidence)
    word = verdict(c)
    if floor is not None and a["mean"] >= floor and b["mean"] >= floor:
        word = "collapsed"
    return Comparison(key, text, c["ratio"], c["low"], c["high"], word, paired,
                      c["se_text"])


def fmt_cell(c: dict) -> str:
    """``mean [low, high]`` with two decimals."""
    return f"{c['mean']:.2f} [{c['low']:.2f}, {c['high']:.2f}]"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def perplexity_table(record: dict, kind: str) -> str:
    """Markdown table of the main models: one row per method, one column per length."""
    per_method = record["perplexity"][kind]
    lengths = sorted({int(T) for per in per_method.values() for T in per})
    rows = [[LABEL[m]] + [fmt_cell(per[str(T)]) for T in lengths]
            for m, per in per_method.items()]
    return _table(["method"] + [f"T = {T}" for T in lengths], rows)


def extension_table(record: dict, kind: str) -> str:
    """Markdown table of the RoPE extensions at each length, with the factor ``s``
    each method used there (``factors`` in the record)."""
    L = record["settings"]["train_length"]
    ext = record["extension"][kind]
    lengths = sorted({int(T) for per in ext["no_fine_tune"].values() for T in per})
    plain = record["perplexity"][kind]["rope"]
    rows = [["plain RoPE (trained at L), s = 1"] + [
        fmt_cell(plain[str(T)]) if str(T) in plain else "not run" for T in lengths]]
    for stage, tag in (("no_fine_tune", "no fine-tune"), ("fine_tune", "fine-tuned")):
        for m, per in ext[stage].items():
            fac = record["factors"][m if stage == "no_fine_tune"
                                    else f"{m}, fine-tuned"]
            rows.append([f"{LABEL[m]}, {tag}"] + [
                f"{fmt_cell(per[str(T)])}, s = {fac[str(T)]:g}" if str(T) in per
                else "not run" for T in lengths])
    return _table(["method"] + [f"T = {T} ({T // L}L)" for T in lengths], rows)


def reference_table(record: dict, kind: str) -> str:
    """Markdown table of the reference models trained at ``reference_length``."""
    ref = record["reference"][kind]
    lengths = sorted({int(T) for per in ref.values() for T in per})
    rows = [[f"{LABEL[m]}, trained at {record['reference_length']}"]
            + [fmt_cell(per[str(T)]) for T in lengths] for m, per in ref.items()]
    return _table(["model"] + [f"T = {T}" for T in lengths], rows)


def comparisons(record: dict, *, confidence: float = 0.95,
                floor: float | None = None) -> dict[str, Comparison]:
    """Every comparison chapter 12 states, by key.

    Keys: ``rise/<kind>/<method>`` (the model at the longest length scored that
    way over itself at ``L``), ``gain2/sliding/<method>`` (sliding window at ``2L``
    over ``L``),
    ``top/<a>/<b>`` and ``atL/<a>/<b>`` (two methods, non-overlapping windows),
    ``ref/...`` (against the reference models), ``ext/<method>/<T>`` (an extension
    at inference against plain RoPE at ``T``), ``ft/<method>/<T>`` (a fine-tuned
    extension against the control fine-tuned the same steps),
    ``ftL/<method>/<T>`` (fine-tuned at ``T`` against plain RoPE at ``L``),
    ``ntk/<T>`` (static NTK against NTK at ``s = T/L``),
    ``gain4/sliding/<method>`` (sliding window at ``4L`` over ``2L``, both with
    stride ``L``), ``abl/<effect>/<T>`` (the ablation of YaRN's temperature and
    ramp at inference). Every comparison is paired over seeds. ``gain2`` and
    ``gain4`` are made for the :data:`DISTANCE_ONLY` methods only; ``rise/sliding``
    for an :data:`ABSOLUTE` method says so in its text (after the first window, its
    scored tokens all sit at positions from the longest length minus ``L`` on). ``confidence`` sets every interval's level (the
    chapter also recomputes them at a family-wise level); ``floor`` as in
    :func:`compare`.
    """
    s = record["settings"]
    L = s["train_length"]
    top = max(s["multipliers"]) * L
    main = record["perplexity"]
    out: dict[str, Comparison] = {}

    def add(key, text, a, b):
        out[key] = compare(record, key, text, a, b, confidence=confidence,
                           floor=floor)

    for kind in ("nonoverlap", "sliding"):
        for m, per in main[kind].items():
            end = max(int(T) for T in per)
            note = (f"; scored positions {end - L}..{end - 1}, untrained"
                    if kind == "sliding" and m in ABSOLUTE else "")
            add(f"rise/{kind}/{m}", f"{LABEL[m]}: T = {end} over T = {L} ({kind}"
                f"{note})", per[str(end)], per[str(L)])
    short = record.get("sliding_stride_at_L", L)
    for m, per in main["sliding"].items():
        if m not in DISTANCE_ONLY:
            continue
        if str(2 * L) in per:
            add(f"gain2/sliding/{m}", f"{LABEL[m]}: T = {2 * L} (stride {L}) over "
                f"T = {L} (stride {short}), sliding", per[str(2 * L)], per[str(L)])
        if str(2 * L) in per and str(4 * L) in per:
            add(f"gain4/sliding/{m}", f"{LABEL[m]}: T = {4 * L} over T = {2 * L} "
                f"(sliding, stride {L})", per[str(4 * L)], per[str(2 * L)])
    pairs = [("alibi", "t5"), ("alibi", "sinusoidal"), ("alibi", "rope"),
             ("t5", "rope"), ("t5", "sinusoidal"), ("alibi", "learned"),
             ("alibi", "none")]
    for a, b in pairs:
        if a in main["nonoverlap"] and b in main["nonoverlap"]:
            add(f"top/{a}/{b}", f"{LABEL[a]} over {LABEL[b]} at T = {top}",
                main["nonoverlap"][a][str(top)], main["nonoverlap"][b][str(top)])
    for a in main["nonoverlap"]:
        if a != "rope" and "rope" in main["nonoverlap"] and a != "rope+yarn":
            add(f"atL/{a}/rope", f"{LABEL[a]} over RoPE at T = {L}",
                main["nonoverlap"][a][str(L)], main["nonoverlap"]["rope"][str(L)])
    if "alibi" in main["nonoverlap"] and "sinusoidal" in main["nonoverlap"]:
        add("atL/alibi/sinusoidal", f"ALiBi over sinusoidal at T = {L}",
            main["nonoverlap"]["alibi"][str(L)],
            main["nonoverlap"]["sinusoidal"][str(L)])
    R = record.get("reference_length")
    ref = record.get("reference", {}).get("nonoverlap", {})
    if R and ref:
        for m in ref:
            add(f"ref/{m}/own", f"{LABEL[m]} trained at {R} over {LABEL[m]} trained "
                f"at {L}, both at T = {R}", ref[m][str(R)],
                main["nonoverlap"][m][str(R)])
            add(f"refL/{m}", f"{LABEL[m]} trained at {R}, at T = {R}, over "
                f"{LABEL[m]} trained at {L}, at T = {L}", ref[m][str(R)],
                main["nonoverlap"][m][str(L)])
        if "sinusoidal" in ref and "alibi" in main["nonoverlap"]:
            add("ref/alibi/sinusoidal", f"ALiBi trained at {L} over sinusoidal trained "
                f"at {R}, both at T = {R}", main["nonoverlap"]["alibi"][str(R)],
                ref["sinusoidal"][str(R)])
        if "rope" in ref:
            ext = record["extension"]["nonoverlap"]
            for stage in ("no_fine_tune", "fine_tune"):
                for m, per in ext[stage].items():
                    if str(R) in per:
                        tag = "" if stage == "no_fine_tune" else ", fine-tuned"
                        add(f"ref/rope/{m}{tag}", f"{LABEL[m]}{tag} over RoPE trained "
                            f"at {R}, at T = {R}", per[str(R)], ref["rope"][str(R)])
    ext = record["extension"]["nonoverlap"]
    for m, per in ext["no_fine_tune"].items():
        for T in per:
            add(f"ext/{m}/{T}", f"{LABEL[m]} over plain RoPE at T = {T}", per[T],
                main["nonoverlap"]["rope"][T])
    if "ntk" in ext["no_fine_tune"] and "dynamic" in ext["no_fine_tune"]:
        for T, c in ext["no_fine_tune"]["ntk"].items():
            if record["factors"]["ntk"][T] == record["factors"]["dynamic"][T]:
                continue  # the same rotation: nothing to compare
            add(f"ntk/{T}", f"static NTK over NTK at s = T/L, at T = {T}", c,
                ext["no_fine_tune"]["dynamic"][T])
    effects = [("temp-noramp", "pi+t", "linear", "temperature, without the ramp"),
               ("temp-ramp", "yarn", "ramp", "temperature, with the ramp"),
               ("ramp-notemp", "ramp", "linear", "ramp, without the temperature"),
               ("ramp-temp", "yarn", "pi+t", "ramp, with the temperature")]
    nf = ext["no_fine_tune"]
    for name, a, b, what in effects:
        if a in nf and b in nf:
            for T in nf[a]:
                if T in nf[b]:
                    add(f"abl/{name}/{T}", f"{what}: {LABEL[a]} over {LABEL[b]} at "
                        f"T = {T}", nf[a][T], nf[b][T])
    ft = ext["fine_tune"]
    for m, per in ft.items():
        for T in per:
            if m != "plain" and "plain" in ft:
                add(f"ft/{m}/{T}", f"{LABEL[m]}, fine-tuned, over the control at "
                    f"T = {T}", per[T], ft["plain"][T])
            add(f"ftL/{m}/{T}", f"{LABEL[m]}, fine-tuned, at T = {T} over plain RoPE "
                f"at T = {L}", per[T], main["nonoverlap"]["rope"][str(L)])
    return out


def comparison_table(comps: dict[str, Comparison], keys: list[str],
                     interval: str = "95 % interval") -> str:
    """Markdown table of the comparisons ``keys``: ratio, interval, verdict;
    ``interval`` heads the interval column (its level)."""
    rows = [[comps[k].text, f"{comps[k].ratio:.3f}",
             f"[{comps[k].low:.3f}, {comps[k].high:.3f}]", comps[k].verdict]
            for k in keys if k in comps]
    return _table(["perplexity ratio", "ratio", interval, "verdict"], rows)


def all_means(record: dict, dynamic: dict | None = None) -> list[float]:
    """The geometric-mean perplexity of every cell of the record (main models,
    reference models, extensions at both stages) and of the dynamic-NTK cells."""
    out = []
    for kind in ("nonoverlap", "sliding"):
        for per in (*record["perplexity"][kind].values(),
                    *record["reference"][kind].values(),
                    *record["extension"][kind]["no_fine_tune"].values(),
                    *record["extension"][kind]["fine_tune"].values()):
            out += [c["mean"] for c in per.values()]
    boot = record["settings"]
    for c in (dynamic or {"cells": {}})["cells"].values():
        out.append(contrast(c, replicates=boot["bootstrap"],
                            seed=boot["bootstrap_seed"])["ratio"])
    return out


def load_dynamic(path=None) -> dict | None:
    """The stored dynamic-NTK cells (``course_lib.experiments.lm_dynamic``), or
    None when the file is absent."""
    import json
    from pathlib import Path

    from course_lib.experiments.lm_dynamic import DYNAMIC_PATH

    p = DYNAMIC_PATH if path is None else Path(path)
    return json.loads(p.read_text()) if p.exists() else None


def dynamic_comparisons(record: dict, dynamic: dict, *, confidence: float = 0.95
                        ) -> dict[str, Comparison]:
    """Dynamic NTK run token by token, against plain RoPE (``dyn/<T>``) and against
    NTK at ``s = T/L`` for the whole window (``dynT/<T>``), at each stored length;
    paired over seeds (the same re-trained models, checked by ``run_dynamic``).
    Also ``dynppl/<T>``: the perplexity itself (a cell alone, as the tables), always
    at 95 %; ``confidence`` sets the level of the two comparisons."""
    if dynamic["seeds"] != record["seeds"]:
        raise ValueError(f"dynamic_comparisons: seeds {dynamic['seeds']} differ from "
                         f"the record's {record['seeds']}")
    plain = record["perplexity"]["nonoverlap"]["rope"]
    window = record["extension"]["nonoverlap"]["no_fine_tune"]["dynamic"]
    boot = record["settings"]
    out: dict[str, Comparison] = {}
    label = "dynamic NTK, token by token"
    for T, cell in dynamic["cells"].items():
        out[f"dyn/{T}"] = compare(record, f"dyn/{T}", f"{label}, over plain RoPE at "
                                  f"T = {T}", cell, plain[T], confidence=confidence)
        out[f"dynT/{T}"] = compare(record, f"dynT/{T}", f"{label}, over NTK at "
                                   f"s = T/L for the whole window, at T = {T}", cell,
                                   window[T], confidence=confidence)
        c = contrast(cell, replicates=boot["bootstrap"], seed=boot["bootstrap_seed"])
        out[f"dynppl/{T}"] = Comparison(f"dynppl/{T}", f"{label} at T = {T}",
                                        c["ratio"], c["low"], c["high"], "", False,
                                        c["se_text"])
    return out
