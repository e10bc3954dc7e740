r"""Longer contexts for RoPE: rescale the rotation frequencies of a trained model.

A RoPE model trained on sequences of at most :math:`L` tokens has seen, for pair
:math:`i`, rotation angles :math:`m\theta_i` with :math:`0 \le m < L` only. Pairs whose
wavelength :math:`\lambda_i = 2\pi/\theta_i` exceeds :math:`L` never completed a turn in
training, so positions past :math:`L` give them angles the model has never seen. Every
method here changes the frequencies (and some the attention temperature) so that a
longer context :math:`sL` (``factor`` :math:`s`) maps into familiar angles:

- ``"linear"``: position interpolation (Chen et al. 2023),
  :math:`\theta_i' = \theta_i/s`;
- ``"ntk"``: NTK-aware base scaling (bloc97 2023), :math:`b' = b\,s^{d/(d-2)}`,
  :math:`\theta_i' = b'^{-2i/d}`;
- ``"dynamic"``: dynamic NTK (emozilla 2023), ``"ntk"`` with a factor that follows the
  current length :math:`\ell`. Without ``factor``: the YaRN paper's rule (Peng et al.
  2023, section 3.3) :math:`s(\ell) = \max(1, \ell/L)`. With ``factor`` :math:`a`: the
  rule of emozilla's post and of Hugging Face, :math:`s(\ell) = a\max(\ell, L)/L -
  (a - 1)`; that :math:`a` is a slope, not the target ratio (:math:`a = 1` is the
  paper's rule);
- ``"yarn"``: YaRN (Peng et al. 2023), a ramp over the pair index (the reference
  code's form of the paper's ramp in turns) between extrapolation and interpolation,
  plus the attention factor :math:`0.1\ln s + 1`;
- ``"llama3"``: Llama 3.1's three wavelength bands (Meta's reference code,
  ``apply_scaling``);
- ``"longrope"``: LongRoPE (Ding et al. 2024) as Phi-3 applies it, searched per-pair
  factors :math:`\theta_i' = \theta_i / f_i`.

The keyword names are the course's own (``method``, ``base``,
``original_max_position``); :func:`from_hf_rope_parameters` translates a Hugging Face
``rope_parameters`` / ``rope_scaling`` dict, as it stands in a model's
``config.json``, into them. The parity with
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` is tested in
``tests/test_parity_rope_scaling.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ._validate import describe, fail, require_base, require_rotary_dim

__all__ = [
    "ROPE_SCALING_METHODS",
    "dynamic_ntk_factor",
    "from_hf_rope_parameters",
    "llama3_scaled_frequencies",
    "llama3_smooth_factor",
    "ntk_scaled_base",
    "rope_scaled_frequencies",
    "yarn_attention_factor",
    "yarn_correction_dim",
    "yarn_correction_range",
    "yarn_paper_ramp",
    "yarn_ramp",
]

# method name -> the method_params it accepts (besides factor / original_max_position).
_PARAMS: dict[str, tuple[str, ...]] = {
    "linear": (),
    "ntk": (),
    "dynamic": ("seq_len",),
    "yarn": (
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
        "max_position",
    ),
    "llama3": ("low_freq_factor", "high_freq_factor"),
    "longrope": (
        "short_factor",
        "long_factor",
        "attention_factor",
        "max_position",
        "seq_len",
    ),
}
ROPE_SCALING_METHODS: tuple[str, ...] = tuple(_PARAMS)
_NEEDS_ORIGINAL = ("dynamic", "yarn", "llama3", "longrope")


def _real(fn: str, name: str, value: object, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        fail(fn, f"{name} must be a real number, got {describe(value)}", TypeError)
    value = float(value)
    if not math.isfinite(value) or (positive and not value > 0):
        fail(fn, f"{name} must be a finite number greater than 0, got {value!r}")
    return value


def _factor(fn: str, factor: object) -> float:
    factor = _real(fn, "factor", factor)
    if factor < 1.0:
        fail(
            fn,
            f"factor must be at least 1 (the new context is factor times the "
            f"original one), got {factor!r}",
        )
    return factor


def _length(fn: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail(
            fn,
            f"{name} must be a positive integer (a number of tokens), "
            f"got {describe(value)}",
        )
    return int(value)  # type: ignore[arg-type]


def ntk_scaled_base(base: float, factor: float, head_dim: int) -> float:
    r"""NTK-aware base: :math:`b' = b\, s^{d/(d-2)}`.

    Chosen so that the lowest-frequency pair :math:`i = d/2 - 1` is slowed down by
    exactly :math:`s` (it is interpolated like position interpolation) while pair 0
    keeps :math:`\theta_0 = 1` (high frequencies extrapolate):
    :math:`b'^{-(d-2)/d} = b^{-(d-2)/d}/s`.

    Example:
        >>> round(ntk_scaled_base(10000.0, 4.0, 4), 1)
        160000.0
    """
    fn = "ntk_scaled_base"
    head_dim = require_rotary_dim(fn, head_dim)
    if head_dim < 4:
        fail(
            fn, f"head_dim must be at least 4 (the exponent is d/(d-2)), got {head_dim}"
        )
    return require_base(fn, base) * _factor(fn, factor) ** (head_dim / (head_dim - 2))


def dynamic_ntk_factor(
    factor: float | None, seq_len: int, original_max_position: int
) -> float:
    r"""Effective NTK factor of dynamic NTK at the current length :math:`\ell`.

    Two rules are in use, and they differ:

    * ``factor=None``, the YaRN paper's rule (Peng et al. 2023, section 3.3):
      :math:`s(\ell) = \max(1, \ell/L)`, the ratio of the current length to the
      training length;
    * ``factor=a``, emozilla's rule (2023), which Hugging Face's ``"dynamic"``
      ``rope_type`` implements:

      .. math::

          s(\ell) = \frac{a\,\max(\ell, L)}{L} - (a - 1).

      It is 1 up to :math:`L` and grows by :math:`a/L` per token: :math:`a` is a
      slope, not the target ratio. :math:`a = 1` is the paper's rule; with
      :math:`a = T/L` at length :math:`T` the effective factor is
      :math:`(T/L)^2 - T/L + 1` (3 at :math:`T = 2L`, 13 at :math:`4L`), not
      :math:`T/L`.

    Example:
        >>> dynamic_ntk_factor(None, 3000, 2000)
        1.5
        >>> dynamic_ntk_factor(2.0, 3000, 2000)
        2.0
    """
    fn = "dynamic_ntk_factor"
    slope = 1.0 if factor is None else _factor(fn, factor)
    seq_len = _length(fn, "seq_len", seq_len)
    original = _length(fn, "original_max_position", original_max_position)
    return slope * max(seq_len, original) / original - (slope - 1.0)


def yarn_correction_dim(
    num_rotations: float, head_dim: int, base: float, original_max_position: int
) -> float:
    r"""The (fractional) pair index whose wavelength fits ``num_rotations`` times in L.

    Pair :math:`i` turns :math:`L\theta_i/2\pi = L / (2\pi b^{2i/d})` times over the
    training length; solving that for :math:`i` gives

    .. math::

        i(r) = \frac{d \,\ln\!\big(L / (2\pi r)\big)}{2 \ln b}.
    """
    return (
        head_dim * math.log(original_max_position / (num_rotations * 2 * math.pi))
    ) / (2 * math.log(base))


def yarn_correction_range(
    beta_fast: float,
    beta_slow: float,
    head_dim: int,
    base: float,
    original_max_position: int,
    *,
    truncate: bool = True,
) -> tuple[float, float]:
    r"""Pair indices ``(low, high)`` where YaRN's ramp starts and ends.

    ``low = floor(i(beta_fast))``, ``high = ceil(i(beta_slow))`` (no rounding when
    ``truncate=False``), clipped to ``[0, d - 1]``. A ``beta_fast`` above the
    :math:`L/2\pi` turns of the fastest pair gives ``i < 0``, clipped to pair 0
    (e.g. LLaMA's 32 at :math:`L = 16`); ramp and result are then those of any
    ``beta_fast`` between :math:`L/2\pi` and that value.

    >>> yarn_correction_range(32.0, 1.0, 16, 10000.0, 16)  # d = 16, L = 16
    (0, 1)
    """
    low = yarn_correction_dim(beta_fast, head_dim, base, original_max_position)
    high = yarn_correction_dim(beta_slow, head_dim, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def yarn_ramp(low: float, high: float, n_pairs: int) -> torch.Tensor:
    r"""YaRN's ramp :math:`\gamma_i = \mathrm{clip}((i - low)/(high - low), 0, 1)`.

    0 for the fast pairs (kept as trained), 1 for the slow ones (interpolated by
    :math:`s`). ``high == low`` is widened by 0.001 as in the reference code.

    Returns:
        float64 tensor ``(n_pairs,)``.
    """
    if high == low:
        high = high + 0.001
    i = torch.arange(n_pairs, dtype=torch.float64)
    return ((i - low) / (high - low)).clamp(0.0, 1.0)  # (n_pairs,)


def yarn_paper_ramp(turns: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    r"""The YaRN paper's ramp (section 3.2, "NTK-by-parts"), linear in the turns.

    .. math::

        \gamma(r) = \operatorname{clip}\!\Big(\frac{r - \alpha}{\beta - \alpha},
        0, 1\Big), \qquad
        h(\theta_i) = (1 - \gamma(r_i))\,\frac{\theta_i}{s} + \gamma(r_i)\,\theta_i,

    with :math:`r_i = L/\lambda_i` the turns of pair :math:`i` in the training
    length. Here :math:`\gamma = 1` means *keep* (many turns) and :math:`\gamma = 0`
    interpolate; the paper uses :math:`\alpha = 1`, :math:`\beta = 32` for LLaMA.
    The reference code and :func:`yarn_ramp` use a ramp linear in the pair index
    instead (1 = interpolate); Llama 3.1's blend is this ramp with
    :math:`\alpha = 1`, :math:`\beta = 4`.

    Args:
        turns: :math:`r`, a floating tensor of any shape.
        alpha, beta: the ends of the ramp in turns, :math:`\alpha < \beta`.

    Returns:
        :math:`\gamma(r)`, same shape and dtype as ``turns``.
    """
    fn = "yarn_paper_ramp"
    if not isinstance(turns, torch.Tensor) or not turns.is_floating_point():
        fail(fn, f"turns must be a floating tensor, got {describe(turns)}", TypeError)
    alpha = _real(fn, "alpha", alpha, positive=False)
    beta = _real(fn, "beta", beta, positive=False)
    if not beta > alpha:
        fail(fn, f"beta must be larger than alpha, got beta={beta} <= alpha={alpha}")
    return ((turns - alpha) / (beta - alpha)).clamp(0.0, 1.0)


def yarn_attention_factor(
    factor: float, mscale: float | None = None, mscale_all_dim: float | None = None
) -> float:
    r"""YaRN's attention factor, the square root of the softmax temperature 1/t.

    .. math::

        \sqrt{1/t} = 0.1 \ln s + 1 \quad (s > 1), \qquad 1 \quad (s \le 1);

    with both ``mscale`` (:math:`\kappa`) and ``mscale_all_dim``
    (:math:`\kappa_{all}`, DeepSeek), the ratio
    :math:`(0.1\,\kappa \ln s + 1) / (0.1\,\kappa_{all} \ln s + 1)`. The cos and sin
    tables are multiplied by it, so the logits :math:`q^\top k` grow by its square.
    """

    def get(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        return float(get(factor, mscale) / get(factor, mscale_all_dim))
    return get(factor)


def llama3_smooth_factor(
    wavelength: torch.Tensor,
    original_max_position: int,
    low_freq_factor: float,
    high_freq_factor: float,
) -> torch.Tensor:
    r"""Llama 3.1's blend weight :math:`\mu = (L/\lambda - \alpha)/(\beta - \alpha)`.

    ``alpha = low_freq_factor``, ``beta = high_freq_factor``. It is 0 at
    :math:`\lambda = L/\alpha` (fully interpolated) and 1 at :math:`\lambda = L/\beta`
    (kept); only meaningful between the two (the medium band).
    """
    return (original_max_position / wavelength - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )


def llama3_scaled_frequencies(
    inv_freq: torch.Tensor,
    factor: float,
    original_max_position: int,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> torch.Tensor:
    r"""Llama 3.1's frequency bands applied to the frequencies ``inv_freq``.

    With wavelength :math:`\lambda_i = 2\pi/\theta_i`, training length :math:`L`,
    :math:`\alpha` = ``low_freq_factor`` and :math:`\beta` = ``high_freq_factor``:

    .. math::

        \theta_i' = \begin{cases}
        \theta_i & \lambda_i < L/\beta \quad \text{(kept)}\\
        \theta_i / s & \lambda_i > L/\alpha \quad \text{(interpolated)}\\
        (1 - \mu_i)\,\theta_i/s + \mu_i\,\theta_i & \text{otherwise}
        \end{cases}

    with :math:`\mu_i` from :func:`llama3_smooth_factor`; the three pieces join
    continuously at the band edges.

    Args:
        inv_freq: the trained frequencies :math:`\theta`, a 1-D floating tensor of
            positive numbers ``(n_pairs,)``.
        factor: context extension factor :math:`s \ge 1` (Llama 3.1: 8).
        original_max_position: training length :math:`L`.
        low_freq_factor: :math:`\alpha`; wavelengths above :math:`L/\alpha` are
            interpolated.
        high_freq_factor: :math:`\beta > \alpha`; wavelengths below
            :math:`L/\beta` are kept.

    Returns:
        tensor ``(n_pairs,)`` of ``inv_freq``'s dtype (computed in float64).

    Example:
        Wavelengths 6.3 (kept), 628 (blended) and 6283 (interpolated) for
        :math:`L = 2000`:

        >>> theta = torch.tensor([1.0, 0.01, 0.001], dtype=torch.float64)
        >>> [round(v, 6) for v in llama3_scaled_frequencies(theta, 8.0, 2000).tolist()]
        [1.0, 0.007617, 0.000125]
    """
    fn = "llama3_scaled_frequencies"
    if (
        not isinstance(inv_freq, torch.Tensor)
        or inv_freq.dim() != 1
        or not inv_freq.is_floating_point()
    ):
        fail(
            fn,
            f"inv_freq must be a 1-D floating tensor of frequencies, got "
            f"{describe(inv_freq)}",
            TypeError,
        )
    if not bool((inv_freq > 0).all()) or not bool(inv_freq.isfinite().all()):
        fail(fn, "inv_freq must hold finite frequencies greater than 0")
    factor = _factor(fn, factor)
    original = _length(fn, "original_max_position", original_max_position)
    alpha = _real(fn, "low_freq_factor", low_freq_factor)
    beta = _real(fn, "high_freq_factor", high_freq_factor)
    if not beta > alpha:
        fail(
            fn,
            f"high_freq_factor must be larger than low_freq_factor, got "
            f"high_freq_factor={beta} <= low_freq_factor={alpha}",
        )
    theta = inv_freq.double()  # (n_pairs,)
    wavelength = 2 * math.pi / theta  # (n_pairs,)
    mu = llama3_smooth_factor(wavelength, original, alpha, beta)
    out = torch.where(
        wavelength < original / beta,
        theta,  # high band: kept
        torch.where(
            wavelength > original / alpha,
            theta / factor,  # low band: interpolated
            (1 - mu) * theta / factor + mu * theta,  # medium band: blended
        ),
    )
    return out.to(inv_freq.dtype)


def _factor_list(fn: str, name: str, value: object, n_pairs: int) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if not isinstance(value, Sequence) or isinstance(value, str):
        fail(
            fn,
            f"{name} must be a list of head_dim // 2 = {n_pairs} numbers, "
            f"got {describe(value)}",
            TypeError,
        )
    if len(value) != n_pairs:  # type: ignore[arg-type]
        fail(
            fn,
            f"{name} must have head_dim // 2 = {n_pairs} entries (one per "
            f"pair), got {len(value)}",
        )  # type: ignore[arg-type]
    out = [_real(fn, f"{name}[{k}]", v) for k, v in enumerate(value)]  # type: ignore[union-attr]
    return torch.tensor(out, dtype=torch.float64)  # (n_pairs,)


def rope_scaled_frequencies(
    head_dim: int,
    *,
    base: float = 10000.0,
    method: str,
    factor: float | None,
    original_max_position: int | None = None,
    dtype: torch.dtype = torch.float32,
    **method_params: object,
) -> tuple[torch.Tensor, float]:
    r"""Rescaled RoPE frequencies for running a model past its training length.

    With :math:`\theta_i = b^{-2i/d}`, :math:`i = 0..d/2-1`, factor :math:`s`,
    training length :math:`L` (``original_max_position``) and wavelength
    :math:`\lambda_i = 2\pi/\theta_i`:

    * ``"linear"``: :math:`\theta_i' = \theta_i / s`; attention factor 1.
    * ``"ntk"``: :math:`\theta_i' = (b s^{d/(d-2)})^{-2i/d}`; attention factor 1.
      NTK-aware scaling is its own method name (it needs nothing but ``factor``);
      ``"dynamic"`` is the same formula with :func:`dynamic_ntk_factor`.
    * ``"dynamic"``: ``"ntk"`` with the factor :math:`s(\ell)` of
      :func:`dynamic_ntk_factor` at the current length :math:`\ell` (``seq_len``,
      default :math:`L`). ``factor=None``: the YaRN paper's :math:`s(\ell) =
      \max(1, \ell/L)`, the rule to use for "extend by the length in use".
      ``factor=a``: Hugging Face's (emozilla's) :math:`s(\ell) = a\max(\ell, L)/L -
      (a-1)`, where :math:`a` is a slope and not the target ratio; passing
      :math:`a = T/L` together with ``seq_len`` :math:`T` gives :math:`(T/L)^2 - T/L
      + 1`, not :math:`T/L`.
    * ``"yarn"``: :math:`\theta_i' = (1 - \gamma_i)\theta_i + \gamma_i\theta_i/s` with
      :func:`yarn_ramp` :math:`\gamma` (1 = interpolate) linear in the pair index
      between the pairs that turn ``beta_fast`` (default 32) and ``beta_slow``
      (default 1) times in :math:`L` (:func:`yarn_correction_range`): the form of
      the reference code and of Hugging Face, which the course follows. The
      defaults are LLaMA's; Peng et al. tune them per model (section 3.2). No pair
      turns more than :math:`L/2\pi` times (pair 0, :math:`\theta_0 = 1`), so at a
      short :math:`L` the fast end falls below pair 0 and is clipped there: at
      :math:`d = 16`, :math:`L = 16`, base :math:`10^4` the ramp keeps pair 0 and
      divides every other pair by :math:`s`, with no pair in between. The paper
      (section 3.2) writes the ramp linear in the number of turns :math:`r = L/\lambda`
      with :math:`\gamma = 1` meaning keep; the two agree at the ends, not in
      between. Attention factor ``attention_factor`` or
      :func:`yarn_attention_factor`. ``factor=None`` means ``max_position /
      original_max_position``.
    * ``"llama3"``: :math:`\theta_i' = \theta_i` if :math:`\lambda_i < L/\beta`,
      :math:`\theta_i/s` if :math:`\lambda_i > L/\alpha`, otherwise
      :math:`(1-\mu_i)\theta_i/s + \mu_i\theta_i` (:func:`llama3_smooth_factor`);
      :math:`\alpha` = ``low_freq_factor`` (default 1), :math:`\beta` =
      ``high_freq_factor`` (default 4), Llama 3.1's values. Attention factor 1.
    * ``"longrope"``: :math:`\theta_i' = \theta_i / f_i` with :math:`f` =
      ``long_factor`` when ``seq_len`` > :math:`L`, else ``short_factor`` (lists of
      :math:`d/2` numbers); attention factor ``attention_factor`` or
      :math:`\sqrt{1 + \ln s / \ln L}` (1 when :math:`s \le 1`); ``factor=None``
      means ``max_position / original_max_position``.

    Computed in float64 and rounded once to ``dtype``.

    Args:
        head_dim: head dimension :math:`d` (even).
        base: RoPE base :math:`b`.
        method: one of ``ROPE_SCALING_METHODS``.
        factor: context extension factor :math:`s \ge 1` (for ``"dynamic"``: the
            slope :math:`a` of Hugging Face's rule, or ``None`` for the paper's rule).
        original_max_position: training length :math:`L` (needed by dynamic, yarn,
            llama3, longrope).
        dtype: floating dtype of ``inv_freq``.
        **method_params: the method's parameters, named as in Hugging Face's
            ``rope_parameters`` (``beta_fast``, ``mscale``, ``low_freq_factor``,
            ``long_factor``, ...), plus ``max_position`` and ``seq_len``; a whole
            Hugging Face dict goes through :func:`from_hf_rope_parameters`.

    Returns:
        ``(inv_freq, attention_factor)``: tensor ``(head_dim // 2,)`` and a float
        that multiplies the cos and sin tables.

    Example:
        >>> rope_scaled_frequencies(4, method="linear", factor=2.0)
        (tensor([0.5000, 0.0050]), 1.0)
    """
    fn = "rope_scaled_frequencies"
    if method not in _PARAMS:
        fail(
            fn,
            f"method must be one of {', '.join(map(repr, ROPE_SCALING_METHODS))}, "
            f"got {method!r}",
        )
    head_dim = require_rotary_dim(fn, head_dim)
    base = require_base(fn, base)
    unknown = sorted(set(method_params) - set(_PARAMS[method]))
    if unknown:
        allowed = ", ".join(_PARAMS[method]) or "none"
        fail(
            fn,
            f"method {method!r} does not take {', '.join(unknown)} "
            f"(it accepts: {allowed})",
            TypeError,
        )
    if method in _NEEDS_ORIGINAL:
        if original_max_position is None:
            fail(
                fn,
                f"method {method!r} needs original_max_position (the length the "
                f"model was trained at)",
            )
        original = _length(fn, "original_max_position", original_max_position)
    elif original_max_position is not None:
        original = _length(fn, "original_max_position", original_max_position)
    max_position = method_params.get("max_position")
    if factor is None and method == "dynamic":
        pass  # the paper's rule, s = max(1, seq_len / L)
    elif factor is None:
        if method in ("yarn", "longrope") and max_position is not None:
            max_position = _length(fn, "max_position", max_position)
            factor = max_position / original
        else:
            fail(
                fn,
                f"method {method!r} needs a factor"
                + (" (or max_position)" if method in ("yarn", "longrope") else ""),
            )
    if method == "longrope":
        factor = _real(fn, "factor", factor)  # HF allows any positive factor here
    elif factor is not None:
        factor = _factor(fn, factor)
    n_pairs = head_dim // 2
    exponent = torch.arange(n_pairs, dtype=torch.float64) * 2.0 / head_dim  # 2i/d
    theta = base ** (-exponent)  # (n_pairs,)
    attention = 1.0

    if method == "linear":
        inv = theta / factor
    elif method == "ntk":
        inv = ntk_scaled_base(base, factor, head_dim) ** (-exponent)
    elif method == "dynamic":
        seq_len = method_params.get("seq_len")
        seq_len = original if seq_len is None else _length(fn, "seq_len", seq_len)
        s = dynamic_ntk_factor(factor, seq_len, original)
        inv = ntk_scaled_base(base, s, head_dim) ** (-exponent)
    elif method == "yarn":
        beta_fast = _real(fn, "beta_fast", method_params.get("beta_fast") or 32.0)
        beta_slow = _real(fn, "beta_slow", method_params.get("beta_slow") or 1.0)
        if beta_fast <= beta_slow:
            fail(
                fn,
                f"beta_fast must be larger than beta_slow (rotations in L of the "
                f"fast and the slow end of the ramp), got {beta_fast} <= {beta_slow}",
            )
        truncate = method_params.get("truncate", True)
        if not isinstance(truncate, bool):
            fail(
                fn,
                f"truncate must be True or False, got {describe(truncate)}",
                TypeError,
            )
        low, high = yarn_correction_range(
            beta_fast, beta_slow, head_dim, base, original, truncate=truncate
        )
        gamma = yarn_ramp(low, high, n_pairs)  # (n_pairs,) 0 = keep, 1 = interpolate
        inv = theta * (1.0 - gamma) + (theta / factor) * gamma
        att = method_params.get("attention_factor")
        if att is None:
            mscale = method_params.get("mscale")
            mscale_all = method_params.get("mscale_all_dim")
            for name, v in (("mscale", mscale), ("mscale_all_dim", mscale_all)):
                if v is not None:
                    _real(fn, name, v, positive=False)
            attention = yarn_attention_factor(factor, mscale, mscale_all)  # type: ignore[arg-type]
        else:
            attention = _real(fn, "attention_factor", att)
    elif method == "llama3":
        alpha = _real(fn, "low_freq_factor", method_params.get("low_freq_factor", 1.0))
        beta = _real(fn, "high_freq_factor", method_params.get("high_freq_factor", 4.0))
        if not beta > alpha:
            fail(
                fn,
                f"high_freq_factor must be larger than low_freq_factor, got "
                f"high_freq_factor={beta} <= low_freq_factor={alpha}",
            )
        inv = llama3_scaled_frequencies(theta, factor, original, alpha, beta)
    else:  # longrope
        for key in ("short_factor", "long_factor"):
            if method_params.get(key) is None:
                fail(
                    fn,
                    f"method 'longrope' needs {key} (a list of head_dim // 2 = "
                    f"{n_pairs} numbers)",
                )
        short = _factor_list(fn, "short_factor", method_params["short_factor"], n_pairs)
        long = _factor_list(fn, "long_factor", method_params["long_factor"], n_pairs)
        seq_len = method_params.get("seq_len")
        seq_len = None if seq_len is None else _length(fn, "seq_len", seq_len)
        ext = long if seq_len is not None and seq_len > original else short
        inv = theta / ext
        att = method_params.get("attention_factor")
        if att is None:
            attention = (
                1.0
                if factor <= 1.0
                else math.sqrt(1 + math.log(factor) / math.log(original))
            )
        else:
            attention = _real(fn, "attention_factor", att)
    return inv.to(dtype), float(attention)


# Hugging Face rope_type -> course method (``"default"`` is plain RoPE: linear, s = 1)
_HF_TYPES = {
    "default": "linear",
    "linear": "linear",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
}


def from_hf_rope_parameters(
    rope_parameters: dict,
    *,
    rope_theta: float | None = None,
    max_position_embeddings: int | None = None,
    original_max_position_embeddings: int | None = None,
) -> dict:
    r"""Keyword arguments of :func:`rope_scaled_frequencies` for a Hugging Face dict.

    ``rope_parameters`` is a model config's ``rope_parameters`` (transformers 5) or
    ``rope_scaling`` (transformers 4) dict, as it stands in ``config.json``:
    ``rope_type`` (or the older ``type``), ``rope_theta``, ``factor``,
    ``original_max_position_embeddings`` and the method's own keys (``beta_fast``,
    ``mscale``, ``low_freq_factor``, ``short_factor``, ...). The keys transformers 4
    keeps at the top level of the config are passed as keywords: ``rope_theta``
    and, for Phi-3, ``original_max_position_embeddings``. ``max_position_embeddings``
    (the config's) is needed where Hugging Face reads it: ``"dynamic"`` takes its
    training length :math:`L` from it, and ``"yarn"`` and ``"longrope"`` without a
    ``factor`` take :math:`s` = max_position_embeddings / L.

    Returns:
        a dict with ``base``, ``method``, ``factor``, ``original_max_position`` and
        the method's parameters: ``rope_scaled_frequencies(head_dim, **kwargs)``
        gives Hugging Face's frequencies and attention factor (``tests/
        test_parity_rope_scaling.py`` compares them for real model configs). For
        :class:`~course_lib.rope.RotaryEmbedding`, pop ``base`` and pass the rest as
        ``scaling``. ``rope_type="default"`` gives ``method="linear"`` with
        ``factor=1.0``, plain RoPE.

    Example:
        >>> llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        ...            "high_freq_factor": 4.0,
        ...            "original_max_position_embeddings": 8192}
        >>> kw = from_hf_rope_parameters(llama31, rope_theta=500000.0)
        >>> kw["method"], kw["base"], kw["factor"], kw["original_max_position"]
        ('llama3', 500000.0, 8.0, 8192)
    """
    fn = "from_hf_rope_parameters"
    if not isinstance(rope_parameters, dict):
        fail(
            fn,
            f"rope_parameters must be a dict (a config's rope_parameters or "
            f"rope_scaling), got {describe(rope_parameters)}",
            TypeError,
        )
    params = dict(rope_parameters)
    rope_type = params.pop("rope_type", None)
    legacy = params.pop("type", None)
    rope_type = rope_type if rope_type is not None else legacy
    if rope_type not in _HF_TYPES:
        fail(
            fn,
            f"rope_type must be one of {', '.join(map(repr, _HF_TYPES))} (the "
            f"Hugging Face types this course implements), got {rope_type!r}",
        )
    method = _HF_TYPES[rope_type]
    base = params.pop("rope_theta", None)
    base = rope_theta if base is None else base
    if base is None:
        fail(
            fn,
            "rope_theta is missing: it is in rope_parameters (transformers 5) or "
            "at the top of the config (transformers 4: pass rope_theta=...)",
        )
    partial = params.pop("partial_rotary_factor", 1.0)
    if partial != 1.0:
        fail(
            fn,
            f"partial_rotary_factor={partial!r}: only part of each head is "
            f"rotated; remove the key and give rope_scaled_frequencies "
            f"head_dim = int(head_dim * {partial!r}), the rotated width",
        )
    original = params.pop("original_max_position_embeddings", None)
    original = original_max_position_embeddings if original is None else original
    factor = params.pop("factor", None)
    out: dict = {"base": require_base(fn, base), "method": method}
    if rope_type == "default":
        out.update(factor=1.0)
    elif method == "dynamic":
        # Hugging Face's dynamic type measures lengths against the config's
        # max_position_embeddings, not original_max_position_embeddings
        if max_position_embeddings is None:
            fail(
                fn,
                "rope_type 'dynamic' needs max_position_embeddings: Hugging Face "
                "takes the training length L from the config's "
                "max_position_embeddings",
            )
        if factor is None:
            fail(fn, "rope_type 'dynamic' needs a factor (Hugging Face's slope)")
        out.update(factor=factor, original_max_position=max_position_embeddings)
    elif method == "linear":
        if factor is None:
            fail(fn, "rope_type 'linear' needs a factor")
        out.update(factor=factor)
    else:
        if original is None:
            fail(
                fn,
                f"rope_type {rope_type!r} needs original_max_position_embeddings "
                f"(the training length), in the dict or as a keyword",
            )
        out.update(factor=factor, original_max_position=original)
        if factor is None and method in ("yarn", "longrope"):
            if max_position_embeddings is None:
                fail(
                    fn,
                    f"rope_type {rope_type!r} without a factor needs "
                    f"max_position_embeddings (factor = max_position_embeddings / "
                    f"original_max_position_embeddings)",
                )
            out["max_position"] = max_position_embeddings
    unknown = sorted(set(params) - set(_PARAMS[method]) - {"seq_len"})
    if unknown:
        fail(
            fn,
            f"rope_type {rope_type!r}: this course does not implement the keys "
            f"{', '.join(unknown)}",
        )
    out.update(params)
    return out
