"""course_lib: positional encodings for transformers, one tested module per idea.

Every chapter of the book and every grader of the exercises uses these functions;
they are the course's single source of truth. Shapes are batch-first:
``(batch, heads, seq, head_dim)`` for queries, keys and values and
``(heads, q_len, k_len)`` for additive attention biases.

The plotting helpers (:mod:`course_lib.viz`), the graders (:mod:`course_lib.checks`),
the instructor tool (:mod:`course_lib.grading`) and the lab
(:mod:`course_lib.experiments`) are sub-packages imported on demand.
"""

from . import (
    alibi,
    attention,
    conventions,
    da,
    relative,
    rope,
    rope_scaling,
    rotation,
    sinusoidal,
    transformer_xl,
)
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

__version__ = "0.1.0"

__all__ = [
    *attention.__all__,
    *sinusoidal.__all__,
    *rotation.__all__,
    *rope.__all__,
    *rope_scaling.__all__,
    *alibi.__all__,
    *relative.__all__,
    *transformer_xl.__all__,
    *da.__all__,
    *conventions.__all__,
]
