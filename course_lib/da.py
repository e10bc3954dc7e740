"""DA-Transformer: distance-aware attention (Wu, Wu and Huang, 2021).

Each head rescales its (ReLU-rectified) attention scores by a learnable, bounded,
monotone function of the token distance ``R_{ij} = |i - j|``:

.. math::

    \\hat R_{ij} = \\frac{1 + e^{v}}{1 + e^{v - w R_{ij}}}, \\qquad
    A = \\mathrm{softmax}\\Big(\\frac{\\mathrm{ReLU}(Q K^\\top) \\odot \\hat R}
    {\\sqrt{d}}\\Big), \\qquad \\mathrm{out} = A V.

``w`` sets how fast the weight changes with distance (``w > 0`` favours long-range
pairs, ``w < 0`` short-range ones) and ``v`` bounds it: ``hat R`` lies between 1 (at
distance 0) and ``1 + e^v``. ReLU keeps the scores non-negative so that the rescaling
moves them in a consistent direction.

Reference: C. Wu, F. Wu, Y. Huang, "DA-Transformer: Distance-aware Transformer",
NAACL 2021.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import (
    describe,
    fail,
    require_float_tensor,
    require_head_dim,
    require_ndim,
    require_qkv,
    require_tensor,
)

__all__ = ["DAAttention", "da_attention", "da_flex_attention", "da_rescale"]


def _check_real(fn: str, name: str, x: object) -> object:
    if isinstance(x, bool) or not isinstance(x, int | float | torch.Tensor):
        fail(fn, f"{name} must be a number or a tensor, got {describe(x)}", TypeError)
    if isinstance(x, torch.Tensor) and (x.is_complex() or x.dtype == torch.bool):
        fail(fn, f"{name} must be real, got {describe(x)}", TypeError)
    return x


def da_rescale(
    distance: torch.Tensor | float,
    w: torch.Tensor | float,
    v: torch.Tensor | float,
) -> torch.Tensor:
    """DA-Transformer's distance weight ``(1 + e^v) / (1 + e^(v - w * distance))``.

    .. math::

        \\hat R = \\frac{1 + e^{v}}{1 + e^{v - wR}}
        = \\exp\\big(\\mathrm{softplus}(v) - \\mathrm{softplus}(v - wR)\\big)

    The softplus form is evaluated, as ``max(x, 0) + log1p(e^{-|x|})`` (exact, unlike
    ``F.softplus``, which returns ``x`` itself above 20): it neither overflows for large
    ``v`` or ``-wR`` nor loses the ratio when both exponentials are huge.

    Args:
        distance: distances ``R >= 0`` (integer or float tensor, or a number).
        w: slope ``w`` (tensor or number, broadcast with ``distance``).
        v: bound ``v``; ``hat R`` tends to ``1 + e^v`` as ``wR -> +inf`` and to 0 as
            ``wR -> -inf``.

    Returns:
        float tensor of the broadcast shape of ``distance``, ``w`` and ``v``.

    Paper: Wu et al. 2021, eq. (6).

    >>> da_rescale(torch.tensor([0, 1, 10]), 1.0, 0.0)
    tensor([1.0000, 1.4621, 1.9999])
    """
    fn = "da_rescale"
    args = [
        _check_real(fn, name, x)
        for name, x in (("distance", distance), ("w", w), ("v", v))
    ]
    dtype = torch.get_default_dtype()  # unless a floating tensor asks for more
    floats = [t.dtype for t in args if isinstance(t, torch.Tensor)]
    floats = [dt for dt in floats if dt.is_floating_point]
    if floats:
        dtype = floats[0]
        for other in floats[1:]:
            dtype = torch.promote_types(dtype, other)
    d_t, w_t, v_t = (
        torch.as_tensor(t).to(dtype)
        if isinstance(t, torch.Tensor)
        else torch.tensor(float(t), dtype=dtype)
        for t in args
    )
    try:
        torch.broadcast_shapes(d_t.shape, w_t.shape, v_t.shape)
    except RuntimeError:
        fail(
            fn,
            f"distance, w and v must broadcast together, got distance "
            f"{tuple(d_t.shape)}, w {tuple(w_t.shape)}, v {tuple(v_t.shape)}",
        )
    x = v_t - w_t * d_t
    # softplus(y) = log(1 + e^y) = max(y, 0) + log1p(e^-|y|): no overflow, no cut-off
    softplus_v = v_t.clamp(min=0) + torch.log1p(torch.exp(-v_t.abs()))
    softplus_x = x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))
    return torch.exp(softplus_v - softplus_x)


def _require_head_params(fn: str, heads: int, **params: object) -> None:
    """Each of ``params`` (DA's ``w`` and ``v_bias``) is a float tensor of shape
    ``(heads,)``."""
    for name, p in params.items():
        require_ndim(
            fn,
            name,
            require_float_tensor(fn, name, require_tensor(fn, name, p)),
            1,
            "(heads,)",
        )
        if p.shape[0] != heads:
            fail(fn, f"{name} must have shape (heads,) = ({heads},), got {describe(p)}")


def da_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    v_bias: torch.Tensor,
    *,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distance-aware attention: ReLU scores rescaled by :func:`da_rescale`.

    .. math::

        A_h = \\mathrm{softmax}\\Big(\\frac{\\mathrm{ReLU}(Q_h K_h^\\top) \\odot
        \\hat R_h}{\\sqrt{d}}\\Big), \\quad \\hat R_h[i, j] =
        \\frac{1 + e^{v_h}}{1 + e^{v_h - w_h |i' - j|}}, \\quad i' = i + L_k - L_q

    Args:
        q: ``(batch, heads, q_len, head_dim)`` queries (the last ``q_len`` positions).
        k: ``(batch, heads, k_len, head_dim)`` keys.
        v: ``(batch, heads, k_len, v_dim)`` values.
        w: ``(heads,)`` distance slopes.
        v_bias: ``(heads,)`` bounds (the paper's ``v``).
        causal: mask keys after their query.

    Returns:
        ``(out, weights)``: ``(batch, heads, q_len, v_dim)`` and
        ``(batch, heads, q_len, k_len)``.

    Paper: Wu et al. 2021, eq. (5)-(7).
    """
    fn = "da_attention"
    heads, q_len, k_len = require_qkv(fn, q, k, v)
    dim = q.shape[-1]
    _require_head_params(fn, heads, w=w, v_bias=v_bias)
    query_pos = torch.arange(q_len, device=q.device) + (k_len - q_len)  # (Lq,)
    distance = (query_pos[:, None] - torch.arange(k_len, device=q.device)).abs()
    r_hat = da_rescale(
        distance.to(q.dtype), w[:, None, None], v_bias[:, None, None]
    )  # (H, Lq, Lk)
    scores = F.relu(q @ k.transpose(-2, -1)) * r_hat / math.sqrt(dim)  # (B, H, Lq, Lk)
    if causal:
        future = query_pos[:, None] < torch.arange(k_len, device=q.device)  # (Lq, Lk)
        scores = scores.masked_fill(future, float("-inf"))
    weights = scores.softmax(dim=-1)  # (B, H, Lq, Lk)
    return weights @ v, weights


def da_flex_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    v_bias: torch.Tensor,
    *,
    causal: bool = False,
    compiled: bool = True,
) -> torch.Tensor:
    """Distance-aware attention through ``flex_attention``: DA as a ``score_mod``.

    .. math::

        s_h(i, j) = \\mathrm{ReLU}\\Big(\\frac{q_i \\cdot k_j}{\\sqrt{d}}\\Big)\\,
        \\hat R_h(|i' - j|), \\qquad i' = i + L_k - L_q

    ``flex_attention`` hands the ``score_mod`` the scaled score ``q.k / sqrt(d)`` and
    the indices; since ``sqrt(d) > 0``, ``ReLU(q.k) R_hat / sqrt(d)`` equals
    ``ReLU(q.k / sqrt(d)) R_hat``, so the modified score is exactly DA's logit.
    ``R_hat`` depends only on the head and the distance ``|i' - j| < k_len``, so it is
    tabulated once, ``(heads, k_len)``; the compiled kernel computes each score and
    reads its coefficient from the table: no ``(L_q, L_k)`` scores are stored, unlike
    :func:`da_attention`. With ``causal``, a block mask skips the blocks above the
    diagonal.

    Args:
        q, k, v, w, v_bias, causal: as for :func:`da_attention`.
        compiled: use ``torch.compile(flex_attention)``; False runs PyTorch's eager
            reference, which materialises the scores (for tests and tiny inputs).

    Returns:
        ``(batch, heads, q_len, v_dim)``, equal to the output of :func:`da_attention`
        (tested); the weights are not returned.

    Paper: Wu et al. 2021; FlexAttention: Dong et al. 2024.
    """
    from torch.nn.attention.flex_attention import flex_attention

    from ._flex import causal_block_mask, compiled_flex_attention

    fn = "da_flex_attention"
    n_heads, q_len, k_len = require_qkv(fn, q, k, v)
    _require_head_params(fn, n_heads, w=w, v_bias=v_bias)
    offset = k_len - q_len
    distances = torch.arange(k_len, device=q.device, dtype=q.dtype)  # (Lk,)
    table = da_rescale(
        distances, w.to(q)[:, None], v_bias.to(q)[:, None]
    )  # (H, Lk): R_hat of head h at distance t

    def da_score_mod(score, b, h, q_idx, kv_idx):
        return torch.relu(score) * table[h, (q_idx + offset - kv_idx).abs()]

    block_mask = causal_block_mask(q_len, k_len, q.device) if causal else None
    attend = compiled_flex_attention() if compiled else flex_attention
    return attend(
        q, k, v, score_mod=da_score_mod, block_mask=block_mask
    )  # (B, H, Lq, Dv)


class DAAttention(nn.Module):
    """Multi-head distance-aware attention with learnable ``w`` and ``v`` per head.

    Args:
        d_model: model width, divisible by ``n_heads``.
        n_heads: number of heads.
        causal: mask keys after their query.
        w_init: initial ``w`` for every head (0 starts as plain ReLU attention).
        v_init: initial ``v`` for every head.

    >>> layer = DAAttention(8, 2)
    >>> layer(torch.zeros(2, 5, 8)).shape
    torch.Size([2, 5, 8])
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        causal: bool = False,
        w_init: float = 0.0,
        v_init: float = 0.0,
    ) -> None:
        super().__init__()
        fn = "DAAttention"
        self.head_dim = require_head_dim(fn, d_model, n_heads)
        self.n_heads = n_heads
        self.causal = bool(causal)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.w = nn.Parameter(torch.full((self.n_heads,), float(w_init)))
        self.v = nn.Parameter(torch.full((self.n_heads,), float(v_init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (batch, seq, d_model)`` -> ``(batch, seq, d_model)``."""
        fn = "DAAttention.forward"
        require_ndim(
            fn, "x", require_float_tensor(fn, "x", x), 3, "(batch, seq, d_model)"
        )
        batch, seq, _ = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, D)
        z, _ = da_attention(q, k, v, self.w, self.v, causal=self.causal)
        return self.out(z.transpose(1, 2).reshape(batch, seq, -1))  # (B, S, d_model)
