r"""Chapter 11: longer contexts for RoPE (wavelengths, score drift, scaled frequencies).

Part of :mod:`course_lib.viz`; import the figures from there.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure

from .._validate import require_positive_int
from ._common import new_figure, styled

__all__ = [
    "plot_rope_score_drift",
    "plot_rope_wavelengths_vs_training",
    "plot_scaled_frequency_ratios",
]

_METHODS = (
    ("linear", {}),
    ("ntk", {}),
    ("yarn", {}),
    ("llama3", {}),
)


@styled
def plot_rope_wavelengths_vs_training(
    head_dim: int = 128, train_len: int = 2048, *, base: float = 10000.0
) -> Figure:
    r"""Wavelength :math:`\lambda_i = 2\pi/\theta_i` of every pair against the training
    length :math:`L`.

    Pairs above the horizontal line :math:`\lambda = L` never completed one turn in
    training: past :math:`L` their angles are new to the model.

    Returns:
        Figure with one axes: one point per pair (x = pair index, log y).
    """
    from ..rope import rope_frequencies

    fn = "plot_rope_wavelengths_vs_training"
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    train_len = require_positive_int(fn, "train_len", train_len)
    theta = rope_frequencies(head_dim, base=base, dtype=torch.float64)
    wavelength = (2 * math.pi / theta).numpy()  # (d/2,)
    i = np.arange(head_dim // 2)
    fig = new_figure(6.5, 3.0)
    ax = fig.subplots()
    seen = wavelength <= train_len
    ax.semilogy(
        i[seen], wavelength[seen], "o", ms=3, label="full turn seen in training"
    )
    ax.semilogy(
        i[~seen],
        wavelength[~seen],
        "o",
        ms=3,
        color="C3",
        label="never a full turn in training",
    )
    ax.axhline(
        train_len,
        color="black",
        lw=1,
        ls="--",
        label=f"training length L = {train_len}",
    )
    ax.set_xlabel("pair index $i$")
    ax.set_ylabel(r"wavelength $2\pi/\theta_i$ (tokens)")
    ax.set_title(f"RoPE wavelengths, d = {head_dim}, base {base:g}")
    ax.legend(loc="upper left", fontsize=8)
    return fig


@styled
def plot_rope_score_drift(
    head_dim: int = 64,
    train_len: int = 512,
    *,
    base: float = 10000.0,
    factor: float = 4.0,
) -> Figure:
    r"""The score :math:`\langle R_0 q, R_r q\rangle / d` of an all-ones query against
    the distance :math:`r`, up to ``factor`` times the training length.

    Plain RoPE (left of the dashed line: what the model saw; right: new territory)
    against the same score with position interpolation (``"linear"``), which maps
    the whole range back into the training one.

    Returns:
        Figure with one axes, two lines (x = distance ``0 .. factor * train_len``).
    """
    from ..rope_scaling import rope_scaled_frequencies

    fn = "plot_rope_score_drift"
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    train_len = require_positive_int(fn, "train_len", train_len)
    r = torch.arange(int(factor * train_len) + 1, dtype=torch.float64)
    fig = new_figure(6.5, 3.0)
    ax = fig.subplots()
    for label, scale in (
        ("plain RoPE", 1.0),
        (f"position interpolation, s = {factor:g}", factor),
    ):
        inv, _ = rope_scaled_frequencies(
            head_dim, base=base, method="linear", factor=scale, dtype=torch.float64
        )
        score = torch.cos(r[:, None] * inv).mean(-1)  # (R,): (2/d) sum_i cos(r theta_i)
        ax.plot(r.numpy(), score.numpy(), lw=1.0, label=label)
    ax.axvline(train_len, color="black", lw=1, ls="--")
    ax.set_xlabel("distance $r$ (tokens)")
    ax.set_ylabel("score / d")
    ax.set_title(f"Score of identical vectors, trained to L = {train_len}")
    ax.legend(fontsize=8)
    return fig


@styled
def plot_scaled_frequency_ratios(
    head_dim: int = 128,
    train_len: int = 8192,
    *,
    base: float = 500000.0,
    factor: float = 8.0,
) -> Figure:
    r"""How much each method slows each pair: :math:`\theta_i/\theta_i'` against the
    wavelength :math:`\lambda_i`, for linear, NTK-aware, YaRN and Llama 3.1.

    A ratio of 1 keeps the pair as trained (extrapolation); ``factor`` interpolates it.

    Returns:
        Figure with one axes, one line per method (x = wavelength, log scale).
    """
    from ..rope import rope_frequencies
    from ..rope_scaling import rope_scaled_frequencies

    fn = "plot_scaled_frequency_ratios"
    head_dim = require_positive_int(fn, "head_dim", head_dim)
    train_len = require_positive_int(fn, "train_len", train_len)
    theta = rope_frequencies(head_dim, base=base, dtype=torch.float64)
    wavelength = (2 * math.pi / theta).numpy()
    fig = new_figure(6.5, 3.2)
    ax = fig.subplots()
    for method, extra in _METHODS:
        inv, _ = rope_scaled_frequencies(
            head_dim,
            base=base,
            method=method,
            factor=factor,
            original_max_position=train_len,
            dtype=torch.float64,
            **extra,
        )
        ax.semilogx(wavelength, (theta / inv).numpy(), lw=1.3, label=method)
    ax.axvline(train_len, color="black", lw=1, ls="--", label="L")
    ax.set_xlabel(r"wavelength $\lambda_i$ (tokens)")
    ax.set_ylabel(r"slow-down $\theta_i / \theta_i'$")
    ax.set_title(f"Frequency scaling, s = {factor:g}, L = {train_len}, base {base:g}")
    ax.legend(fontsize=8)
    return fig
