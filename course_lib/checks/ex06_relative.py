"""Graders of exercise 6 (relative positions): Shaw et al.'s relative attention in its
memory-efficient form, and T5's bucketed relative positions.

Expected answers come from :mod:`course_lib.relative`, captured at import. The known
wrong answers are computed here, so a message can name the mistake: for Shaw et al.,
the queries placed first with a key/value cache, the tables read at i - j, the position
term left unscaled, the value term dropped, the softmax over the queries, the clip one
short; for T5, query - key, the bidirectional halving forgotten, no clamp to the last
bucket, future keys not sent to bucket 0 in causal mode.

Variants (:data:`VARIANTS`, chosen for a term by ``c.CourseTerm.variants`` in
``nbgrader_config.py``): ``"causal"`` asks ``t5_relative_position_bucket`` for a
decoder's buckets by default, ``bidirectional=False`` (T5's decoder stack calls Mesh
TensorFlow's and Hugging Face's ``_relative_position_bucket`` so; Raffel et al. 2020,
section 2.1; chapter 6, "Which offsets share a bucket", step 1): all ``num_buckets``
buckets for the keys at or before the query, every key after it in bucket 0. Its
graders call the causal buckets the way a decoder's default does, without
``bidirectional``; the open edition's answer (bidirectional by default) fails them and
is named ``default-variant``, and the causal buckets halved as if there were a second
direction are named too (``halved-causal``). A term's ``seed``
(``c.CourseTerm.seed``) draws both hidden graders' sizes and settings anew.
"""

from __future__ import annotations

import math
from dataclasses import replace as _replace

import torch

from course_lib.relative import (
    shaw_relative_attention as _ref_shaw_relative_attention,
)
from course_lib.relative import t5_relative_position_bucket as _ref_bucket

from ._core import (
    CheckFailed,
    Mistake,
    Variant,
    call_student,
    expect_close,
    expect_equal,
    hinted,
    passed,
    term_rng,
    variant_named,
)

__all__ = [
    "check_shaw_relative_attention",
    "check_t5_relative_position_bucket",
    "grade_shaw_relative_attention",
    "grade_t5_relative_position_bucket",
]

_arange = torch.arange
_equal = torch.equal
_where = torch.where
_log = torch.log
_einsum = torch.einsum
_allclose = torch.allclose
_sqrt = math.sqrt

_ATOL = 1e-5
_RTOL = 1e-4

EXERCISE = "ex06_relative"
VARIANTS: dict[str, Variant] = {
    "causal": Variant(
        summary=(
            "t5_relative_position_bucket gives a decoder's causal buckets by default "
            "(bidirectional=False: all num_buckets for the past, future keys in "
            "bucket 0; chapter 6, 'Which offsets share a bucket', step 1; Raffel et "
            "al. 2020, section 2.1, T5's decoder)"
        ),
        references={
            "t5_relative_position_bucket": "_reference_causal_t5_bucket",
        },
    ),
}


def _known(expected: torch.Tensor, candidates: list[Mistake]) -> list[Mistake]:
    """The candidate wrong answers that differ from the expected one (a candidate
    that coincides with the right answer for this input must not reject it)."""
    return [
        m
        for m in candidates
        if not (m.answer.shape == expected.shape and _equal(m.answer, expected))
    ]


# --- shaw_relative_attention

# Each known mistake: what it does, in the words of the message. Where it was met in
# public code, the message says where. Its slug is its key with hyphens.
_SHAW_MISTAKES = {
    "queries_first": (
        "the queries are placed at positions 0..q_len-1. They are the LAST q_len of "
        "the k_len positions (a key/value cache): query row i sits at position "
        "i + k_len - q_len. (Hugging Face's BERT relative_key attention had this bug "
        "when decoding with a cache, transformers#19045.)"
    ),
    "query_minus_key": (
        "the tables are read at i - j (query minus key). Row r of a_k and a_v belongs "
        "to the distance j - i = r - max_distance, key minus query, as in Shaw et "
        "al.'s tensor2tensor code; Hugging Face's BERT relative_key indexes its own "
        "table by i - j, so a table ported between the two is read backwards."
    ),
    "position_unscaled": (
        "the position term q_i . a^K_ij is added after the content term was divided "
        "by sqrt(head_dim). Shaw et al.'s eq. (4) divides the whole q_i . (k_j + "
        "a^K_ij) by sqrt(head_dim)."
    ),
    "no_value_term": (
        "the weights are right but the output has no a^V term: z_i = sum_j alpha_ij "
        "(v_j + a^V_ij). (A key-only variant, as in BERT's relative_key or Music "
        "Transformer, drops it on purpose; this exercise asks for both tables.)"
    ),
    "softmax_over_queries": (
        "the softmax runs over the queries (dim -2): each query's weights over the "
        "keys must sum to 1 (softmax over the last dimension)."
    ),
    "clip_off_by_one": (
        "the distances are clipped at +-(max_distance - 1): clip j - i to "
        "[-max_distance, max_distance], so that rows 0 and 2*max_distance are used."
    ),
}


def _shaw_variant(q, k, v, a_k, a_v, max_distance: int, mistake: str = ""):
    """Shaw et al.'s attention ``(out, weights)`` with one switchable mistake, through
    a one-hot ``(q_len, k_len, 2K+1)`` table of rows (small: the graders' sizes)."""
    K = max_distance
    q_len, k_len, dim = q.shape[2], k.shape[2], q.shape[3]
    first = 0 if mistake == "queries_first" else k_len - q_len
    query = _arange(q_len)[:, None] + first  # (Lq, 1) positions
    key = _arange(k_len)[None, :]  # (1, Lk)
    rel = query - key if mistake == "query_minus_key" else key - query  # (Lq, Lk)
    clip = K - 1 if mistake == "clip_off_by_one" else K
    rows = rel.clamp(-clip, clip) + K  # (Lq, Lk)
    one_hot = (rows[..., None] == _arange(2 * K + 1)).to(q.dtype)  # (Lq, Lk, 2K+1)
    content = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    position = _einsum("bhir,ijr->bhij", q @ a_k.transpose(0, 1), one_hot)
    if mistake == "position_unscaled":
        scores = content / _sqrt(dim) + position
    else:
        scores = (content + position) / _sqrt(dim)
    weights = scores.softmax(dim=-2 if mistake == "softmax_over_queries" else -1)
    out = weights @ v  # (B, H, Lq, D)
    if mistake != "no_value_term":
        out = out + _einsum("bhij,ijr->bhir", weights, one_hot) @ a_v
    return out, weights


# The fix, shown only when the student asks for hints: where it is the step the
# exercise asks to work out (keyed like _SHAW_MISTAKES).
_SHAW_HINTS = {
    "no_value_term": (
        "the keys that read the same row of a_v can be grouped: sum their weights "
        "per table row, then multiply by a_v"
    ),
}


def _shaw_mistakes(q, k, v, a_k, a_v, max_distance: int, expected):
    """``(output mistakes, weight mistakes)`` for this case."""
    out_ref, weights_ref = expected
    outs, weights = [], []
    for mistake, text in _SHAW_MISTAKES.items():
        out, w = _shaw_variant(q, k, v, a_k, a_v, max_distance, mistake)
        slug = mistake.replace("_", "-")
        outs.append(hinted(Mistake(
            out,
            text,
            slug), _SHAW_HINTS.get(mistake, "")))
        weights.append(Mistake(
            w,
            text,
            slug,
        ))
    return _close_known(out_ref, outs), _close_known(weights_ref, weights)


def _close_known(expected, candidates):
    """The candidates that are not within the grader's tolerance of the answer."""
    return [
        m
        for m in candidates
        if not _allclose(m.answer, expected, atol=_ATOL, rtol=_RTOL)
    ]


def _shaw_case(seed: int, batch: int, heads: int, q_len: int, k_len: int, dim: int,
               max_distance: int, dtype: torch.dtype = torch.float32):
    """Seeded inputs ``(q, k, v, a_k, a_v, max_distance)``."""
    gen = torch.Generator().manual_seed(seed)
    rows = 2 * max_distance + 1
    shapes = [(batch, heads, q_len, dim), (batch, heads, k_len, dim),
              (batch, heads, k_len, dim), (rows, dim), (rows, dim)]
    q, k, v, a_k, a_v = (torch.randn(*s, generator=gen).to(dtype) for s in shapes)
    return q, k, v, a_k, a_v, max_distance


def _check_shaw_case(fn, q, k, v, a_k, a_v, max_distance: int) -> None:
    expected = _ref_shaw_relative_attention(
        q.clone(), k.clone(), v.clone(), a_k.clone(), a_v.clone(), max_distance
    )
    out_mistakes, weight_mistakes = _shaw_mistakes(
        q, k, v, a_k, a_v, max_distance, expected
    )
    call = (
        f"shaw_relative_attention(q, k, v, a_k, a_v, {max_distance}) with "
        f"q {tuple(q.shape)}, k and v {tuple(k.shape)}, a_k and a_v "
        f"{tuple(a_k.shape)}, {str(q.dtype).removeprefix('torch.')}"
    )
    got = call_student(
        fn, q.clone(), k.clone(), v.clone(), a_k.clone(), a_v.clone(), max_distance,
        call=call,
    )
    if not isinstance(got, tuple | list) or len(got) != 2:
        raise CheckFailed(
            f"{call} should return a pair (out, weights), got {type(got).__name__}"
            + (f" of length {len(got)}" if isinstance(got, tuple | list) else "")
        )
    out, weights = got
    out_ref, weights_ref = expected
    expect_close(
        weights, weights_ref, what=f"the weight tensor of {call}", atol=_ATOL,
        rtol=_RTOL, mistakes=weight_mistakes, dtype="float",
    )
    expect_close(
        out, out_ref, what=f"the output of {call} (its weights are right)",
        atol=_ATOL, rtol=_RTOL, mistakes=out_mistakes, dtype="float",
    )


# (seed, batch, heads, q_len, k_len, head_dim, max_distance): equal lengths with keys
# beyond the clip on both sides; a key/value cache (3 queries, the last of 9 keys);
# a clip wider than the sequence (every row its own distance, no clipping); float64
# inputs (a buffer made with the default dtype, float32, cannot take them).
_SHAW_PUBLIC = [
    (61, 2, 3, 7, 7, 8, 2),
    (62, 1, 2, 3, 9, 4, 3),
    (63, 1, 1, 5, 5, 6, 6),
    (60, 1, 2, 4, 6, 4, 2, torch.float64),
]


def check_shaw_relative_attention(fn) -> None:
    """Public check of ``shaw_relative_attention(q, k, v, a_k, a_v, max_distance)``:
    equal lengths, a key/value cache, a clip wider than the sequence, float64."""
    for case in _SHAW_PUBLIC:
        _check_shaw_case(fn, *_shaw_case(*case))
    passed("shaw_relative_attention", public=True)


def _hidden_shaw_cases(seed: int | None) -> list[tuple]:
    """The hidden cases past the public ones, as ``_shaw_case`` arguments: fixed
    without a term seed; else drawn by the seed with what the fixed ones were chosen
    for: one decoding step (1 query, more keys than the 2K + 1 table rows), K = 1,
    float64 with a key/value cache, a long sequence (32 to 48 positions, K 6 to 10),
    a batch of 3 or 4 with one head and head_dim 1 to 3, and four random sizes."""
    if seed is None:
        cases = [
            (64, 2, 2, 1, 12, 8, 4),  # one decoding step
            (65, 1, 4, 6, 6, 4, 1),
            (66, 2, 2, 5, 8, 8, 3, torch.float64),
            (67, 1, 2, 40, 40, 16, 8),
            (68, 3, 1, 4, 4, 2, 2),
        ]
        gen = torch.Generator().manual_seed(606)
        for i in range(4):
            q_len = int(torch.randint(1, 11, (1,), generator=gen))
            k_len = q_len + int(torch.randint(0, 10, (1,), generator=gen))
            dim = int(torch.randint(1, 9, (1,), generator=gen))
            K = int(torch.randint(1, 9, (1,), generator=gen))
            cases.append((700 + i, 2, 2, q_len, k_len, dim, K))
        return cases
    rng = term_rng(seed, "grade_shaw_relative_attention")

    def tensors() -> int:  # the seed of one case's random tensors
        return rng.randrange(2**31)

    K = rng.randint(2, 4)
    cases = [(tensors(), rng.randint(1, 2), rng.randint(1, 3), 1,
              rng.randint(2 * K + 2, 16), rng.choice((4, 8)), K)]  # a decoding step
    n = rng.randint(4, 8)
    cases.append((tensors(), 1, rng.randint(2, 4), n, n, rng.randint(2, 6), 1))
    q_len = rng.randint(3, 6)
    cases.append((tensors(), 2, 2, q_len, q_len + rng.randint(1, 4),
                  rng.choice((4, 8)), rng.randint(2, 4), torch.float64))
    n = rng.randint(32, 48)
    cases.append((tensors(), 1, 2, n, n, rng.choice((8, 16)), rng.randint(6, 10)))
    n = rng.randint(3, 6)
    cases.append((tensors(), rng.randint(3, 4), 1, n, n, rng.randint(1, 3),
                  rng.randint(1, 3)))
    for _ in range(4):
        q_len = rng.randint(1, 10)
        cases.append((tensors(), 2, 2, q_len, q_len + rng.randint(0, 9),
                      rng.randint(1, 8), rng.randint(1, 8)))
    return cases


def grade_shaw_relative_attention(
    fn, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grader: the public cases, one decoding step, K = 1, float64, a long
    sequence and random sizes (drawn by the term's ``seed`` when there is one). No
    variant changes Shaw et al.'s attention."""
    variant_named(VARIANTS, variant, EXERCISE)
    cases = [_shaw_case(*case) for case in _SHAW_PUBLIC]
    cases += [_shaw_case(*case) for case in _hidden_shaw_cases(seed)]
    for case in cases:
        _check_shaw_case(fn, *case)
    passed("shaw_relative_attention", public=False, detail=f"{len(cases)} cases")


# --- t5_relative_position_bucket


def _t5_variant(
    relative_position: torch.Tensor,
    bidirectional: bool,
    num_buckets: int,
    max_distance: int,
    *,
    halve: bool = True,
    clamp: bool = True,
    causal_abs: bool = False,
    causal_halved: bool = False,
    shift: float = 0.0,
    rounding: str = "floor",
) -> torch.Tensor:
    """T5 buckets with switchable mistakes; ``shift`` nudges the log bucket value
    (used to find the bucket edges where float rounding may go either way)."""
    rel = relative_position.long()
    buckets = num_buckets
    if bidirectional:
        if halve:
            buckets //= 2
        offset = (rel > 0).long() * buckets
        n = rel.abs()
    else:
        offset = torch.zeros_like(rel)
        n = rel.abs() if causal_abs else (-rel).clamp(min=0)
        if causal_halved:
            buckets //= 2
    max_exact = buckets // 2
    n_large = n.clamp(min=max_exact).double()
    scaled = (
        _log(n_large / max_exact)
        / math.log(max_distance / max_exact)
        * (buckets - max_exact)
    )
    rounded = {"floor": torch.floor, "ceil": torch.ceil, "round": torch.round}
    large = max_exact + rounded[rounding](scaled + shift).long()
    if clamp:
        large = large.clamp(max=buckets - 1)
    return offset + _where(n < max_exact, n, large)


def _t5_expected(relative_position, bidirectional, num_buckets, max_distance):
    """The reference buckets and, at bucket edges where ``log(n/E)/log(D/E)*(B-E)`` is
    within 1e-4 of an integer (float32 and float64 round it differently), the other
    acceptable value."""
    expected = _ref_bucket(
        relative_position.clone(),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    args = (relative_position, bidirectional, num_buckets, max_distance)
    low = _t5_variant(*args, shift=-1e-4)
    high = _t5_variant(*args, shift=1e-4)
    other = _where(expected == low, high, low)
    return expected, other


def _reference_causal_t5_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = False,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """The causal variant's answer: T5's buckets with a decoder's default,
    ``bidirectional=False`` (all buckets for the past, future keys in bucket 0)."""
    return _ref_bucket(
        relative_position,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )


# The sign and the future keys, as the causal variant's messages put them (its calls
# leave bidirectional out; keyed by slug).
_DECODER_TEXTS = {
    "query-minus-key": (
        "these are the causal buckets of query - key: the keys after the query got "
        "the buckets of their distance and the keys at or before it bucket 0. "
        "relative_position is key - query (memory_position - context_position in "
        "T5's code), negative for the keys a decoder attends to.",
        "the keys at or before the query are read at the distance "
        "-relative_position",
    ),
    "causal-abs": (
        "keys after the query (relative_position > 0) got the buckets of their "
        "distance, like the keys before it; in the causal buckets every key after "
        "the query is in bucket 0 (step 1 of the task, Direction).",
        "a key after the query counts as distance 0: n = max(-relative_position, 0)",
    ),
}


def _t5_mistakes(relative_position, bidirectional, num_buckets, max_distance, expected,
                 decoder_default: bool = False):
    """The known wrong buckets for this call that differ from ``expected``.
    ``decoder_default``: the causal variant's call, which leaves ``bidirectional`` to
    its default (False in that term): the open edition's answer (bidirectional by
    default) comes first, as ``default-variant``."""
    args = (relative_position, bidirectional, num_buckets, max_distance)
    candidates = []
    if decoder_default:
        candidates.append(Mistake(
            _t5_variant(relative_position, True, num_buckets, max_distance),
            "these are the bidirectional (encoder) buckets, what "
            "t5_relative_position_bucket gives without a bidirectional argument in "
            "the open edition's exercise 6 (bidirectional=True by default); this "
            "term's exercise asks for a decoder's causal buckets by default "
            "(bidirectional=False): all num_buckets buckets for the keys at or "
            "before the query, every key after it in bucket 0",
            "default-variant",
        ))
    text, hint = _DECODER_TEXTS["query-minus-key"] if decoder_default else (
        "these are the buckets of query - key. relative_position is key - query "
        "(memory_position - context_position in T5): in causal mode keys before "
        "the query (negative relative_position) use the buckets, keys after it go "
        "to bucket 0.",
        "",
    )
    candidates += [
        hinted(Mistake(
            _t5_variant(-relative_position, bidirectional, num_buckets, max_distance),
            text,
            "query-minus-key"), hint),
        hinted(Mistake(
            _t5_variant(*args, clamp=False),
            "bucket ids reach num_buckets or more: distances at or beyond "
            "max_distance must all share the last bucket of their half.",
            "not-clamped"),
            "clamp the logarithmic bucket to the last bucket of its half"),
        hinted(Mistake(
            _t5_variant(*args, rounding="ceil"),
            "the logarithmic bucket is rounded up: some distances land one bucket "
            "after the bucket whose range holds them.",
            "rounded-up"),
            "bucket b holds the distances from its first distance r_b to "
            "r_(b+1) - 1, so a distance belongs to the largest b with r_b <= "
            "distance: round the logarithmic value down"),
        hinted(Mistake(
            _t5_variant(*args, rounding="round"),
            "the logarithmic bucket is rounded to the nearest integer: some "
            "distances land one bucket after the bucket whose range holds them.",
            "rounded-nearest"),
            "a distance belongs to the largest b whose first distance r_b is at "
            "most the distance: round the logarithmic value down"),
    ]
    if bidirectional:
        candidates.append(
            Mistake(
                _t5_variant(*args, halve=False),
                "in bidirectional mode each direction gets half of the buckets: use "
                "num_buckets // 2 per side, keys after the query offset by "
                "num_buckets // 2 (your buckets run up to 2 * num_buckets - 1).",
                "not-halved",
            )
        )
        candidates.append(
            Mistake(
                _t5_variant(*args, halve=False, clamp=False),
                "in bidirectional mode each direction gets half of the buckets "
                "(num_buckets // 2 per side), and the logarithmic bucket must be "
                "clamped to the last bucket of its half.",
                "not-halved-not-clamped",
            )
        )
    else:
        text, hint = _DECODER_TEXTS["causal-abs"] if decoder_default else (
            "in causal mode (bidirectional=False) every key after the query "
            "(relative_position > 0) belongs to bucket 0: use "
            "n = max(-relative_position, 0), not |relative_position|.",
            "",
        )
        candidates.append(hinted(Mistake(
            _t5_variant(*args, causal_abs=True),
            text,
            "causal-abs"), hint))
    if decoder_default:
        candidates.append(hinted(Mistake(
            _t5_variant(*args, causal_halved=True),
            "the causal buckets stop at num_buckets // 2 - 1: the keys at or before "
            "the query were given half of the buckets, as one direction of the "
            "bidirectional buckets is (step 1 of the task, Direction).",
            "halved-causal"),
            "without a second direction all num_buckets buckets serve the keys at "
            "or before the query: E = num_buckets // 2 exact buckets, the "
            "logarithmic ones up to num_buckets - 1"))
    return _known(expected, candidates)


def _call_bucket(fn, relative_position, bidirectional, num_buckets, max_distance, call,
                 omit: tuple[str, ...] = ()):
    """The student's buckets; the arguments named in ``omit`` are left to the
    function's defaults (a decoder's call in the causal variant)."""
    given = {"bidirectional": bidirectional, "num_buckets": num_buckets,
             "max_distance": max_distance}
    kwargs = {k: v for k, v in given.items() if k not in omit}
    return call_student(fn, relative_position.clone(), call=call, **kwargs)


def _describe_input(relative_position: torch.Tensor) -> str:
    flat = relative_position.flatten()
    if relative_position.ndim == 1 and _equal(
        flat, _arange(int(flat[0]), int(flat[0]) + flat.numel())
    ):
        return f"arange({int(flat[0])}, {int(flat[-1]) + 1})"
    return f"<tensor of shape {tuple(relative_position.shape)}>"


def _decoder_call(variant: str, bidirectional: bool) -> bool:
    """Whether the causal variant's graders call this setting as a decoder does:
    causal buckets, ``bidirectional`` left to its default."""
    return variant == "causal" and not bidirectional


def _check_bucket_case(fn, relative_position, bidirectional, num_buckets, max_distance,
                       variant: str = "default", defaults: bool = False):
    """One call judged against the reference; ``defaults``: the call gives
    ``relative_position`` alone (the causal variant's call of the defaults)."""
    args = (relative_position, bidirectional, num_buckets, max_distance)
    decoder = _decoder_call(variant, bidirectional)
    expected, other = _t5_expected(*args)
    if decoder:
        mistakes = _t5_mistakes(*args, expected, decoder_default=True)
        # the open edition's answer, either rounding at its own bucket edges
        open_answer, open_other = _t5_expected(relative_position, True, num_buckets,
                                               max_distance)
    else:
        mistakes = _t5_mistakes(*args, expected)
    omit = ("bidirectional",) if decoder else ()
    if defaults:
        omit = ("bidirectional", "num_buckets", "max_distance")
        call = (f"t5_relative_position_bucket({_describe_input(relative_position)}) "
                "(the default arguments)")
    else:
        flag = "" if decoder else f"bidirectional={bidirectional}, "
        call = (
            f"t5_relative_position_bucket({_describe_input(relative_position)}, "
            f"{flag}num_buckets={num_buckets}, max_distance={max_distance})"
        )
    got = _call_bucket(fn, *args, call, omit)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape:
        # At a bucket edge either rounding of the logarithm is accepted, for the
        # answer and for the known mistakes alike (float32 and float64 code round
        # an edge differently, by one bucket).
        edge = expected != other
        expected = _where(got == other, other, expected)
        if not got.is_complex():
            near = got.double().round().long()
            mistakes = [
                _replace(m, answer=_where(edge & ((near - m.answer).abs() <= 1),
                                          near, m.answer))
                for m in mistakes
            ]
            if decoder:
                as_open = _where(got == open_other, open_other, open_answer)
                mistakes = [
                    _replace(m, answer=as_open)
                    if m.slug == "default-variant" else m
                    for m in mistakes
                ]
    expect_equal(got, expected, what=call, mistakes=mistakes)


def _check_bucket_defaults(fn, variant: str = "default") -> None:
    """``fn(relative_position)`` alone must use the defaults of the task's signature:
    T5's, bidirectional, 32 buckets, max_distance 128; in the causal variant a
    decoder's, ``bidirectional=False``."""
    relative_position = _arange(-300, 301)
    if variant == "causal":
        _check_bucket_case(fn, relative_position, False, 32, 128, variant,
                           defaults=True)
        return
    expected, other = _t5_expected(relative_position, True, 32, 128)
    call = "t5_relative_position_bucket(arange(-300, 301)) (the default arguments)"
    got = call_student(fn, relative_position.clone(), call=call)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape:
        expected = _where(got == other, other, expected)
        if not _equal(got.long(), expected):
            raise CheckFailed(
                f"{call} gives other buckets than with bidirectional=True, "
                "num_buckets=32, max_distance=128: the defaults of the signature "
                "must be T5's, t5_relative_position_bucket(relative_position, "
                "bidirectional=True, num_buckets=32, max_distance=128)"
            )
    expect_equal(got, expected, what=call)


def _grid(q_len: int, k_len: int) -> torch.Tensor:
    """``key - query`` for queries at the last ``q_len`` of ``k_len`` positions."""
    query = _arange(q_len)[:, None] + (k_len - q_len)
    return _arange(k_len)[None, :] - query  # (Lq, Lk)


_BUCKET_PUBLIC = [
    (_arange(-200, 201), True, 32, 128),
    (_arange(-200, 201), False, 32, 128),
    (_grid(6, 10), True, 8, 16),
]


def check_t5_relative_position_bucket(fn, variant: str | None = None) -> None:
    """Public check of ``t5_relative_position_bucket``: three settings and a call
    with the default arguments (T5's, as the signature of the task says;
    ``variant="causal"``: the causal settings called without ``bidirectional``, whose
    default is a decoder's, False)."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    for case in _BUCKET_PUBLIC:
        _check_bucket_case(fn, *case, variant)
    _check_bucket_defaults(fn, variant)
    passed("t5_relative_position_bucket", public=True,
           detail="causal by default" if variant == "causal" else "")


def _bucket_call(bidirectional: bool, num_buckets: int, max_distance: int,
                 decoder: bool, what: str) -> str:
    flag = "" if decoder else f"bidirectional={bidirectional}, "
    return (f"t5_relative_position_bucket({what}, {flag}num_buckets={num_buckets}, "
            f"max_distance={max_distance})")


def _check_monotone(fn, bidirectional: bool, num_buckets: int, max_distance: int,
                    variant: str = "default"):
    distance = _arange(0, 4 * max_distance)  # (n,)
    decoder = _decoder_call(variant, bidirectional)
    call = _bucket_call(bidirectional, num_buckets, max_distance, decoder,
                        f"±arange(0, {4 * max_distance})")
    omit = ("bidirectional",) if decoder else ()
    for sign, side in ((-1, "before"), (1, "after")):
        if sign == 1 and not bidirectional:
            continue
        got = _call_bucket(
            fn, sign * distance, bidirectional, num_buckets, max_distance, call, omit
        )
        if not isinstance(got, torch.Tensor) or got.shape != distance.shape:
            raise CheckFailed(
                f"{call} should return a tensor of shape {tuple(distance.shape)}, "
                f"got {got.shape if isinstance(got, torch.Tensor) else type(got)}"
            )
        got = got.long()
        if bool((got < 0).any()) or bool((got >= num_buckets).any()):
            bad = int(((got < 0) | (got >= num_buckets)).nonzero()[0, 0])
            raise CheckFailed(
                f"{call}: bucket ids must lie in [0, num_buckets) = "
                f"[0, {num_buckets}), "
                f"got {int(got[bad])} for relative_position {sign * bad}"
            )
        drop = (got[1:] < got[:-1]).nonzero()
        if drop.numel():
            d = int(drop[0, 0]) + 1
            raise CheckFailed(
                f"{call}: buckets must not decrease as the distance grows (keys "
                f"{side} the query): distance {d - 1} is in bucket {int(got[d - 1])} "
                f"but distance {d} in bucket {int(got[d])}"
            )


def _check_causal_future(fn, num_buckets: int, max_distance: int,
                         variant: str = "default") -> None:
    future = _arange(1, 3 * max_distance)
    decoder = _decoder_call(variant, False)
    call = _bucket_call(False, num_buckets, max_distance, decoder,
                        f"arange(1, {3 * max_distance})")
    omit = ("bidirectional",) if decoder else ()
    got = _call_bucket(fn, future, False, num_buckets, max_distance, call, omit)
    if isinstance(got, torch.Tensor) and got.shape == future.shape:
        nonzero = (got != 0).nonzero()
        if nonzero.numel():
            i = int(nonzero[0, 0])
            raise CheckFailed(
                f"{call}: in causal mode every key after the query belongs to bucket "
                f"0, but relative_position {int(future[i])} got bucket {int(got[i])}"
            )
    expect_equal(got, torch.zeros_like(future), what=call)


# the max_distance values of chapter 6's figures and code (16 to 256), which a drawn
# hidden setting avoids
_FIGURE_DISTANCES = (16, 32, 64, 128, 256)


def _hidden_bucket_settings(seed: int | None):
    """``(causal future setting, monotone settings, value cases)`` of the hidden
    grader: fixed without a term seed; else drawn by the seed with what the fixed ones
    were chosen for: settings outside chapter 6's figures (no max_distance of
    theirs), bidirectional and causal, the smallest setting (4 buckets), a bucket
    count that is not a multiple of 4, a decoding step's row and a square grid of
    queries, the distances around max_distance and far beyond it, and random
    tensors of 1 to 3 dimensions."""
    if seed is None:
        gen = torch.Generator().manual_seed(607)
        return (24, 96), [(True, 32, 128), (False, 32, 128), (True, 8, 20),
                          (False, 12, 40)], [
            (_arange(-300, 301), True, 48, 200),
            (_arange(-50, 51), True, 4, 10),
            (_arange(-50, 51), False, 4, 10),
            (_arange(-100, 101), False, 10, 60),
            (_grid(1, 40), False, 24, 96),
            (_grid(12, 12), True, 20, 40),
            (
                torch.tensor([-100000, -5000, -151, -150, -149, 149, 150, 151, 100000]),
                True,
                40,
                150,
            ),
            (torch.randint(-1000, 1000, (3, 4, 5), generator=gen), True, 36, 300),
            (torch.randint(-1000, 1000, (7, 9), generator=gen), False, 28, 100),
            (torch.randint(-60, 60, (50,), generator=gen), True, 16, 50),
        ]
    rng = term_rng(seed, "grade_t5_relative_position_bucket")

    def even(low: int, high: int) -> int:
        return 2 * rng.randint(low // 2, high // 2)

    def distance(low: int, high: int) -> int:
        d = rng.randint(low, high)
        return d + 1 if d in _FIGURE_DISTANCES else d

    def randint(high: int, shape: tuple) -> torch.Tensor:
        gen = torch.Generator().manual_seed(rng.randrange(2**31))
        return torch.randint(-high, high, shape, generator=gen)

    n = even(12, 40)
    future = (n, distance(2 * n, 5 * n))
    monotone = [(True, 32, 128), (False, 32, 128)]
    for bidirectional in (True, False):
        n = even(6, 24)
        monotone.append((bidirectional, n, distance(n, 4 * n)))
    n, d, length = even(34, 60), distance(150, 250), rng.randint(2, 4) * 100
    far = distance(100, 200)
    cases = [
        (_arange(-length, length + 1), True, n, d),
        (_arange(-50, 51), True, 4, distance(6, 14)),
        (_arange(-50, 51), False, 4, distance(6, 14)),
        (_arange(-100, 101), False, rng.choice((6, 10, 14, 18, 22)), distance(40, 80)),
    ]
    length = rng.randint(30, 50)
    cases.append((_grid(1, length), False, even(20, 28),
                  distance(2 * length, 3 * length)))
    length = rng.randint(10, 14)
    cases.append((_grid(length, length), True, even(16, 24), distance(30, 50)))
    cases.append((
        torch.tensor([-100000, -5000, -far - 1, -far, -far + 1, far - 1, far, far + 1,
                      100000]),
        True, even(30, 48), far,
    ))
    cases.append((randint(1000, (3, 4, 5)), True, even(30, 40), distance(200, 400)))
    cases.append((randint(1000, (7, 9)), False, even(24, 32), distance(80, 150)))
    cases.append((randint(60, (50,)), True, even(12, 20), distance(40, 60)))
    return future, monotone, cases


def grade_t5_relative_position_bucket(
    fn, variant: str | None = None, seed: int | None = None
) -> None:
    """Hidden grader: properties (range, monotone in distance, causal future keys in
    bucket 0) and values for several settings, shapes and large distances (drawn by
    the term's ``seed`` when there is one; ``variant="causal"``: the causal settings
    called without ``bidirectional``, a decoder's default)."""
    variant = variant_named(VARIANTS, variant, EXERCISE)
    for case in _BUCKET_PUBLIC:
        _check_bucket_case(fn, *case, variant)
    _check_bucket_defaults(fn, variant)
    # Values at settings outside chapter 6's figures (the interactive figure embeds
    # num_buckets 4, 8, 16, 32, 64 x max_distance 16, 32, 64, 128, 256 over +-200;
    # the chapter's own code runs 32/128, 8/16, 64/256): bidirectional and causal,
    # exact and log buckets, the last bucket and distances far beyond it.
    future, monotone, cases = _hidden_bucket_settings(seed)
    _check_causal_future(fn, *future, variant)
    for setting in monotone:
        _check_monotone(fn, *setting, variant)
    for case in cases:
        _check_bucket_case(fn, *case, variant)
    n_cases = len(cases) + len(_BUCKET_PUBLIC)
    form = "causal by default, " if variant == "causal" else ""
    passed("t5_relative_position_bucket", public=False,
           detail=f"{form}{n_cases} cases")
