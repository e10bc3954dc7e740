"""The interactive figures of the static book (``{interactive-figure}``).

Design: ``course_lib.viz.interactive`` computes each figure's data with the library for
every combination of slider values at build time; ``book/_static/interactive/
figures.js`` only looks the current combination up and draws it. The fast tests check
the data module (float32 round trip, defaults equal to the chapters' static figures,
closed forms). The browser tests (slow) open the strictly built book (``built_book``,
shared with ``test_book_site.py``) in Chromium, move the sliders, read the values the
script drew (``data-*`` attributes and SVG coordinates) and compare them with the
library called here directly; they also move every slider with the keyboard, and read
the page with JavaScript off.

Tolerances. Floats reach the page as JSON: float64 values as Python's ``repr`` and
float32 values as their shortest round-tripping decimal, both parsed exactly by
JavaScript and written back by ``String(number)``, the shortest round-tripping form
again; so a drawn value equals the library's bit for bit when the library returns the
same result for the same call. Where the test's call differs from the build's (one
position instead of a tensor of 101, or a closed form evaluated by Python's ``math``)
the bound is a few float64 ulps, derived at each use. SVG coordinates are rounded to
0.01 px by the script.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from course_lib.alibi import alibi_bias, alibi_slopes
from course_lib.relative import t5_relative_position_bucket
from course_lib.rope import rope_angles, rope_frequencies
from course_lib.rope_scaling import (
    rope_scaled_frequencies,
    yarn_correction_range,
    yarn_ramp,
)
from course_lib.viz import interactive

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "book" / "_static" / "interactive" / "figures.js"
PAGES = {
    "rope": "book/04-rope",
    "alibi": "book/05-alibi",
    "t5": "book/06-relative",
    "yarn": "book/11-long-context",
}
EPS64 = 2.0**-52
KNOWN_JS_ERROR = "THEBE_JS_URL"  # sphinx-thebe declares it twice (test_book_site)
PX = 0.02  # two coordinates rounded to 0.01 px each, plus float noise far below


# --- the data module (fast) -----------------------------------------------------------


def test_float32_json_round_trips_every_value(gen: torch.Generator) -> None:
    values = torch.cat([
        torch.randn(2000, generator=gen) * 10.0 ** torch.randint(-30, 30, (2000,),
                                                                  generator=gen),
        torch.tensor([0.0, -0.0, 1.0, 2.0**-126, 2.0**-149, 3.4028234e38]),
    ]).to(torch.float32)
    decoded = np.array(interactive.float32_json(values), dtype=np.float64)
    assert np.array_equal(decoded.astype(np.float32), values.numpy())
    # shortest: never longer than the 9 significant digits float32 needs
    mantissas = [repr(float(v)).split("e")[0] for v in decoded]
    digits = [len(re.sub(r"[^0-9]", "", m).strip("0")) for m in mantissas]
    assert max(digits) <= 9


def test_unknown_figure_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown interactive figure 'nope'; choose"):
        interactive.figure_data("nope")


def _defaults(kind: str) -> list:
    data = interactive.figure_data(kind)
    return [s["values"][s["default"]] for s in data["sliders"]]


def test_defaults_are_the_chapters_static_figures() -> None:
    """Default slider values draw what the chapter's static figure (or cell) shows."""
    alibi_md = (ROOT / "book" / "05-alibi.md").read_text()
    heads, length = map(int, re.search(
        r"viz\.plot_alibi_bias\((\d+), (\d+),.*causal=True\)", alibi_md).groups())
    assert _defaults("alibi") == [heads]
    assert interactive.figure_data("alibi")["length"] == length

    relative_md = (ROOT / "book" / "06-relative.md").read_text()
    buckets, distance, span = map(int, re.search(
        r"viz\.plot_t5_buckets\((\d+), (\d+), span=(\d+)\)", relative_md).groups())
    assert _defaults("t5") == [buckets, distance]
    assert interactive.figure_data("t5")["span"] == span

    long_md = (ROOT / "book" / "11-long-context.md").read_text()
    d, base, L = re.search(r"\nd, base, L = (\d+), ([\d.]+), (\d+)\n", long_md).groups()
    s = float(re.search(r"\ns = ([\d.]+)\n", long_md).group(1))
    fast, slow = map(float, re.search(
        r"yarn_correction_range\(([\d.]+), ([\d.]+), d, base, L\)", long_md).groups())
    yarn = interactive.figure_data("yarn")
    default_head = interactive.YARN_HEADS[
        yarn["sliders"][3]["values"].index(_defaults("yarn")[3])]
    assert _defaults("yarn")[:3] == [fast, slow, s]
    assert default_head == (int(d), float(base))
    assert yarn["training_length"] == int(L)

    rope_md = (ROOT / "book" / "04-rope.md").read_text()
    assert "with base $b = 10000$ in the paper" in rope_md
    assert _defaults("rope")[0] == 10_000.0


def test_alibi_data_follows_the_closed_form() -> None:
    """Power-of-two heads: m_h = 2^(-8h/n); 12 heads: exponents 1..8 then 0.5, 1.5,
    2.5, 3.5 (the rule of the authors' code for a head count that is not a power of
    two)."""
    data = interactive.figure_data("alibi")
    index = data["sliders"][0]["values"]
    cases = [(n, [8 * h / n for h in range(1, n + 1)]) for n in (1, 2, 4, 8, 16)]
    cases.append((12, [*range(1, 9), 0.5, 1.5, 2.5, 3.5]))
    for n, exponents in cases:
        slopes = data["data"][str(index.index(n))]["slopes"]
        assert len(slopes) == n
        for m, e in zip(slopes, exponents, strict=True):
            # 2^-e rounded once to float32: relative error at most 2^-24 (and none
            # for whole e, a power of two)
            assert abs(m - 2.0**-e) <= 2.0**-24 * 2.0**-e
            assert m == 2.0**-e or not float(e).is_integer()
    for n in index:
        bias = data["data"][str(index.index(n))]["bias"]
        L = data["length"]
        assert len(bias) == n and all(len(head) == L * L for head in bias)
        for head in bias:  # masked exactly above the diagonal, 0 on it
            for k, v in enumerate(head):
                i, j = divmod(k, L)
                assert (v is None) == (j > i)
                assert j != i or v == 0.0


def test_class_edition_figures_of_chapters_4_to_6_hold_no_graded_answer() -> None:
    """The interactive figures that the class edition of chapters 4-6 keeps embed no
    graded function's output on a public or hidden input (the search of
    ``tests/test_giveaways.py``, on the figures' data alone): the rope figure's head of
    14 dimensions is no graded head size, the t5 figure's span of 160 holds no graded
    range. The alibi figure, which holds ex05's public answers (every head count from 4
    on contains the slopes of 4 or 8 heads), is open-edition only, and the same search
    finds them there."""
    import giveaway_scan as scan

    calls = scan.graded_calls()
    kept = {
        kind
        for page in ("04-rope", "05-alibi", "06-relative")
        for _, kind in scan.interactive_figures((ROOT / "book" / f"{page}.md").read_text())
    }
    assert kept == {"rope", "t5"}
    for kind in sorted(kept):
        segments = scan.json_segments(kind, interactive.figure_data(kind))
        found = scan.find_answers(segments, calls)
        assert not found, [f.describe() for f in found]
    segments = scan.json_segments("alibi", interactive.figure_data("alibi"))
    found = scan.find_answers(segments, calls)
    assert any(f.answer.startswith("alibi_slopes") for f in found), found


def test_seeded_t5_cases_avoid_the_figure_settings() -> None:
    """A term's seed draws ex06's hidden T5 settings anew; none of them uses a
    max_distance of the t5 figure (ex06's ``_FIGURE_DISTANCES``), so the figure holds
    no seeded answer either. 200 seeds."""
    from course_lib.checks import ex06_relative

    for seed in range(200):
        future, monotone, cases = ex06_relative._hidden_bucket_settings(seed)
        drawn = [future[1]] + [m[2] for m in monotone[2:]] + [c[3] for c in cases]
        assert not set(drawn) & set(interactive.T5_MAX_DISTANCES), (seed, drawn)


def test_seeded_rope_head_sizes_avoid_the_figure_head() -> None:
    """With a term's seed, rope_frequencies is graded on head sizes drawn anew; the
    class edition's rope figure (angles at position 1 = the frequencies of a
    ROPE_HEAD_DIM head) must not be one of them."""
    from course_lib.checks import ex04_rope

    assert interactive.ROPE_HEAD_DIM in ex04_rope._FIGURE_HEAD_DIMS
    hit = [s for s in range(200)
           if interactive.ROPE_HEAD_DIM in ex04_rope._hidden_frequency_dims(s)]
    assert not hit, f"seeds drawing head size {interactive.ROPE_HEAD_DIM}: {hit[:5]}"


def test_script_only_draws() -> None:
    """The JavaScript holds no copy of an algorithm: no slope, bucket or ramp maths."""
    text = SCRIPT.read_text()
    for forbidden in ("Math.pow", "Math.exp", "Math.log(",
                      "**", "num_buckets", "beta_fast"):
        assert forbidden not in text, forbidden
    # the only logarithms are axis transforms of values read from the data
    assert sorted(set(re.findall(r"Math\.log\w*", text))) == ["Math.log10", "Math.log2"]


# --- the built book in a browser (slow) -----------------------------------------------


def _label(value: object) -> str:
    """What the slider's <output> shows (figures.js ``fmt``)."""
    if isinstance(value, (int, float)) and float(value).is_integer():
        return f"{int(value):,}"
    return str(value)


@pytest.fixture
def tab(server: str, browser):
    ctx = browser.new_context()
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: None if KNOWN_JS_ERROR in str(e)
            else errors.append(str(e)))
    page.errors = errors
    yield page
    ctx.close()


def _open(tab, server: str, kind: str) -> None:
    tab.goto(f"{server}/{PAGES[kind]}.html", wait_until="load")
    tab.wait_for_selector(f"#pe-fig-{kind}[data-ready='true']", timeout=30_000)


def _set(tab, kind: str, indices: tuple[int, ...]) -> list:
    """Set every slider of the figure to an index; return the slider values."""
    sliders = interactive.figure_data(kind)["sliders"]
    for slider, index in zip(sliders, indices, strict=True):
        tab.evaluate(
            """([id, v]) => { const e = document.getElementById(id); e.value = v;
                 e.dispatchEvent(new Event("input", {bubbles: true})); }""",
            [f"pe-{kind}-{slider['name']}", index],
        )
    values = [s["values"][i] for s, i in zip(sliders, indices, strict=True)]
    for slider, value in zip(sliders, values, strict=True):
        shown = tab.inner_text(f"#pe-{kind}-{slider['name']}-value")
        assert shown == _label(value), (slider["name"], shown)
    return values


def _attrs(tab, selector: str, *names: str) -> list[list[str]]:
    return tab.eval_on_selector_all(
        selector, "(els, names) => els.map(e => names.map(n => e.getAttribute(n)))",
        list(names))


def _affine(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Slope and the largest residual of ys against a line through xs (min, max)."""
    lo, hi = min(range(len(xs)), key=xs.__getitem__), max(range(len(xs)),
                                                          key=xs.__getitem__)
    slope = (ys[hi] - ys[lo]) / (xs[hi] - xs[lo])
    residual = max(abs(y - (ys[lo] + slope * (x - xs[lo])))
                   for x, y in zip(xs, ys, strict=True))
    return slope, residual


@pytest.mark.slow
def test_rope_figure_draws_rope_angles(tab, server: str) -> None:
    _open(tab, server, "rope")
    for indices in [(2, 10), (0, 0), (5, 100), (4, 37), (1, 1)]:
        base, m = _set(tab, "rope", indices)
        lines = _attrs(tab, "#pe-fig-rope line.pe-hand", "data-angle", "x1", "y1",
                       "x2", "y2")
        radius = float(_attrs(tab, "#pe-fig-rope circle", "r")[0][0])
        d = interactive.ROPE_HEAD_DIM
        assert len(lines) == d // 2
        expected = rope_angles(torch.tensor([m]), d, base=base)[0].tolist()
        for i, (angle, x1, y1, x2, y2) in enumerate(lines):
            angle = float(angle)
            # The build asked for positions 0..100 in one call, this test for one:
            # torch's pow may round the float64 frequency differently by 1 ulp, and
            # m * theta adds half an ulp: 2 eps relative covers both.
            assert abs(angle - expected[i]) <= 2 * EPS64 * abs(expected[i])
            # independent of the library: m * b^(-2i/d) with Python's libm
            closed = m * base ** (-2 * i / d)
            assert abs(angle - closed) <= 4 * EPS64 * closed
            # the hand points at the angle (counter-clockwise, SVG y grows downwards)
            dx, dy = float(x2) - float(x1), float(y1) - float(y2)
            assert abs(dx - radius * math.cos(angle)) <= PX
            assert abs(dy - radius * math.sin(angle)) <= PX
    assert not tab.errors


@pytest.mark.slow
def test_alibi_figure_draws_slopes_and_bias(tab, server: str) -> None:
    _open(tab, server, "alibi")
    heads = interactive.ALIBI_HEADS
    L = interactive.ALIBI_LEN
    for n in (8, 1, 3, 12, 16, 5):
        (shown,) = _set(tab, "alibi", (heads.index(n),))
        assert shown == n
        dots = _attrs(tab, "#pe-fig-alibi circle.pe-slope", "data-value", "cy")
        # Same call as the build, same machine; the shortest float32 decimal reads back
        # as the same float32: equal bit for bit.
        expected = alibi_slopes(n).tolist()
        assert [np.float32(float(v)) for v, _ in dots] == expected
        if n > 1:  # drawn at -log2 m on a linear axis, higher is larger
            slope, residual = _affine([-math.log2(float(v)) for v, _ in dots],
                                      [float(cy) for _, cy in dots])
            assert slope < 0 and residual <= PX
        cells = _attrs(tab, "#pe-fig-alibi rect.pe-cell", "data-head", "data-row",
                       "data-col", "data-value")
        bias = alibi_bias(n, L, causal=True)
        assert len(cells) == n * L * L
        for h, i, j, v in cells:
            want = bias[int(h), int(i), int(j)].item()
            if v == "masked":
                assert want == -math.inf
            else:
                assert np.float32(float(v)) == want
    assert not tab.errors


@pytest.mark.slow
def test_t5_figure_draws_the_buckets(tab, server: str) -> None:
    _open(tab, server, "t5")
    span = interactive.T5_SPAN
    delta = torch.arange(-span, span + 1)
    nb, md = interactive.T5_NUM_BUCKETS, interactive.T5_MAX_DISTANCES
    refused_seen = 0
    for n, dist in [(32, 128), (8, 16), (4, 256), (64, 64), (64, 16), (16, 32)]:
        assert _set(tab, "t5", (nb.index(n), md.index(dist))) == [n, dist]
        for mode, bidirectional in (("bidirectional", True), ("causal", False)):
            paths = _attrs(tab, f"#pe-fig-t5 path.pe-t5[data-mode='{mode}']",
                           "data-buckets", "d")
            try:
                expected = t5_relative_position_bucket(
                    delta, bidirectional=bidirectional, num_buckets=n,
                    max_distance=dist).tolist()
            except ValueError:
                assert paths == []
                assert tab.locator(
                    f"#pe-fig-t5 text.pe-refused[data-mode='{mode}']").count() == 1
                refused_seen += 1
                continue
            (buckets, d), = paths
            assert [int(b) for b in buckets.split(",")] == expected
            points = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", d)]
            xs, ys = points[0::2], points[1::2]
            assert len(xs) == len(expected)
            # left to right in delta
            assert all(b > a for a, b in zip(xs, xs[1:], strict=False))
            slope, residual = _affine([float(b) for b in expected], ys)
            assert slope < 0 and residual <= PX  # bucket drawn upwards, to scale
    # (64, 16) only: 16 exact buckets per direction (bidirectional), 32 (causal)
    assert refused_seen == 2
    assert not tab.errors


@pytest.mark.slow
def test_yarn_figure_draws_ramp_and_frequencies(tab, server: str) -> None:
    _open(tab, server, "yarn")
    sliders = interactive.figure_data("yarn")["sliders"]
    L = interactive.YARN_TRAINING_LENGTH
    for indices in [(2, 1, 1, 1), (0, 3, 3, 0), (3, 0, 0, 2), (1, 2, 2, 1)]:
        fast, slow, s, head = _set(tab, "yarn", indices)
        d, base = interactive.YARN_HEADS[sliders[3]["values"].index(head)]
        low, high = yarn_correction_range(fast, slow, d, base, L)
        ramp = _attrs(tab, "#pe-fig-yarn circle.pe-ramp", "data-value", "cy")
        # same float64 call as the build: exact (repr and String() round-trip)
        assert [float(v) for v, _ in ramp] == yarn_ramp(low, high, d // 2).tolist()
        slope, residual = _affine([float(v) for v, _ in ramp],
                                  [float(cy) for _, cy in ramp])
        assert slope < 0 and residual <= PX
        inv, attention = rope_scaled_frequencies(
            d, base=base, method="yarn", factor=s, original_max_position=L,
            beta_fast=fast, beta_slow=slow)
        scaled = _attrs(tab, "#pe-fig-yarn circle.pe-scaled", "data-value")
        assert [np.float32(float(v)) for (v,) in scaled] == inv.tolist()
        theta = _attrs(tab, "#pe-fig-yarn circle.pe-theta", "data-value")
        assert [np.float32(float(v)) for (v,) in theta] == rope_frequencies(
            d, base=base).tolist()
        summary = tab.text_content("#pe-fig-yarn text.pe-summary")
        assert summary.startswith(f"low = {low}, high = {high}, attention factor ")
        shown = float(re.search(r"attention factor ([\d.]+)", summary).group(1))
        assert abs(shown - attention) <= 5e-4 * attention  # 4 significant digits
    assert not tab.errors


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(PAGES))
def test_every_slider_moves_by_keyboard_and_redraws(tab, server: str,
                                                    kind: str) -> None:
    _open(tab, server, kind)
    # the plot is an image named by the caption's first sentence, described by the
    # whole caption
    plot = f"#pe-fig-{kind} svg.pe-plot"
    assert tab.get_attribute(plot, "role") == "img"
    label = tab.get_attribute(plot, "aria-label")
    caption = tab.inner_text(f"#{tab.get_attribute(plot, 'aria-describedby')}")
    assert label.startswith("Interactive figure: ") and len(caption) > 40
    first = label.removeprefix("Interactive figure: ").split()[:3]
    assert caption.split()[:3] == first, (label, caption)
    for slider in interactive.figure_data(kind)["sliders"]:
        ident = f"pe-{kind}-{slider['name']}"
        label = tab.inner_text(f"label[for='{ident}']")
        assert label == slider["label"]
        before_svg = tab.inner_html(f"#pe-fig-{kind} svg.pe-plot")
        before = int(tab.input_value(f"#{ident}"))
        key = "ArrowRight" if before < len(slider["values"]) - 1 else "ArrowLeft"
        tab.focus(f"#{ident}")
        tab.keyboard.press(key)
        after = int(tab.input_value(f"#{ident}"))
        assert after == before + (1 if key == "ArrowRight" else -1)
        value = slider["values"][after]
        assert tab.inner_text(f"#{ident}-value") == _label(value)
        assert tab.get_attribute(f"#{ident}", "aria-valuetext") == (
            f"{slider['label']} {_label(value)}")
        assert tab.inner_html(f"#pe-fig-{kind} svg.pe-plot") != before_svg, (
            f"{kind}: moving {slider['name']} left the figure unchanged")
        tab.keyboard.press("Home")
        assert tab.input_value(f"#{ident}") == "0"
        assert tab.inner_text(f"#{ident}-value") == _label(slider["values"][0])
    assert not tab.errors


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(PAGES))
def test_without_javascript_a_one_line_note(server: str, browser, kind: str) -> None:
    ctx = browser.new_context(java_script_enabled=False)
    try:
        page = ctx.new_page()
        page.goto(f"{server}/{PAGES[kind]}.html", wait_until="load")
        note = page.locator(f"#pe-fig-{kind} p.pe-nojs")
        assert note.is_visible()
        assert "needs JavaScript" in note.inner_text()
        assert not page.locator(f"#pe-fig-{kind} .pe-controls").is_visible()
        assert not page.locator(f"#pe-fig-{kind} svg.pe-plot").is_visible()
        # the caption is there for every reader
        assert page.locator(f"#pe-fig-{kind} + .pe-caption, "
                            f".pe-figure:has(#pe-fig-{kind}) .pe-caption").count() >= 1
    finally:
        ctx.close()


@pytest.mark.slow
def test_script_is_served_by_the_book(built_book: Path) -> None:
    served = built_book / "_static" / "interactive" / "figures.js"
    assert served.read_bytes() == SCRIPT.read_bytes()
    for page in PAGES.values():
        html = (built_book / f"{page}.html").read_text()
        assert re.search(r'<script defer="defer" src="[./]*_static/interactive/'
                         r'figures\.js', html), page
