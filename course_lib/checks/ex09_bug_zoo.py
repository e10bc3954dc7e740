"""Graders of exercise 9 (bug zoo): three bugs that were reported in public
repositories, each to be fixed by the student. None of them is one of chapter 9's
errata (whose fixes the chapter prints).

==============================  =====================================================
graded function                 the bug in the notebook's ``buggy_...`` version
==============================  =====================================================
``fixed_rope_cos_sin``          RoPE angles computed in the model's half precision:
                                EleutherAI/gpt-neox#1003, huggingface/transformers
                                #25681 and #29496 (the ``inv_freq`` buffer cast by
                                ``model.to(dtype)``), sgl-project/sglang-jax#1472
``fixed_decode_position_ids``   one ``cache_position`` for every row of a
                                left-padded batch: unslothai/unsloth#3699 (fixed by
                                #3795), huggingface/transformers#22161
``fixed_sliding_window_mask``   the window's diagonal added instead of subtracted,
                                so far keys stay visible and future ones reappear:
                                huggingface/transformers#41228; the window's size
                                off by one: transformers#29623, ml-explore/mlx-lm#390
==============================  =====================================================

Every expected value is computed here, independently of the notebook; each known
wrong fix is re-implemented, so that handing in the buggy version (or a variant of
it) is answered with the sentence that names the mistake.

The exercise has no variants (:data:`VARIANTS` is empty: each task is one reported
bug, and its fix is the same every term). The hidden graders take the term's
``variant`` (only ``"default"``) and ``seed`` (issue 34 item 3): with a seed, the
inputs each bug shows on (positions, dtypes' ranges, masks, lengths and windows) are
drawn from it, with the properties the fixed cases were chosen for; without one they
are the fixed cases.
"""

from __future__ import annotations

import torch

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    expect_equal,
    known_mistake,
    passed,
    require_plain,
    term_rng,
    variant_named,
)

__all__ = [
    "check_fixed_decode_position_ids",
    "check_fixed_rope_cos_sin",
    "check_fixed_sliding_window_mask",
    "grade_fixed_decode_position_ids",
    "grade_fixed_rope_cos_sin",
    "grade_fixed_sliding_window_mask",
]

EXERCISE = "ex09_bug_zoo"
# No variants: each task is one reported bug, fixed the same way every term.
VARIANTS: dict[str, Variant] = {}

_arange = torch.arange
_allclose = torch.allclose
_equal = torch.equal
_STILL = "this is still the buggy version: "


def _known(expected: torch.Tensor, candidates, *, atol: float = 0.0):
    """The candidates that differ from the expected answer (for this input)."""
    found = []
    for m in candidates:
        if m.answer.shape == expected.shape and _allclose(
            m.answer.double(), expected.double(), atol=atol, rtol=0.0
        ):
            continue
        found.append(m)
    return found


# --- fixed_rope_cos_sin

# Tolerances, from the arithmetic. The answer is cos/sin of p * theta_i rounded once
# to the requested dtype: half a unit in the last place of that dtype (for values in
# [-1, 1] at most eps/2: 2^-8 for bfloat16, 2^-11 for float16, 2^-24 for float32),
# plus what the angle loses when it is computed in float32 instead of exactly,
# |p theta| 2^-24 <= 5000 * 6e-8 = 3e-4 rad at the far positions graded here. Two
# correct computations can round to neighbouring values, and another CPU's cos may
# differ in its last bits, so the bound allows 5 eps of the dtype (a few units in the
# last place) plus the float32 angle error. A bug that computes the angle in the low
# precision moves it by O(1) rad at such positions (position 1857, float16: 1044.27
# rad becomes 1045 rad), far outside even bfloat16's 0.04.
_COS_SIN_ATOL = {dt: 5 * torch.finfo(dt).eps + 3e-4
                 for dt in (torch.bfloat16, torch.float16, torch.float32,
                            torch.float64)}
_BASE = 10000.0


def _theta(head_dim: int) -> torch.Tensor:
    return _BASE ** (-_arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def _cos_sin_expected(positions: torch.Tensor, head_dim: int, dtype: torch.dtype):
    """cos and sin of positions * theta_i, computed in float64, rounded once."""
    angles = positions.double()[:, None] * _theta(head_dim)  # (seq, head_dim/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _cos_sin_variant(positions, head_dim, dtype, *, low_freq=False, low_pos=False,
                     low_all=False):
    inv_freq = 1.0 / (_BASE ** (_arange(0, head_dim, 2).float() / head_dim))
    t = positions.float()
    if low_all:  # everything in the low precision (gpt-neox#1003)
        angles = t.to(dtype)[:, None] * inv_freq.to(dtype)
        return angles.cos(), angles.sin()
    if low_freq:  # the buffer was cast, the product is float32
        inv_freq = inv_freq.to(dtype).float()
    if low_pos:  # positions made with type_as(inv_freq) of the low dtype
        t = t.to(dtype).float()
    angles = t[:, None] * inv_freq  # (seq, head_dim/2) float32
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _cos_sin_mistakes(positions, head_dim, dtype):
    """Known wrong answers, each a :class:`Mistake` whose answer is a (cos, sin)
    pair."""
    low = dtype in (torch.float16, torch.bfloat16)
    name = str(dtype).replace("torch.", "")
    out = []
    if low:
        out += [
            Mistake(
                _cos_sin_variant(positions, head_dim, dtype, low_all=True),
                _STILL + f"the angles p * theta_i are computed in {name}. Far "
                "positions are large numbers, and rounding p * theta_i to "
                f"{name} moves the angle by whole radians (EleutherAI/gpt-neox#1003). "
                "Compute positions, frequencies and angles in float32 (or float64) "
                f"and round only cos and sin to {name}.",
                "angles-low-precision",
            ),
            Mistake(
                _cos_sin_variant(positions, head_dim, dtype, low_freq=True),
                f"the frequencies theta_i are rounded to {name} before the angles "
                "are computed (what happens to an inv_freq buffer when the model is "
                "cast: huggingface/transformers#25681, sgl-project/sglang-jax#1472): "
                "their relative error, multiplied by a far position, is a large "
                "angle error. Keep the frequencies in float32 or float64.",
                "frequencies-low-precision",
            ),
            Mistake(
                _cos_sin_variant(positions, head_dim, dtype, low_pos=True),
                f"the positions are rounded to {name} (a tensor made with "
                f"type_as of a {name} tensor): {name} cannot hold every integer "
                f"above {256 if dtype == torch.bfloat16 else 2048}. Keep positions in "
                "float32 or float64 (exact up to 2^24).",
                "positions-low-precision",
            ),
        ]
    angles = positions.double()[:, None] * _theta(head_dim)
    out.append(
        Mistake(
            (angles.sin().to(dtype), angles.cos().to(dtype)),
            "cos and sin are swapped: return (cos, sin), in that order.",
            "cos-sin-swapped",
        )
    )
    return out


def _fmt_positions(positions: torch.Tensor) -> str:
    values = positions.tolist()
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"arange({values[0]}, {values[-1] + 1})"
    if len(values) > 6:
        step = values[1] - values[0]
        if values == list(range(values[0], values[-1] + 1, step)):
            return f"arange({values[0]}, {values[-1] + 1}, {step})"
    return f"tensor({values})"


def _check_cos_sin(fn, positions: torch.Tensor, head_dim: int,
                   dtype: torch.dtype) -> None:
    call = (f"fixed_rope_cos_sin({_fmt_positions(positions)}, {head_dim}, "
            f"{dtype})")
    expected = _cos_sin_expected(positions, head_dim, dtype)
    known = _cos_sin_mistakes(positions, head_dim, dtype)
    atol = _COS_SIN_ATOL[dtype]
    got = call_student(fn, positions.clone(), head_dim, dtype, call=call)
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise CheckFailed(f"{call} should return a pair (cos, sin) of tensors, got "
                          f"{type(got).__name__}"
                          + (f" of length {len(got)}" if isinstance(got, tuple | list)
                             else ""))
    for part, g in zip(("cos", "sin"), got, strict=True):
        if not isinstance(g, torch.Tensor):
            raise CheckFailed(f"{call}: {part} should be a torch.Tensor, got "
                              f"{type(g).__name__}")
        require_plain(g, f"{call}: {part}")
    # A known mistake is named only when both halves match it.
    right = all(
        g.shape == e.shape and _allclose(g.double(), e.double(), atol=atol, rtol=0.0)
        for g, e in zip(got, expected, strict=True)
    )
    if not right:
        for mistake in known:
            m_cos, m_sin = mistake.answer
            mine = all(
                g.shape == m.shape
                and _allclose(g.double(), m.double(), atol=atol, rtol=0.0)
                for g, m in zip(got, (m_cos, m_sin), strict=True)
            )
            same = all(
                _allclose(m.double(), e.double(), atol=atol, rtol=0.0)
                for m, e in zip((m_cos, m_sin), expected, strict=True)
            )
            if mine and not same:
                raise known_mistake(call, mistake, got=got)
    for part, g, e in zip(("cos", "sin"), got, expected, strict=True):
        expect_close(g, e, what=f"{call}: {part}", atol=atol, rtol=0.0)
    for part, g in zip(("cos", "sin"), got, strict=True):
        if g.dtype != dtype:
            raise CheckFailed(
                f"{call}: {part} has the right values, but its dtype is {g.dtype} "
                f"instead of {dtype}; the task asks for the model's dtype (a float32 "
                "table in a half-precision model doubles its memory and promotes "
                "every rotated query and key: huggingface/transformers#24261)"
            )


def check_fixed_rope_cos_sin(fn) -> None:
    """Public check: float32 near positions, float16 and bfloat16 far ones."""
    _check_cos_sin(fn, _arange(6), 8, torch.float32)
    _check_cos_sin(fn, _arange(0, 2048, 97), 16, torch.float16)
    _check_cos_sin(fn, _arange(1000, 1010), 32, torch.bfloat16)
    passed("fixed_rope_cos_sin", public=True)


def _hidden_cos_sin_cases(seed: int | None) -> tuple:
    """The hidden ``(positions, head_dim, dtype)`` cases: fixed without a term seed;
    else drawn by the seed with the same properties. The public case (positions 0 to
    5, head_dim 8, float32) stays first; then head_dim 2 at one position, float64,
    float16 at five unsorted positions up to 5000 (one of them odd and above 2048,
    where float16 holds only even integers), bfloat16 on a stride over 0 to 4096,
    float16 across 2048, bfloat16 at three unsorted positions (one at 4500 to 5000,
    one at 0 to 10, one at 257 to 600: past bfloat16's 256), and 40 near positions
    in float32. Positions stay at most 5000, the bound the tolerance was derived
    for."""
    if seed is None:
        return (
            (_arange(6), 8, torch.float32),
            (_arange(1), 2, torch.float32),
            (_arange(5), 4, torch.float64),
            (torch.tensor([1857, 3, 4095, 257, 5000]), 32, torch.float16),
            (_arange(0, 4096, 129), 64, torch.bfloat16),
            (_arange(2040, 2056), 16, torch.float16),
            (torch.tensor([4999, 0, 300]), 128, torch.bfloat16),
            (_arange(100, 140), 8, torch.float32),
        )
    rng = term_rng(seed, "grade_fixed_rope_cos_sin")
    one = rng.randint(0, 5000)
    start = rng.randint(0, 20)
    far = [rng.randrange(2049, 5000, 2)] + rng.sample(range(5001), 4)
    rng.shuffle(far)
    step = rng.randint(97, 200)
    below = rng.randint(4, 12)
    three = [rng.randint(4500, 5000), rng.randint(0, 10), rng.randint(257, 600)]
    rng.shuffle(three)
    near = rng.randint(50, 500)
    return (
        (_arange(6), 8, torch.float32),
        (_arange(one, one + 1), 2, torch.float32),
        (_arange(start, start + rng.randint(3, 8)), rng.choice((4, 6, 10)),
         torch.float64),
        (torch.tensor(far), rng.choice((24, 32, 48)), torch.float16),
        (_arange(rng.randint(0, step - 1), 4096, step), rng.choice((48, 64, 96)),
         torch.bfloat16),
        (_arange(2048 - below, 2048 + rng.randint(4, 12)), rng.choice((12, 16, 20)),
         torch.float16),
        (torch.tensor(three), rng.choice((96, 128)), torch.bfloat16),
        (_arange(near, near + 40), rng.choice((6, 8, 12)), torch.float32),
    )


def grade_fixed_rope_cos_sin(fn, variant: str | None = None,
                             seed: int | None = None) -> None:
    """Hidden grader: head_dim 2, one position, float64, positions up to 5000, both
    half precisions, arbitrary (unsorted) positions (drawn by the term's ``seed``
    when there is one)."""
    variant_named(VARIANTS, variant, EXERCISE)
    cases = _hidden_cos_sin_cases(seed)
    for positions, head_dim, dtype in cases:
        _check_cos_sin(fn, positions, head_dim, dtype)
    passed("fixed_rope_cos_sin", public=False, detail=f"{len(cases)} cases")


# --- fixed_decode_position_ids


def _decode_ids_expected(mask: torch.Tensor, n_new: int) -> torch.Tensor:
    """Real tokens counted from 0 in each row; padding 0; the last n_new columns."""
    m = mask.long()
    ids = (m.cumsum(dim=1) - 1) * m  # (batch, total)
    return ids[:, mask.shape[1] - n_new:]  # (batch, n_new)


def _decode_ids_mistakes(mask: torch.Tensor, n_new: int):
    m = mask.long()
    batch, total = m.shape
    counted = m.cumsum(dim=1)  # (batch, total)
    new = m[:, total - n_new:]
    return [
        Mistake(
            _arange(total - n_new, total).expand(batch, n_new).clone(),
            _STILL + "every row gets the same positions, total - n_new .. total - 1 "
            "(one cache_position for the whole batch: unslothai/unsloth#3699). In a "
            "left-padded row the padding is not part of the text: count only the "
            "real tokens of that row.",
            "one-position-per-batch",
        ),
        Mistake(
            (new.cumsum(dim=1) - 1) * new,
            "the positions restart at 0 with every call: count the real tokens "
            "of the WHOLE row (the cached ones too), then keep the last n_new.",
            "restart-each-call",
        ),
        Mistake(
            (counted * m)[:, total - n_new:],
            "the positions start at 1; the first real token has position 0.",
            "counted-from-one",
        ),
        Mistake(
            (counted - 1)[:, total - n_new:],
            "padding columns get -1 (subtract 1 before masking, then multiply by "
            "the mask): padding must get 0.",
            "padding-minus-one",
        ),
    ]


def _fmt_mask(mask: torch.Tensor) -> str:
    return f"tensor({mask.long().tolist()})"


def _check_decode_ids(fn, mask: torch.Tensor, n_new: int) -> None:
    expected = _decode_ids_expected(mask, n_new)
    mistakes = _known(expected, _decode_ids_mistakes(mask, n_new))
    call = f"fixed_decode_position_ids({_fmt_mask(mask)}, {n_new})"
    if mask.dtype == torch.bool:
        call += " (a boolean mask)"
    got = call_student(fn, mask.clone(), n_new, call=call)
    expect_equal(got, expected, what=call, mistakes=mistakes)


def check_fixed_decode_position_ids(fn) -> None:
    """Public check: a left-padded batch at the first decoding step, and its
    prefill."""
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]])
    _check_decode_ids(fn, mask, 1)
    _check_decode_ids(fn, mask[:, :5], 5)
    passed("fixed_decode_position_ids", public=True)


def _hidden_decode_cases(seed: int | None) -> list:
    """The hidden ``(mask, n_new)`` cases: fixed without a term seed; else drawn by
    the seed with the same properties: a padded row next to an unpadded one at one
    and at several new tokens per call (speculative decoding), one left-padded row,
    one row without padding whose prompt is given in one call (n_new = its length),
    a boolean mask, and a batch of random left paddings (5 rows of 12 without a
    seed; 3 to 6 rows of 8 to 16 with one, each row keeping at least half its
    tokens) at one new token, several, and the whole row."""
    if seed is None:
        gen, rows, total = torch.Generator().manual_seed(94), 5, 12
    else:
        rng = term_rng(seed, "grade_fixed_decode_position_ids")
        gen = torch.Generator().manual_seed(rng.randrange(2**31))
        rows, total = rng.randint(3, 6), rng.randint(8, 16)
    pads = torch.randint(0, total // 2 + 1, (rows,), generator=gen)  # 0 to 6 of 12
    left = (_arange(total)[None, :] >= pads[:, None]).long()  # (rows, total)
    if seed is None:
        return [
            (torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]), 1),
            (torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]), 3),
            (torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]]), 2),
            (torch.tensor([[1, 1, 1, 1, 1]]), 5),  # no padding: the prompt in one call
            (torch.tensor([[0, 1, 1], [1, 1, 1]], dtype=torch.bool), 1),
            (left, 1),
            (left, 4),
            (left, 12),
        ]
    width = rng.randint(5, 9)
    pad = rng.randint(1, width - 3)
    two = torch.tensor([[0] * pad + [1] * (width - pad), [1] * width])
    if rng.random() < 0.5:
        two = two.flip(0)  # the unpadded row first
    one_pad = rng.randint(1, 4)
    one = torch.tensor([[0] * one_pad + [1] * rng.randint(3, 6)])
    prompt = rng.randint(3, 9)
    short = rng.randint(3, 6)
    flag_pad = rng.randint(1, short - 2)
    flags = torch.tensor([[False] * flag_pad + [True] * (short - flag_pad),
                          [True] * short])  # a padded row and a full one
    return [
        (two, 1),
        (two, rng.randint(2, width - pad)),
        (one, rng.randint(2, one.shape[1] - one_pad)),
        (torch.ones(1, prompt, dtype=torch.long), prompt),  # the prompt in one call
        (flags, 1),
        (left, 1),
        (left, rng.randint(2, total - total // 2)),
        (left, total),
    ]


def grade_fixed_decode_position_ids(fn, variant: str | None = None,
                                    seed: int | None = None) -> None:
    """Hidden grader: several steps, several new tokens per call (speculative
    decoding), boolean masks, one row, random left paddings (drawn by the term's
    ``seed`` when there is one)."""
    variant_named(VARIANTS, variant, EXERCISE)
    cases = _hidden_decode_cases(seed)
    for mask, n_new in cases:
        _check_decode_ids(fn, mask, n_new)
    passed("fixed_decode_position_ids", public=False, detail=f"{len(cases)} cases")


# --- fixed_sliding_window_mask


def _window_expected(q_len: int, k_len: int, window: int) -> torch.Tensor:
    """True where query i (absolute position i + k_len - q_len) may see key j:
    0 <= (i + k_len - q_len) - j < window."""
    offset = (_arange(q_len)[:, None] + (k_len - q_len)) - _arange(k_len)[None, :]
    return (offset >= 0) & (offset < window)  # (q_len, k_len)


def _window_variant(q_len, k_len, window, *, span=None, shift=None, causal=True,
                    buggy=False):
    if buggy:  # transformers#41228 before the fix: the window's diagonal added
        offset = k_len - q_len
        blocked = torch.ones(q_len, k_len, dtype=torch.bool).triu(offset + 1)
        return ~blocked.tril(offset + window)
    shift = k_len - q_len if shift is None else shift
    span = window if span is None else span
    d = (_arange(q_len)[:, None] + shift) - _arange(k_len)[None, :]
    keep = d < span
    if causal:
        keep &= d >= 0
    else:
        keep &= d > -span
    return keep


def _window_mistakes(q_len: int, k_len: int, window: int):
    return [
        Mistake(
            _window_variant(q_len, k_len, window, buggy=True),
            _STILL + "the window's diagonal is ADDED to the causal one "
            "(huggingface/transformers#41228): keys more than `window` positions "
            "back stay visible, and future keys beyond the window are unmasked "
            "again. Block every key j with (i + k_len - q_len) - j >= window.",
            "diagonal-added",
        ),
        Mistake(
            _window_variant(q_len, k_len, window, span=window + 1),
            "each query sees window + 1 keys: the window counts the query itself, "
            "so it reaches back window - 1 positions (the off-by-one of "
            "huggingface/transformers#29623 and ml-explore/mlx-lm#390).",
            "window-plus-one",
        ),
        Mistake(
            _window_variant(q_len, k_len, window, shift=0),
            "the queries are taken to be at positions 0 .. q_len - 1; with a cache "
            "they are the LAST q_len of the k_len positions, so query i is at "
            "i + k_len - q_len.",
            "queries-first",
        ),
        Mistake(
            _window_variant(q_len, k_len, window, causal=False),
            "the window is two-sided, so queries see future keys (a window of "
            "(w, w) where (w, 0) was meant: huggingface/transformers#39408). Keep "
            "the causal mask.",
            "two-sided",
        ),
    ]


def _check_window(fn, q_len: int, k_len: int, window: int) -> None:
    expected = _window_expected(q_len, k_len, window)
    mistakes = _known(expected, _window_mistakes(q_len, k_len, window))
    call = f"fixed_sliding_window_mask({q_len}, {k_len}, {window})"
    got = call_student(fn, q_len, k_len, window, call=call)
    if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
        raise CheckFailed(f"{call} should be a boolean tensor (True = may attend), "
                          f"got {got.dtype}")
    right = isinstance(got, torch.Tensor) and got.shape == expected.shape and bool(
        _equal(got, expected))
    if right:
        return
    if isinstance(got, torch.Tensor):
        for m in mistakes:
            if got.shape == m.answer.shape and _equal(got, m.answer):
                raise known_mistake(call, m, got=got)
    expect_equal(got if not isinstance(got, torch.Tensor) else got.long(),
                 expected.long(), what=call)


def check_fixed_sliding_window_mask(fn) -> None:
    """Public check: prefill (q_len = k_len) and a decoding step with a cache."""
    _check_window(fn, 7, 7, 3)
    _check_window(fn, 2, 9, 4)
    passed("fixed_sliding_window_mask", public=True)


def _hidden_window_cases(seed: int | None) -> tuple:
    """The hidden ``(q_len, k_len, window)`` cases: fixed without a term seed; else
    drawn by the seed with the same properties. The two public cases stay first (a
    prefill, a decoding step with a cache); then window 1 (only the token itself), a
    window longer than the keys (plain causal), one query with a cache, one query and
    one key, a chunk of as many queries as the window after a cache, a window as long
    as the prefill, and a few queries with a cache much longer than the window."""
    if seed is None:
        return ((7, 7, 3), (2, 9, 4), (5, 5, 1), (4, 4, 10), (1, 12, 5), (1, 1, 1),
                (6, 16, 6), (16, 16, 16), (3, 20, 8))
    rng = term_rng(seed, "grade_fixed_sliding_window_mask")
    n1, n2, n3 = rng.randint(3, 9), rng.randint(3, 9), rng.randint(10, 20)
    k1 = rng.randint(8, 16)
    chunk = rng.randint(4, 8)
    q3 = rng.randint(2, 4)
    return (
        (7, 7, 3),
        (2, 9, 4),
        (n1, n1, 1),
        (n2, n2, n2 + rng.randint(1, 8)),
        (1, k1, rng.randint(2, k1 - 1)),
        (1, 1, 1),
        (chunk, chunk + rng.randint(6, 14), chunk),
        (n3, n3, n3),
        (q3, rng.randint(16, 24), rng.randint(q3 + 3, 10)),
    )


def grade_fixed_sliding_window_mask(fn, variant: str | None = None,
                                    seed: int | None = None) -> None:
    """Hidden grader: window 1 (only the token itself), a window longer than the
    keys (plain causal), one query, chunked prefill (drawn by the term's ``seed``
    when there is one)."""
    variant_named(VARIANTS, variant, EXERCISE)
    cases = _hidden_window_cases(seed)
    for q_len, k_len, window in cases:
        _check_window(fn, q_len, k_len, window)
    passed("fixed_sliding_window_mask", public=False, detail=f"{len(cases)} cases")


# The references under the names the grading edition plans the hidden graders with
# (``_ref_<function>``, the student's signature).
_ref_fixed_rope_cos_sin = _cos_sin_expected
_ref_fixed_decode_position_ids = _decode_ids_expected
_ref_fixed_sliding_window_mask = _window_expected
