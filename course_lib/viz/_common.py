r"""Shared style of every book figure: rc settings, the PNG-displaying Figure class
and small drawing helpers. Deterministic: no pyplot state, no randomness here."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import TypeVar

import matplotlib
import numpy as np
from matplotlib.figure import Figure

# for the figure modules beside this one
__all__ = ["DIVERGING", "annotate_cells", "new_figure", "styled"]


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


DIVERGING = "RdBu_r"


_F = TypeVar("_F", bound=Callable[..., Figure])


def styled(fn: _F) -> _F:
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


def new_figure(width: float, height: float) -> Figure:
    return _BookFigure(figsize=(width, height), layout="constrained")


def annotate_cells(ax, values: np.ndarray, fmt: str = "{:.2f}", size: float = 7):
    """Write each entry of a small matrix into its heatmap cell."""
    finite = values[np.isfinite(values)]
    mid = (finite.max() + finite.min()) / 2 if finite.size else 0.0
    for (r, c), val in np.ndenumerate(values):
        text = fmt.format(val) if np.isfinite(val) else ("-inf" if val < 0 else "inf")
        dark = np.isfinite(val) and val > mid
        ax.text(c, r, text, ha="center", va="center", fontsize=size,
                color="white" if dark else "black")
