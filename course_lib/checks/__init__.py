"""Exercise graders: ``check_<name>(fn)`` (public, in the students' notebooks) and
``grade_<name>(fn)`` (hidden, run at grading), one module per assignment."""

from . import (
    ex01_permutation,
    ex02_sinusoidal,
    ex03_rotation,
    ex04_rope,
    ex05_alibi,
    ex06_relative,
    ex07_transformer_xl,
    ex08_da,
    ex09_bug_zoo,
    ex10_lab,
    ex11_long_context,
)
from ._core import CheckFailed
from .ex01_permutation import *  # noqa: F403
from .ex02_sinusoidal import *  # noqa: F403
from .ex03_rotation import *  # noqa: F403
from .ex04_rope import *  # noqa: F403
from .ex05_alibi import *  # noqa: F403
from .ex06_relative import *  # noqa: F403
from .ex07_transformer_xl import *  # noqa: F403
from .ex08_da import *  # noqa: F403
from .ex09_bug_zoo import *  # noqa: F403
from .ex10_lab import *  # noqa: F403
from .ex11_long_context import *  # noqa: F403

__all__ = [
    "CheckFailed",
    *ex01_permutation.__all__,
    *ex02_sinusoidal.__all__,
    *ex03_rotation.__all__,
    *ex04_rope.__all__,
    *ex05_alibi.__all__,
    *ex06_relative.__all__,
    *ex07_transformer_xl.__all__,
    *ex08_da.__all__,
    *ex09_bug_zoo.__all__,
    *ex10_lab.__all__,
    *ex11_long_context.__all__,
]
