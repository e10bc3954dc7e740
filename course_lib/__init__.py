"""course_lib: positional encodings for transformers, one tested module per idea.

Every chapter of the book and every grader of the exercises uses these functions;
they are the course's single source of truth. Shapes are batch-first:
``(batch, heads, seq, head_dim)`` for queries, keys and values and
``(heads, q_len, k_len)`` for additive attention biases.

The plotting helpers (:mod:`course_lib.viz`), the graders (:mod:`course_lib.checks`),
the instructor tool (:mod:`course_lib.grading`) and the lab
(:mod:`course_lib.experiments`) are sub-packages imported on demand.

The library's modules (and so PyTorch) are imported lazily too (PEP 562): ``import
course_lib`` is cheap, and ``course_lib.alibi_bias`` or ``from course_lib import
alibi_bias`` imports :mod:`course_lib.alibi` the first time one of its names is used.
So ``course check`` and ``course --help`` start without importing torch. The names
exported are those of the modules' ``__all__``, listed in :data:`_EXPORTS`
(``tests/test_lazy_import.py`` keeps the two equal).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# module -> the names it exports (its ``__all__``), in the order of ``__all__`` below
_EXPORTS: dict[str, tuple[str, ...]] = {
    "attention": (
        "causal_mask",
        "permutation_matrix",
        "permute_tokens",
        "scaled_dot_product_attention",
        "self_attention",
    ),
    "sinusoidal": (
        "LearnedPositionalEncoding",
        "SinusoidalPositionalEncoding",
        "position_ids_from_attention_mask",
        "sinusoidal_encoding",
    ),
    "rotation": (
        "OffsetBlockDerivation",
        "derive_offset_block",
        "offset_matrix",
        "symbolic_dot_product_depends_on_difference",
        "symbolic_pe_pair",
        "symbolic_rope_score",
    ),
    "rope": (
        "RotaryEmbedding",
        "apply_rope",
        "apply_rope_complex",
        "interleaved_to_half_permutation",
        "rope_angles",
        "rope_frequencies",
    ),
    "rope_scaling": (
        "ROPE_SCALING_METHODS",
        "dynamic_ntk_factor",
        "llama3_scaled_frequencies",
        "llama3_smooth_factor",
        "ntk_scaled_base",
        "rope_scaled_frequencies",
        "yarn_attention_factor",
        "yarn_correction_dim",
        "yarn_correction_range",
        "yarn_ramp",
    ),
    "alibi": (
        "ALiBi",
        "alibi_attention",
        "alibi_bias",
        "alibi_flex_attention",
        "alibi_slopes",
    ),
    "relative": (
        "ShawRelativeAttention",
        "T5RelativeBias",
        "relative_position_index",
        "shaw_relative_attention",
        "t5_relative_position_bucket",
    ),
    "transformer_xl": (
        "RelMultiHeadAttention",
        "RelPartialLearnableMultiHeadAttention",
        "rel_attention_scores",
        "rel_attention_scores_gather",
        "rel_shift",
        "relative_sinusoidal_embedding",
        "transformer_xl_mask",
    ),
    "da": ("DAAttention", "da_attention", "da_rescale"),
    "conventions": (
        "alibi_bias_bloom_style",
        "alibi_forms_softmax_gap",
        "concat_to_interleaved_permutation",
        "interleaved_to_concat_permutation",
        "rope_half_to_interleaved_weights",
        "rope_interleaved_to_half_weights",
        "sincos_concat_to_interleaved",
        "sincos_interleaved_to_concat",
    ),
}
# name -> the module that defines it
_ORIGIN = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [name for names in _EXPORTS.values() for name in names]


def _load(module: str):
    """Import ``course_lib.<module>`` and bind its exported names here, as the
    eager ``from .<module> import *`` did (a name already set here is kept)."""
    loaded = importlib.import_module(f"{__name__}.{module}")
    namespace = globals()
    for name in _EXPORTS[module]:
        namespace.setdefault(name, getattr(loaded, name))
    return loaded


def _load_all() -> None:
    """Import every library module now (what the eager package did): the graders'
    reference trap must see every function of the library, private helpers
    included, before a student's code runs."""
    for module in _EXPORTS:
        _load(module)


def __getattr__(name: str):
    """The first use of a library name (or module) imports its module."""
    module = _ORIGIN.get(name)
    if module is not None:
        _load(module)
        return globals()[name]
    if name in _EXPORTS:
        return _load(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and IDEs see: the eager imports
    from . import alibi as alibi
    from . import attention as attention
    from . import conventions as conventions
    from . import da as da
    from . import relative as relative
    from . import rope as rope
    from . import rope_scaling as rope_scaling
    from . import rotation as rotation
    from . import sinusoidal as sinusoidal
    from . import transformer_xl as transformer_xl
    from .alibi import *  # noqa: F403
    from .attention import *  # noqa: F403
    from .conventions import *  # noqa: F403
    from .da import *  # noqa: F403
    from .relative import *  # noqa: F403
    from .rope import *  # noqa: F403
    from .rope_scaling import *  # noqa: F403
    from .rotation import *  # noqa: F403
    from .sinusoidal import *  # noqa: F403
    from .transformer_xl import *  # noqa: F403
