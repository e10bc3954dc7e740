r"""Chapter 7: Transformer-XL: the ``rel_shift`` steps, segment recurrence and
the four score terms.

Part of :mod:`course_lib.viz`; import the figures from there.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .._validate import fail, require_int, require_positive_int
from ._common import DIVERGING, annotate_cells, new_figure, styled

__all__ = [
    "plot_rel_shift_steps",
    "plot_segment_recurrence",
    "plot_transformer_xl_terms",
]


@styled
def plot_rel_shift_steps(q_len: int = 3, k_len: int = 5) -> Figure:
    """Transformer-XL's pad-and-reshape shift, step by step, on distance labels.

    The input holds, in row ``i`` and column ``c``, the relative distance
    ``k_len - 1 - c`` (scores indexed by distance). The panels show: the input; one
    zero column padded on the left; the same numbers read with rows of length
    ``q_len`` (shape ``(k_len + 1, q_len)``), whose first row is dropped; and the
    result read back as ``(q_len, k_len)``, which equals
    :func:`~course_lib.transformer_xl.rel_shift` and holds in row ``i`` the distance
    from query ``i`` (absolute position ``i + k_len - q_len``) to each key. Entries
    above the causal diagonal are leftovers and are hatched: they must be masked.

    Args:
        q_len: number of queries.
        k_len: number of keys (memory plus segment), at least ``q_len``.

    Returns:
        Figure with four axes; the image of the last equals
        ``rel_shift(x)`` for the distance-labelled ``x``.
    """
    from ..transformer_xl import rel_shift

    fn = "plot_rel_shift_steps"
    q_len = require_positive_int(fn, "q_len", q_len)
    k_len = require_positive_int(fn, "k_len", k_len)
    if k_len < q_len:
        fail(fn, f"k_len must be at least q_len, got q_len={q_len}, k_len={k_len}")
    x = (k_len - 1 - torch.arange(k_len, dtype=torch.float32)).expand(q_len, k_len)
    padded = torch.nn.functional.pad(x, (1, 0))  # (Lq, Lk + 1)
    regrouped = padded.reshape(k_len + 1, q_len)  # the same numbers, rows of length Lq
    shifted = rel_shift(x)  # (Lq, Lk)
    mask = torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None] + k_len - q_len

    steps = (
        (x, "1. scores by distance"),
        (padded, "2. pad a zero column"),
        (regrouped, f"3. view as ({k_len + 1}, {q_len}),\ndrop row 0"),
        (shifted, "4. view as "
                  f"({q_len}, {k_len}):\ndistance to each key"),
    )
    fig = new_figure(9.0, 2.9)
    axes = fig.subplots(1, 4, width_ratios=(k_len, k_len + 1, q_len + 0.5, k_len))
    for n, (ax, (values, title)) in enumerate(zip(axes, steps, strict=True)):
        v = values.numpy()
        ax.imshow(v, cmap="Blues", vmin=-1, vmax=2 * k_len, interpolation="nearest")
        annotate_cells(ax, v, fmt="{:.0f}", size=8)
        if n == 2:
            ax.add_patch(Rectangle((-0.5, -0.5), q_len, 1, color="red", alpha=0.25))
        if n == 3:
            for r, c in zip(*np.nonzero(~mask.numpy()), strict=True):
                ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False,
                                       hatch="///", color="red", lw=0))
        ax.set_title(title)
        ax.set_xticks(range(v.shape[1]))
        ax.set_yticks(range(v.shape[0]))
        ax.set_xlabel("key $j$" if n == 3 else "column")
        ax.set_ylabel("query $i$" if n in (0, 3) else "row")
    return fig


def _recurrence_field(
    seg_len: int, mem_len: int, n_layers: int, n_segments: int
) -> np.ndarray:
    """Which inputs of each layer reach the last token (rows: layer 0 = inputs)."""
    from ..transformer_xl import transformer_xl_mask

    total = seg_len * n_segments
    attend = torch.zeros(total, total, dtype=torch.bool)  # (T, T): query, key
    for s in range(n_segments):
        start = s * seg_len
        mem = min(mem_len, start)
        block = transformer_xl_mask(seg_len, seg_len + mem)  # (L, M + L)
        attend[start : start + seg_len, start - mem : start + seg_len] = block
    field = np.zeros((n_layers + 1, total), dtype=bool)
    reach = torch.zeros(total, dtype=torch.bool)
    reach[-1] = True
    field[n_layers] = reach.numpy()
    for layer in range(n_layers - 1, -1, -1):
        reach = (attend & reach[:, None]).any(dim=0) | reach  # residual keeps reach
        field[layer] = reach.numpy()
    return field


@styled
def plot_segment_recurrence(
    seg_len: int = 4, mem_len: int = 4, *, n_layers: int = 3, n_segments: int = 4
) -> Figure:
    """What the last token of a Transformer-XL stack can see, with and without memory.

    Keys of a segment are the cached states of the previous ``mem_len`` positions
    plus the segment itself, causally masked
    (:func:`~course_lib.transformer_xl.transformer_xl_mask`). Going down the layers
    from the last token, every layer extends the reach by up to ``mem_len``
    positions, so the context grows linearly with depth. Without memory
    (``mem_len = 0``) it stops at the segment boundary.

    Args:
        seg_len: tokens per segment.
        mem_len: cached positions per layer (the right panel).
        n_layers: layers of the stack.
        n_segments: segments drawn.

    Returns:
        Figure with two axes (no memory, with memory); each image is
        ``(n_layers + 1, seg_len * n_segments)``, 1 where a state reaches the last
        token.
    """
    fn = "plot_segment_recurrence"
    seg_len = require_positive_int(fn, "seg_len", seg_len)
    mem_len = require_int(fn, "mem_len", mem_len, minimum=0)
    n_layers = require_positive_int(fn, "n_layers", n_layers)
    n_segments = require_positive_int(fn, "n_segments", n_segments)
    total = seg_len * n_segments
    fig = new_figure(8.0, 1.0 + 0.42 * (n_layers + 1) * 2)
    axes = fig.subplots(2, 1, sharex=True)
    panels = (
        (axes[0], 0, "no memory: context stops at the segment"),
        (axes[1], mem_len, f"memory of {mem_len} positions per layer"),
    )
    for ax, m, title in panels:
        field = _recurrence_field(seg_len, m, n_layers, n_segments).astype(float)
        ax.imshow(field, cmap="Blues", vmin=0, vmax=1.3, origin="lower",
                  aspect="auto", interpolation="nearest")
        for s in range(1, n_segments):
            ax.axvline(s * seg_len - 0.5, color="k", lw=1.2)
        ax.set_xticks(np.arange(total) + 0.5, minor=True)
        ax.set_yticks(np.arange(n_layers + 1) + 0.5, minor=True)
        ax.grid(which="minor", color="white", lw=1)
        ax.tick_params(which="minor", length=0)
        ax.plot(total - 1, n_layers, "*", color="C3", ms=11)
        ax.set_yticks(range(n_layers + 1),
                      ["input"] + [f"layer {n}" for n in range(1, n_layers + 1)])
        ax.set_title(title + f" (segments of {seg_len}; star = last token)")
    axes[1].set_xlabel("position (segment boundaries in black)")
    return fig


@styled
def plot_transformer_xl_terms(
    q_len: int = 6, mem_len: int = 4, head_dim: int = 16, *, seed: int = 0
) -> Figure:
    r"""The four terms of the Transformer-XL score for one head, as heatmaps.

    With random queries, keys and global biases and the projected sinusoids of
    :func:`~course_lib.transformer_xl.relative_sinusoidal_embedding`: (a)
    :math:`q_i \cdot k_j`, (b) :math:`q_i \cdot r_{i-j}`, (c) :math:`u \cdot k_j`,
    (d) :math:`v \cdot r_{i-j}`, the position terms aligned with
    :func:`~course_lib.transformer_xl.rel_shift`. Term (c) is constant down each
    column (it ignores the query), term (d) constant along each diagonal (it sees
    only the distance). Keys after the query are blank.

    Args:
        q_len: queries (the current segment).
        mem_len: memory positions before it.
        head_dim: width of the head.
        seed: seed of the random tensors.

    Returns:
        Figure with four heatmap axes, each ``(q_len, mem_len + q_len)``.
    """
    from ..transformer_xl import (
        rel_shift,
        relative_sinusoidal_embedding,
        transformer_xl_mask,
    )

    fn = "plot_transformer_xl_terms"
    q_len = require_positive_int(fn, "q_len", q_len)
    mem_len = require_int(fn, "mem_len", mem_len, minimum=0)
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    k_len = q_len + mem_len
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(q_len, head_dim, generator=g)
    k = torch.randn(k_len, head_dim, generator=g)
    u, v = torch.randn(2, head_dim, generator=g)
    w_r = torch.randn(head_dim, 2 * ((head_dim + 1) // 2), generator=g) / math.sqrt(
        head_dim)
    r = relative_sinusoidal_embedding(k_len, w_r.shape[1]) @ w_r.T  # (Lk, D)
    terms = (
        (q @ k.T, "(a) content $q_i\\cdot k_j$"),
        (rel_shift(q @ r.T), "(b) content-position $q_i\\cdot r_{i-j}$"),
        ((u @ k.T).expand(q_len, k_len), "(c) global content $u\\cdot k_j$"),
        (rel_shift((v @ r.T).expand(q_len, k_len).contiguous()),
         "(d) global position $v\\cdot r_{i-j}$"),
    )
    visible = transformer_xl_mask(q_len, k_len).numpy()
    fig = new_figure(9.0, 2.6)
    axes = fig.subplots(1, 4)
    for ax, (values, title) in zip(axes, terms, strict=True):
        shown = np.where(visible, values.numpy(), np.nan)
        lim = float(np.nanmax(np.abs(shown)))
        ax.imshow(shown, cmap=DIVERGING, vmin=-lim, vmax=lim, interpolation="nearest")
        ax.axvline(mem_len - 0.5, color="k", lw=1)
        ax.set_xticks(range(0, k_len, 2 if k_len > 6 else 1))
        ax.set_yticks(range(q_len))
        ax.set_title(title, fontsize=8.5)
        ax.set_xlabel("key $j$ (memory | segment)")
        ax.set_ylabel("query $i$")
    return fig
