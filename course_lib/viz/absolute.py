r"""Every figure of the book, deterministic, as matplotlib Figures.

Each function computes its data with ``course_lib`` (never a private copy of an
algorithm), draws it on a fresh :class:`matplotlib.figure.Figure` and returns the
figure. No pyplot state is touched, nothing is shown or saved: the book displays the
returned figure, the tests inspect its axes, and a reader can call
``fig.savefig("name.png")``. Randomness (example embeddings and weights) comes from an
explicit seed, so every call draws the same picture.

Figures are sized for a narrow page (about 6.5 x 3 inches) with 9-point text, so they
stay readable when the browser window is small.

The file is organised in sections, one per group of chapters; new figures are added
as a new section at the end, each section extending ``__all__``.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from ._validate import fail, require_int, require_positive_int

__all__ = [
    "plot_alibi_bias",
    "plot_attention_permutation",
    "plot_da_rescale",
    "plot_dot_product_vs_distance",
    "plot_encoding_heatmap",
    "plot_offset_rotation",
    "plot_position_ids",
    "plot_rel_shift_steps",
    "plot_rope_decay",
    "plot_rope_pairing",
    "plot_rope_relative",
    "plot_t5_buckets",
    "plot_wavelengths",
]

# Small, consistent text: the figures must read well at about 650 px wide.
_RC = {
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_DIVERGING = "RdBu_r"
_F = TypeVar("_F", bound=Callable[..., Figure])


def _styled(fn: _F) -> _F:
    """Draw ``fn``'s figure under the book's style (restored afterwards)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(_RC):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class _BookFigure(Figure):
    """A Figure that Jupyter displays as PNG even when pyplot was never imported."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()


def _figure(width: float, height: float) -> Figure:
    return _BookFigure(figsize=(width, height), layout="constrained")


def _annotate_cells(ax, values: np.ndarray, fmt: str = "{:.2f}", size: float = 7):
    """Write each entry of a small matrix into its heatmap cell."""
    finite = values[np.isfinite(values)]
    mid = (finite.max() + finite.min()) / 2 if finite.size else 0.0
    for (r, c), val in np.ndenumerate(values):
        text = fmt.format(val) if np.isfinite(val) else ("-inf" if val < 0 else "inf")
        dark = np.isfinite(val) and val > mid
        ax.text(c, r, text, ha="center", va="center", fontsize=size,
                color="white" if dark else "black")


# --------------------------------------------------------------------------------------
# Chapters 1-4: permutation equivariance, sinusoids, the rotation, RoPE
# --------------------------------------------------------------------------------------


@_styled
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
    from .attention import permutation_matrix, scaled_dot_product_attention

    fn = "plot_attention_permutation"
    d_model = require_positive_int(fn, "d_model", d_model)
    tokens = list(tokens)
    if len(perm) != len(tokens):
        fail(fn, f"perm must have one entry per token ({len(tokens)}), "
             f"got {list(perm)}")
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

    fig = _figure(8.4, 3.1)
    axes = fig.subplots(1, 3)
    panels = (
        (a, tokens, "sentence 1: $A(X)$"),
        (a_perm, permuted, "sentence 2: $A(PX)$"),
        (a_back, tokens, "sentence 2 put back: $P^\\top A(PX)\\,P$"),
    )
    for ax, (w, labels, title) in zip(axes, panels, strict=True):
        im = ax.imshow(w.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
        _annotate_cells(ax, w.numpy())
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_title(title)
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    return fig


@_styled
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
    from .sinusoidal import sinusoidal_encoding

    pe = sinusoidal_encoding(max_len, d_model, base=base, layout=layout)
    fig = _figure(6.4, 3.6)
    ax = fig.subplots()
    im = ax.imshow(pe.numpy(), cmap=_DIVERGING, vmin=-1, vmax=1, aspect="auto",
                   interpolation="nearest")
    ax.set_xlabel("dimension of the encoding")
    ax.set_ylabel("position $p$")
    what = ("sin in even, cos in odd columns" if layout == "interleaved"
            else "all sines, then all cosines")
    ax.set_title(f"Sinusoidal encoding, $d_{{model}}={d_model}$ ({what})")
    fig.colorbar(im, ax=ax, label="$PE_{p,j}$")
    return fig


@_styled
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
    from .rope import rope_frequencies
    from .sinusoidal import sinusoidal_encoding

    pe = sinusoidal_encoding(max_len, d_model, base=base)
    omega = rope_frequencies(d_model, base=base, dtype=torch.float64)  # (d/2,)
    wavelength = (2 * math.pi / omega).numpy()

    fig = _figure(8.0, 3.0)
    left, right = fig.subplots(1, 2, width_ratios=(1.25, 1))
    for c in columns:
        kind = "sin" if c % 2 == 0 else "cos"
        lam = 2 * math.pi / omega[c // 2].item()
        left.plot(pe[:, c].numpy(), lw=1.0 if c < 2 else 1.5,
                  label=f"column {c} ({kind}), $\\lambda$ = {lam:.3g}")
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


@_styled
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
    from .sinusoidal import sinusoidal_encoding

    fn = "plot_dot_product_vs_distance"
    for p in anchors:
        require_int(fn, "anchors[...]", p, minimum=0)
        if p >= max_len:
            fail(fn, f"anchors must be < max_len={max_len}, got {list(anchors)}")
    pe = sinusoidal_encoding(max_len, d_model, base=base).double()
    gram = (pe @ pe.T).numpy()  # (L, L)

    fig = _figure(8.0, 3.2)
    left, right = fig.subplots(1, 2)
    im = left.imshow(gram, cmap="viridis", interpolation="nearest")
    left.set_xlabel("position $q$")
    left.set_ylabel("position $p$")
    left.set_title(r"$PE_p \cdot PE_q$ (constant along diagonals)")
    fig.colorbar(im, ax=left, shrink=0.85)

    styles = ("-", "--", ":", "-.")
    for n, p in enumerate(anchors):
        offsets = np.arange(-p, max_len - p)
        right.plot(offsets, gram[p, p + offsets], styles[n % len(styles)], lw=1.4,
                   label=f"$p = {p}$")
    right.set_xlabel("offset $k$")
    right.set_ylabel(r"$PE_p \cdot PE_{p+k}$")
    right.set_title("Same curve from every anchor $p$")
    right.axhline(0, color="gray", lw=0.6)
    right.legend(loc="best")
    return fig


@_styled
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
    from .sinusoidal import position_ids_from_attention_mask

    fn = "plot_position_ids"
    seq_len = require_positive_int(fn, "seq_len", seq_len)
    lengths = [require_int(fn, "lengths[...]", n, minimum=0) for n in lengths]
    if not lengths or max(lengths) > seq_len:
        fail(fn, f"lengths must be non-empty and at most seq_len={seq_len}, "
             f"got {lengths}")
    t = torch.arange(seq_len)
    n = torch.tensor(lengths)[:, None]  # (batch, 1)
    masks = {"right padding": t < n, "left padding": t >= seq_len - n}

    fig = _figure(7.2, 0.9 + 0.45 * len(lengths))
    axes = fig.subplots(1, 2)
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        ids = position_ids_from_attention_mask(mask)  # (batch, seq_len)
        ax.imshow(mask.numpy(), cmap="Greens", vmin=-0.6, vmax=1.6,
                  interpolation="nearest")
        for (r, c), pid in np.ndenumerate(ids.numpy()):
            real = bool(mask[r, c])
            ax.text(c, r, str(pid) if real else f"pad\n({pid})", ha="center",
                    va="center", fontsize=8 if real else 6.5,
                    color="black" if real else "gray")
        ax.set_xticks(range(seq_len))
        ax.set_yticks(range(len(lengths)), [f"seq {b}" for b in range(len(lengths))])
        ax.set_xlabel("slot in the padded batch")
        ax.set_ylabel("sequence")
        ax.set_title(f"{title}: position ids")
    return fig


@_styled
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
    from .rotation import offset_matrix
    from .sinusoidal import sinusoidal_encoding

    fn = "plot_offset_rotation"
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model > 8:
        fail(fn, f"d_model must be at most 8 (one panel per pair), got {d_model}")
    k = require_int(fn, "k", k)
    pe = sinusoidal_encoding(max_pos + 1 + max(positions, default=0), d_model,
                             base=base).double()
    shifted = (offset_matrix(k, d_model, base=base, dtype=torch.float64)
               @ pe[list(positions)].T).T  # (len(positions), d_model)

    n_pairs = d_model // 2
    fig = _figure(3.3 * n_pairs, 3.7)
    axes = np.atleast_1d(fig.subplots(1, n_pairs))
    circle = np.linspace(0, 2 * np.pi, 400)
    colors = matplotlib.colormaps["tab10"]
    for i, ax in enumerate(axes):
        dots = pe[: max_pos + 1, 2 * i : 2 * i + 2].numpy()  # (max_pos + 1, 2)
        ax.plot(dots[:, 0], dots[:, 1], "o", ms=4, color="0.35", zorder=3)
        ax.plot(np.sin(circle), np.cos(circle), color="0.8", lw=0.8, zorder=1)
        for p, (s, c) in enumerate(dots):
            ax.annotate(str(p), (s, c), xytext=(9 * s, 9 * c),
                        textcoords="offset points", ha="center", va="center",
                        fontsize=7, color="0.35")
        ends = []
        for n, p in enumerate(positions):
            start = pe[p, 2 * i : 2 * i + 2].numpy()
            end = shifted[n, 2 * i : 2 * i + 2].numpy()
            ends.append(end)
            ax.add_patch(FancyArrowPatch(
                tuple(start), tuple(end), arrowstyle="-|>", mutation_scale=10,
                color=colors(n % 10), lw=1.4, zorder=4,
                connectionstyle="arc3,rad=-0.25",
                label=f"$p={p} \\to {p + k}$"))
        omega = base ** (-2 * i / d_model)
        ax.set_title(f"pair {i}: $\\omega_{i}$ = {omega:.3g} rad per position\n"
                     f"turn by $k\\omega_{i}$ = {k * omega:.3g} rad")
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
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
               fontsize=8)
    fig.suptitle(f"$PE_{{p+{k}}} = M({k})\\,PE_p$: every pair turns by a fixed angle",
                 fontsize=10)
    return fig


def _rope_partner(head_dim: int, convention: str) -> list[int]:
    """partner[j]: the dimension that RoPE rotates together with dimension j.

    Found by rotating each basis vector e_j (position 1, base 2 so that no frequency
    is negligible) with :func:`apply_rope` and reading where its mass went.
    """
    from .rope import apply_rope

    eye = torch.eye(head_dim, dtype=torch.float64)[:, None, :]  # (d, 1, d)
    x = torch.cat((torch.zeros_like(eye), eye), dim=1)  # (d, 2, d): positions 0, 1
    out = apply_rope(x, base=2.0, convention=convention)[:, 1]  # (d, d)
    out = out.abs() * (1 - torch.eye(head_dim, dtype=torch.float64))
    return out.argmax(dim=-1).tolist()


@_styled
def plot_rope_pairing(head_dim: int = 8) -> Figure:
    """Which dimensions RoPE rotates together: interleaved vs rotate-half.

    The pairs are read off :func:`~course_lib.rope.apply_rope` itself (a basis vector
    rotated at position 1 leaks only into its partner), and drawn as arcs over the
    ``head_dim`` slots of a query vector; arc ``i`` turns at frequency
    :math:`\\theta_i`.

    Args:
        head_dim: head dimension, even, at most 16 for a readable drawing.

    Returns:
        Figure with two axes (``"interleaved"`` then ``"half"``); each carries one arc
        patch per pair and the partner list in ``ax.partners`` (``partner[j]``).
    """
    fn = "plot_rope_pairing"
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    if head_dim % 2 or head_dim > 16:
        fail(fn, f"head_dim must be even and at most 16, got {head_dim}")
    fig = _figure(6.4, 2.9)
    axes = fig.subplots(2, 1)
    colors = matplotlib.colormaps["viridis"]
    titles = {
        "interleaved": "interleaved: pairs $(2i, 2i+1)$ (RoFormer, Meta LLaMA)",
        "half": "rotate-half: pairs $(i, i+d/2)$ (GPT-NeoX, Hugging Face Llama)",
    }
    for ax, convention in zip(axes, ("interleaved", "half"), strict=True):
        partner = _rope_partner(head_dim, convention)
        ax.partners = partner
        pairs = sorted({tuple(sorted((j, partner[j]))) for j in range(head_dim)})
        for idx, (a, b) in enumerate(pairs):
            color = colors(idx / max(1, len(pairs) - 1) * 0.85)
            for j in (a, b):
                ax.add_patch(Rectangle((j - 0.42, -0.4), 0.84, 0.8, color=color,
                                       alpha=0.85))
                ax.text(j, 0, f"{j}", ha="center", va="center", color="white",
                        fontsize=8, fontweight="bold")
            height = 0.35 + (0.18 * idx if b - a > 1 else 0.0)
            t = np.linspace(0, 1, 60)
            ax.plot(a + (b - a) * t, 0.42 + height * np.sin(np.pi * t), color=color,
                    lw=1.3)
            ax.text((a + b) / 2 + (0.25 if b - a > 1 else 0), 0.45 + height,
                    f"$\\theta_{idx}$", ha="center", va="bottom", fontsize=7.5,
                    color=color)
        ax.set_xlim(-0.7, head_dim - 0.3)
        ax.set_ylim(-0.55, 1.2 + 0.18 * (head_dim // 2 - 1))
        ax.set_yticks([])
        ax.set_xticks(range(head_dim))
        ax.set_xlabel("dimension of the query/key vector")
        ax.set_title(titles[convention], loc="left")
        ax.spines["left"].set_visible(False)
    return fig


@_styled
def plot_rope_relative(
    q: Sequence[float] = (1.0, 0.2),
    k: Sequence[float] = (0.6, 0.7),
    position_pairs: Sequence[tuple[int, int]] = ((1, 0), (4, 3)),
) -> Figure:
    r"""One 2-D query/key pair rotated by RoPE at two placements with the same offset.

    With ``head_dim = 2`` the single frequency is :math:`\theta_0 = 1` radian per
    position. For each ``(m, n)`` the panel shows :math:`R_m q` and :math:`R_n k`
    (computed with :func:`~course_lib.rope.apply_rope`); both placements have the
    same :math:`m - n`, so the angle between the rotated vectors, and their dot
    product, is the same.

    Args:
        q: the query pair.
        k: the key pair.
        position_pairs: ``(m, n)`` placements (query position, key position).

    Returns:
        Figure with one axes per placement; the title of each ends with the score
        ``<R_m q, R_n k>`` and ``ax.score`` holds it as a float.
    """
    from .rope import apply_rope

    qv = torch.tensor([list(q)], dtype=torch.float64)  # (1, 2)
    kv = torch.tensor([list(k)], dtype=torch.float64)  # (1, 2)
    fig = _figure(3.1 * len(position_pairs), 3.2)
    axes = np.atleast_1d(fig.subplots(1, len(position_pairs)))
    circle = np.linspace(0, 2 * np.pi, 200)
    for ax, (m, n) in zip(axes, position_pairs, strict=True):
        qm = apply_rope(qv, torch.tensor([m]))[0].numpy()
        kn = apply_rope(kv, torch.tensor([n]))[0].numpy()
        score = float(qm @ kn)
        ax.score = score
        r = max(np.hypot(*q), np.hypot(*k))
        ax.plot(r * np.cos(circle), r * np.sin(circle), color="0.85", lw=0.8)
        for vec, label, color in ((qv[0].numpy(), "$q$", "C0"),
                                  (kv[0].numpy(), "$k$", "C1")):
            ax.annotate("", xy=tuple(vec), xytext=(0, 0),
                        arrowprops={"arrowstyle": "-|>", "color": color, "alpha": 0.3,
                                    "lw": 1})
            ax.text(*(vec * 1.12), label, color=color, alpha=0.5, ha="center")
        for vec, label, color in ((qm, f"$R_{{{m}}}q$", "C0"),
                                  (kn, f"$R_{{{n}}}k$", "C1")):
            ax.annotate("", xy=tuple(vec), xytext=(0, 0),
                        arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.8})
            ax.text(*(vec * 1.18), label, color=color, ha="center", va="center")
        ax.set_aspect("equal")
        lim = 1.45 * r
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_xlabel("dimension 0")
        ax.set_ylabel("dimension 1")
        ax.set_title(f"$m={m}$, $n={n}$: score {score:.3f}")
    fig.suptitle("Same offset $m-n$, same angle, same score", fontsize=10)
    return fig


@_styled
def plot_rope_decay(
    head_dim: int = 128,
    max_distance: int = 256,
    *,
    bases: Sequence[float] = (10000.0,),
) -> Figure:
    r"""RoFormer's long-range decay: the bound, and the score of identical vectors.

    Left: the quantity RoFormer plots (section 3.4.3),
    :math:`\frac{1}{d/2}\sum_{j=1}^{d/2} |S_j|` with
    :math:`S_j = \sum_{i=0}^{j-1} e^{\mathrm{i} r\theta_i}`, against the relative
    distance :math:`r`; it bounds how large a score can stay at distance
    :math:`r` (up to the variation of the query-key products), and decays on average.
    Right: the score :math:`\langle R_m q, R_{m+r}\, q\rangle / d` of the all-ones
    vector with itself, computed with :func:`~course_lib.rope.apply_rope`, which
    equals :math:`\frac{2}{d}\sum_i \cos(r\theta_i)`.

    Args:
        head_dim: dimension :math:`d` of one head.
        max_distance: largest relative distance drawn.
        bases: one curve per base :math:`\theta` (``base``).

    Returns:
        Figure with two axes, one line per base in each (x = distances
        ``0..max_distance``).
    """
    from .rope import apply_rope, rope_angles

    fn = "plot_rope_decay"
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    max_distance = require_positive_int(fn, "max_distance", max_distance)
    r = torch.arange(max_distance + 1)
    fig = _figure(8.0, 3.1)
    left, right = fig.subplots(1, 2)
    for base in bases:
        angles = rope_angles(r, head_dim, base=base)  # (R, d/2) = r * theta_i
        partial_sums = torch.polar(torch.ones_like(angles), angles).cumsum(-1)
        bound = partial_sums.abs().mean(-1)  # (R,)
        left.plot(r.numpy(), bound.numpy(), lw=1.2, label=f"base {base:g}")
        ones = torch.ones(max_distance + 1, head_dim, dtype=torch.float64)
        rotated = apply_rope(ones, r, base=base)  # (R, d): R_r 1
        score = rotated @ rotated[0] / head_dim  # (R,): <R_0 1, R_r 1> / d
        right.plot(r.numpy(), score.numpy(), lw=1.2, label=f"base {base:g}")
    left.set_xlabel("relative distance $r$")
    left.set_ylabel(r"mean of $|S_j|$ over $j$")
    left.set_title(f"RoFormer's upper bound ($d={head_dim}$)")
    right.set_xlabel("relative distance $r$")
    right.set_ylabel(r"$\langle R_m \mathbf{1}, R_{m+r} \mathbf{1}\rangle / d$")
    right.set_title("Score of identical all-ones $q$, $k$")
    right.axhline(0, color="gray", lw=0.6)
    for ax in (left, right):
        ax.legend(loc="upper right")
    return fig


# --------------------------------------------------------------------------------------
# Chapters 5-8: ALiBi, T5 buckets, Transformer-XL's shift, DA-Transformer
# --------------------------------------------------------------------------------------


@_styled
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
        :func:`~course_lib.alibi.alibi_bias`) and a last axes with the slopes
        :math:`m_h` against the head index on a log scale.
    """
    from .alibi import alibi_bias, alibi_slopes

    fn = "plot_alibi_bias"
    n_heads = require_positive_int(fn, "n_heads", n_heads)
    heads = [0, n_heads // 2, n_heads - 1] if heads is None else list(heads)
    heads = list(dict.fromkeys(heads))
    for h in heads:
        if not 0 <= h < n_heads:
            fail(fn, f"heads must be in 0..{n_heads - 1}, got {heads}")
    bias = alibi_bias(n_heads, seq_len, causal=causal)  # (H, L, L)
    slopes = alibi_slopes(n_heads)

    fig = _figure(2.7 * len(heads) + 2.4, 2.9)
    axes = fig.subplots(1, len(heads) + 1)
    for ax, h in zip(axes[:-1], heads, strict=True):
        b = bias[h].numpy()
        # each head on its own colour scale: the slopes differ by up to 2^7
        im = ax.imshow(np.where(np.isfinite(b), b, np.nan), cmap="magma",
                       vmin=float(b[np.isfinite(b)].min()), vmax=0,
                       interpolation="nearest")
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.set_title(f"head {h}: $m = 2^{{{math.log2(slopes[h]):.3g}}}$")
        ax.set_xticks(range(0, seq_len, 2))
        ax.set_yticks(range(0, seq_len, 2))
        ax.set_xlabel("key $j$")
        ax.set_ylabel("query $i$")
    last = axes[-1]
    last.plot(range(n_heads), slopes.numpy(), "o-", ms=3)
    last.set_yscale("log", base=2)
    last.set_xlabel("head $h$")
    last.set_ylabel("slope $m_h$")
    last.set_title(f"slopes, {n_heads} heads")
    fig.suptitle("ALiBi bias $-m_h|i-j|$ added to the attention scores", fontsize=10)
    return fig


@_styled
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
    from .relative import t5_relative_position_bucket

    span = require_positive_int("plot_t5_buckets", "span", span)
    rel = torch.arange(-span, span + 1)
    fig = _figure(6.4, 3.0)
    ax = fig.subplots()
    for bidirectional, style in ((True, "-"), (False, "--")):
        buckets = t5_relative_position_bucket(
            rel, bidirectional=bidirectional, num_buckets=num_buckets,
            max_distance=max_distance)
        ax.step(rel.numpy(), buckets.numpy(), style, where="mid", lw=1.3,
                label=("bidirectional (encoder)" if bidirectional
                       else "causal (decoder)"))
    for x in (-max_distance, max_distance):
        ax.axvline(x, color="gray", ls=":", lw=0.8)
    ax.text(max_distance, 1, " max_distance", color="gray", fontsize=7)
    ax.set_xlabel("relative position (key - query)")
    ax.set_ylabel("bucket")
    ax.set_title(f"T5 buckets: {num_buckets} buckets, max_distance {max_distance}")
    ax.legend(loc="upper left")
    return fig


@_styled
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
    from .da import da_rescale

    max_distance = require_positive_int("plot_da_rescale", "max_distance",
                                        max_distance)
    dist = torch.linspace(0, max_distance, 8 * max_distance + 1, dtype=torch.float64)
    fig = _figure(3.3 * len(vs), 3.0)
    axes = np.atleast_1d(fig.subplots(1, len(vs), sharey=True))
    for ax, v in zip(axes, vs, strict=True):
        for w in ws:
            ax.plot(dist.numpy(), da_rescale(dist, w, v).numpy(), lw=1.3,
                    label=f"$w={w:g}$")
        ax.axhline(1 + math.exp(v), color="gray", ls="--", lw=0.8)
        ax.text(0, 1 + math.exp(v), f"$1+e^v$ = {1 + math.exp(v):.3g}", va="bottom",
                fontsize=7, color="gray")
        ax.set_xlabel("distance $R = |i-j|$")
        ax.set_ylabel(r"$\hat R$")
        ax.set_title(f"$v = {v:g}$")
        ax.legend(loc="center right")
    return fig


@_styled
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
    from .transformer_xl import rel_shift

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
    fig = _figure(9.0, 2.9)
    axes = fig.subplots(1, 4, width_ratios=(k_len, k_len + 1, q_len + 0.5, k_len))
    for n, (ax, (values, title)) in enumerate(zip(axes, steps, strict=True)):
        v = values.numpy()
        ax.imshow(v, cmap="Blues", vmin=-1, vmax=2 * k_len, interpolation="nearest")
        _annotate_cells(ax, v, fmt="{:.0f}", size=8)
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


# --------------------------------------------------------------------------------------
# --- Chapters 5-9 ---: ALiBi slopes and span, relative indices and bias families,
# Transformer-XL recurrence and score terms, DA-Transformer weights, errata figures
# --------------------------------------------------------------------------------------

__all__ += [
    "plot_alibi_attention_decay",
    "plot_alibi_slopes",
    "plot_attention_biases",
    "plot_da_weights",
    "plot_relative_position_index",
    "plot_segment_recurrence",
    "plot_transformer_xl_terms",
    "plot_wavelength_comparison",
]


@_styled
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
    from .alibi import alibi_slopes

    fn = "plot_alibi_slopes"
    counts = [require_positive_int(fn, "head_counts", n) for n in head_counts]
    if not counts:
        fail(fn, "head_counts must name at least one head count, got an empty sequence")
    fig = _figure(6.4, 0.55 * len(counts) + 1.4)
    ax = fig.subplots()
    for row, n in enumerate(counts):
        exponent = (-alibi_slopes(n).double().log2()).numpy()
        c = 1 << (n.bit_length() - 1)
        ax.plot(exponent[:c], [row] * c, "o", color="C0", ms=6,
                label="largest power of two $c \\leq n$" if row == 0 else None)
        if n > c:
            ax.plot(exponent[c:], [row] * (n - c), "s", mfc="none", color="C3",
                    ms=7, mew=1.4, label="extra heads (slopes of $2c$ heads)")
    ax.set_yticks(range(len(counts)), [f"{n} heads" for n in counts])
    ax.set_ylim(len(counts) - 0.4, -0.8)
    ax.set_xticks(range(0, 9))
    ax.grid(axis="x", color="0.85", lw=0.8)
    ax.set_xlabel(r"$-\log_2 m_h$ (slope $m_h = 2^{-x}$; right = gentler)")
    ax.set_title("ALiBi head slopes")
    ax.legend(loc="lower right", ncols=2, framealpha=0.95)
    return fig


@_styled
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
        half-way line.
    """
    from .alibi import alibi_bias, alibi_slopes
    from .attention import scaled_dot_product_attention

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

    fig = _figure(8.0, 3.1)
    left, right = fig.subplots(1, 2)
    colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, n_heads))
    for h in range(n_heads):
        label = f"$m = 2^{{{math.log2(slopes[h]):.3g}}}$"
        left.plot(dist, by_distance[h], lw=1.2, color=colors[h], label=label)
        right.plot(dist, by_distance[h].cumsum(), lw=1.2, color=colors[h])
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


@_styled
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
    from .relative import relative_position_index

    fn = "plot_relative_position_index"
    cases = [tuple(c) for c in cases]
    if not cases:
        fail(fn, "cases must hold at least one (q_len, k_len) pair, got none")
    max_distance = require_positive_int(fn, "max_distance", max_distance)
    grids = [relative_position_index(q, k, max_distance) for q, k in cases]
    fig = _figure(2.0 + 0.55 * sum(k for _, k in cases), 2.9)
    axes = np.atleast_1d(fig.subplots(1, len(cases),
                                      width_ratios=[k for _, k in cases]))
    for ax, (q_len, k_len), grid in zip(axes, cases, grids, strict=True):
        g = grid.numpy()
        im = ax.imshow(g, cmap="coolwarm", vmin=0, vmax=2 * max_distance,
                       interpolation="nearest")
        _annotate_cells(ax, g.astype(float), fmt="{:.0f}", size=8)
        ax.set_xticks(range(k_len))
        ax.set_yticks(range(q_len), [f"{i} ({i + k_len - q_len})"
                                     for i in range(q_len)])
        ax.set_xlabel("key $j$")
        ax.set_ylabel("query $i$ (position $i'$)")
        ax.set_title(f"$L_q={q_len}$, $L_k={k_len}$, $K={max_distance}$")
    fig.colorbar(im, ax=list(axes), shrink=0.85,
                 label=f"table row (row {max_distance} = distance 0)")
    return fig


@_styled
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
            fail(fn, f"biases[{title!r}] must be a torch.Tensor, "
                 f"got {type(b).__name__}", TypeError)
        if b.ndim != 2:
            fail(fn, f"biases[{title!r}] must be 2-D (q_len, k_len), "
                 f"got shape {tuple(b.shape)}")
    fig = _figure(2.35 * len(biases) + 0.4, 2.8)
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


def _recurrence_field(
    seg_len: int, mem_len: int, n_layers: int, n_segments: int
) -> np.ndarray:
    """Which inputs of each layer reach the last token (rows: layer 0 = inputs)."""
    from .transformer_xl import transformer_xl_mask

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


@_styled
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
    fig = _figure(8.0, 1.0 + 0.42 * (n_layers + 1) * 2)
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


@_styled
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
    from .transformer_xl import (
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
    fig = _figure(9.0, 2.6)
    axes = fig.subplots(1, 4)
    for ax, (values, title) in zip(axes, terms, strict=True):
        shown = np.where(visible, values.numpy(), np.nan)
        lim = float(np.nanmax(np.abs(shown)))
        ax.imshow(shown, cmap=_DIVERGING, vmin=-lim, vmax=lim, interpolation="nearest")
        ax.axvline(mem_len - 0.5, color="k", lw=1)
        ax.set_xticks(range(0, k_len, 2 if k_len > 6 else 1))
        ax.set_yticks(range(q_len))
        ax.set_title(title, fontsize=8.5)
        ax.set_xlabel("key $j$ (memory | segment)")
        ax.set_ylabel("query $i$")
    return fig


@_styled
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
    from .da import da_attention

    fn = "plot_da_weights"
    seq_len = require_positive_int(fn, "seq_len", seq_len)
    ws = [float(w) for w in ws]
    if not ws:
        fail(fn, "ws must hold at least one slope, got none")
    n = len(ws)
    q = torch.full((1, n, seq_len, 1), math.sqrt(abs(score)), dtype=torch.float64)
    k = q * (1.0 if score >= 0 else -1.0)  # q . k = score for every pair
    values = torch.zeros(1, n, seq_len, 1, dtype=torch.float64)
    _, weights = da_attention(q, k, values, torch.tensor(ws, dtype=torch.float64),
                              torch.full((n,), float(v), dtype=torch.float64))
    mid = seq_len // 2
    fig = _figure(6.4, 3.0)
    ax = fig.subplots()
    for h, w in enumerate(ws):
        ax.plot(range(seq_len), weights[0, h, mid].numpy(), "o-", ms=3, lw=1.2,
                label=f"$w={w:g}$")
    ax.axvline(mid, color="gray", ls=":", lw=1)
    ax.set_xlabel(f"key $j$ (query at {mid})")
    ax.set_ylabel("attention weight")
    ax.set_title(f"DA attention with equal scores $q\\cdot k={score:g}$, $v={v:g}$")
    ax.legend()
    return fig


@_styled
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
    fig = _figure(6.4, 3.0)
    ax = fig.subplots()
    for label, omega in frequencies.items():
        if not isinstance(omega, torch.Tensor) or omega.ndim != 1 or not bool(
            (omega > 0).all()
        ):
            fail(fn, f"frequencies[{label!r}] must be a 1-D tensor of positive "
                 f"frequencies, got {omega!r}")
        wavelength = (2 * math.pi / omega.double()).numpy()
        ax.plot(np.arange(len(wavelength)), wavelength, ".-", ms=3, lw=1.1,
                label=label)
    ax.set_yscale("log")
    ax.set_xlabel("pair index $i$ (columns $2i, 2i+1$)")
    ax.set_ylabel("wavelength (positions)")
    ax.set_title("Wavelength of each sin/cos pair")
    ax.legend()
    return fig


# --------------------------------------------------------------------------------------
# --- Chapter 10: extrapolation lab ---: accuracy against sequence length per task and
# position method, from the stored results of course_lib.experiments
# --------------------------------------------------------------------------------------

__all__ += ["plot_lab_accuracy", "plot_lab_heatmap"]

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


@_styled
def plot_lab_accuracy(results: dict, *, tasks: Sequence[str] | None = None) -> Figure:
    r"""Test accuracy against sequence length, one row of panels per task.

    Each line is a position method: the mean over seeds with its 95 % t-interval as
    a band; the dashed line is chance, the dotted vertical line the training length
    :math:`L`. Left panels: NoPE and the encodings added to the input or rotating it
    (learned, sinusoidal, RoPE); right panels: the relative methods (ALiBi, T5, Shaw,
    Transformer-XL, DA).

    Args:
        results: the lab's results (:func:`course_lib.experiments.load_results`).
        tasks: which tasks to draw (default: all in the results).

    Returns:
        Figure with ``2 * len(tasks)`` axes (row = task; x = length on a log2 scale,
        y = accuracy); each line is labelled with the method's display name.
    """
    from matplotlib.ticker import ScalarFormatter

    from .experiments import METHOD_LABELS, TASKS

    fn = "plot_lab_accuracy"
    rows, all_tasks, train_length = _lab_rows(fn, results)
    tasks = all_tasks if tasks is None else list(tasks)
    for t in tasks:
        if t not in all_tasks:
            fail(fn, f"tasks must be among {', '.join(all_tasks)}, got {t!r}")
    fig = _figure(6.6, 2.25 * len(tasks) + 0.5)
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


@_styled
def plot_lab_heatmap(results: dict) -> Figure:
    """Mean accuracy of every method (rows) at every task and length (columns).

    Args:
        results: the lab's results (:func:`course_lib.experiments.load_results`).

    Returns:
        Figure with one heatmap axes (rows = methods, columns = task x length,
        cells annotated with the mean accuracy over seeds) and a colour bar.
    """
    from .experiments import METHOD_LABELS, METHODS

    fn = "plot_lab_heatmap"
    rows, tasks, _ = _lab_rows(fn, results)
    lengths = sorted({r["length"] for r in rows})
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    cell = {(r["task"], r["method"], r["length"]): r["mean"] for r in rows}
    grid = np.array([[cell.get((t, m, n), np.nan) for t in tasks for n in lengths]
                     for m in methods])  # (methods, tasks * lengths)
    fig = _figure(6.6, 0.32 * len(methods) + 1.3)
    ax = fig.subplots()
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto",
                   interpolation="nearest")
    _annotate_cells(ax, grid, size=6.5)
    ax.set_yticks(range(len(methods)), [METHOD_LABELS[m] for m in methods])
    ax.set_xticks(range(grid.shape[1]), [str(n) for _ in tasks for n in lengths])
    for i, t in enumerate(tasks):
        ax.text((i + 0.5) * len(lengths) - 0.5, -0.9, t, ha="center", va="bottom")
        if i:
            ax.axvline(i * len(lengths) - 0.5, color="white", lw=2)
    ax.set_xlabel("test length (tokens) per task")
    fig.colorbar(im, ax=ax, shrink=0.9, label="accuracy")
    return fig


# --------------------------------------------------------------------------------------
# --- Chapters 2-4 (additions) ---: how close the rows of the sinusoidal table come,
# and the offset matrix M(k) as a picture
# --------------------------------------------------------------------------------------

__all__ += ["plot_offset_matrix", "plot_row_separation"]


@_styled
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
    from .sinusoidal import sinusoidal_encoding

    fn = "plot_row_separation"
    max_offset = require_positive_int(fn, "max_offset", max_offset)
    widths = [require_positive_int(fn, "d_models[...]", d) for d in d_models]
    if not widths or any(d % 2 for d in widths):
        fail(fn, f"d_models must be a non-empty list of even widths, "
             f"got {list(d_models)}")
    fig = _figure(6.4, 3.0)
    ax = fig.subplots()
    for d in widths:
        pe = sinusoidal_encoding(max_offset + 1, d, base=base).double()  # (K+1, d)
        dist = (pe[1:] - pe[0]).norm(dim=-1)  # (K,): offset k = 1..K
        running = torch.cummin(dist, dim=0).values  # (K,)
        drops = torch.nonzero(running[1:] < running[:-1]).flatten() + 1
        idx = torch.cat((torch.zeros(1, dtype=torch.long), drops,
                         torch.tensor([max_offset - 1])))
        ax.plot((idx + 1).numpy(), running[idx].numpy(), drawstyle="steps-post",
                lw=1.4, label=f"$d_{{model}} = {d}$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("range of offsets $K$ (positions)")
    ax.set_ylabel(r"$\min_{1 \leq k \leq K} \|PE_0 - PE_k\|$")
    ax.set_title("Distance between the two closest rows among $K+1$ positions")
    ax.legend(loc="lower left")
    return fig


@_styled
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
        in float64, each cell labelled with its value.
    """
    from .rotation import offset_matrix

    fn = "plot_offset_matrix"
    k = require_int(fn, "k", k)
    d_model = require_positive_int(fn, "d_model", d_model)
    if d_model % 2 or d_model > 12:
        fail(fn, f"d_model must be even and at most 12, got {d_model}")
    m = offset_matrix(k, d_model, base=base, dtype=torch.float64).numpy()
    fig = _figure(1.2 + 0.48 * d_model, 0.9 + 0.42 * d_model)
    ax = fig.subplots()
    im = ax.imshow(m, cmap=_DIVERGING, vmin=-1, vmax=1, interpolation="nearest")
    for (r, c), val in np.ndenumerate(m):
        if r // 2 == c // 2:
            ax.text(c, r, f"{val:.3f}", ha="center", va="center", fontsize=6.5,
                    color="white" if abs(val) > 0.6 else "black")
    for i in range(d_model // 2):
        ax.add_patch(Rectangle((2 * i - 0.5, 2 * i - 0.5), 2, 2, fill=False,
                               edgecolor="0.2", lw=1.0))
    names = [f"{'sin' if j % 2 == 0 else 'cos'} $\\omega_{j // 2}$"
             for j in range(d_model)]
    ax.set_xticks(range(d_model), names, rotation=90)
    ax.set_yticks(range(d_model), names)
    ax.set_xlabel("input: column of $PE_p$")
    ax.set_ylabel("output: column of $PE_{p+k}$")
    ax.set_title(f"$M({k})$, $d_{{model}} = {d_model}$: one block per frequency")
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig
