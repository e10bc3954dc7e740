"""One place that raises the errors students and readers see for bad input.

Every public function of ``course_lib`` validates its arguments through these
helpers, so every message has the same form::

    apply_rope: head_dim must be even, got x of shape (2, 4, 7)

that is, the function's name, the argument, what was expected and what was received.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "describe",
    "fail",
    "require_base",
    "require_even",
    "require_float_tensor",
    "require_head_dim",
    "require_int",
    "require_ndim",
    "require_positive_int",
    "require_qkv",
    "require_rotary_dim",
    "require_tensor",
]


def describe(x: object) -> str:
    """Describe a value for an error message (shape and dtype of tensors)."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{x!r} ({type(x).__name__})"


def fail(fn: str, message: str, exc: type[Exception] = ValueError) -> None:
    """Raise ``exc`` with the message ``"<fn>: <message>"``."""
    raise exc(f"{fn}: {message}")


def require_int(
    fn: str, name: str, value: object, *, minimum: int | None = None
) -> int:
    """Check that ``value`` is an integer (or 0-d integer tensor) >= ``minimum``."""
    if (
        isinstance(value, torch.Tensor)
        and value.ndim == 0
        and not value.is_floating_point()
    ):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        fail(fn, f"{name} must be an integer, got {describe(value)}", TypeError)
    if minimum is not None and value < minimum:
        fail(fn, f"{name} must be at least {minimum}, got {value}")
    return value


def require_positive_int(fn: str, name: str, value: object) -> int:
    """Check that ``value`` is an integer >= 1."""
    return require_int(fn, name, value, minimum=1)


def require_rotary_dim(fn: str, head_dim: object, what: str = "head_dim") -> int:
    """Check the dimension RoPE rotates: a positive, even integer (it is cut into
    pairs). ``what`` names the argument (``head_dim``, ``rotary_dim``)."""
    head_dim = require_positive_int(fn, what, head_dim)
    if head_dim % 2 != 0:
        fail(
            fn,
            f"{what} must be even (RoPE rotates pairs of dimensions), "
            f"got {what}={head_dim}",
        )
    return head_dim


def require_base(fn: str, base: object) -> float:
    """Check a frequency base (sinusoids, RoPE): a finite real number above 1."""
    if isinstance(base, bool) or not isinstance(base, int | float):
        fail(fn, f"base must be a real number, got {describe(base)}", TypeError)
    if not base > 1.0 or not math.isfinite(base):
        fail(fn, f"base must be a finite number greater than 1, got {base!r}")
    return float(base)


def require_even(fn: str, name: str, value: int, *, context: str = "") -> int:
    """Check that an integer is even; ``context`` says where it came from."""
    if value % 2 != 0:
        where = f", {context}" if context else ""
        fail(fn, f"{name} must be even, got {value}{where}")
    return value


def require_tensor(fn: str, name: str, x: object) -> torch.Tensor:
    """Check that ``x`` is a ``torch.Tensor``."""
    if not isinstance(x, torch.Tensor):
        fail(fn, f"{name} must be a torch.Tensor, got {describe(x)}", TypeError)
    return x  # type: ignore[return-value]


def require_float_tensor(fn: str, name: str, x: object) -> torch.Tensor:
    """Check that ``x`` is a floating-point tensor (integer tensors cannot be rotated,
    scaled or soft-maxed without silent truncation)."""
    x = require_tensor(fn, name, x)
    if not x.is_floating_point():
        fail(
            fn,
            f"{name} must be a floating-point tensor, got {describe(x)}; "
            f"convert it with {name}.float()",
            TypeError,
        )
    return x


def require_ndim(
    fn: str, name: str, x: torch.Tensor, ndim: int | Sequence[int], layout: str = ""
) -> torch.Tensor:
    """Check the number of dimensions; ``layout`` names them: ``(batch, seq, dim)``."""
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.ndim not in allowed:
        want = " or ".join(str(n) for n in allowed)
        named = f" {layout}" if layout else ""
        fail(fn, f"{name} must have {want} dimensions{named}, got {describe(x)}")
    return x


def require_head_dim(fn: str, d_model: object, n_heads: object) -> int:
    """Check ``d_model`` and ``n_heads`` (positive, ``n_heads`` divides ``d_model``) and
    return the width of one head, ``d_model // n_heads``."""
    d_model = require_positive_int(fn, "d_model", d_model)
    n_heads = require_positive_int(fn, "n_heads", n_heads)
    if d_model % n_heads != 0:
        fail(
            fn,
            f"d_model must be divisible by n_heads, got d_model={d_model} "
            f"and n_heads={n_heads}",
        )
    return d_model // n_heads


def require_qkv(
    fn: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[int, int, int]:
    """Validate attention inputs; return ``(n_heads, q_len, k_len)``."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_ndim(
            fn,
            name,
            require_float_tensor(fn, name, x),
            4,
            "(batch, heads, seq, head_dim)",
        )
    if k.shape[:2] != q.shape[:2] or v.shape[:2] != q.shape[:2]:
        fail(
            fn,
            f"q, k, v must share (batch, heads), got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}",
        )
    if k.shape[-1] != q.shape[-1]:
        fail(fn, f"k must have head_dim {q.shape[-1]} like q, got k {tuple(k.shape)}")
    if v.shape[2] != k.shape[2]:
        fail(
            fn,
            f"v must have as many positions as k ({k.shape[2]}), "
            f"got v {tuple(v.shape)}",
        )
    n_heads, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    if q_len == 0 or k_len < q_len:
        fail(
            fn,
            f"need 1 <= q_len <= k_len (queries are the last q_len keys), got "
            f"q_len={q_len} and k_len={k_len} from q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}",
        )
    return n_heads, q_len, k_len
