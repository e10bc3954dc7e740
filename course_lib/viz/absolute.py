r"""Chapters 1-3 and the errata: permutation equivariance, the sinusoidal table
(heatmap, wavelengths, dot products, row separation), position ids and the offset
rotation ``PE[p+k] = M(k) PE[p]``.

Part of :mod:`course_lib.viz`; import the figures from there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from .._validate import fail, require_int, require_positive_int
from ._common import DIVERGING, annotate_cells, new_figure, styled

__all__ = [
    "plot_attention_permutation",
    "plot_dot_product_vs_distance",
    "plot_encoding_heatmap",
    "plot_offset_matrix",
    "plot_offset_rotation",
    "plot_position_ids",
    "plot_row_separation",
    "plot_wavelength_comparison",
    "plot_wavelengths",
]


@styled
def plot_attention_permutation(
    tokens: Sequence[str] = ("the", "cat", "chased", "the", "dog"),
    perm: Sequence[int] = (0, 4, 2, 3, 1),
    *,
    d_model: int = 8,
    seed: int = 0,
) -> Figure:
    r"""Attention weights of a sentence and of its permutation, without positions.

    Every distinct word gets a random embedding (the same word, the same vector);
    one head of :func:`~course_lib.attention.scaled_dot_product_attention` with random
    projections computes :math:`A(X)` and :math:`A(PX)`. The third panel undoes the
    permutation, :math:`P^\top A(PX) P`, and shows it equals :math:`A(X)`: the
    weights moved with the tokens and nothing else changed.

    Args:
        tokens: the words of the first sentence.
        perm: a permutation of ``range(len(tokens))``; the second sentence is
            ``[tokens[perm[i]] for i in ...]`` (the default turns "the cat chased the
            dog" into "the dog chased the cat").
        d_model: embedding width.
        seed: seed of the embeddings and projections.

    Returns:
        Figure with three heatmap axes (each ``(seq, seq)``) and a colorbar.
    """
    from ..attention import permutation_matrix, scaled_dot_product_attention

    fn = "plot_attention_permutation"
    d_model = require_positive_int(fn, "d_model", d_model)
    tokens = list(tokens)
    if len(perm) != len(tokens):
        fail(
            fn, f"perm must have one entry per token ({len(tokens)}), got {list(perm)}"
        )
    p = permutation_matrix(list(perm))  # (n, n)
    g = torch.Generator().manual_seed(seed)
    vocab = sorted(set(tokens))
    table = torch.randn(len(vocab), d_model, generator=g)  # (V, d)
    w_q, w_k = torch.randn(2, d_model, d_model, generator=g) / math.sqrt(d_model)
    x = table[[vocab.index(t) for t in tokens]]  # (n, d)

    def weights(z: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(z @ w_q, z @ w_k, z)[1]  # (n, n)

    a = weights(x)
    a_perm = weights(p @ x)
    a_back = p.T @ a_perm @ p
    permuted = [tokens[i] for i in perm]

    fig = new_figure(8.4, 3.1)
    axes = fig.subplots(1, 3)
    panels = (
        (a, tokens, "sentence 1: $A(X)$"),
        (a_perm, permuted, "sentence 2: $A(PX)$"),
        (a_back, tokens, "sentence 2 put back: $P^\\top A(PX)\\,P$"),
    )
    for ax, (w, labels, title) in zip(axes, panels, strict=True):
        im = ax.imshow(w.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
        annotate_cells(ax, w.numpy())
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_title(title)
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    return fig


@styled
def plot_encoding_heatmap(
    max_len: int = 64,
    d_model: int = 64,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
) -> Figure:
    r"""The sinusoidal table :math:`PE` as a heatmap: positions down, dimensions across.

    Args:
        max_len: number of positions shown.
        d_model: encoding width.
        base: frequency base.
        layout: ``"interleaved"`` or ``"concat"``, see
            :func:`~course_lib.sinusoidal.sinusoidal_encoding`.

    Returns:
        Figure whose first axes holds one image equal to
        ``sinusoidal_encoding(max_len, d_model, base=base, layout=layout)``.
    """
    from ..sinusoidal import sinusoidal_encoding

    pe = sinusoidal_encoding(max_len, d_model, base=base, layout=layout)
    fig = new_figure(6.4, 3.6)
    ax = fig.subplots()
    im = ax.imshow(
        pe.numpy(),
        cmap=DIVERGING,
        vmin=-1,
        vmax=1,
        aspect="auto",
        interpolation="nearest",
    )
    ax.set_xlabel("dimension of the encoding")
    ax.set_ylabel("position $p$")
    what = (
        "sin in even, cos in odd columns"
        if layout == "interleaved"
        else "all sines, then all cosines"
    )
    ax.set_title(f"Sinusoidal encoding, $d_{{model}}={d_model}$ ({what})")
    fig.colorbar(im, ax=ax, label="$PE_{p,j}$")
    return fig


@styled
def plot_wavelengths(
    d_model: int = 128,
    *,
    base: float = 10000.0,
    max_len: int = 100,
    columns: Sequence[int] = (0, 12, 24, 48),
) -> Figure:
    r"""A few columns of :math:`PE` over positions, and the wavelength of every pair.

    Pair :math:`i` (columns :math:`2i, 2i+1`) turns at :math:`\omega_i =
    \text{base}^{-2i/d}` radians per position, so its wavelength is
    :math:`\lambda_i = 2\pi\,\text{base}^{2i/d}`: a geometric ladder from
    :math:`2\pi` towards (never reaching) :math:`2\pi \cdot \text{base}`.

    Args:
        d_model: encoding width.
        base: frequency base.
        max_len: positions in the left panel.
        columns: columns of the table drawn in the left panel.

    Returns:
        Figure with two axes: the columns over positions (one line per column, data
        from :func:`~course_lib.sinusoidal.sinusoidal_encoding`) and the wavelengths
        :math:`\lambda_i` against :math:`i` on a log scale (one line, ``d_model // 2``
        points, from the encoding's frequencies).
    """
    from ..rope import rope_frequencies
    from ..sinusoidal import sinusoidal_encoding

    pe = sinusoidal_encoding(max_len, d_model, base=base)
    omega = rope_frequencies(d_model, base=base, dtype=torch.float64)  # (d/2,)
    wavelength = (2 * math.pi / omega).numpy()

    fig = new_figure(8.0, 3.0)
    left, right = fig.subplots(1, 2, width_ratios=(1.25, 1))
    for c in columns:
        kind = "sin" if c % 2 == 0 else "cos"
        lam = 2 * math.pi / omega[c // 2].item()
        left.plot(
            pe[:, c].numpy(),
            lw=1.0 if c < 2 else 1.5,
            label=f"column {c} ({kind}), $\\lambda$ = {lam:.3g}",
        )
    left.set_xlabel("position $p$")
    left.set_ylabel("$PE_{p,j}$")
    left.set_title("Columns of the table over positions")
    left.legend(loc="lower left", ncols=2, framealpha=0.9)
    left.set_ylim(-1.6, 1.15)

    i = np.arange(d_model // 2)
    right.plot(i, wavelength, ".-", ms=3, lw=1, label=r"$\lambda_i = 2\pi\,b^{2i/d}$")
    right.axhline(2 * math.pi, color="gray", ls=":", lw=1)
    right.axhline(2 * math.pi * base, color="gray", ls="--", lw=1)
    right.text(0, 2 * math.pi * 1.4, r"$2\pi$", color="gray")
    right.text(0, 2 * math.pi * base * 1.4, rf"$2\pi\cdot{base:g}$", color="gray")
    right.set_yscale("log")
    right.set_ylim(2, 2 * math.pi * base * 8)
    right.set_xlabel("pair index $i$")
    right.set_ylabel("wavelength (positions)")
    right.set_title("Wavelength of each pair")
    right.legend(loc="lower right")
    return fig


@styled
def plot_dot_product_vs_distance(
    max_len: int = 128,
    d_model: int = 64,
    *,
    base: float = 10000.0,
    anchors: Sequence[int] = (0, 32, 64),
) -> Figure:
    r"""Dot products of sinusoidal encodings depend only on the offset.

    Left: the Gram matrix :math:`PE\,PE^\top`, constant along every diagonal.
    Right: :math:`PE_p \cdot PE_{p+k}` against :math:`k` for several anchors
    :math:`p`; the curves lie on top of each other and of
    :math:`\sum_i \cos(k\omega_i)`, symmetric in :math:`k`.

    Args:
        max_len: number of positions.
        d_model: encoding width.
        base: frequency base.
        anchors: the positions :math:`p` of the right panel (each ``< max_len``).

    Returns:
        Figure with two axes: the Gram matrix image ``(max_len, max_len)``, and one
        line per anchor (x = offsets ``-p .. max_len-1-p``, y = dot products).
    """
    from ..sinusoidal import sinusoidal_encoding

    fn = "plot_dot_product_vs_distance"
    for p in anchors:
        require_int(fn, "anchors[...]", p, minimum=0)
        if p >= max_len:
            fail(fn, f"anchors must be < max_len={max_len}, got {list(anchors)}")
    pe = sinusoidal_encoding(max_len, d_model, base=base).double()
    gram = (pe @ pe.T).numpy()  # (L, L)

    fig = new_figure(8.0, 3.2)
    left, right = fig.subplots(1, 2)
    im = left.imshow(gram, cmap="viridis", interpolation="nearest")
    left.set_xlabel("position $q$")
    left.set_ylabel("position $p$")
    left.set_title(r"$PE_p \cdot PE_q$ (constant along diagonals)")
    fig.colorbar(im, ax=left, shrink=0.85)

    styles = ("-", "--", ":", "-.")
    for n, p in enumerate(anchors):
        offsets = np.arange(-p, max_len - p)
        right.plot(
            offsets,
            gram[p, p + offsets],
            styles[n % len(styles)],
            lw=1.4,
            label=f"$p = {p}$",
        )
    right.set_xlabel("offset $k$")
    right.set_ylabel(r"$PE_p \cdot PE_{p+k}$")
    right.set_title("Same curve from every anchor $p$")
    right.axhline(0, color="gray", lw=0.6)
    right.legend(loc="best")
    return fig


@styled
def plot_position_ids(lengths: Sequence[int] = (5, 3, 2), seq_len: int = 6) -> Figure:
    """Position ids of a padded batch, right padding and left padding side by side.

    The ids come from :func:`~course_lib.sinusoidal.position_ids_from_attention_mask`:
    real tokens count 0, 1, 2, ... wherever the padding is, and padding gets 0.

    Args:
        lengths: number of real tokens in each sequence of the batch.
        seq_len: padded length (at least ``max(lengths)``).

    Returns:
        Figure with two axes (right padding, left padding); each image is the mask
        ``(batch, seq_len)`` and each cell is labelled with its position id.
    """
    from ..sinusoidal import position_ids_from_attention_mask

    fn = "plot_position_ids"
    seq_len = require_positive_int(fn, "seq_len", seq_len)
    lengths = [require_int(fn, "lengths[...]", n, minimum=0) for n in lengths]
    if not lengths or max(lengths) > seq_len:
        fail(
            fn,
            f"lengths must be non-empty and at most seq_len={seq_len}, got {lengths}",
        )
    t = torch.arange(seq_len)
    n = torch.tensor(lengths)[:, None]  # (batch, 1)
    masks = {"right padding": t < n, "left padding": t >= seq_len - n}

    fig = new_figure(7.2, 0.9 + 0.45 * len(lengths))
    axes = fig.subplots(1, 2)
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        ids = position_ids_from_attention_mask(mask)  # (batch, seq_len)
        ax.imshow(
            mask.numpy(), cmap="Greens", vmin=-0.6, vmax=1.6, interpolation="nearest"
        )
        for (r, c), pid in np.ndenumerate(ids.numpy()):
            real = bool(mask[r, c])
            ax.text(
                c,
                r,
                str(pid) if real else f"pad\n({pid})",
                ha="center",
                va="center",
                fontsize=8 if real else 6.5,
                color="black" if real else "gray",
            )
        ax.set_xticks(range(seq_len))
        ax.set_yticks(range(len(lengths)), [f"seq {b}" for b in range(len(lengths))])
        ax.set_xlabel("slot in the padded batch")
        ax.set_ylabel("sequence")
        ax.set_title(f"{title}: position ids")
    return fig


@styled
def plot_offset_rotation(
    k: int = 1,
    *,
    d_model: int = 4,
    positions: Sequence[int] = (0, 1, 5, 6),
    base: float = 10000.0,
    max_pos: int = 8,
) -> Figure:
    r"""A shift by :math:`k` positions turns each (sin, cos) pair by :math:`k\omega_i`.

    One panel per pair :math:`i` of a ``d_model``-wide encoding: the points
    :math:`(\sin p\omega_i, \cos p\omega_i)` for :math:`p = 0 .. ` ``max_pos``, on the
    unit circle, and an arrow from :math:`PE_p` to :math:`M(k)\,PE_p` (computed with
    :func:`~course_lib.rotation.offset_matrix`) for each highlighted position; each
    arrow turns by the same angle :math:`k\omega_i`, whatever :math:`p` is.

    Args:
        k: the offset.
        d_model: encoding width (one panel per pair, so keep it small).
        positions: positions whose shift is drawn.
        base: frequency base.
        max_pos: last position drawn as a dot.

    Returns:
        Figure with ``d_model // 2`` axes. In each, the first line holds the points
        ``(sin, cos)`` of positions ``0..max_pos``, and one arrow patch per highlighted
        position goes from ``PE_p`` to ``(offset_matrix(k) @ PE_p)`` (that pair).
    """
    from ..rotation import offset_matrix
    from ..sinusoidal import sinusoidal_encoding

    fn = "plot_offset_rotation"
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model > 8:
        fail(fn, f"d_model must be at most 8 (one panel per pair), got {d_model}")
    k = require_int(fn, "k", k)
    pe = sinusoidal_encoding(
        max_pos + 1 + max(positions, default=0), d_model, base=base
    ).double()
    shifted = (
        offset_matrix(k, d_model, base=base, dtype=torch.float64)
        @ pe[list(positions)].T
    ).T  # (len(positions), d_model)

    n_pairs = d_model // 2
    fig = new_figure(3.3 * n_pairs, 3.7)
    axes = np.atleast_1d(fig.subplots(1, n_pairs))
    circle = np.linspace(0, 2 * np.pi, 400)
    colors = matplotlib.colormaps["tab10"]
    for i, ax in enumerate(axes):
        dots = pe[: max_pos + 1, 2 * i : 2 * i + 2].numpy()  # (max_pos + 1, 2)
        ax.plot(dots[:, 0], dots[:, 1], "o", ms=4, color="0.35", zorder=3)
        ax.plot(np.sin(circle), np.cos(circle), color="0.8", lw=0.8, zorder=1)
        for p, (s, c) in enumerate(dots):
            ax.annotate(
                str(p),
                (s, c),
                xytext=(9 * s, 9 * c),
                textcoords="offset points",
                ha="center",
                va="center",
                fontsize=7,
                color="0.35",
            )
        ends = []
        for n, p in enumerate(positions):
            start = pe[p, 2 * i : 2 * i + 2].numpy()
            end = shifted[n, 2 * i : 2 * i + 2].numpy()
            ends.append(end)
            ax.add_patch(
                FancyArrowPatch(
                    tuple(start),
                    tuple(end),
                    arrowstyle="-|>",
                    mutation_scale=10,
                    color=colors(n % 10),
                    lw=1.4,
                    zorder=4,
                    connectionstyle="arc3,rad=-0.25",
                    label=f"$p={p} \\to {p + k}$",
                )
            )
        omega = base ** (-2 * i / d_model)
        ax.set_title(
            f"pair {i}: $\\omega_{i}$ = {omega:.3g} rad per position\n"
            f"turn by $k\\omega_{i}$ = {k * omega:.3g} rad"
        )
        ax.set_xlabel(f"$PE_{{p,{2 * i}}} = \\sin(p\\,\\omega_{i})$")
        ax.set_ylabel(f"$PE_{{p,{2 * i + 1}}} = \\cos(p\\,\\omega_{i})$")
        ax.set_aspect("equal")
        pts = np.concatenate((dots, np.array(ends)))
        lo, hi = pts.min(0), pts.max(0)
        if (hi - lo).max() < 0.5:  # a slow pair: zoom in on the short arc it covers
            mid, half = (lo + hi) / 2, max((hi - lo).max() * 0.75, 0.01)
            ax.set_xlim(mid[0] - half, mid[0] + half)
            ax.set_ylim(mid[1] - half, mid[1] + half)
            ax.set_title(ax.get_title() + " (zoomed in)")
        else:
            ax.set_xlim(-1.35, 1.35)
            ax.set_ylim(-1.35, 1.35)
    handles = axes[0].patches
    fig.legend(
        handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8
    )
    fig.suptitle(
        f"$PE_{{p+{k}}} = M({k})\\,PE_p$: every pair turns by a fixed angle",
        fontsize=10,
    )
    return fig


@styled
def plot_wavelength_comparison(frequencies: dict[str, torch.Tensor]) -> Figure:
    r"""Wavelengths :math:`2\pi/\omega_i` of several frequency ladders, log scale.

    Used to compare a sinusoidal table with a faulty one (for example an exponent
    that is off by a factor of two): the caller passes each ladder's angular
    frequencies per pair.

    Args:
        frequencies: label -> 1-D tensor of angular frequencies :math:`\omega_i > 0`.

    Returns:
        Figure with one axes and one line per ladder (x = pair index, y =
        wavelength in positions).
    """
    fn = "plot_wavelength_comparison"
    if not frequencies:
        fail(fn, "frequencies must hold at least one (label, tensor) pair, got none")
    fig = new_figure(6.4, 3.0)
    ax = fig.subplots()
    for label, omega in frequencies.items():
        if (
            not isinstance(omega, torch.Tensor)
            or omega.ndim != 1
            or not bool((omega > 0).all())
        ):
            fail(
                fn,
                f"frequencies[{label!r}] must be a 1-D tensor of positive "
                f"frequencies, got {omega!r}",
            )
        wavelength = (2 * math.pi / omega.double()).numpy()
        ax.plot(np.arange(len(wavelength)), wavelength, ".-", ms=3, lw=1.1, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("pair index $i$ (columns $2i, 2i+1$)")
    ax.set_ylabel("wavelength (positions)")
    ax.set_title("Wavelength of each sin/cos pair")
    ax.legend()
    return fig


@styled
def plot_row_separation(
    d_models: Sequence[int] = (4, 8, 16, 64),
    max_offset: int = 100_000,
    *,
    base: float = 10000.0,
) -> Figure:
    r"""The closest two rows of the sinusoidal table come within a range of offsets.

    The distance between two rows depends only on their offset :math:`k`,

    .. math::

        \lVert PE_p - PE_{p+k} \rVert^2 = 2 \sum_i \bigl(1 - \cos k\omega_i\bigr),

    so the closest pair among :math:`K + 1` consecutive positions is
    :math:`\min_{1 \le k \le K} \lVert PE_0 - PE_k \rVert`. The figure draws that
    running minimum against :math:`K` for several widths, with the rows taken from
    :func:`~course_lib.sinusoidal.sinusoidal_encoding`.

    Args:
        d_models: encoding widths, one line each (even).
        max_offset: the largest offset :math:`K` drawn.
        base: frequency base.

    Returns:
        Figure with one axes (log-log) and one step line per width: x holds the offsets
        where the running minimum drops, then ``max_offset``; y holds the running
        minimum there (``drawstyle="steps-post"``).
    """
    from ..sinusoidal import sinusoidal_encoding

    fn = "plot_row_separation"
    max_offset = require_positive_int(fn, "max_offset", max_offset)
    widths = [require_positive_int(fn, "d_models[...]", d) for d in d_models]
    if not widths or any(d % 2 for d in widths):
        fail(
            fn,
            f"d_models must be a non-empty list of even widths, got {list(d_models)}",
        )
    fig = new_figure(6.4, 3.0)
    ax = fig.subplots()
    for d in widths:
        pe = sinusoidal_encoding(max_offset + 1, d, base=base).double()  # (K+1, d)
        dist = (pe[1:] - pe[0]).norm(dim=-1)  # (K,): offset k = 1..K
        running = torch.cummin(dist, dim=0).values  # (K,)
        drops = torch.nonzero(running[1:] < running[:-1]).flatten() + 1
        idx = torch.cat(
            (torch.zeros(1, dtype=torch.long), drops, torch.tensor([max_offset - 1]))
        )
        ax.plot(
            (idx + 1).numpy(),
            running[idx].numpy(),
            drawstyle="steps-post",
            lw=1.4,
            label=f"$d_{{model}} = {d}$",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("range of offsets $K$ (positions)")
    ax.set_ylabel(r"$\min_{1 \leq k \leq K} \|PE_0 - PE_k\|$")
    ax.set_title("Distance between the two closest rows among $K+1$ positions")
    ax.legend(loc="lower left")
    return fig


@styled
def plot_offset_matrix(
    k: int = 1, d_model: int = 8, *, base: float = 10000.0
) -> Figure:
    r"""The matrix :math:`M(k)` with :math:`PE_{p+k} = M(k)\,PE_p`, entry by entry.

    Block :math:`i` (rows and columns :math:`2i, 2i+1`) is
    :math:`\begin{pmatrix}\cos k\omega_i & \sin k\omega_i \\ -\sin k\omega_i &
    \cos k\omega_i\end{pmatrix}`, taken from :func:`~course_lib.rotation.offset_matrix`;
    every entry outside the blocks is 0.

    Args:
        k: the offset.
        d_model: encoding width, even, at most 12 so that the entries stay legible.
        base: frequency base.

    Returns:
        Figure with one axes whose image is ``offset_matrix(k, d_model, base=base)``
        in float64 (the colour shows each value); each entry of a block is labelled
        with its symbol, :math:`c_i`, :math:`s_i` or :math:`-s_i` (with
        :math:`c_i = \cos k\omega_i`, :math:`s_i = \sin k\omega_i`), not with its
        number: the exercise that builds :math:`M(k)` is left to derive the values.
    """
    from ..rotation import offset_matrix

    fn = "plot_offset_matrix"
    k = require_int(fn, "k", k)
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model % 2 or d_model > 12:
        fail(fn, f"d_model must be even and at most 12, got {d_model}")
    m = offset_matrix(k, d_model, base=base, dtype=torch.float64).numpy()
    fig = new_figure(1.2 + 0.48 * d_model, 0.9 + 0.42 * d_model)
    ax = fig.subplots()
    im = ax.imshow(m, cmap=DIVERGING, vmin=-1, vmax=1, interpolation="nearest")
    for (r, c), val in np.ndenumerate(m):
        if r // 2 == c // 2:
            i = r // 2
            symbol = f"c_{i}" if r == c else (f"s_{i}" if r < c else f"-s_{i}")
            ax.text(
                c,
                r,
                f"${symbol}$",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if abs(val) > 0.6 else "black",
            )
    for i in range(d_model // 2):
        ax.add_patch(
            Rectangle(
                (2 * i - 0.5, 2 * i - 0.5), 2, 2, fill=False, edgecolor="0.2", lw=1.0
            )
        )
    names = [
        f"{'sin' if j % 2 == 0 else 'cos'} $\\omega_{j // 2}$" for j in range(d_model)
    ]
    ax.set_xticks(range(d_model), names, rotation=90)
    ax.set_yticks(range(d_model), names)
    ax.set_xlabel("input: column of $PE_p$")
    ax.set_ylabel("output: column of $PE_{p+k}$")
    ax.set_title(f"$M({k})$, $d_{{model}} = {d_model}$: one block per frequency")
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig
