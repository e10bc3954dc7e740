r"""Chapters 5, 6 and 8: biases added to the attention scores: ALiBi slopes and bias,
Shaw/T5 relative positions and buckets, and the DA-Transformer's rescaling.

Part of :mod:`course_lib.viz`; import the figures from there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from .._validate import fail, require_positive_int
from ._common import annotate_cells, new_figure, styled

__all__ = [
    "plot_alibi_attention_decay",
    "plot_alibi_bias",
    "plot_alibi_slopes",
    "plot_attention_biases",
    "plot_da_rescale",
    "plot_da_weights",
    "plot_relative_position_index",
    "plot_t5_buckets",
]


@styled
def plot_alibi_bias(
    n_heads: int = 8,
    seq_len: int = 10,
    *,
    heads: Sequence[int] | None = None,
    causal: bool = True,
) -> Figure:
    r"""ALiBi's additive bias :math:`-m_h|i-j|` for a few heads, and all the slopes.

    Args:
        n_heads: number of heads (slopes from :func:`~course_lib.alibi.alibi_slopes`).
        seq_len: queries and keys shown.
        heads: which heads to draw (default: first, middle, last).
        causal: draw the causal bias (``-inf``, left blank, above the diagonal).

    Returns:
        Figure with one heatmap axes per drawn head (image = that head of
        :func:`~course_lib.alibi.alibi_bias`) and a last axes with the exponents
        :math:`-\log_2 m_h` of the slopes against the head index.
    """
    from ..alibi import alibi_bias, alibi_slopes

    fn = "plot_alibi_bias"
    n_heads = require_positive_int(fn, "n_heads", n_heads)
    heads = [0, n_heads // 2, n_heads - 1] if heads is None else list(heads)
    heads = list(dict.fromkeys(heads))
    for h in heads:
        if not 0 <= h < n_heads:
            fail(fn, f"heads must be in 0..{n_heads - 1}, got {heads}")
    bias = alibi_bias(n_heads, seq_len, causal=causal)  # (H, L, L)
    slopes = alibi_slopes(n_heads)

    fig = new_figure(2.7 * len(heads) + 2.4, 2.9)
    axes = fig.subplots(1, len(heads) + 1)
    for ax, h in zip(axes[:-1], heads, strict=True):
        b = bias[h].numpy()
        # each head on its own colour scale: the slopes differ by up to 2^7
        im = ax.imshow(
            np.where(np.isfinite(b), b, np.nan),
            cmap="magma",
            vmin=float(b[np.isfinite(b)].min()),
            vmax=0,
            interpolation="nearest",
        )
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.set_title(f"head {h}: $m = 2^{{{math.log2(slopes[h]):.3g}}}$")
        ax.set_xticks(range(0, seq_len, 2))
        ax.set_yticks(range(0, seq_len, 2))
        ax.set_xlabel("key $j$")
        ax.set_ylabel("query $i$")
    last = axes[-1]
    # The exponents -log2 m_h on a linear axis (the log scale of the slopes, read as
    # the numbers Press et al. write for 8 heads, 2^-1 ... 2^-8, section 3), as
    # plot_alibi_slopes places them.
    last.plot(range(n_heads), (-slopes.double().log2()).numpy(), "o-", ms=3)
    last.invert_yaxis()  # steep heads (small exponent) at the top
    last.set_xlabel("head $h$")
    last.set_ylabel(r"$-\log_2 m_h$")
    last.set_title(f"slopes, {n_heads} heads")
    fig.suptitle("ALiBi bias $-m_h|i-j|$ added to the attention scores", fontsize=10)
    return fig


@styled
def plot_alibi_slopes(head_counts: Sequence[int] = (8, 12, 16)) -> Figure:
    r"""ALiBi slopes for several head counts on one exponent axis.

    Each row is a model with ``n`` heads; each marker one head, placed at
    :math:`-\log_2 m_h`. Filled circles are the slopes of the largest power of two
    :math:`c \le n`; open squares are the extra heads, the odd-numbered slopes of a
    :math:`2c`-head model.

    Args:
        head_counts: the head counts drawn, one row each.

    Returns:
        Figure with one axes; per head count two marker collections (power-of-two
        part, extra heads) whose x data are :math:`-\log_2` of
        :func:`~course_lib.alibi.alibi_slopes`.
    """
    from ..alibi import alibi_slopes

    fn = "plot_alibi_slopes"
    counts = [require_positive_int(fn, "head_counts", n) for n in head_counts]
    if not counts:
        fail(fn, "head_counts must name at least one head count, got an empty sequence")
    fig = new_figure(6.4, 0.55 * len(counts) + 1.4)
    ax = fig.subplots()
    for row, n in enumerate(counts):
        exponent = (-alibi_slopes(n).double().log2()).numpy()
        c = 1 << (n.bit_length() - 1)
        ax.plot(
            exponent[:c],
            [row] * c,
            "o",
            color="C0",
            ms=6,
            label="largest power of two $c \\leq n$" if row == 0 else None,
        )
        if n > c:
            ax.plot(
                exponent[c:],
                [row] * (n - c),
                "s",
                mfc="none",
                color="C3",
                ms=7,
                mew=1.4,
                label="extra heads (slopes of $2c$ heads)",
            )
    ax.set_yticks(range(len(counts)), [f"{n} heads" for n in counts])
    ax.set_ylim(len(counts) - 0.4, -0.8)
    ax.set_xticks(range(0, 9))
    ax.grid(axis="x", color="0.85", lw=0.8)
    ax.set_xlabel(r"$-\log_2 m_h$ (slope $m_h = 2^{-x}$; right = gentler)")
    ax.set_title("ALiBi head slopes")
    ax.legend(loc="lower right", ncols=2, framealpha=0.95)
    return fig


@styled
def plot_alibi_attention_decay(n_heads: int = 8, seq_len: int = 64) -> Figure:
    r"""How far each ALiBi head looks when the content is neutral.

    A causal query at the last of ``seq_len`` positions with all dot products equal
    gets the weights :math:`w(d) \propto e^{-m_h d}` (a truncated geometric
    distribution over the distance :math:`d`), computed here with
    :func:`~course_lib.attention.scaled_dot_product_attention` and
    :func:`~course_lib.alibi.alibi_bias`.

    Args:
        n_heads: number of heads (all drawn).
        seq_len: keys seen by the query (distances ``0..seq_len-1``).

    Returns:
        Figure with two axes, one line per head in each: the weight against the
        distance (log scale) and the cumulative weight within each distance, with the
        half-way line. The cumulative line of head ``h`` has the gid
        ``"cumulative head h"``, so that a caption can quote numbers read from the
        plotted data.
    """
    from ..alibi import alibi_bias, alibi_slopes
    from ..attention import scaled_dot_product_attention

    fn = "plot_alibi_attention_decay"
    n_heads = require_positive_int(fn, "n_heads", n_heads)
    seq_len = require_positive_int(fn, "seq_len", seq_len)
    q = torch.zeros(1, n_heads, 1, 2)  # zero queries: every dot product is 0
    k = torch.ones(1, n_heads, seq_len, 2)
    bias = alibi_bias(n_heads, 1, seq_len, causal=True)  # (H, 1, L)
    _, weights = scaled_dot_product_attention(q, k, k, bias=bias)  # (1, H, 1, L)
    by_distance = weights[0, :, 0].flip(-1).numpy()  # (H, L): column d = distance d
    slopes = alibi_slopes(n_heads)
    dist = np.arange(seq_len)

    fig = new_figure(8.0, 3.1)
    left, right = fig.subplots(1, 2)
    colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, n_heads))
    for h in range(n_heads):
        label = f"$m = 2^{{{math.log2(slopes[h]):.3g}}}$"
        left.plot(dist, by_distance[h], lw=1.2, color=colors[h], label=label)
        right.plot(
            dist,
            by_distance[h].cumsum(),
            lw=1.2,
            color=colors[h],
            gid=f"cumulative head {h}",  # the chapter reads its caption's numbers here
        )
    left.set_yscale("log")
    left.set_ylim(max(float(by_distance.min()), 1e-6) / 2, 1.0)
    left.set_xlabel("distance $d = i - j$")
    left.set_ylabel("attention weight")
    left.set_title("weight of each key (neutral content)")
    left.legend(loc="lower left", ncols=2, fontsize=7)
    right.axhline(0.5, color="gray", ls=":", lw=1)
    right.set_ylim(0, 1.02)
    right.set_xlabel("distance $D$")
    right.set_ylabel("weight within distance $D$")
    right.set_title(f"cumulative, last of {seq_len} positions")
    return fig


@styled
def plot_t5_buckets(
    num_buckets: int = 32, max_distance: int = 128, *, span: int = 200
) -> Figure:
    """T5's relative-position buckets against ``key - query``, both variants.

    Small distances get a bucket each, larger ones share logarithmically wider
    buckets, and everything at or beyond ``max_distance`` shares the last one.

    Args:
        num_buckets: total buckets.
        max_distance: distance from which all share one bucket.
        span: relative positions ``-span .. span`` are drawn.

    Returns:
        Figure with one axes and two lines (bidirectional, causal), x = relative
        positions, y = :func:`~course_lib.relative.t5_relative_position_bucket`.
    """
    from ..relative import t5_relative_position_bucket

    span = require_positive_int("plot_t5_buckets", "span", span)
    rel = torch.arange(-span, span + 1)
    fig = new_figure(6.4, 3.0)
    ax = fig.subplots()
    for bidirectional, style in ((True, "-"), (False, "--")):
        buckets = t5_relative_position_bucket(
            rel,
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        )
        ax.step(
            rel.numpy(),
            buckets.numpy(),
            style,
            where="mid",
            lw=1.3,
            label=("bidirectional (encoder)" if bidirectional else "causal (decoder)"),
        )
    for x in (-max_distance, max_distance):
        ax.axvline(x, color="gray", ls=":", lw=0.8)
    ax.text(max_distance, 1, " max_distance", color="gray", fontsize=7)
    ax.set_xlabel("relative position (key - query)")
    ax.set_ylabel("bucket")
    ax.set_title(f"T5 buckets: {num_buckets} buckets, max_distance {max_distance}")
    ax.legend(loc="upper left")
    return fig


@styled
def plot_relative_position_index(
    cases: Sequence[tuple[int, int]] = ((6, 6), (2, 6)), max_distance: int = 2
) -> Figure:
    r"""Shaw et al.'s clipped relative index, one annotated grid per ``(q_len, k_len)``.

    Entry ``[i, j]`` is :func:`~course_lib.relative.relative_position_index`, the row
    of the tables :math:`a^K, a^V` used by query ``i`` and key ``j``:
    :math:`\mathrm{clip}(j - i', -K, K) + K` with :math:`i' = i + L_k - L_q` (queries
    are the last positions). Row ``K`` of the table is distance 0.

    Args:
        cases: ``(q_len, k_len)`` pairs, one panel each.
        max_distance: the clipping distance ``K``.

    Returns:
        Figure with one heatmap axes per case (image = the index grid) and a colorbar.
    """
    from ..relative import relative_position_index

    fn = "plot_relative_position_index"
    cases = [tuple(c) for c in cases]
    if not cases:
        fail(fn, "cases must hold at least one (q_len, k_len) pair, got none")
    max_distance = require_positive_int(fn, "max_distance", max_distance)
    grids = [relative_position_index(q, k, max_distance) for q, k in cases]
    fig = new_figure(2.0 + 0.55 * sum(k for _, k in cases), 2.9)
    axes = np.atleast_1d(
        fig.subplots(1, len(cases), width_ratios=[k for _, k in cases])
    )
    for ax, (q_len, k_len), grid in zip(axes, cases, grids, strict=True):
        g = grid.numpy()
        im = ax.imshow(
            g, cmap="coolwarm", vmin=0, vmax=2 * max_distance, interpolation="nearest"
        )
        annotate_cells(ax, g.astype(float), fmt="{:.0f}", size=8)
        ax.set_xticks(range(k_len))
        ax.set_yticks(
            range(q_len), [f"{i} ({i + k_len - q_len})" for i in range(q_len)]
        )
        ax.set_xlabel("key $j$")
        ax.set_ylabel("query $i$ (position $i'$)")
        ax.set_title(f"$L_q={q_len}$, $L_k={k_len}$, $K={max_distance}$")
    fig.colorbar(
        im,
        ax=list(axes),
        shrink=0.85,
        label=f"table row (row {max_distance} = distance 0)",
    )
    return fig


@styled
def plot_attention_biases(
    biases: dict[str, torch.Tensor], *, cmap: str = "viridis"
) -> Figure:
    """Several additive attention biases ``(q_len, k_len)`` side by side.

    Each bias gets its own colour scale (their units differ); ``-inf`` entries
    (masked keys) are left blank.

    Args:
        biases: title -> 2-D bias tensor; the caller computes them with the library.
        cmap: matplotlib colormap.

    Returns:
        Figure with one heatmap axes per bias (in the order given), each with a
        colorbar; the images equal the given biases (``nan`` where ``-inf``).
    """
    fn = "plot_attention_biases"
    if not biases:
        fail(fn, "biases must hold at least one (title, tensor) pair, got none")
    for title, b in biases.items():
        if not isinstance(b, torch.Tensor):
            fail(
                fn,
                f"biases[{title!r}] must be a torch.Tensor, got {type(b).__name__}",
                TypeError,
            )
        if b.ndim != 2:
            fail(
                fn,
                f"biases[{title!r}] must be 2-D (q_len, k_len), "
                f"got shape {tuple(b.shape)}",
            )
    fig = new_figure(2.35 * len(biases) + 0.4, 2.8)
    axes = np.atleast_1d(fig.subplots(1, len(biases)))
    for ax, (title, b) in zip(axes, biases.items(), strict=True):
        values = b.detach().double().numpy()
        shown = np.where(np.isfinite(values), values, np.nan)
        im = ax.imshow(shown, cmap=cmap, interpolation="nearest")
        fig.colorbar(im, ax=ax, shrink=0.75)
        ax.set_title(title)
        ax.set_xlabel("key $j$")
        ax.set_ylabel("query $i$")
    return fig


@styled
def plot_da_rescale(
    ws: Sequence[float] = (-1.0, -0.2, 0.2, 1.0),
    vs: Sequence[float] = (0.0, 2.0),
    *,
    max_distance: int = 20,
) -> Figure:
    r"""DA-Transformer's distance weight :math:`\hat R(R)` for several ``w`` and ``v``.

    Positive ``w`` grows the weight of distant tokens towards :math:`1 + e^v`,
    negative ``w`` shrinks it towards 0; every curve passes through 1 at distance 0.

    Args:
        ws: slopes ``w`` (one line each).
        vs: bounds ``v`` (one panel each).
        max_distance: distances ``0..max_distance``.

    Returns:
        Figure with one axes per ``v`` and one line per ``w`` (y =
        :func:`~course_lib.da.da_rescale`).
    """
    from ..da import da_rescale

    max_distance = require_positive_int("plot_da_rescale", "max_distance", max_distance)
    dist = torch.linspace(0, max_distance, 8 * max_distance + 1, dtype=torch.float64)
    fig = new_figure(3.3 * len(vs), 3.0)
    axes = np.atleast_1d(fig.subplots(1, len(vs), sharey=True))
    for ax, v in zip(axes, vs, strict=True):
        for w in ws:
            ax.plot(
                dist.numpy(), da_rescale(dist, w, v).numpy(), lw=1.3, label=f"$w={w:g}$"
            )
        ax.axhline(1 + math.exp(v), color="gray", ls="--", lw=0.8)
        ax.text(
            0,
            1 + math.exp(v),
            f"$1+e^v$ = {1 + math.exp(v):.3g}",
            va="bottom",
            fontsize=7,
            color="gray",
        )
        ax.set_xlabel("distance $R = |i-j|$")
        ax.set_ylabel(r"$\hat R$")
        ax.set_title(f"$v = {v:g}$")
        ax.legend(loc="center right")
    return fig


@styled
def plot_da_weights(
    ws: Sequence[float] = (-0.5, 0.0, 0.5),
    v: float = 1.0,
    *,
    seq_len: int = 21,
    score: float = 2.0,
) -> Figure:
    r"""DA-Transformer attention of the middle query for several ``w``.

    Every query-key product equals ``score`` (so only the distance matters), and
    :func:`~course_lib.da.da_attention` rescales it by :math:`\hat R` before the
    softmax: negative ``w`` concentrates the weight near the query, positive ``w``
    spreads it to distant keys.

    Args:
        ws: slopes ``w``, one line each (the same for every head).
        v: the bound ``v``.
        seq_len: number of positions; the middle one is the query drawn.
        score: the common value of :math:`q \cdot k` (before the :math:`1/\sqrt d`).

    Returns:
        Figure with one axes and one line per ``w`` (x = key positions, y = weights).
    """
    from ..da import da_attention

    fn = "plot_da_weights"
    seq_len = require_positive_int(fn, "seq_len", seq_len)
    ws = [float(w) for w in ws]
    if not ws:
        fail(fn, "ws must hold at least one slope, got none")
    n = len(ws)
    q = torch.full((1, n, seq_len, 1), math.sqrt(abs(score)), dtype=torch.float64)
    k = q * (1.0 if score >= 0 else -1.0)  # q . k = score for every pair
    values = torch.zeros(1, n, seq_len, 1, dtype=torch.float64)
    _, weights = da_attention(
        q,
        k,
        values,
        torch.tensor(ws, dtype=torch.float64),
        torch.full((n,), float(v), dtype=torch.float64),
    )
    mid = seq_len // 2
    fig = new_figure(6.4, 3.0)
    ax = fig.subplots()
    for h, w in enumerate(ws):
        ax.plot(
            range(seq_len),
            weights[0, h, mid].numpy(),
            "o-",
            ms=3,
            lw=1.2,
            label=f"$w={w:g}$",
        )
    ax.axvline(mid, color="gray", ls=":", lw=1)
    ax.set_xlabel(f"key $j$ (query at {mid})")
    ax.set_ylabel("attention weight")
    ax.set_title(f"DA attention with equal scores $q\\cdot k={score:g}$, $v={v:g}$")
    ax.legend()
    return fig
