r"""Every figure of the book, deterministic, as matplotlib Figures.

Each function computes its data with ``course_lib`` (never a private copy of an
algorithm), draws it on a fresh :class:`matplotlib.figure.Figure` and returns the
figure. No pyplot state is touched, nothing is shown or saved: the book displays the
returned figure, the tests inspect its axes, and a reader can call
``fig.savefig("name.png")``. Randomness (example embeddings and weights) comes from an
explicit seed, so every call draws the same picture.

Figures are sized for a narrow page (about 6.5 x 3 inches) with 9-point text, so they
stay readable when the browser window is small.

The figures live in one module per chapter family; import them from here
(``from course_lib import viz; viz.plot_alibi_bias()``):

- ``course_lib.viz._common``: the shared style and drawing helpers;
- ``course_lib.viz.absolute``: permutation, sinusoidal table, offset rotation
  (chapters 1-3, errata);
- ``course_lib.viz.rope``: rotary embedding (chapter 4);
- ``course_lib.viz.bias``: ALiBi, Shaw/T5 relative positions, DA-Transformer
  (chapters 5, 6, 8);
- ``course_lib.viz.transformer_xl``: Transformer-XL (chapter 7);
- ``course_lib.viz.lab``: the length-extrapolation lab (chapter 10);
- ``course_lib.viz.long_context``: longer contexts for RoPE (chapter 11);
- ``course_lib.viz.lm``: the language-model experiment (chapter 12).

A new family is a new module with its own ``__all__``, registered in ``_FAMILIES``
below.
"""

from __future__ import annotations

from . import absolute, bias, lab, lm, long_context, rope, transformer_xl
from .absolute import *  # noqa: F403
from .bias import *  # noqa: F403
from .lab import *  # noqa: F403
from .lm import *  # noqa: F403
from .long_context import *  # noqa: F403
from .rope import *  # noqa: F403
from .transformer_xl import *  # noqa: F403

_FAMILIES = (absolute, rope, bias, transformer_xl, lab, long_context, lm)

__all__ = sorted(name for family in _FAMILIES for name in family.__all__)
