"""Graders of exercise 9 (bug zoo): five functions modelled on real bugs, each to be
fixed by the student.

=============================  ==============================================
graded function                the bug in the notebook's ``buggy_...`` version
=============================  ==============================================
``fixed_sinusoidal_encoding``  exponent ``2*i/d`` with ``i`` already even: off by 2
``fixed_alibi_slopes``         ``2^(-8h/n)``: only right for powers of two
``fixed_apply_rope``           reads pairs (2i, 2i+1), writes [firsts | seconds]
``fixed_rel_attention_scores`` ``rel_shift`` without the causal mask
``fixed_position_ids``         ``cumsum(mask) * mask - 1``: padding gets -1
=============================  ==============================================

Expected answers come from ``course_lib`` (captured at import); each bug is
re-implemented here, so that handing in the buggy version (or a variant of it) is
answered with "this is still the buggy version: ...".
"""

from __future__ import annotations

import torch

from course_lib.alibi import alibi_slopes as _ref_slopes
from course_lib.rope import apply_rope as _ref_rope
from course_lib.sinusoidal import position_ids_from_attention_mask as _ref_ids
from course_lib.sinusoidal import sinusoidal_encoding as _ref_sinusoidal

from ._core import (
    CheckFailed,
    Mistake,
    call_student,
    expect_close,
    expect_equal,
    passed,
)
from .ex07_transformer_xl import _check_scores_case, _random_inputs

__all__ = [
    "check_fixed_alibi_slopes",
    "check_fixed_apply_rope",
    "check_fixed_position_ids",
    "check_fixed_rel_attention_scores",
    "check_fixed_sinusoidal_encoding",
    "grade_fixed_alibi_slopes",
    "grade_fixed_apply_rope",
    "grade_fixed_position_ids",
    "grade_fixed_rel_attention_scores",
    "grade_fixed_sinusoidal_encoding",
]

_arange = torch.arange
_allclose = torch.allclose
_equal = torch.equal

# Tolerances, from the arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8.
# The fixed functions are ex02-ex07's (sinusoids, RoPE, ALiBi slopes, relative
# scores): the same arithmetic and the same float32 argument error ~|p| u at
# positions p <= 100 (1e-5), so the same bounds as those exercises' graders.
# Each bug left in moves some entry by O(0.1).
_ATOL = 1e-4
_RTOL = 1e-4
_STILL = "this is still the buggy version: "


def _known(expected: torch.Tensor, candidates, *, exact: bool = False):
    """The candidates that differ from the expected answer (for this input)."""
    found = []
    for answer, text in candidates:
        if answer.shape == expected.shape:
            if exact and _equal(answer, expected):
                continue
            if not exact and _allclose(
                answer.double(), expected.double(), atol=_ATOL, rtol=_RTOL
            ):
                continue
        found.append(Mistake(answer, text))
    return found


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


# --- fixed_sinusoidal_encoding


def _sinusoid_variant(
    max_len: int, d_model: int, *, exponent_scale: float = 1.0, layout="interleaved"
):
    even = _arange(0, d_model, 2, dtype=torch.float64)  # the even column index 2i
    omega = 10000.0 ** (-exponent_scale * even / d_model)  # (d/2,)
    angles = _arange(max_len, dtype=torch.float64)[:, None] * omega  # (L, d/2)
    sin, cos = angles.sin(), angles.cos()
    if layout == "concat":
        return torch.cat((sin, cos), dim=-1)  # (L, d)
    if layout == "swapped":
        return torch.stack((cos, sin), dim=-1).flatten(-2)  # (L, d)
    return torch.stack((sin, cos), dim=-1).flatten(-2)  # (L, d)


def _sinusoid_mistakes(max_len: int, d_model: int):
    return [
        (
            _sinusoid_variant(max_len, d_model, exponent_scale=2.0),
            _STILL + "the exponent is off by a factor of 2. The loop variable i "
            "already steps over the even columns 0, 2, 4, ..., so column i needs "
            "10000^(i / d_model); 10000^(2*i / d_model) doubles the exponent.",
        ),
        (
            _sinusoid_variant(max_len, d_model, exponent_scale=-1.0),
            "the exponent has the wrong sign: position p is divided by "
            "10000^(2i/d_model), so the frequencies decrease along the columns.",
        ),
        (
            _sinusoid_variant(max_len, d_model, layout="concat"),
            "this is the concatenated [sin | cos] layout; the exercise asks for the "
            "interleaved layout of Vaswani et al. (sin in even columns, cos in odd).",
        ),
        (
            _sinusoid_variant(max_len, d_model, layout="swapped"),
            "sin and cos are swapped: sin goes in the even columns, cos in the odd.",
        ),
        (
            _sinusoid_variant(max_len, d_model, exponent_scale=2.0, layout="concat"),
            _STILL + "the exponent is off by a factor of 2, and the layout is "
            "[sin | cos] instead of interleaved.",
        ),
    ]


def _check_sinusoid(fn, max_len: int, d_model: int) -> None:
    expected = _ref_sinusoidal(max_len, d_model)
    mistakes = _known(expected, _sinusoid_mistakes(max_len, d_model))
    call = f"fixed_sinusoidal_encoding({max_len}, {d_model})"
    got = call_student(fn, max_len, d_model, call=call)
    expect_close(
        got,
        expected,
        what=call,
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=mistakes,
        dtype="float",
    )


def check_fixed_sinusoidal_encoding(fn) -> None:
    """Public check of the fixed sinusoidal encoding."""
    for max_len, d_model in [(6, 8), (20, 16)]:
        _check_sinusoid(fn, max_len, d_model)
    passed("fixed_sinusoidal_encoding", public=True)


def grade_fixed_sinusoidal_encoding(fn) -> None:
    """Hidden grader: more sizes, d_model = 2, one position, wide encodings."""
    cases = [(6, 8), (20, 16), (1, 2), (5, 2), (1, 64), (50, 32), (33, 6), (12, 128)]
    for max_len, d_model in cases:
        _check_sinusoid(fn, max_len, d_model)
    passed("fixed_sinusoidal_encoding", public=False, detail=f"{len(cases)} cases")


# --- fixed_alibi_slopes


def _slope_mistakes(n: int):
    h = _arange(1, n + 1, dtype=torch.float64)
    closest = 1 << (n.bit_length() - 1)
    up = 1 << (n - 1).bit_length()  # the power of two at or above n
    ref = _ref_slopes(n).double()
    return [
        (
            2.0 ** (-8.0 * h / n),
            _STILL + f"2^(-8h/n) is only right when the number of heads is a power "
            f"of two. For {n} heads take the {closest} slopes of {closest} heads, "
            f"then every other slope of the {2 * closest}-head sequence, starting "
            f"with the first: 2^(-8(2j+1)/{2 * closest}), j = 0, 1, ...",
        ),
        (
            2.0 ** (-8.0 * (h - 1) / n),
            _STILL + "2^(-8h/n) with h counted from 0 (the first slope is 1), and it "
            "is only right for powers of two.",
        ),
        (
            (2.0 ** (-8.0 * _arange(1, up + 1, dtype=torch.float64) / up))[:n],
            f"these are the first {n} slopes of {up} heads (the head count rounded "
            "up to a power of two); the paper rounds DOWN and fills in with every "
            "other slope of the doubled sequence.",
        ),
        (ref.flip(0), "the right slopes in reversed order: keep the paper's order."),
        (
            ref.sort(descending=True).values,
            "the right slopes, but sorted: keep the paper's order (the slopes of the "
            "closest power of two first, then the extra ones).",
        ),
    ]


def _check_slopes(fn, n: int) -> None:
    expected = _ref_slopes(n)
    mistakes = _known(expected, _slope_mistakes(n))
    call = f"fixed_alibi_slopes({n})"
    got = call_student(fn, n, call=call)
    expect_close(
        got,
        expected,
        what=call,
        atol=1e-6,
        rtol=1e-4,
        mistakes=mistakes,
        dtype="float",
    )


def check_fixed_alibi_slopes(fn) -> None:
    """Public check: a power of two and two other head counts."""
    for n in (8, 12, 6):
        _check_slopes(fn, n)
    passed("fixed_alibi_slopes", public=True)


def grade_fixed_alibi_slopes(fn) -> None:
    """Hidden grader: 1..40 heads and a few large counts."""
    counts = [*range(1, 41), 48, 64, 80, 96, 100, 128]
    for n in counts:
        _check_slopes(fn, n)
    passed("fixed_alibi_slopes", public=False, detail=f"{len(counts)} head counts")


# --- fixed_apply_rope


def _rope_parts(x: torch.Tensor, positions: torch.Tensor, sign: float = 1.0):
    d = x.shape[-1]
    theta = 10000.0 ** (-_arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = sign * positions.double()[:, None] * theta  # (seq, d/2)
    return angles.cos(), angles.sin()


def _rope_variant(x, positions, *, pairing="interleaved", sign=1.0, output=None):
    cos, sin = _rope_parts(x, positions, sign)
    x = x.double()
    half = x.shape[-1] // 2
    if pairing == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]  # pairs (2i, 2i+1)
    else:
        a, b = x[..., :half], x[..., half:]  # pairs (i, i + d/2)
    first, second = a * cos - b * sin, a * sin + b * cos
    layout = output or pairing
    if layout == "half":
        return torch.cat((first, second), dim=-1)  # (..., seq, d)
    return torch.stack((first, second), dim=-1).flatten(-2)  # (..., seq, d)


def _rope_mistakes(x, positions):
    return [
        (
            _rope_variant(x, positions, output="half"),
            _STILL + "the pairs (2i, 2i+1) are rotated, but the results are written "
            "back as [all first components | all second components]. Write each "
            "rotated pair back into columns 2i and 2i+1, so that the output has the "
            "layout of the input.",
        ),
        (
            _rope_variant(x, positions, pairing="half"),
            "this is the rotate-half pairing (i, i + head_dim/2) of GPT-NeoX and "
            "Hugging Face Llama; the exercise pairs (2i, 2i+1) (RoFormer, Meta "
            "LLaMA).",
        ),
        (
            _rope_variant(x, positions, sign=-1.0),
            "each pair is rotated by -m*theta_i (clockwise); the rotation is "
            "(a, b) -> (a cos - b sin, a sin + b cos).",
        ),
        (
            _rope_variant(x, _arange(x.shape[-2])),
            "the positions argument is ignored (this rotates by 0, 1, 2, ...): use "
            "the given positions, e.g. an offset for a KV cache.",
        ),
    ]


def _fmt_positions(positions: torch.Tensor) -> str:
    values = positions.tolist()
    if values == list(range(values[0], values[0] + len(values))):
        return f"arange({values[0]}, {values[-1] + 1})"
    return f"tensor({values})"


def _check_rope(
    fn, x: torch.Tensor, positions: torch.Tensor, *, atol=_ATOL, rtol=_RTOL
) -> None:
    expected = _ref_rope(x.clone(), positions.clone())
    mistakes = _known(expected, _rope_mistakes(x, positions))
    call = f"fixed_apply_rope(x of shape {tuple(x.shape)}, {_fmt_positions(positions)})"
    got = call_student(fn, x.clone(), positions.clone(), call=call)
    expect_close(
        got,
        expected,
        what=call,
        atol=atol,
        rtol=rtol,
        mistakes=mistakes,
        dtype=x.dtype,
        dtype_reason="the task asks for the dtype of x: rotated queries and keys of "
        "another dtype no longer multiply the rest of the model's tensors (torch "
        "does not mix dtypes in a matrix product)",
    )


def _check_rope_composition(fn, gen: torch.Generator) -> None:
    """Rotating by m and then by n is rotating by m + n (the buggy layout breaks it)."""
    x = _randn(gen, 2, 5, 8)
    first = _arange(3, 8)
    second = torch.tensor([1, 4, 0, 2, 6])
    call = "fixed_apply_rope(fixed_apply_rope(x, m), n)"
    once = call_student(fn, x.clone(), first.clone(), call=call)
    if not isinstance(once, torch.Tensor) or once.shape != x.shape:
        raise CheckFailed(
            f"fixed_apply_rope(x of shape {tuple(x.shape)}, positions) should return "
            f"a tensor of the same shape, got "
            f"{tuple(once.shape) if isinstance(once, torch.Tensor) else type(once)}"
        )
    twice = call_student(fn, once.detach().clone(), second.clone(), call=call)
    expected = _ref_rope(x.clone(), first + second)
    expect_close(
        twice,
        expected,
        what=f"{call} compared with fixed_apply_rope(x, m + n)",
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=_known(
            expected,
            [
                (
                    _rope_variant(
                        _rope_variant(x, first, output="half"),
                        second,
                        output="half",
                    ),
                    _STILL + "rotating by m and then by n must equal rotating by "
                    "m + n, but the output is written as [firsts | seconds], so the "
                    "second call pairs up the wrong numbers. Write each rotated pair "
                    "back into columns 2i and 2i+1.",
                )
            ],
        ),
        dtype="float",
    )


def check_fixed_apply_rope(fn) -> None:
    """Public check of the fixed RoPE (interleaved pairs, given positions)."""
    gen = torch.Generator().manual_seed(90)
    _check_rope(fn, _randn(gen, 2, 3, 5, 8), _arange(5))
    _check_rope(fn, _randn(gen, 4, 6), _arange(10, 14))
    _check_rope_composition(fn, gen)
    passed("fixed_apply_rope", public=True)


def grade_fixed_apply_rope(fn) -> None:
    """Hidden grader: norms kept, several shapes, head_dim 2, positions that are
    offsets or arbitrary, composition of rotations."""
    gen = torch.Generator().manual_seed(91)
    x = _randn(gen, 3, 7, 16)
    call = "fixed_apply_rope(x of shape (3, 7, 16), arange(7))"
    got = call_student(fn, x.clone(), _arange(7), call=call)
    if isinstance(got, torch.Tensor) and got.shape == x.shape:
        norms, want = got.double().norm(dim=-1), x.double().norm(dim=-1)
        if not _allclose(norms, want, atol=1e-4, rtol=1e-4):
            raise CheckFailed(
                f"{call}: a rotation keeps the length of every vector, but the norms "
                f"change (first vector: {want.flatten()[0]:.5g} -> "
                f"{norms.flatten()[0]:.5g})"
            )
    cases = [
        (x, _arange(7)),
        (_randn(gen, 2, 3, 5, 8), _arange(5)),
        (_randn(gen, 1, 1, 4, 2), _arange(4)),
        (_randn(gen, 6, 4), torch.tensor([0, 7, 3, 3, 20, 1])),
        (_randn(gen, 2, 2, 9, 32), _arange(30, 39)),
        (_randn(gen, 1, 10), _arange(40, 41)),
    ]
    for x, positions in cases:
        _check_rope(fn, x, positions)
    # Far positions (a long KV cache); float32 angles lose ~1e-4 at position 5000.
    far = torch.tensor([1000, 2047, 2048, 4096, 5000])
    _check_rope(fn, _randn(gen, 2, 5, 8), far, atol=2e-3, rtol=1e-3)
    _check_rope_composition(fn, gen)
    passed("fixed_apply_rope", public=False, detail=f"{len(cases) + 2} cases")


# --- fixed_rel_attention_scores

_STILL_UNMASKED = (
    _STILL + "the entries for keys after the query are not masked. After rel_shift "
    "they hold leftovers of the neighbouring row (scores with the wrong distance); "
    "set them to -inf where j > i + k_len - q_len."
)


def _check_fixed_scores(fn, gen: torch.Generator, sizes) -> None:
    _check_scores_case(
        fn,
        "fixed_rel_attention_scores",
        *_random_inputs(gen, *sizes),
        unmasked=_STILL_UNMASKED,
    )


def check_fixed_rel_attention_scores(fn) -> None:
    """Public check of the masked Transformer-XL scores."""
    gen = torch.Generator().manual_seed(92)
    for sizes in [(2, 2, 4, 4, 8), (1, 2, 3, 6, 4)]:
        _check_fixed_scores(fn, gen, sizes)
    passed("fixed_rel_attention_scores", public=True)


def grade_fixed_rel_attention_scores(fn) -> None:
    """Hidden grader: memories, single positions, several heads."""
    gen = torch.Generator().manual_seed(93)
    sizes = [
        (2, 2, 4, 4, 8),
        (1, 1, 1, 1, 2),
        (1, 1, 1, 7, 4),
        (3, 2, 5, 11, 8),
        (2, 3, 6, 6, 16),
    ]
    for s in sizes:
        _check_fixed_scores(fn, gen, s)
    passed("fixed_rel_attention_scores", public=False, detail=f"{len(sizes)} cases")


# --- fixed_position_ids


def _ids_mistakes(mask: torch.Tensor):
    m = mask.long()
    counted = m.cumsum(dim=-1)  # (batch, seq): real tokens up to and including t
    seq = m.shape[-1]
    return [
        (
            counted * m - 1,
            _STILL + "padding positions get -1 (the mask is applied before "
            "subtracting 1). Padding must get 0.",
        ),
        (
            counted - 1,
            "left padding gets -1 and right padding repeats the last position: "
            "multiply by the mask AFTER subtracting 1, so that padding gets 0.",
        ),
        (
            _arange(seq).expand_as(m).clone(),
            "the positions ignore the padding (0, 1, 2, ... in every row): in a "
            "left-padded row the first REAL token must get position 0.",
        ),
        (
            _arange(seq).expand_as(m) * m,
            "the positions count the padding: in a left-padded row the first REAL "
            "token must get position 0 (count real tokens with a cumulative sum).",
        ),
        (
            counted * m,
            "the positions start at 1; the first real token has position 0.",
        ),
    ]


def _fmt_mask(mask: torch.Tensor) -> str:
    return f"tensor({mask.long().tolist()})"


def _check_ids(fn, mask: torch.Tensor) -> None:
    expected = _ref_ids(mask.clone())
    mistakes = _known(expected, _ids_mistakes(mask), exact=True)
    call = f"fixed_position_ids({_fmt_mask(mask)})"
    if mask.dtype == torch.bool:
        call += " (a boolean mask)"
    got = call_student(fn, mask.clone(), call=call)
    expect_equal(got, expected, what=call, mistakes=mistakes)


def check_fixed_position_ids(fn) -> None:
    """Public check: right padding, left padding, no padding."""
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    _check_ids(fn, mask)
    passed("fixed_position_ids", public=True)


def grade_fixed_position_ids(fn) -> None:
    """Hidden grader: mixed padding, a row of padding only, boolean masks, a single
    token, random masks with left padding."""
    gen = torch.Generator().manual_seed(94)
    lengths = torch.randint(0, 9, (6,), generator=gen)
    left = (_arange(8)[None, :] >= 8 - lengths[:, None]).long()  # (6, 8) left-padded
    right = (_arange(8)[None, :] < lengths[:, None]).long()  # (6, 8) right-padded
    masks = [
        torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]),
        torch.tensor([[0, 0, 0, 0], [0, 1, 1, 0], [1, 0, 1, 1]]),
        torch.tensor([[1]]),
        torch.tensor([[0]]),
        torch.tensor([[0, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.bool),
        left,
        right,
    ]
    for mask in masks:
        _check_ids(fn, mask)
    passed("fixed_position_ids", public=False, detail=f"{len(masks)} masks")
