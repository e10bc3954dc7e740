r"""Chapter 12: perplexity against evaluation length for the language-model
experiment of :mod:`course_lib.experiments.lm` (the ALiBi paper's first figure).

Part of :mod:`course_lib.viz`; import the figures from there.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from .._validate import fail
from ._common import new_figure, styled

__all__ = ["plot_lm_perplexity"]

_LABELS = {
    "none": "NoPE", "sinusoidal": "sinusoidal", "learned": "learned abs.",
    "rope": "RoPE", "rope+yarn": "RoPE + YaRN", "t5": "T5 bias", "alibi": "ALiBi",
}


@styled
def plot_lm_perplexity(record: dict) -> Figure:
    """Validation perplexity against evaluation length, one line per method.

    Two panels: non-overlapping windows and the sliding window. Each line is the
    geometric mean of the perplexity over the training seeds with its 95 % interval as
    a band, as stored in the record (:func:`course_lib.experiments.lm.contrast`): on
    the log scale, the variance over seeds plus the variance of a bootstrap over
    blocks of the validation text (the same resample for every seed), a Student-t
    quantile with Welch-Satterthwaite degrees of freedom, then exponentiated (the
    lower end never below 1).

    Args:
        record: the dict stored in ``course_lib/data/lm_extrapolation.json``.
    """
    fn = "plot_lm_perplexity"
    if not isinstance(record, dict) or "perplexity" not in record:
        fail(fn, "record must be the dict of course_lib/data/lm_extrapolation.json")
    L = record["settings"]["train_length"]
    fig = new_figure(6.5, 3.0)
    axes = fig.subplots(1, 2, sharey=True)
    titles = {"nonoverlap": "non-overlapping windows",
              "sliding": f"sliding window (stride {record['sliding_stride']}"
              + (f", {record['sliding_stride_at_L']} at L)"
                 if "sliding_stride_at_L" in record else ")")}
    for ax, kind in zip(axes, ("nonoverlap", "sliding"), strict=True):
        for method, per in record["perplexity"][kind].items():
            xs = sorted(int(t) for t in per)
            mean = [per[str(t)]["mean"] for t in xs]
            ax.plot(xs, mean, marker="o", ms=3, label=_LABELS.get(method, method))
            ax.fill_between(xs, [per[str(t)]["low"] for t in xs],
                            [per[str(t)]["high"] for t in xs], alpha=0.15)
        ax.axvline(L, color="gray", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_title(titles[kind])
    axes[0].set_ylabel("validation perplexity")
    axes[1].legend(fontsize=7, loc="upper left")
    return fig
