r"""Chapter 10: the length-extrapolation lab's accuracy curves and heatmap, drawn from
the stored results of :mod:`course_lib.experiments`.

Part of :mod:`course_lib.viz`; import the figures from there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from .._validate import fail
from ._common import annotate_cells, new_figure, styled

__all__ = [
    "plot_lab_accuracy",
    "plot_lab_heatmap",
]


# Two families, drawn in separate panels so that nine lines stay readable.
_LAB_GROUPS = (
    ("none, added or rotary positions", ("none", "learned", "sinusoidal", "rope")),
    ("distance terms in the scores", ("alibi", "t5", "shaw", "xl", "da")),
)


_LAB_STYLE = {
    "none": ("k", "o"), "learned": ("tab:red", "s"), "sinusoidal": ("tab:orange", "^"),
    "rope": ("tab:purple", "D"), "alibi": ("tab:blue", "o"), "t5": ("tab:green", "s"),
    "shaw": ("tab:brown", "^"), "xl": ("tab:pink", "D"), "da": ("tab:cyan", "v"),
}


def _lab_rows(fn: str, results: dict) -> tuple[list[dict], list[str], int]:
    if not isinstance(results, dict) or not {"summary", "meta"} <= results.keys():
        fail(fn, "results must be the dict of course_lib.experiments.load_results(), "
                 f"got {type(results).__name__}", TypeError)
    rows = results["summary"]
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    return rows, tasks, int(results["meta"]["settings"]["train_length"])


@styled
def plot_lab_accuracy(results: dict, *, tasks: Sequence[str] | None = None) -> Figure:
    r"""Test accuracy against sequence length, one row of panels per task.

    Each line is a position method: the mean accuracy over seeds with its 95 %
    interval as a band, as stored in the results' summary rows: with per-sequence
    counts, :func:`course_lib.experiments.lab_interval` (a Student-t half-width
    over the training seeds and a bootstrap half-width over the test sequences,
    combined in quadrature, clipped to [0, 1]); for older results without them, the
    seeds-only t-interval. The dashed line is chance, the dotted vertical line the
    training length :math:`L`. Left panels: NoPE and the encodings added to the input
    or rotating it (learned, sinusoidal, RoPE); right panels: the relative methods
    (ALiBi, T5, Shaw, Transformer-XL, DA).

    Args:
        results: the lab's results (:func:`course_lib.experiments.load_results`).
        tasks: which tasks to draw (default: all in the results).

    Returns:
        Figure with ``2 * len(tasks)`` axes (row = task; x = length on a log2 scale,
        y = accuracy); each line is labelled with the method's display name.
    """
    from matplotlib.ticker import ScalarFormatter

    from ..experiments import METHOD_LABELS, TASKS

    fn = "plot_lab_accuracy"
    rows, all_tasks, train_length = _lab_rows(fn, results)
    tasks = all_tasks if tasks is None else list(tasks)
    for t in tasks:
        if t not in all_tasks:
            fail(fn, f"tasks must be among {', '.join(all_tasks)}, got {t!r}")
    fig = new_figure(6.6, 2.25 * len(tasks) + 0.5)
    axes = np.atleast_2d(fig.subplots(len(tasks), 2, sharex=True, sharey="row"))
    for row, task in enumerate(tasks):
        for col, (title, methods) in enumerate(_LAB_GROUPS):
            ax = axes[row, col]
            for m in methods:
                pts = sorted((r["length"], r["mean"], r["low"], r["high"])
                             for r in rows if r["task"] == task and r["method"] == m)
                if not pts:
                    continue
                x, mean, low, high = (np.array(v) for v in zip(*pts, strict=True))
                color, marker = _LAB_STYLE[m]
                ax.plot(x, mean, marker=marker, color=color, ms=3.5, lw=1.2,
                        label=METHOD_LABELS[m])
                ax.fill_between(x, np.clip(low, 0, 1), np.clip(high, 0, 1),
                                color=color, alpha=0.12, lw=0)
            ax.axhline(TASKS[task].chance, color="gray", ls="--", lw=0.8)
            ax.axvline(train_length, color="gray", ls=":", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 1.03)
            ax.set_title(f"{title}\n{task}" if row == 0 else task)
            if col == 0:
                ax.set_ylabel("accuracy")
            if row == len(tasks) - 1:
                ax.set_xlabel("test length (tokens)")
                ax.set_xticks(sorted({r["length"] for r in rows}))
                ax.get_xaxis().set_major_formatter(ScalarFormatter())
            if row == 0:
                ax.legend(loc="lower left", ncol=1, fontsize=7, framealpha=0.8)
    return fig


@styled
def plot_lab_heatmap(results: dict) -> Figure:
    """Mean accuracy of every method (rows) at every task and length (columns).

    Args:
        results: the lab's results (:func:`course_lib.experiments.load_results`).

    Returns:
        Figure with one heatmap axes (rows = methods, columns = task x length,
        cells annotated with the mean accuracy over seeds) and a colour bar.
    """
    from ..experiments import METHOD_LABELS, METHODS

    fn = "plot_lab_heatmap"
    rows, tasks, _ = _lab_rows(fn, results)
    lengths = sorted({r["length"] for r in rows})
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    cell = {(r["task"], r["method"], r["length"]): r["mean"] for r in rows}
    grid = np.array([[cell.get((t, m, n), np.nan) for t in tasks for n in lengths]
                     for m in methods])  # (methods, tasks * lengths)
    fig = new_figure(6.6, 0.32 * len(methods) + 1.3)
    ax = fig.subplots()
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto",
                   interpolation="nearest")
    annotate_cells(ax, grid, size=6.5)
    ax.set_yticks(range(len(methods)), [METHOD_LABELS[m] for m in methods])
    ax.set_xticks(range(grid.shape[1]), [str(n) for _ in tasks for n in lengths])
    for i, t in enumerate(tasks):
        ax.text((i + 0.5) * len(lengths) - 0.5, -0.9, t, ha="center", va="bottom")
        if i:
            ax.axvline(i * len(lengths) - 0.5, color="white", lw=2)
    ax.set_xlabel("test length (tokens) per task")
    fig.colorbar(im, ax=ax, shrink=0.9, label="accuracy")
    return fig
