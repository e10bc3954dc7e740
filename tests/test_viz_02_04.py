"""Figures added for chapters 2-4: each draws library numbers, recomputed here.

Expected values come from the papers' formulas in NumPy (the distance between two
sinusoidal rows as a sum of cosines, the angle-addition block), never from the
plotting code under test.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib.figure import Figure

from course_lib import viz


def _data_axes(fig: Figure):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _renders(fig: Figure) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def _row_distance(k: np.ndarray, d_model: int, base: float) -> np.ndarray:
    """||PE_p - PE_{p+k}|| = sqrt(2 sum_i (1 - cos k w_i)), w_i = base^(-2i/d)."""
    omega = base ** (-np.arange(0, d_model, 2) / d_model)
    return np.sqrt(2 * (1 - np.cos(k[:, None] * omega)).sum(axis=1))


def _step_value(line, x: float) -> float:
    """Value of a steps-post line at x: the y of the last vertex with x_v <= x."""
    xs, ys = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    return float(ys[np.searchsorted(xs, x, side="right") - 1])


@pytest.mark.parametrize(
    ("d_models", "max_offset", "base"),
    [((4, 8, 16, 64), 100_000, 10000.0), ((2, 6), 3000, 10000.0), ((4,), 500, 100.0)],
)
def test_row_separation_is_the_running_minimum_distance(
    d_models, max_offset: int, base: float
) -> None:
    fig = viz.plot_row_separation(d_models, max_offset, base=base)
    (ax,) = _data_axes(fig)
    assert len(ax.lines) == len(d_models)
    k = np.arange(1, max_offset + 1, dtype=np.float64)
    probes = np.unique(np.geomspace(1, max_offset, 25).astype(int))
    for line, d in zip(ax.lines, d_models, strict=True):
        assert line.get_drawstyle() == "steps-post"
        running = np.minimum.accumulate(_row_distance(k, d, base))
        for big_k in probes:
            assert _step_value(line, big_k) == pytest.approx(
                running[big_k - 1], rel=1e-4, abs=1e-5
            ), (d, big_k)
        assert np.asarray(line.get_xdata())[-1] == max_offset
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    _renders(fig)


def test_row_separation_shows_near_collisions_only_for_narrow_tables() -> None:
    """The chapter's reading: d_model=4 comes within 0.002, d_model=16 never gets
    closer than its neighbouring row."""
    fig = viz.plot_row_separation((4, 16), 100_000)
    narrow, wide = _data_axes(fig)[0].lines
    assert min(narrow.get_ydata()) < 0.002
    neighbour = _row_distance(np.array([1.0]), 16, 10000.0)[0]
    assert min(wide.get_ydata()) == pytest.approx(neighbour, rel=1e-5)


@pytest.mark.parametrize(("k", "d_model", "base"), [(1, 8, 10000.0), (-3, 4, 10000.0),
                                                    (5, 12, 100.0), (0, 2, 10000.0)])
def test_offset_matrix_figure_is_the_angle_addition_block(
    k: int, d_model: int, base: float
) -> None:
    fig = viz.plot_offset_matrix(k, d_model, base=base)
    (ax,) = _data_axes(fig)
    image = np.asarray(ax.images[0].get_array(), dtype=np.float64)
    expected = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        a = k * base ** (-2 * i / d_model)
        expected[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [
            [np.cos(a), np.sin(a)],
            [-np.sin(a), np.cos(a)],
        ]
    np.testing.assert_allclose(image, expected, atol=1e-12)
    labels = [t.get_text() for t in ax.texts]
    assert len(labels) == 2 * d_model  # the entries of the blocks, nothing else
    assert labels[:4] == ["$c_0$", "$s_0$", "$-s_0$", "$c_0$"]  # symbols, no values
    _renders(fig)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: viz.plot_row_separation((4, 5)), "plot_row_separation: d_models"),
        (lambda: viz.plot_row_separation((4,), 0), "plot_row_separation: max_offset"),
        (lambda: viz.plot_offset_matrix(1, 14), "plot_offset_matrix: d_model"),
        (lambda: viz.plot_offset_matrix(1.5, 4), "plot_offset_matrix: k"),
    ],
)
def test_bad_arguments_name_the_function_and_argument(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()
