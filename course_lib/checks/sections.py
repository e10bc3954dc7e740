"""Where each graded function is taught: the section of the book a feedback message
links to, so that a student who made a known mistake can reread the step.

:data:`SECTIONS` maps a graded function's name (the name of its ``check_`` and
``grade_`` graders without the prefix) to the :class:`Section` of the chapter that
teaches what the function implements: the chapter's page (``"book/05-alibi"``, its
path without ``.md``), the MyST label written on the line above the section's heading
(``(alibi-bias)=``), and the heading's text as it stands in the chapter. Functions of
the bug zoo (exercise 9) and of the lab (exercise 10) point to the chapter where the
concept is derived, not to the exercise's own chapter. A test checks that every graded
function has a section and that each label stands once in its chapter, right above a
heading with that text.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SECTIONS", "Section", "section_of"]


@dataclass(frozen=True)
class Section:
    """A section of the book: its page, its MyST label, its heading's text."""

    page: str
    label: str
    title: str


_PERMUTATION = "book/01-permutation"
_SINUSOIDAL = "book/02-sinusoidal"
_ROTATION = "book/03-rotation"
_ROPE = "book/04-rope"
_ALIBI = "book/05-alibi"
_RELATIVE = "book/06-relative"
_XL = "book/07-transformer-xl"
_DA = "book/08-da-transformer"
_LAB = "book/10-extrapolation-lab"
_LONG = "book/11-long-context"

_PADDED_IDS = Section(
    _SINUSOIDAL, "padded-position-ids", "Position ids in padded batches"
)
_ROPE_PAIRS = Section(
    _ROPE, "rope-frequencies", "$d$ dimensions: one frequency per pair"
)
_ALIBI_BIAS = Section(_ALIBI, "alibi-bias", "The bias")
_YARN = Section(_LONG, "long-context-yarn", "YaRN")

SECTIONS: dict[str, Section] = {
    # ex01_permutation
    "self_attention": Section(_PERMUTATION, "permutation-proof", "The proof"),
    "permutation_matrix": Section(
        _PERMUTATION, "equivariance-invariance", "Equivariance and invariance"
    ),
    # ex02_sinusoidal
    "sinusoidal_encoding": Section(_SINUSOIDAL, "sinusoidal-formula", "The formula"),
    "position_ids_from_attention_mask": _PADDED_IDS,
    # ex03_rotation
    "offset_matrix": Section(
        _ROTATION, "rotation-blocks", "The whole vector: one block per frequency"
    ),
    "hand_computation": Section(
        _ROTATION,
        "rotation-hand-computation",
        r"The hand computation for $d_\text{model} = 4$",
    ),
    # ex04_rope
    "rope_frequencies": _ROPE_PAIRS,
    "apply_rope": _ROPE_PAIRS,
    "interleaved_to_half_weights": Section(
        _ROPE, "rope-pairings", "Two ways to pair the dimensions"
    ),
    # ex05_alibi
    "alibi_slopes": Section(
        _ALIBI, "alibi-slope-series", "The slopes form a geometric series"
    ),
    "alibi_bias": _ALIBI_BIAS,
    # ex06_relative
    "shaw_relative_attention": Section(
        _RELATIVE, "shaw-relative", "Shaw et al.: relative key and value vectors"
    ),
    "t5_relative_position_bucket": Section(
        _RELATIVE, "t5-buckets", "Which offsets share a bucket"
    ),
    # ex07_transformer_xl
    "rel_shift": Section(_XL, "rel-shift", "The `rel_shift` trick, step by step"),
    "rel_attention_scores": Section(_XL, "xl-four-terms", "The four terms"),
    "rel_shift_bidirectional": Section(
        _XL, "rel-shift-mask", "Why the mask is mandatory after the shift"
    ),
    # ex08_da
    "da_rescale": Section(_DA, "da-distance-function", "The distance function"),
    "da_attention": Section(
        _DA, "da-coefficients", "Where the coefficients enter, and why the ReLU"
    ),
    # ex09_bug_zoo: the chapters that teach what each bug gets wrong
    "fixed_rope_cos_sin": Section(
        _ROPE,
        "rope-precision",
        "Precision at long positions",
    ),
    "fixed_decode_position_ids": _PADDED_IDS,
    "fixed_sliding_window_mask": Section(
        _ALIBI, "alibi-kv-cache", "Key/value caches: queries are the last positions"
    ),
    # ex10_lab: the bias is ALiBi's with another function of the distance
    "log_distance_bias": _ALIBI_BIAS,
    "retained_skill": Section(_LAB, "lab-measuring", "Training and measuring"),
    # ex11_long_context
    "yarn_correction_range": _YARN,
    "yarn_attention_factor": _YARN,
    "llama3_scaled_frequencies": Section(
        _LONG, "llama3-bands", "Llama 3.1's frequency bands"
    ),
}


def section_of(function: str) -> Section | None:
    """The section that teaches ``function`` (a graded function's name, without
    ``check_`` or ``grade_``), or ``None`` for a name that no grader checks."""
    return SECTIONS.get(function)
