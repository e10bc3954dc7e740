"""Bug zoo of exercise 6: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too.

Where a mistake was met in public code, its docstring says where.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import course_lib

# --- shaw_relative_attention: a gather/scatter-add core with switchable mistakes


def _rows(q_len, k_len, max_distance, *, first=None, sign=1, clip=None):
    """Table row of every (query, key): clip(j - i', -clip, clip) + K."""
    first = k_len - q_len if first is None else first
    clip = max_distance if clip is None else clip
    query = torch.arange(first, first + q_len)[:, None]
    key = torch.arange(k_len)[None, :]
    return (sign * (key - query)).clamp(-clip, clip) + max_distance


def _shaw(q, k, v, a_k, a_v, max_distance, *, rows=None, scale_position=True,
          value_term=True, softmax_dim=-1):
    batch, heads, q_len, dim = q.shape
    k_len = k.shape[2]
    if rows is None:
        rows = _rows(q_len, k_len, max_distance)
    idx = rows.expand(batch, heads, q_len, k_len)
    position = (q @ a_k.T).gather(-1, idx)  # (B, H, Lq, Lk)
    content = q @ k.transpose(-2, -1)
    if scale_position:
        scores = (content + position) / math.sqrt(dim)
    else:
        scores = content / math.sqrt(dim) + position
    weights = scores.softmax(softmax_dim)
    out = weights @ v
    if value_term:
        bins = torch.zeros(batch, heads, q_len, a_v.shape[0], dtype=weights.dtype)
        out = out + bins.scatter_add(-1, idx, weights) @ a_v
    return out, weights


# --- shaw_relative_attention: correct


def shaw_gather_scatter(q, k, v, a_k, a_v, max_distance):
    return _shaw(q, k, v, a_k, a_v, max_distance)


def shaw_one_hot(q, k, v, a_k, a_v, max_distance):
    """The rows as a one-hot (q_len, k_len, 2K+1) tensor and two einsums."""
    q_len, k_len = q.shape[2], k.shape[2]
    rows = _rows(q_len, k_len, max_distance)
    one_hot = F.one_hot(rows, 2 * max_distance + 1).to(q.dtype)
    position = torch.einsum("bhid,rd,ijr->bhij", q, a_k, one_hot)
    scores = (q @ k.transpose(-2, -1) + position) * q.shape[-1] ** -0.5
    weights = torch.softmax(scores, dim=-1)
    per_row = torch.einsum("bhij,ijr->bhir", weights, one_hot)
    return weights @ v + per_row @ a_v, weights


def shaw_loop_over_rows(q, k, v, a_k, a_v, max_distance):
    """One pass per table row, with a mask of the pairs that use it, in float64."""
    q_len, k_len = q.shape[2], k.shape[2]
    rows = _rows(q_len, k_len, max_distance)
    qd, kd, vd, akd, avd = (t.double() for t in (q, k, v, a_k, a_v))
    scores = qd @ kd.transpose(-2, -1)
    for r in range(2 * max_distance + 1):
        scores = scores + (rows == r) * (qd @ akd[r])[..., None]
    weights = (scores / math.sqrt(q.shape[-1])).softmax(-1)
    out = weights @ vd
    for r in range(2 * max_distance + 1):
        out = out + (weights * (rows == r)).sum(-1, keepdim=True) * avd[r]
    return out.to(q.dtype), weights.to(q.dtype)


# --- shaw_relative_attention: wrong


def shaw_queries_first(q, k, v, a_k, a_v, max_distance):
    """Queries at positions 0..q_len-1: Hugging Face BERT's relative_key attention
    with a cache (transformers#19045, fixed in #20203), and the widely copied
    RelativePosition module (range_vec_q = torch.arange(length_q))."""
    rows = _rows(q.shape[2], k.shape[2], max_distance, first=0)
    return _shaw(q, k, v, a_k, a_v, max_distance, rows=rows)


def shaw_query_minus_key(q, k, v, a_k, a_v, max_distance):
    """Tables read at i - j: Hugging Face BERT's relative_key convention
    (distance = position_ids_l - position_ids_r) applied to Shaw's j - i tables."""
    rows = _rows(q.shape[2], k.shape[2], max_distance, sign=-1)
    return _shaw(q, k, v, a_k, a_v, max_distance, rows=rows)


def shaw_position_unscaled(q, k, v, a_k, a_v, max_distance):
    return _shaw(q, k, v, a_k, a_v, max_distance, scale_position=False)


def shaw_no_value_term(q, k, v, a_k, a_v, max_distance):
    """Keys only, as BERT's relative_key and Music Transformer do."""
    return _shaw(q, k, v, a_k, a_v, max_distance, value_term=False)


def shaw_softmax_over_queries(q, k, v, a_k, a_v, max_distance):
    return _shaw(q, k, v, a_k, a_v, max_distance, softmax_dim=-2)


def shaw_clip_off_by_one(q, k, v, a_k, a_v, max_distance):
    rows = _rows(q.shape[2], k.shape[2], max_distance, clip=max_distance - 1)
    return _shaw(q, k, v, a_k, a_v, max_distance, rows=rows)


def shaw_output_only(q, k, v, a_k, a_v, max_distance):
    return _shaw(q, k, v, a_k, a_v, max_distance)[0]


def shaw_half_precision(q, k, v, a_k, a_v, max_distance):
    out, weights = _shaw(*(t.half() for t in (q, k, v, a_k, a_v)), max_distance)
    return out, weights


def shaw_bins_default_dtype(q, k, v, a_k, a_v, max_distance):
    """The per-row sums start from torch.zeros without a dtype (float32): scatter_add
    refuses float64 weights (issue 33: once caught by the hidden grader only)."""
    batch, heads, q_len, _ = q.shape
    idx = _rows(q_len, k.shape[2], max_distance).expand(batch, heads, q_len, -1)
    out, weights = _shaw(q, k, v, a_k, a_v, max_distance, value_term=False)
    bins = torch.zeros(batch, heads, q_len, a_v.shape[0])  # float32, whatever q is
    return out + bins.scatter_add(-1, idx, weights) @ a_v, weights


def shaw_calls_library(q, k, v, a_k, a_v, max_distance):
    return course_lib.shaw_relative_attention(q, k, v, a_k, a_v, max_distance)


# --- t5_relative_position_bucket: correct


def bucket_hf(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """The Hugging Face T5 formulation (float32 logarithm)."""
    buckets = 0
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(
            relative_position, torch.zeros_like(relative_position)
        )
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position, large)


def bucket_float64_log2(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    """Another order of operations: float64 base-2 logarithms of numerator and
    denominator (rounds differently exactly at the bucket edges)."""
    n = relative_position.long()
    half = num_buckets // 2 if bidirectional else num_buckets
    offset = (n > 0).long() * half if bidirectional else torch.zeros_like(n)
    n = n.abs() if bidirectional else (-n).clamp(min=0)
    exact = half // 2
    log_ratio = (torch.log2(n.double()) - math.log2(exact)) / (
        math.log2(max_distance) - math.log2(exact)
    )
    large = (exact + torch.floor(log_ratio * (half - exact)).long()).clamp(max=half - 1)
    return offset + torch.where(n < exact, n, large)


# --- t5_relative_position_bucket: wrong


def bucket_sign_flipped(relative_position, bidirectional, num_buckets, max_distance):
    return bucket_hf(-relative_position, bidirectional, num_buckets, max_distance)


def bucket_no_halving(relative_position, bidirectional, num_buckets, max_distance):
    n = relative_position
    offset = (n > 0).long() * num_buckets if bidirectional else torch.zeros_like(n)
    n = n.abs() if bidirectional else (-n).clamp(min=0)
    exact = num_buckets // 2
    large = (
        exact
        + (
            torch.log(n.float() / exact)
            / math.log(max_distance / exact)
            * (num_buckets - exact)
        ).long()
    )
    large = large.clamp(max=num_buckets - 1)
    return offset + torch.where(n < exact, n, large)


def bucket_no_clamp(relative_position, bidirectional, num_buckets, max_distance):
    n = relative_position
    half = num_buckets // 2 if bidirectional else num_buckets
    offset = (n > 0).long() * half if bidirectional else torch.zeros_like(n)
    n = n.abs() if bidirectional else (-n).clamp(min=0)
    exact = half // 2
    large = (
        exact
        + (
            torch.log(n.float() / exact)
            / math.log(max_distance / exact)
            * (half - exact)
        ).long()
    )
    return offset + torch.where(n < exact, n, large)


def bucket_causal_abs(relative_position, bidirectional, num_buckets, max_distance):
    if bidirectional:
        return bucket_hf(relative_position, True, num_buckets, max_distance)
    n = relative_position.abs()
    exact = num_buckets // 2
    large = (
        exact
        + (
            torch.log(n.float() / exact)
            / math.log(max_distance / exact)
            * (num_buckets - exact)
        ).long()
    )
    return torch.where(n < exact, n, large.clamp(max=num_buckets - 1))


def bucket_log_of_max_distance(
    relative_position, bidirectional, num_buckets, max_distance
):
    n = relative_position
    half = num_buckets // 2 if bidirectional else num_buckets
    offset = (n > 0).long() * half if bidirectional else torch.zeros_like(n)
    n = n.abs() if bidirectional else (-n).clamp(min=0)
    exact = half // 2
    large = (
        exact
        + (
            torch.log(n.float() / exact) / math.log(max_distance) * (half - exact)
        ).long()
    )
    return offset + torch.where(n < exact, n, large.clamp(max=half - 1))


def bucket_float(relative_position, bidirectional, num_buckets, max_distance):
    return bucket_hf(
        relative_position, bidirectional, num_buckets, max_distance
    ).float()


def bucket_calls_library(relative_position, bidirectional, num_buckets, max_distance):
    return course_lib.t5_relative_position_bucket(
        relative_position,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )


# --- found by the red team: correct styles and bugs the first graders missed


def bucket_keyword_only_loop(
    relative_position, *, bidirectional=True, num_buckets=32, max_distance=128
):
    """Entry by entry with math.log, keyword-only options (like the library)."""
    out = []
    for r in relative_position.flatten().tolist():
        half = num_buckets // 2 if bidirectional else num_buckets
        offset = half if bidirectional and r > 0 else 0
        n = abs(r) if bidirectional else max(-r, 0)
        exact = half // 2
        if n < exact:
            out.append(offset + n)
            continue
        scaled = math.log(n / exact) / math.log(max_distance / exact) * (half - exact)
        out.append(offset + min(half - 1, exact + int(scaled)))
    return torch.tensor(out).reshape(relative_position.shape)


def bucket_without_defaults(relative_position, bidirectional, num_buckets,
                            max_distance):
    """Right buckets, but t5_relative_position_bucket(rel) (the worked example)
    fails: the signature has no defaults."""
    return bucket_hf(relative_position, bidirectional, num_buckets, max_distance)


def bucket_causal_default(
    relative_position, bidirectional=False, num_buckets=32, max_distance=128
):
    return bucket_hf(relative_position, bidirectional, num_buckets, max_distance)


def bucket_abs_in_place(relative_position, bidirectional, num_buckets, max_distance):
    """Right buckets, computed by taking |relative_position| in the caller's tensor."""
    sign = relative_position > 0
    n = relative_position.abs_() if bidirectional else (-relative_position).clamp(min=0)
    rel = torch.where(sign, n, -n) if bidirectional else -n
    return bucket_hf(rel, bidirectional, num_buckets, max_distance)


def _bucket_rounded(relative_position, bidirectional, num_buckets, max_distance,
                    rounding):
    n = relative_position.long()
    half = num_buckets // 2 if bidirectional else num_buckets
    offset = (n > 0).long() * half if bidirectional else torch.zeros_like(n)
    n = n.abs() if bidirectional else (-n).clamp(min=0)
    exact = half // 2
    value = (
        torch.log(n.float() / exact) / math.log(max_distance / exact) * (half - exact)
    )
    large = (exact + rounding(value).long()).clamp(max=half - 1)
    return offset + torch.where(n < exact, n, large)


def bucket_rounded_up(relative_position, bidirectional, num_buckets, max_distance):
    """Inverting the bucket starts the wrong way round: the smallest b with
    r_b >= n instead of the largest b with r_b <= n."""
    return _bucket_rounded(
        relative_position, bidirectional, num_buckets, max_distance, torch.ceil
    )


def bucket_rounded_to_nearest(
    relative_position, bidirectional, num_buckets, max_distance
):
    return _bucket_rounded(
        relative_position, bidirectional, num_buckets, max_distance, torch.round
    )


CORRECT = {
    "shaw_relative_attention": [shaw_gather_scatter, shaw_one_hot,
                                shaw_loop_over_rows],
    "t5_relative_position_bucket": [bucket_hf, bucket_float64_log2,
                                    bucket_keyword_only_loop],
}

WRONG = {
    "shaw_relative_attention": [
        (shaw_queries_first, "LAST q_len of the k_len positions", True),
        (shaw_query_minus_key, "read at i - j", True),
        (shaw_position_unscaled, "added after the content term was divided", True),
        (shaw_no_value_term, "the output has no a^V term", True),
        (shaw_softmax_over_queries, "the softmax runs over the queries", True),
        (shaw_clip_off_by_one, "clipped at +-(max_distance - 1)", True),
        (shaw_output_only, "should return a pair (out, weights)", True),
        (shaw_half_precision, "too coarse", True),
        (shaw_bins_default_dtype, "float64 raised RuntimeError", True),
    ],
    "t5_relative_position_bucket": [
        (bucket_sign_flipped, "buckets of query - key", True),
        (bucket_no_halving, "each direction gets half of the buckets", True),
        (bucket_no_clamp, "must all share the last bucket", True),
        (bucket_causal_abs, "belongs to bucket 0", True),
        (bucket_log_of_max_distance, "wrong entries", True),
        (bucket_rounded_up, "the logarithmic bucket is rounded up", True),
        (bucket_rounded_to_nearest, "rounded to the nearest integer", True),
        (bucket_float, "should hold integers", True),
        (bucket_without_defaults, "(the default arguments) raised TypeError", True),
        (bucket_causal_default, "the defaults of the signature must be T5's", True),
        (bucket_abs_in_place, "changed its input relative_position in place", True),
    ],
}

CALLS_LIBRARY = {
    "shaw_relative_attention": shaw_calls_library,
    "t5_relative_position_bucket": bucket_calls_library,
}
