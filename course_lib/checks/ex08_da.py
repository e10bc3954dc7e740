"""Graders of exercise 8 (DA-Transformer): the distance weight ``R_hat`` and
distance-aware attention.

Expected answers come from :mod:`course_lib.da`, captured at import; the known wrong
answers (the sign inside the sigmoid flipped, the numerator ``1 + e^v`` missing or
replaced by ``e^v``, ``R_hat`` not applied, ReLU missing, no ``1/sqrt(d)``, ``R_hat``
applied after the softmax, ``w`` and ``v`` swapped, signed distances) are computed
here so that a message can name the mistake.
"""

from __future__ import annotations

import math
from dataclasses import replace as _replace

import torch

from course_lib.da import da_attention as _ref_attention
from course_lib.da import da_rescale as _ref_rescale

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    passed,
    term_rng,
    variant_named,
    with_hint,
)

__all__ = [
    "check_da_attention",
    "check_da_rescale",
    "grade_da_attention",
    "grade_da_rescale",
]

_exp = torch.exp
_relu = torch.relu
_allclose = torch.allclose
_arange = torch.arange
_sqrt = math.sqrt

# Tolerances, from the arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8.
# R_hat = (1 + e^v) / (1 + e^(v - w R)) is a few exps and divisions (or a
# sigmoid ratio: the same value by another formula), each within a few ulps, and
# the attention weights a softmax of O(1) scores: ~10 u relative in all. rtol
# 1e-4 leaves a factor of 100 for vectorised exp paths that differ by CPU; atol
# 1e-5 is for weights near 0.
_ATOL = 1e-5
_RTOL = 1e-4

# No variant changes an answer of this exercise: the term's seed draws the hidden
# cases (course_lib/grading/editions/term.py), and an unknown variant is refused.
EXERCISE = "ex08_da"
VARIANTS: dict[str, Variant] = {}


def _known(expected: torch.Tensor, candidates):
    return [
        m
        for m in candidates
        if not (
            m.answer.shape == expected.shape
            and _allclose(
                m.answer.double(),
                expected.double(),
                atol=_ATOL,
                rtol=_RTOL,
                equal_nan=True,
            )
        )
    ]


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


def _grid_distance(length: int) -> torch.Tensor:
    pos = _arange(length)
    return (pos[:, None] - pos[None, :]).abs().float()  # (L, L)


def _fmt_arg(x: torch.Tensor) -> str:
    if x.ndim == 0:
        return f"tensor({round(x.item(), 4)})"
    return f"<tensor of shape {tuple(x.shape)}>"


# --- da_rescale


def _rescale_mistakes(distance, w, v):
    d, w, v = distance.double(), w.double(), v.double()
    return [
        Mistake(
            (1 + _exp(v)) / (1 + _exp(v + w * d)),
            "the sign inside the exponential is flipped: the denominator is "
            "1 + e^(v - w*distance), so that w > 0 makes R_hat grow with the distance.",
            "sign-of-w-flipped",
        ),
        Mistake(
            1 / (1 + _exp(v - w * d)),
            "the numerator 1 + e^v is missing: it makes R_hat exactly 1 at distance 0 "
            "(and bounds it by 1 + e^v).",
            "no-numerator",
        ),
        Mistake(
            _exp(v) / (1 + _exp(v - w * d)),
            "the numerator is e^v; it is 1 + e^v, which makes R_hat exactly 1 at "
            "distance 0.",
            "numerator-e-v",
        ),
        Mistake(
            (1 + _exp(v)) / (1 + _exp(w * d - v)),
            "the exponent is w*distance - v; it is v - w*distance.",
            "exponent-negated",
        ),
        Mistake(
            (1 + _exp(w)) / (1 + _exp(w - v * d)),
            "w and v are swapped: w multiplies the distance, v sets the bound 1 + e^v.",
            "w-v-swapped",
        ),
    ]


def _check_rescale_case(fn, distance, w, v) -> None:
    expected = _ref_rescale(distance.clone(), w.clone(), v.clone())
    mistakes = _known(expected, _rescale_mistakes(distance, w, v))
    call = f"da_rescale({_fmt_arg(distance)}, {_fmt_arg(w)}, {_fmt_arg(v)})"
    got = call_student(fn, distance.clone(), w.clone(), v.clone(), call=call)
    if (
        isinstance(got, torch.Tensor)
        and got.shape == expected.shape
        and got.is_floating_point()
        and not bool(torch.isfinite(got).all())
        and bool(torch.isfinite(expected).all())
    ):
        bad = "nan" if bool(got.isnan().any()) else "inf"
        raise CheckFailed(
            with_hint(
                f"{call} returned {bad} where R_hat is finite: e^v overflows for "
                "large v (above about 88 in float32, 709 in float64), and the literal "
                "ratio (1 + e^v) / (1 + e^(v - w*distance)) becomes inf or inf/inf = "
                "nan.",
                "take logarithms of numerator and denominator, each of the form "
                "log(1 + e^x), and evaluate log(1 + e^x) without forming e^x for "
                "large x",
                call,
            )
        )
    expect_close(
        got,
        expected,
        what=call,
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=mistakes,
        dtype="float",
    )


def _scalar(x: float) -> torch.Tensor:
    return torch.tensor(x)


def check_da_rescale(fn) -> None:
    """Public check of ``da_rescale(distance, w, v)``."""
    gen = torch.Generator().manual_seed(80)
    _check_rescale_case(fn, _arange(12).float(), _scalar(0.5), _scalar(1.0))
    _check_rescale_case(fn, _grid_distance(5), _scalar(0.2), _scalar(-0.5))
    heads = 3
    _check_rescale_case(
        fn,
        _grid_distance(6)[None],  # (1, L, L)
        _randn(gen, heads, 1, 1).abs(),
        _randn(gen, heads, 1, 1),
    )
    # A large v: the literal formula overflows (in float32 and in float64).
    _check_rescale_case(fn, _arange(12).float(), _scalar(0.5), _scalar(1000.0))
    # A negative w (R_hat falls below 1), and a small w over long distances.
    _check_rescale_case(fn, _arange(10).float(), _scalar(-0.4), _scalar(0.3))
    _check_rescale_case(
        fn, _arange(0, 1000, 37).float(), _scalar(0.004), _scalar(0.5)
    )
    passed("da_rescale", public=True)


def _property_inputs(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, v)`` of the property check, from ``gen``: four heads, w > 0."""
    heads = 4
    w = torch.rand(heads, 1, generator=gen) * 2 + 0.1  # (H, 1), w > 0
    v = _randn(gen, heads, 1)  # (H, 1)
    return w, v


def _check_rescale_properties(fn, w: torch.Tensor, v: torch.Tensor) -> None:
    heads = w.shape[0]
    distance = _arange(0, 200).float()[None, :]  # (1, 200)
    call = "da_rescale(arange(0, 200), w, v) with w > 0 of shape (4, 1)"
    got = call_student(fn, distance.clone(), w.clone(), v.clone(), call=call)
    if not isinstance(got, torch.Tensor) or got.shape != (heads, 200):
        expect_close(got, _ref_rescale(distance, w, v), what=call)
    at_zero = got[:, 0]
    if not _allclose(
        at_zero.double(), torch.ones(heads, dtype=torch.float64), atol=1e-5
    ):
        raise CheckFailed(
            f"{call}: R_hat must be exactly 1 at distance 0 (for every w and v), got "
            f"{[round(t, 5) for t in at_zero.tolist()]}"
        )
    bound = 1 + _exp(v.double())  # (H, 1)
    if bool((got.double() > bound * (1 + 1e-5)).any()) or bool((got < 1 - 1e-5).any()):
        raise CheckFailed(
            f"{call}: for w > 0, R_hat must stay between 1 (distance 0) and 1 + e^v"
        )
    if not _allclose(got[:, -1].double(), bound[:, 0], rtol=1e-3):
        raise CheckFailed(
            f"{call}: at large distances R_hat must approach its bound 1 + e^v = "
            f"{[round(t, 4) for t in bound[:, 0].tolist()]}, got "
            f"{[round(t, 4) for t in got[:, -1].tolist()]}"
        )
    # Relative slack: a saturated float32 R_hat may drop by one rounding step.
    previous = got[:, :-1].double()
    if bool((got[:, 1:].double() < previous - 1e-6 * previous.abs() - 1e-7).any()):
        raise CheckFailed(f"{call}: for w > 0, R_hat must not decrease with distance")


# (distance, w, v) of one da_rescale case
_RescaleCase = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _hidden_rescale_cases(
    seed: int | None,
) -> tuple[_RescaleCase, tuple[torch.Tensor, torch.Tensor], list[_RescaleCase]]:
    """The hidden ``da_rescale`` inputs: a first ``(distance, w, v)`` case, the
    ``(w, v)`` of the property check (four heads, w > 0, distances 0 to 199), and
    the other cases. Fixed without a term seed; else drawn by the seed with the same
    properties: a plain first case (w, v > 0); negative w over positions and over a
    grid; w of either sign over distances 0 to ~1000; small |w| (0.002 to 0.006,
    either sign) where R_hat still moves at distance ~1000 (a clipped distance
    shows); w and v per head over a (1, L, L) grid; a (2, H, N) distance broadcast
    against w (H, 1) and v (N,); distance 0 everywhere; v past float32's overflow
    (300 to 700: e^v is inf in float32), past float64's (800 to 1200) and just past
    float32's limit 88.7 (89 to 100, with w from 1.5 to 2.5, so that v - w R falls
    below it within the distances). The tensors come from a torch generator seeded
    by the seed."""
    if seed is None:
        gen = torch.Generator().manual_seed(81)
        first = (_arange(12).float(), _scalar(0.5), _scalar(1.0))
        properties = _property_inputs(gen)
        return first, properties, [
            (_arange(30).float(), _scalar(-0.3), _scalar(0.7)),
            (_grid_distance(7), _scalar(-1.5), _scalar(-1.0)),
            (_arange(0, 1000, 37).float(), _scalar(0.8), _scalar(2.0)),
            (_arange(0, 1000, 37).float(), _scalar(-0.8), _scalar(2.0)),
            # Small |w|: R_hat still moves at distance 1000 (a clipped distance
            # shows).
            (_arange(0, 1000, 37).float(), _scalar(0.004), _scalar(0.5)),
            (_arange(0, 1000, 37).float(), _scalar(-0.003), _scalar(-1.0)),
            (_grid_distance(9)[None], _randn(gen, 5, 1, 1), _randn(gen, 5, 1, 1)),
            (torch.rand(2, 3, 4, generator=gen) * 20, _randn(gen, 3, 1),
             _randn(gen, 4)),
            (torch.zeros(6), _randn(gen, 6), _randn(gen, 6)),
            (_grid_distance(8), _scalar(-0.3), _scalar(500.0)),
            (_arange(0, 20).float(), _scalar(0.25), _scalar(1000.0)),
            (_arange(0, 40).float(), _scalar(2.0), _scalar(95.0)),
        ]
    rng = term_rng(seed, "grade_da_rescale")
    gen = torch.Generator().manual_seed(rng.randrange(2**31))

    def number(low: float, high: float, digits: int = 2) -> torch.Tensor:
        return _scalar(round(rng.uniform(low, high), digits))

    first = (_arange(rng.randint(8, 16)).float(), number(0.3, 0.7), number(0.5, 1.5))
    properties = _property_inputs(gen)
    far = _arange(0, rng.randint(950, 1100), rng.randint(25, 50)).float()
    per_head, heads, keys, zeros = (rng.randint(3, 6), rng.randint(2, 5),
                                    rng.randint(3, 6), rng.randint(4, 8))
    return first, properties, [
        (_arange(rng.randint(20, 40)).float(), number(-0.6, -0.1), number(0.2, 1.0)),
        (_grid_distance(rng.randint(5, 10)), number(-2.0, -1.0), number(-1.5, -0.5)),
        (far, number(0.5, 1.0), number(1.0, 3.0)),
        (far, number(-1.0, -0.5), number(1.0, 3.0)),
        (far, number(0.002, 0.006, 4), number(0.0, 1.0)),
        (far, number(-0.006, -0.002, 4), number(-1.5, -0.5)),
        (_grid_distance(rng.randint(6, 10))[None], _randn(gen, per_head, 1, 1),
         _randn(gen, per_head, 1, 1)),
        (torch.rand(2, heads, keys, generator=gen) * 20, _randn(gen, heads, 1),
         _randn(gen, keys)),
        (torch.zeros(zeros), _randn(gen, zeros), _randn(gen, zeros)),
        (_grid_distance(rng.randint(6, 10)), number(-0.5, -0.1), number(300.0, 700.0)),
        (_arange(0, rng.randint(15, 25)).float(), number(0.1, 0.4),
         number(800.0, 1200.0)),
        (_arange(0, rng.randint(35, 45)).float(), number(1.5, 2.5),
         number(89.0, 100.0)),
    ]


def grade_da_rescale(fn, variant: str | None = None, seed: int | None = None) -> None:
    """Hidden grader: the properties (1 at distance 0, bounded by 1 + e^v, monotone),
    negative w, broadcasting over heads, large distances (the inputs drawn by the
    term's ``seed`` when there is one). No variant changes the answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    first, (w, v), cases = _hidden_rescale_cases(seed)
    _check_rescale_case(fn, *first)
    _check_rescale_properties(fn, w, v)
    for distance, w, v in cases:
        _check_rescale_case(fn, distance, w, v)
    passed("da_rescale", public=False, detail=f"{len(cases) + 2} cases")


# --- da_attention


def _attention_variants(q, k, v, w, v_bias, causal=False):
    """Known wrong weights, each as a :class:`Mistake` whose answer is the weights."""
    q_len, k_len = q.shape[2], k.shape[2]
    dim = q.shape[-1]
    query_pos = _arange(q_len) + (k_len - q_len)  # queries are the last positions
    key_pos = _arange(k_len)
    signed = (query_pos[:, None] - key_pos[None, :]).double()  # (Lq, Lk)
    distance = signed.abs()
    future = key_pos[None, :] > query_pos[:, None]  # (Lq, Lk)
    first = _arange(q_len)  # queries taken as the FIRST positions
    distance_first = (first[:, None] - key_pos[None, :]).double().abs()
    future_first = key_pos[None, :] > first[:, None]
    q, k, w, v_bias = q.double(), k.double(), w.double(), v_bias.double()
    wh, vh = w[:, None, None], v_bias[:, None, None]  # (H, 1, 1)

    def rescale(d, w_, v_):
        return (1 + _exp(v_)) / (1 + _exp(v_ - w_ * d))

    r_hat = rescale(distance, wh, vh)  # (H, Lq, Lk)
    raw = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    s = _sqrt(dim)
    after = (raw.relu() / s).softmax(-1) * r_hat
    right = raw.relu() * r_hat / s  # the right logits, before any mask

    def masked(x, where=future):
        return x.masked_fill(where, -torch.inf) if causal else x

    variants = [
        Mistake(
            (raw.relu() / s).softmax(-1),
            "R_hat is not applied: multiply ReLU(q k^T) by R_hat before the softmax.",
            "no-rescale",
        ),
        Mistake(
            (raw * r_hat / s).softmax(-1),
            "the ReLU is missing: DA-Transformer rescales ReLU(q k^T), so that "
            "negative scores do not become more negative with the distance.",
            "no-relu",
        ),
        Mistake(
            (raw.relu() * (1 + _exp(vh)) / (1 + _exp(vh + wh * distance)) / s).softmax(
                -1
            ),
            "the sign inside R_hat's exponential is flipped: R_hat = (1 + e^v) / "
            "(1 + e^(v - w*distance)).",
            "rescale-sign-flipped",
        ),
        Mistake(
            (raw.relu() * r_hat).softmax(-1),
            "the scores are not scaled: divide ReLU(q k^T) * R_hat by sqrt(head_dim).",
            "unscaled",
        ),
        Mistake(
            after / after.sum(-1, keepdim=True),
            "R_hat is applied after the softmax; it rescales the scores before it.",
            "rescale-after-softmax",
        ),
        Mistake(
            after,
            "R_hat multiplies the softmax weights; it rescales the scores before the "
            "softmax (the weights must sum to 1).",
            "rescale-times-weights",
        ),
        Mistake(
            (raw.relu() * rescale(distance, vh, wh) / s).softmax(-1),
            "w and v_bias are swapped: w multiplies the distance, v_bias sets the "
            "bound.",
            "w-v-swapped",
        ),
        Mistake(
            (raw.relu() * rescale(signed, wh, vh) / s).softmax(-1),
            "the distance is signed (i - j); DA-Transformer uses R = |i - j|.",
            "signed-distance",
        ),
    ]
    variants = [
        _replace(m, answer=masked(m.answer.log()).softmax(-1)) if causal else m
        for m in variants
    ]
    if not causal:
        variants.append(Mistake(
            right.masked_fill(future, -torch.inf).softmax(-1),
            "a causal mask was applied, but causal=False: every query sees every key.",
            "causal-mask-applied",
        ))
    else:
        variants += [
            Mistake(
                right.softmax(-1),
                "causal=True, but keys after their query are not masked: fill them "
                "with -inf before the softmax.",
                "not-masked",
            ),
            Mistake(
                masked(raw, future).relu().mul(r_hat).div(s).softmax(-1),
                "the mask is applied before the ReLU: ReLU(-inf) = 0, so the masked "
                "keys still get weight. Mask the rescaled scores, after the ReLU.",
                "mask-before-relu",
            ),
        ]
    if k_len != q_len:
        variants += [
            Mistake(
                masked(raw.relu() * rescale(distance_first, wh, vh) / s,
                       future_first if causal else future).softmax(-1)
                if causal else (raw.relu() * rescale(distance_first, wh, vh) / s
                                ).softmax(-1),
                "the queries are taken as the FIRST q_len positions; they are the "
                "LAST q_len of the k_len positions (a key/value cache): query row i "
                "sits at position i + k_len - q_len.",
                "queries-first",
            ),
        ]
        if causal:
            variants.append(Mistake(
                right.masked_fill(future_first, -torch.inf).softmax(-1),
                "the causal mask ignores the cache: query row i sits at position "
                "i + k_len - q_len and may see every key up to it.",
                "mask-ignores-cache",
            ))
    return variants


def _check_attention_case(fn, q, k, v, w, v_bias, causal=False) -> None:
    out_ref, weights_ref = _ref_attention(
        q.clone(), k.clone(), v.clone(), w.clone(), v_bias.clone(), causal=causal
    )
    variants = _attention_variants(q, k, v, w, v_bias, causal)
    weight_mistakes = _known(
        weights_ref, [_replace(m, answer=m.answer.float()) for m in variants]
    )
    out_mistakes = _known(
        out_ref, [_replace(m, answer=(m.answer @ v.double()).float()) for m in variants]
    )
    call = (
        f"da_attention(q, k, v, w, v_bias{', causal=True' if causal else ''}) with "
        f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
        f"w = {[round(t, 3) for t in w.tolist()]}"
    )
    args = (q.clone(), k.clone(), v.clone(), w.clone(), v_bias.clone())
    if causal:
        got = call_student(fn, *args, causal=True, call=call)
    else:
        got = call_student(fn, *args, call=call)
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise CheckFailed(
            f"{call} should return a pair (out, weights), got {type(got).__name__}"
            + (f" of length {len(got)}" if isinstance(got, tuple | list) else "")
        )
    out, weights = got
    expect_close(
        weights,
        weights_ref,
        what=f"the weight tensor of {call}",
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=weight_mistakes,
        dtype="float",
    )
    expect_close(
        out,
        out_ref,
        what=f"the output of {call} (its weights are right)",
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=out_mistakes,
        dtype="float",
    )


def _random_case(
    gen, batch, heads, length, dim, v_dim=None, *, w_sign=1.0, k_len=None
):
    k_len = k_len or length
    return (
        _randn(gen, batch, heads, length, dim),
        _randn(gen, batch, heads, k_len, dim),
        _randn(gen, batch, heads, k_len, v_dim or dim),
        w_sign * (torch.rand(heads, generator=gen) * 0.5 + 0.05),
        _randn(gen, heads),
    )


def check_da_attention(fn) -> None:
    """Public check of ``da_attention(q, k, v, w, v_bias, causal=False)``: equal
    lengths, a key/value cache (queries last), the causal mask and a negative w."""
    gen = torch.Generator().manual_seed(82)
    _check_attention_case(fn, *_random_case(gen, 2, 2, 5, 8))
    _check_attention_case(fn, *_random_case(gen, 1, 3, 7, 4))
    # a key/value cache: 3 queries, the last of 7 positions
    _check_attention_case(fn, *_random_case(gen, 1, 2, 3, 4, v_dim=6, k_len=7))
    _check_attention_case(fn, *_random_case(gen, 2, 2, 5, 8), causal=True)
    _check_attention_case(fn, *_random_case(gen, 1, 2, 2, 4, k_len=6), causal=True)
    # negative w: R_hat falls below 1 with the distance (far keys are damped)
    _check_attention_case(fn, *_random_case(gen, 1, 2, 6, 4, w_sign=-1.0))
    passed("da_attention", public=True)


# (q, k, v, w, v_bias) of one da_attention case
_AttentionInputs = tuple[torch.Tensor, ...]


def _hidden_attention_cases(seed: int | None) -> tuple[
    list[_AttentionInputs], list[_AttentionInputs], _AttentionInputs
]:
    """The hidden ``da_attention`` inputs: the cases without the mask, the causal
    ones, and a last key/value cache without the mask. Fixed without a term seed;
    else drawn by the seed with the same properties: a plain case, a single token,
    negative w, a long sequence (20 to 32 positions, head_dim 16), a value width
    other than head_dim, w of mixed signs with a zero among them (one w per head,
    four heads); causal: negative w, a cache (k_len > q_len) with a value width
    other than head_dim, one decoding step (one query, 6 to 12 keys); last, a cache
    of at least twice q_len without the mask. The tensors come from a torch
    generator seeded by the seed."""
    if seed is None:
        gen = torch.Generator().manual_seed(83)
        cases = [
            _random_case(gen, 2, 2, 5, 8),
            _random_case(gen, 1, 1, 1, 4),
            _random_case(gen, 2, 3, 6, 8, w_sign=-1.0),
            _random_case(gen, 1, 2, 24, 16),
            _random_case(gen, 3, 2, 9, 4, v_dim=6),
        ]
        q, k, v, _, v_bias = _random_case(gen, 2, 4, 8, 8)
        cases.append((q, k, v, torch.tensor([0.5, -0.5, 0.0, 1.5]), v_bias))
        causal_cases = [
            _random_case(gen, 2, 3, 6, 8, w_sign=-1.0),
            _random_case(gen, 2, 2, 4, 8, v_dim=5, k_len=10),
            _random_case(gen, 1, 2, 1, 4, k_len=9),  # one decoding step
        ]
        return cases, causal_cases, _random_case(gen, 2, 2, 4, 8, k_len=11)
    rng = term_rng(seed, "grade_da_attention")
    gen = torch.Generator().manual_seed(rng.randrange(2**31))

    def even(low: int, high: int) -> int:
        return 2 * rng.randint(low // 2, high // 2)

    def other_than(dim: int) -> int:
        return rng.choice([d for d in range(3, 10) if d != dim])

    dims = [even(4, 8), even(4, 8), even(4, 12), 16, even(4, 8)]
    mixed = [round(rng.uniform(0.2, 1.0), 2), -round(rng.uniform(0.2, 1.0), 2), 0.0,
             round(rng.uniform(1.0, 2.0), 2)]
    rng.shuffle(mixed)
    cases = [
        _random_case(gen, rng.randint(1, 3), 2, rng.randint(4, 8), dims[0]),
        _random_case(gen, 1, 1, 1, dims[1]),
        _random_case(gen, 2, 3, rng.randint(4, 8), dims[2], w_sign=-1.0),
        _random_case(gen, 1, 2, rng.randint(20, 32), dims[3]),
        _random_case(gen, rng.randint(2, 3), 2, rng.randint(6, 10), dims[4],
                     v_dim=other_than(dims[4])),
    ]
    q, k, v, _, v_bias = _random_case(gen, 2, 4, rng.randint(5, 9), even(4, 8))
    cases.append((q, k, v, torch.tensor(mixed), v_bias))
    q_len, head_dim = rng.randint(3, 5), even(4, 8)
    causal_cases = [
        _random_case(gen, 2, 3, rng.randint(4, 8), even(4, 8), w_sign=-1.0),
        _random_case(gen, 2, 2, q_len, head_dim, v_dim=other_than(head_dim),
                     k_len=q_len + rng.randint(3, 8)),
        _random_case(gen, 1, 2, 1, even(4, 8), k_len=rng.randint(6, 12)),
    ]
    q_len = rng.randint(3, 5)
    cache = _random_case(gen, 2, 2, q_len, even(4, 8),
                         k_len=2 * q_len + rng.randint(1, 4))
    return cases, causal_cases, cache


def grade_da_attention(fn, variant: str | None = None, seed: int | None = None) -> None:
    """Hidden grader: negative w, a single token, long sequences, value width other
    than head_dim, mixed-sign w, causal with caches of other sizes (the sizes and
    inputs drawn by the term's ``seed`` when there is one). No variant changes the
    answer."""
    variant_named(VARIANTS, variant, EXERCISE)
    cases, causal_cases, cache = _hidden_attention_cases(seed)
    for case in cases:
        _check_attention_case(fn, *case)
    for case in causal_cases:
        _check_attention_case(fn, *case, causal=True)
    _check_attention_case(fn, *cache)
    n_cases = len(cases) + len(causal_cases) + 1
    passed("da_attention", public=False, detail=f"{n_cases} cases")
