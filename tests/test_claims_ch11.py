"""Chapter 11 (longer contexts for RoPE): the claims of the review of issue 33 that this
file checks against the stored lab results, the library, the graders and the
chapter's own text.

* The opening's verdicts on the lab come from paired differences judged by chapter
  10's rule (the margin, "both at chance"; recomputed here from compare_paired and
  the per-sequence counts), and the page counts its comparisons; no verdict is read
  from overlapping per-cell intervals.
* The unseen-angle explanation is stated as the papers' claim (Chen et al. 2023,
  sections 2.2 and 2.3; bloc97's post as Peng et al. describe it, section 3.1; Peng
  et al. 2023, section 3.2), with the lab's contrary evidence, and chapter 10 named by
  a section title it has.
* Every place that applies YaRN's ramp ends (32 and 1 turns) or its temperature
  (0.1 ln s + 1) says they are LLaMA's (Peng et al. sections 3.2 and 3.4).
* The class edition's YaRN figure (``yarn_class``) embeds no graded answer and no
  frequency table, and the script draws exactly its data.
* Numbers the chapter states about its figures are read from the figures' data.

Sources checked by hand (not computable): Chen et al., arXiv 2306.15595 (sections
2.2, 2.3, 3.1); YaRN arXiv v2 (sections 3.1, 3.2, 3.4).
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import course_lib as cl
from course_lib.experiments import load_results
from course_lib.experiments.train import (
    EQUIVALENCE_MARGIN,
    compare_paired,
    lab_interval,
    variant_runs,
)
from course_lib.grading.editions.launch import strip_open_only
from course_lib.viz import interactive

ROOT = Path(__file__).resolve().parents[1]
CH10 = ROOT / "book" / "10-extrapolation-lab.md"
CH11 = ROOT / "book" / "11-long-context.md"
SCRIPT = ROOT / "book" / "_static" / "interactive" / "figures.js"
F64 = torch.float64


def _prose(text: str) -> str:
    """The chapter's text outside code cells, on one line per paragraph."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    return re.sub(r"```\{code-cell\}.*?```", "", text, flags=re.S)


def _cell(text: str, marker: str) -> str:
    """The source of the code cell that contains ``marker``."""
    for m in re.finditer(r"```\{code-cell\} ipython3\n(.*?)```", text, flags=re.S):
        if marker in m.group(1):
            body = m.group(1)
            if body.startswith("---\n"):
                body = body.split("---\n", 2)[2]
            return re.sub(r"\A:tags:.*\n", "", body)
    raise AssertionError(f"no code cell of chapter 11 contains {marker!r}")


def _run(source: str, namespace: dict | None = None) -> dict:
    """Run a chapter cell with glue and display recorded."""
    glued: dict = {}
    shown: list = []
    ns = {"glue": lambda k, v, display=True: glued.__setitem__(k, v),
          "display": shown.append, **(namespace or {})}
    source = source.replace("from myst_nb import glue\n", "")
    source = source.replace("from IPython.display import Markdown, display\n",
                            "from IPython.display import Markdown\n")
    exec(compile(source, str(CH11), "exec"), ns)  # noqa: S102 - the chapter's own cell
    ns["_glued"], ns["_shown"] = glued, shown
    return ns


@pytest.fixture(scope="module")
def stored():
    return load_results()


@pytest.fixture(scope="module")
def opening():
    """The opening's lab cell, run."""
    return _run(_cell(CH11.read_text(), "lab_summary = ("))


# --------------------------------------------------------- verdicts on the lab


def _at_chance(stored, task: str, variant: str, length: int) -> bool:
    """Chapter 10's rule, computed here from the per-sequence counts."""
    runs = variant_runs(stored, task, variant)
    info = stored["meta"]["test_sets"][task][str(length)]
    cell = lab_interval([r["right"][str(length)] for r in runs], info["scored"])
    return (info["chance"] - EQUIVALENCE_MARGIN < cell["low"]
            and cell["high"] < info["chance"] + EQUIVALENCE_MARGIN)


def test_opening_verdicts_are_paired_differences_with_the_margin(stored, opening):
    settings = stored["meta"]["settings"]
    L = settings["train_length"]
    top = L * max(settings["multipliers"])
    table = opening["lab_table"]
    rows = [r for r in table.splitlines()[2:]]
    pairs = [("base 10", "base 10000"), ("base 10000 + pi", "base 10000"),
             ("base 10000 + ramp", "base 10000 + pi")]
    assert len(rows) == len(pairs)
    for row, (a, b) in zip(rows, pairs, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        for task, cell in zip(settings["tasks"], cells, strict=True):
            c = compare_paired(stored, task, a, b, top)
            want = c["verdict"]
            if want in ("higher", "lower") and abs(c["diff"]) < EQUIVALENCE_MARGIN:
                want = "undecided"  # beyond 0, but the estimate inside the margin
            if _at_chance(stored, task, a, top) and _at_chance(stored, task, b, top):
                want = "both at chance"
            assert cell == (f"{c['diff']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}], "
                            f"{want}"), (a, b, task)
    # plain RoPE against itself at L: the glued task list
    lower = [t for t in settings["tasks"]
             if compare_paired(stored, t, "rope", "rope", top, L)["verdict"] == "lower"]
    assert opening["_glued"]["lab_rope_lower"] == (
        f"all {len(lower)} tasks" if len(lower) == len(settings["tasks"])
        else ", ".join(lower))
    assert opening["_glued"]["lab_margin"] == f"{EQUIVALENCE_MARGIN:.2f}"


def test_opening_counts_its_comparisons(stored, opening):
    tasks = stored["meta"]["settings"]["tasks"]
    # 3 comparison families of one per task: RoPE vs itself at L, the two
    # predictions of the unseen-angle account, the ramp against PI
    assert sum(opening["counted"].values()) == (1 + 2 + 1) * len(tasks)
    summary = opening["lab_summary"]
    total = (1 + 2 + 1) * len(tasks)
    assert f": {total} paired comparisons, each at the 95 % level" in summary
    assert f"some {0.05 * total:.1f} of {total}" in summary


def test_opening_reads_no_verdict_from_per_cell_intervals():
    """The old opening quoted each cell's interval ('0.52 [0.47, 0.56] against 0.80
    [0.70, 0.89]') and read the difference from them."""
    text = CH11.read_text()
    assert "lab_cell(" not in text and "lab_verdict(lab, task, a, b, length)" in text
    prose = _prose(text)
    assert not re.search(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", prose)
    assert "paired differences" in prose and "How many comparisons" in text


def test_the_lab_contradicts_the_account_where_the_page_says_so(stored):
    """The prose says the sweep 'contradicts the account's simple form': on recall at 8L both a
    smaller base and PI are below base 10000, and the lab's ramp, which keeps only
    pair 0 as trained, is above PI."""
    s = stored["meta"]["settings"]
    top = s["train_length"] * max(s["multipliers"])
    for variant in ("base 10", "base 10000 + pi"):
        assert compare_paired(stored, "recall", variant, "base 10000",
                              top)["verdict"] == "lower"
    assert compare_paired(stored, "recall", "base 10000 + ramp", "base 10000 + pi",
                          top)["verdict"] == "higher"
    # the smaller base turns more pairs within L (chapter 10's count, recomputed)
    d = s["d_model"] // s["n_heads"]
    turns = {b: sum(2 * math.pi * b ** (2 * i / d) < s["train_length"]
                    for i in range(d // 2)) for b in (10.0, 10000.0)}
    assert turns[10.0] > turns[10000.0]


def test_the_labs_ramp_differs_from_pi_only_in_pair_0(opening):
    # the lab's ends (yarn_betas): the kept end at the fastest pair, which turns
    # L / 2 pi times in L; with base 10000 no other pair turns once (chapter 10)
    assert opening["differ"] == [0]
    assert "only by keeping pair 0 as trained" in opening["lab_summary"]


# --------------------------------------------------------- the literature's account


def test_the_unseen_angle_account_is_stated_as_the_papers_claim():
    prose = re.sub(r"\s+", " ", _prose(CH11.read_text()))
    assert "what the literature claims" in prose
    for phrase in ("{cite}`chen2023pi` (section 2.2)", "(section 2.3)",
                   "bloc97 {cite}`bloc97ntk`", "the post this way, section 3.1",
                   "make the account pair by pair (section 3.2)",
                   "The lab's own sweep, with every rescaling applied without fine-tuning, contradicts the account's simple form"):
        assert phrase in prose, phrase
    # chapter 10 named by a section title it has (chapter 10 is revised apart)
    title = re.search(r"Chapter 10's section \"([^\"]+)\"", prose).group(1)
    assert f"\n## {title}\n" in CH10.read_text()
    assert "does not confirm the unseen-angle account" in CH11.read_text()


def test_llamas_settings_are_said_to_be_llamas():
    """Peng et al. tune alpha and beta per model (section 3.2) and fit the temperature
    on LLaMA (section 3.4): every paragraph that applies them says so."""
    text = CH11.read_text()
    paragraphs = [p for p in re.split(r"\n\s*\n", _prose(text))
                  if not p.lstrip().startswith("$$")]  # a display formula alone
    uses = [p for p in paragraphs
            if re.search(r"\\beta_\{\\text\{fast\}\} = 32|\\beta = 32|"
                         r"0\.1 \\ln s \+ 1|32 and 1", p)]
    assert len(uses) >= 5
    for p in uses:
        assert "LLaMA" in p, p
    assert '"should be tuned on a case-by-case basis" (section 3.2)' in re.sub(
        r"\s+", " ", text)
    caption = re.search(r"name: fig-long-ratios\n    caption: \|\n(.*?)\n---",
                        text, flags=re.S).group(1)
    assert "LLaMA" in caption and "section 3.2" in caption


# --------------------------------------------------------- figures and their numbers


def test_caption_numbers_are_read_from_the_figures():
    text = CH11.read_text()
    never = sum(2 * math.pi * 10000.0 ** (2 * i / 128) > 2048 for i in range(64))
    wl = _run(_cell(text, "wl_fig = "), {"viz": cl.viz, "d": 128, "L": 2048,
                                          "base": 10000.0, "never_a_full_turn": never})
    assert wl["_glued"] == {"wl_d": 128}
    d3, b3, L3, s3 = 128, 500000.0, 8192, 8.0  # Llama 3.1's settings
    ratios = _run(_cell(text, "ratios_fig = "), {
        "viz": cl.viz, "cl": cl, "torch": torch, "F64": F64, "d3": d3, "b3": b3,
        "L3": L3, "s3": s3, "theta3": cl.rope_frequencies(d3, base=b3, dtype=F64)})
    # Llama 3.1: head size 128, original length 8192, factor 8 (Meta's apply_scaling)
    assert ratios["_glued"] == {"ratios_d": 128, "ratios_L": 8192, "ratios_s": "8"}


def test_score_drift_numbers_follow_the_formula():
    """(2/d) sum_i cos(r theta_i) for d = 64, L = 512: past L the score goes below its
    lowest value within L; with PI (distances r/4) it dips a little below it too."""
    text = CH11.read_text()
    # the cell also checks its lines against RotaryEmbedding on all-ones vectors
    got = _run(_cell(text, "drift_fig = "), {"viz": cl.viz, "cl": cl, "torch": torch,
                                               "F64": F64})["_glued"]
    theta = 10000.0 ** (-np.arange(32) / 32)
    r = np.arange(4 * 512 + 1)
    plain = np.cos(r[:, None] * theta).mean(axis=1)
    pi = np.cos(r[:, None] * theta / 4).mean(axis=1)
    inside = r < 512
    # float64 sums of 32 cosines in another order: a few ulps apart
    assert got["drift_min_in"] == pytest.approx(plain[inside].min(), abs=1e-13)
    assert got["drift_min_out"] == pytest.approx(plain[~inside].min(), abs=1e-13)
    assert got["drift_below"] == int((plain[~inside] < plain[inside].min()).sum())
    assert got["drift_past"] == int((~inside).sum())
    assert got["drift_pi_min"] == pytest.approx(pi.min(), abs=1e-13)
    assert got["drift_min_out"] < got["drift_min_in"] and got["drift_below"] > 0
    assert got["drift_pi_min"] < got["drift_min_in"]  # "can dip a little below"


# --------------------------------------------------------- the class edition's figure


def test_each_edition_has_its_own_yarn_figure():
    text = CH11.read_text()
    open_block = re.search(r"^::::\{only\} not class_edition\n"
                           r"```\{interactive-figure\} (\w+)\n", text, flags=re.M)
    class_block = re.search(r"^::::\{only\} class_edition\n```\{interactive-figure\} "
                            r"(\w+)\n", text, flags=re.M)
    assert open_block.group(1) == "yarn" and class_block.group(1) == "yarn_class"
    kept = re.findall(r"^```\{interactive-figure\} (\w+)$", strip_open_only(text),
                      flags=re.M)
    assert kept == ["yarn_class"]


@pytest.fixture(scope="module")
def calls():
    sys.path.insert(0, str(ROOT / "tests"))
    import giveaway_scan as scan

    return scan, scan.graded_calls()


def test_class_yarn_figure_embeds_no_graded_answer(calls):
    scan, graded = calls
    data = interactive.figure_data("yarn_class")
    assert not scan.find_answers(scan.json_segments("yarn_class", data), graded)
    # the control: the open edition's figure holds frequencies and factors the
    # graders ask for (why the class edition has its own)
    full = interactive.figure_data("yarn")
    assert scan.find_answers(scan.json_segments("yarn", full), graded)
    text = json.dumps(data)
    for key in ('"theta"', '"attention"', '"scaled"'):
        assert key not in text, key


def test_class_yarn_figure_has_no_graded_correction_range_setting(calls):
    """Correction ranges are small integers the scan cannot tell from chance: the
    class figure's grid itself must avoid every graded input."""
    _, graded = calls
    data = interactive.figure_data("yarn_class")
    L = data["training_length"]
    grid = {(f, s, *interactive.YARN_HEADS[h])
            for f in data["sliders"][0]["values"] for s in data["sliders"][1]["values"]
            for h in range(len(interactive.YARN_HEADS))}
    ranges = [c for c in graded if c.name == "yarn_correction_range"]
    assert len(ranges) >= 10
    for c in ranges:
        fast, slow, d, base, original = c.args[:5]
        if original == L:
            assert (fast, slow, d, base) not in grid, c.call


def test_class_yarn_figure_data_follows_the_library():
    data = interactive.figure_data("yarn_class")
    sliders = data["sliders"]
    L = data["training_length"]
    values = [s["values"][s["default"]] for s in sliders]
    # the defaults are the chapter's cell: beta 32 and 1, s = 4, d = 128, base 10000
    assert values[:3] == [32.0, 1.0, 4.0]
    assert interactive.YARN_HEADS[sliders[3]["values"].index(values[3])] == (128, 1e4)
    for key, entry in data["data"].items():
        idx = [int(k) for k in key.split(",")]
        fast, slow, s = (sliders[k]["values"][idx[k]] for k in range(3))
        d, base = interactive.YARN_HEADS[idx[3]]
        low, high = cl.yarn_correction_range(fast, slow, d, base, L)
        assert (entry["low"], entry["high"]) == (low, high)
        assert entry["ramp"] == cl.yarn_ramp(low, high, d // 2).tolist()
        inv, _ = cl.rope_scaled_frequencies(
            d, base=base, method="yarn", factor=s, original_max_position=L,
            beta_fast=fast, beta_slow=slow, dtype=F64)
        # the same float64 division as the data module: exact
        assert entry["slowdown"] == (cl.rope_frequencies(d, base=base, dtype=F64)
                                     / inv).tolist()
        assert min(entry["slowdown"]) >= 1 - 1e-12 and max(entry["slowdown"]) <= s * (
            1 + 1e-12)  # between kept (1) and interpolated (s), a few ulps of rounding


def _harness(tmp_path: Path) -> Path:
    """A page with the class figure as the book's extension writes it."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import interactive_figures as ext

    sliders = interactive.figure_data("yarn_class")["sliders"]
    page = tmp_path / "yarn_class.html"
    page.write_text(
        "<!doctype html><html><body>"
        '<div class="pe-interactive" data-kind="yarn_class" id="pe-fig-yarn_class">'
        f'<div class="pe-controls" hidden>{ext._controls("yarn_class", sliders)}</div>'
        '<svg class="pe-plot" role="img" hidden xmlns="http://www.w3.org/2000/svg">'
        '</svg><script type="application/json" class="pe-data">'
        f"{interactive.figure_json('yarn_class')}</script></div>"
        f'<script src="{SCRIPT.as_uri()}"></script></body></html>'
    )
    return page


@pytest.mark.slow
def test_class_yarn_figure_draws_its_data(browser, tmp_path):
    page = _harness(tmp_path)
    ctx = browser.new_context()
    try:
        tab = ctx.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(page.as_uri(), wait_until="load")
        tab.wait_for_selector("#pe-fig-yarn_class[data-ready='true']", timeout=30_000)
        data = interactive.figure_data("yarn_class")
        for indices in [(1, 1, 1, 1), (0, 3, 3, 0), (2, 0, 0, 2)]:
            for slider, index in zip(data["sliders"], indices, strict=True):
                tab.evaluate(
                    """([id, v]) => { const e = document.getElementById(id);
                         e.value = v; e.dispatchEvent(new Event("input")); }""",
                    [f"pe-yarn_class-{slider['name']}", index])
            entry = data["data"][",".join(map(str, indices))]
            for cls, key in (("pe-ramp", "ramp"), ("pe-slowdown", "slowdown")):
                drawn = tab.eval_on_selector_all(
                    f"#pe-fig-yarn_class circle.{cls}",
                    "els => els.map(e => e.getAttribute('data-value'))")
                # JSON numbers written back by String(): the same float64
                assert [float(v) for v in drawn] == entry[key], cls
            summary = tab.text_content("#pe-fig-yarn_class text.pe-summary")
            assert summary == (f"low = {entry['low']}, high = {entry['high']} "
                               f"(training length {data['training_length']})")
            labels = tab.eval_on_selector_all("#pe-fig-yarn_class text",
                                              "els => els.map(e => e.textContent)")
            assert not [t for t in labels if "_i" in t or "\u2032" in t], labels
        assert not errors
    finally:
        ctx.close()


# ------------------------------------------ re-read of chapter 11 (reread-ch06-11.md)


def test_reread_ch11_claims_are_checked_where_they_are_made():
    """Items 7-16: each claim the re-read found unchecked now has its assert in the
    chapter, and the over-claims are gone."""
    text = CH11.read_text()
    flat = " ".join(text.split())
    assert "far more than $T/L$" not in flat
    assert "{glue:text}`dyn_hf_2`" in text and "{glue:text}`dyn_hf_8`" in text
    assert "about one in twenty would still" in flat and "at most about one in twenty" in flat
    assert "the others keep the fast pairs" not in flat
    assert "NTK-aware keeps only pair 0" in flat
    assert "are much larger than the NTK base" not in flat
    for needle in (
        "assert for_it,",
        'assert all(c["verdict"] != "lower" for c in ramp.values())',
        'assert torch.equal(beyond["NTK-aware"], partial_turn & (i < d // 2 - 1))',
        "assert torch.equal(rho[ends], 1 - keep[ends])",
        "assert b_new > b_ntk",
        "rotated @ rotated[0] / 64",
    ):
        assert needle in text, needle


def test_ratio_figure_keeps_what_the_caption_says():
    """Llama 3.1's settings (d 128, base 500000, L 8192, s 8), computed here from the
    formulas: NTK-aware slows every pair but pair 0 by s^(2i/(d-2)) > 1; Llama 3.1 keeps
    the pairs of wavelength below L/4, a run of the fastest; linear slows all by s."""
    d, b, L, s = 128, 500000.0, 8192, 8.0
    i = np.arange(d // 2)
    theta = b ** (-2 * i / d)
    ntk = theta / (b * s ** (d / (d - 2))) ** (-2 * i / d)
    np.testing.assert_allclose(ntk, s ** (2 * i / (d - 2)), rtol=1e-12)
    assert ntk[0] == pytest.approx(1.0, abs=1e-15) and (ntk[1:] > 1 + 1e-3).all()
    kept = 2 * np.pi / theta < L / 4.0
    assert kept[0] and kept.sum() > 1 and not kept[int(kept.sum()):].any()
    fig = cl.viz.plot_scaled_frequency_ratios()
    lines = {ln.get_label(): np.asarray(ln.get_ydata()) for ln in fig.axes[0].lines}
    np.testing.assert_allclose(lines["ntk"], ntk, rtol=1e-12)
    assert (np.abs(lines["llama3"] - 1) <= 1e-12).sum() == kept.sum()
    np.testing.assert_allclose(lines["linear"], s, rtol=1e-12)
