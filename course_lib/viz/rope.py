r"""Chapter 4: rotary position embedding (pairings, relative property, decay).

Part of :mod:`course_lib.viz`; import the figures from there.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .._validate import fail, require_positive_int
from ._common import new_figure, styled

__all__ = [
    "plot_rope_decay",
    "plot_rope_pairing",
    "plot_rope_relative",
]


def _rope_partner(head_dim: int, convention: str) -> list[int]:
    """partner[j]: the dimension that RoPE rotates together with dimension j.

    Found by rotating each basis vector e_j (position 1, base 2 so that no frequency
    is negligible) with :func:`apply_rope` and reading where its mass went.
    """
    from ..rope import apply_rope

    eye = torch.eye(head_dim, dtype=torch.float64)[:, None, :]  # (d, 1, d)
    x = torch.cat((torch.zeros_like(eye), eye), dim=1)  # (d, 2, d): positions 0, 1
    out = apply_rope(x, base=2.0, convention=convention)[:, 1]  # (d, d)
    out = out.abs() * (1 - torch.eye(head_dim, dtype=torch.float64))
    return out.argmax(dim=-1).tolist()


@styled
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
    fig = new_figure(6.4, 2.9)
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


@styled
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
    from ..rope import apply_rope

    qv = torch.tensor([list(q)], dtype=torch.float64)  # (1, 2)
    kv = torch.tensor([list(k)], dtype=torch.float64)  # (1, 2)
    fig = new_figure(3.1 * len(position_pairs), 3.2)
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


@styled
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
    from ..rope import apply_rope, rope_angles

    fn = "plot_rope_decay"
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    max_distance = require_positive_int(fn, "max_distance", max_distance)
    r = torch.arange(max_distance + 1)
    fig = new_figure(8.0, 3.1)
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
