"""Figures of chapters 5-9: each draws library numbers, recomputed here independently.

Expected values come from the papers' formulas written as NumPy loops or closed forms,
never from the plotting code under test.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from course_lib import viz


def _data_axes(fig: Figure):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _image(ax) -> np.ndarray:
    assert len(ax.images) == 1
    return np.asarray(ax.images[0].get_array().filled(np.nan), dtype=np.float64)


def _renders(fig: Figure) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def _slope_exponents(n: int) -> list[float]:
    """-log2 of the ALiBi slopes by the authors' rule (largest power of two c <= n,
    then the odd-numbered slopes of 2c heads)."""
    c = 2 ** int(math.floor(math.log2(n)))
    return [8 * h / c for h in range(1, c + 1)] + [
        8 * (2 * j + 1) / (2 * c) for j in range(n - c)
    ]


@pytest.mark.parametrize("counts", [(8, 12, 16), (1, 3, 5, 6), (12,)])
def test_alibi_slopes_figure_places_each_head(counts) -> None:
    fig = viz.plot_alibi_slopes(counts)
    (ax,) = _data_axes(fig)
    for row, n in enumerate(counts):
        lines = [ln for ln in ax.lines if set(np.asarray(ln.get_ydata())) == {row}]
        xs = sorted(float(x) for ln in lines for x in ln.get_xdata())
        assert xs == pytest.approx(sorted(_slope_exponents(n)))
        c = 2 ** int(math.floor(math.log2(n)))
        circles = [ln for ln in lines if ln.get_marker() == "o"]
        squares = [ln for ln in lines if ln.get_marker() == "s"]
        assert sum(len(ln.get_xdata()) for ln in circles) == c
        assert sum(len(ln.get_xdata()) for ln in squares) == n - c
    _renders(fig)


@pytest.mark.parametrize(("n_heads", "seq_len"), [(8, 64), (12, 30), (1, 5)])
def test_alibi_decay_figure_is_the_geometric_distribution(n_heads, seq_len) -> None:
    fig = viz.plot_alibi_attention_decay(n_heads, seq_len)
    left, right = _data_axes(fig)
    assert len(left.lines) == n_heads
    exps = _slope_exponents(n_heads)
    d = np.arange(seq_len)
    for h, line in enumerate(left.lines):
        m = 2.0 ** -exps[h]
        expected = np.exp(-m * d) / np.exp(-m * d).sum()
        np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(
            right.lines[h].get_ydata(), np.cumsum(expected), rtol=1e-5, atol=1e-6
        )
    assert left.get_yscale() == "log"


@pytest.mark.parametrize("max_distance", [1, 2, 3])
def test_relative_index_figure_is_the_clipped_offset(max_distance: int) -> None:
    cases = ((6, 6), (2, 6), (1, 4))
    fig = viz.plot_relative_position_index(cases, max_distance)
    axes = _data_axes(fig)
    assert len(axes) == len(cases)
    for ax, (q_len, k_len) in zip(axes, cases, strict=True):
        expected = np.zeros((q_len, k_len))
        for i in range(q_len):
            for j in range(k_len):
                offset = j - (i + k_len - q_len)
                expected[i, j] = (
                    min(max(offset, -max_distance), max_distance) + max_distance
                )
        np.testing.assert_array_equal(_image(ax), expected)
        assert len(ax.texts) == q_len * k_len  # every cell annotated
    _renders(fig)


def test_attention_biases_figure_shows_the_given_matrices() -> None:
    a = torch.tensor([[0.0, -math.inf], [-1.0, 0.0]])
    b = torch.arange(6.0).reshape(2, 3)
    fig = viz.plot_attention_biases({"first": a, "second": b})
    axes = _data_axes(fig)
    assert [ax.get_title() for ax in axes] == ["first", "second"]
    np.testing.assert_array_equal(_image(axes[0]), [[0.0, np.nan], [-1.0, 0.0]])
    np.testing.assert_array_equal(_image(axes[1]), b.numpy())
    assert len(fig.axes) == 4  # one colorbar each
    _renders(fig)


def _reach_by_definition(seg_len: int, mem_len: int, n_layers: int, n_segments: int):
    """Brute force from the recurrence: position t of layer n attends to positions
    s * seg_len - min(mem_len, s * seg_len) ... t of layer n - 1 (s = its segment)."""
    total = seg_len * n_segments
    reach = np.zeros((n_layers + 1, total), dtype=bool)
    reach[n_layers, total - 1] = True
    for layer in range(n_layers, 0, -1):
        for t in np.nonzero(reach[layer])[0]:
            start = (t // seg_len) * seg_len
            lo = start - min(mem_len, start)
            reach[layer - 1, lo : t + 1] = True
    return reach


@pytest.mark.parametrize(
    ("seg_len", "mem_len", "n_layers", "n_segments"),
    [(4, 4, 3, 4), (3, 2, 2, 3), (4, 8, 2, 4), (2, 0, 3, 3)],
)
def test_segment_recurrence_figure_is_the_reachable_set(
    seg_len, mem_len, n_layers, n_segments
) -> None:
    fig = viz.plot_segment_recurrence(
        seg_len, mem_len, n_layers=n_layers, n_segments=n_segments
    )
    no_memory, with_memory = _data_axes(fig)
    np.testing.assert_array_equal(
        _image(no_memory) > 0, _reach_by_definition(seg_len, 0, n_layers, n_segments)
    )
    np.testing.assert_array_equal(
        _image(with_memory) > 0,
        _reach_by_definition(seg_len, mem_len, n_layers, n_segments),
    )
    if mem_len == seg_len:  # one segment further back per layer
        inputs = _image(with_memory)[0] > 0
        first = int(np.nonzero(inputs)[0][0])
        assert first == max(0, (n_segments - 1 - n_layers) * seg_len)


@pytest.mark.parametrize(("q_len", "mem_len"), [(6, 4), (3, 0), (2, 5)])
def test_transformer_xl_terms_have_the_stated_structure(
    q_len: int, mem_len: int
) -> None:
    fig = viz.plot_transformer_xl_terms(q_len, mem_len, head_dim=8, seed=3)
    axes = _data_axes(fig)
    assert len(axes) == 4
    k_len = q_len + mem_len
    visible = np.tril(np.ones((q_len, k_len), dtype=bool), k=mem_len)
    terms = [_image(ax) for ax in axes]
    for t in terms:
        assert t.shape == (q_len, k_len)
        assert np.isnan(t[~visible]).all() and np.isfinite(t[visible]).all()
    content, _, global_content, global_position = terms
    for j in range(k_len):  # (c) ignores the query: constant down each column
        col = global_content[visible[:, j], j]
        np.testing.assert_allclose(col, col[0], rtol=1e-6)
    for i in range(q_len):  # (d) depends on the distance i' - j only
        for j in range(k_len):
            if visible[i, j] and i + 1 < q_len:
                np.testing.assert_allclose(
                    global_position[i, j], global_position[i + 1, j + 1], rtol=1e-5
                )
    assert not np.allclose(content[visible], content[visible][0])


@pytest.mark.parametrize(("v", "score"), [(1.0, 2.0), (0.0, 0.5), (2.0, -1.0)])
def test_da_weights_figure_follows_the_formula(v: float, score: float) -> None:
    ws = (-0.5, 0.0, 0.5)
    seq_len = 11
    fig = viz.plot_da_weights(ws, v, seq_len=seq_len, score=score)
    (ax,) = _data_axes(fig)
    mid = seq_len // 2
    dist = np.abs(np.arange(seq_len) - mid)
    for line, w in zip(ax.lines, ws, strict=False):
        r_hat = (1 + math.exp(v)) / (1 + np.exp(v - w * dist))
        logits = max(score, 0.0) * r_hat  # ReLU(q.k) * R_hat / sqrt(1)
        expected = np.exp(logits) / np.exp(logits).sum()
        np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-9)
    if score > 0:
        near, flat, far = (ln.get_ydata() for ln in ax.lines[:3])
        assert near.argmax() == mid and np.allclose(flat, 1 / seq_len)
        assert far[mid] == far.min()


def test_wavelength_comparison_draws_two_pi_over_omega() -> None:
    omega = {"a": torch.tensor([1.0, 0.1, 0.01]), "b": torch.tensor([2.0, 0.5])}
    fig = viz.plot_wavelength_comparison(omega)
    (ax,) = _data_axes(fig)
    for line, w in zip(ax.lines, omega.values(), strict=True):
        np.testing.assert_allclose(line.get_ydata(), 2 * math.pi / w.double().numpy())
    assert ax.get_yscale() == "log"
    _renders(fig)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: viz.plot_alibi_slopes(()), "plot_alibi_slopes: head_counts"),
        (lambda: viz.plot_alibi_slopes((8, 0)), "plot_alibi_slopes: head_counts"),
        (
            lambda: viz.plot_alibi_attention_decay(0),
            "plot_alibi_attention_decay: n_heads",
        ),
        (
            lambda: viz.plot_relative_position_index((), 2),
            "plot_relative_position_index: cases",
        ),
        (
            lambda: viz.plot_relative_position_index(((3, 3),), 0),
            "plot_relative_position_index: max_distance",
        ),
        (lambda: viz.plot_attention_biases({}), "plot_attention_biases: biases"),
        (
            lambda: viz.plot_attention_biases({"x": torch.zeros(3)}),
            "plot_attention_biases: biases['x']",
        ),
        (
            lambda: viz.plot_segment_recurrence(4, -1),
            "plot_segment_recurrence: mem_len",
        ),
        (lambda: viz.plot_transformer_xl_terms(0), "plot_transformer_xl_terms: q_len"),
        (lambda: viz.plot_da_weights(()), "plot_da_weights: ws"),
        (
            lambda: viz.plot_wavelength_comparison({"x": torch.tensor([1.0, -1.0])}),
            "plot_wavelength_comparison: frequencies['x']",
        ),
    ],
)
def test_bad_arguments_name_the_function_and_argument(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message.replace("[", r"\[")):
        call()


def test_attention_biases_rejects_non_tensors_with_type_error() -> None:
    with pytest.raises(TypeError, match="plot_attention_biases: biases"):
        viz.plot_attention_biases({"x": [[0.0]]})


def _chapter5_figure_cell(name: str) -> tuple[str, str]:
    """(caption, code) of the chapter-5 cell that draws figure ``name``."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "book" / "05-alibi.md").read_text()
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S)
    (cell,) = [c for c in cells if f"name: {name}" in c]
    options, code = cell.split("\n---\n", 1)
    caption = " ".join(options.split("caption: |", 1)[1].split("name:", 1)[0].split())
    return caption, code


def test_alibi_bias_caption_states_the_slopes_of_the_drawn_heads() -> None:
    """Issue 33 (captions agree with their figures): the caption of fig-alibi-bias
    names heads and slopes; the heads are those the cell draws, and each slope is
    the one its heatmap shows, read back as -bias / distance below the diagonal."""
    import re

    caption, code = _chapter5_figure_cell("fig-alibi-bias")
    heads = [
        int(h) for h in re.search(r"heads=\(([\d, ]+)\)", code).group(1).split(",")
    ]
    stated_heads = re.search(r"heads ([\d, ]+) and (\d+)", caption)
    named = [int(h) for h in stated_heads.group(1).split(",") if h.strip()]
    assert named + [int(stated_heads.group(2))] == heads
    exponents = [int(e) for e in re.findall(r"\$2\^\{-(\d+)\}\$", caption)]
    fig = viz.plot_alibi_bias(8, 10, heads=tuple(heads), causal=True)
    panels = _data_axes(fig)[: len(heads)]
    assert len(exponents) == len(heads)
    for ax, e in zip(panels, exponents, strict=True):
        img = _image(ax)
        i, j = np.tril_indices(img.shape[0], k=-1)
        slope = -img[i, j] / (i - j)
        np.testing.assert_allclose(slope, 2.0**-e, rtol=1e-6)


def test_alibi_decay_figure_names_its_cumulative_lines() -> None:
    """The chapter reads its caption's numbers from the lines with these gids."""
    fig = viz.plot_alibi_attention_decay(8, 64)
    _, right = _data_axes(fig)
    gids = [ln.get_gid() for ln in right.lines if ln.get_gid()]
    assert gids == [f"cumulative head {h}" for h in range(8)]
    for h, ln in enumerate(right.lines[:8]):
        assert ln.get_gid() == f"cumulative head {h}"
        assert ln.get_ydata()[-1] == pytest.approx(1.0, abs=1e-5)
