"""Bug zoo of exercise 6: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too.
"""

from __future__ import annotations

import math

import torch

import course_lib

# --- relative_position_index: correct


def index_clamp(q_len, k_len, max_distance):
    query = torch.arange(q_len)[:, None] + (k_len - q_len)
    key = torch.arange(k_len)[None, :]
    return (key - query).clamp(-max_distance, max_distance) + max_distance


def index_loop(q_len, k_len, max_distance):
    out = torch.zeros(q_len, k_len, dtype=torch.long)
    for i in range(q_len):
        for j in range(k_len):
            d = j - (i + k_len - q_len)
            out[i, j] = max(-max_distance, min(max_distance, d)) + max_distance
    return out


def index_clip_after_offset(q_len, k_len, max_distance):
    rel = torch.arange(k_len)[None, :] - torch.arange(k_len - q_len, k_len)[:, None]
    return torch.clip(rel + max_distance, 0, 2 * max_distance).to(torch.int32)


# --- relative_position_index: wrong


def index_query_minus_key(q_len, k_len, max_distance):
    query = torch.arange(q_len)[:, None] + (k_len - q_len)
    key = torch.arange(k_len)[None, :]
    return (query - key).clamp(-max_distance, max_distance) + max_distance


def index_not_clipped(q_len, k_len, max_distance):
    query = torch.arange(q_len)[:, None] + (k_len - q_len)
    return torch.arange(k_len)[None, :] - query + max_distance


def index_no_offset(q_len, k_len, max_distance):
    query = torch.arange(q_len)[:, None] + (k_len - q_len)
    return (torch.arange(k_len)[None, :] - query).clamp(-max_distance, max_distance)


def index_queries_first(q_len, k_len, max_distance):
    rel = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
    return rel.clamp(-max_distance, max_distance) + max_distance


def index_clip_off_by_one(q_len, k_len, max_distance):
    query = torch.arange(q_len)[:, None] + (k_len - q_len)
    rel = torch.arange(k_len)[None, :] - query
    return rel.clamp(-max_distance + 1, max_distance - 1) + max_distance


def index_float(q_len, k_len, max_distance):
    return index_clamp(q_len, k_len, max_distance).float()


def index_transposed(q_len, k_len, max_distance):
    return index_clamp(q_len, k_len, max_distance).T


def index_calls_library(q_len, k_len, max_distance):
    return course_lib.relative_position_index(q_len, k_len, max_distance)


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


def index_int8(q_len, k_len, max_distance):
    """Right indices while they are small; int8 wraps around beyond 127."""
    return index_clamp(q_len, k_len, max_distance).to(torch.int8)


CORRECT = {
    "relative_position_index": [index_clamp, index_loop, index_clip_after_offset],
    "t5_relative_position_bucket": [bucket_hf, bucket_float64_log2,
                                    bucket_keyword_only_loop],
}

WRONG = {
    "relative_position_index": [
        (index_query_minus_key, "convention is j - i", True),
        (index_not_clipped, "distances are not clipped", True),
        (index_no_offset, "the offset is missing", True),
        (index_queries_first, "LAST q_len of the k_len positions", True),
        (index_clip_off_by_one, "wrong entries", True),
        (index_float, "should hold integers", True),
        (index_transposed, "convention is j - i", True),  # square: j<->i,
        (index_int8, "should be a torch.long tensor, got torch.int8", True),
    ],
    "t5_relative_position_bucket": [
        (bucket_sign_flipped, "buckets of query - key", True),
        (bucket_no_halving, "each direction gets half of the buckets", True),
        (bucket_no_clamp, "clamp the logarithmic bucket", True),
        (bucket_causal_abs, "belongs to bucket 0", True),
        (bucket_log_of_max_distance, "wrong entries", True),
        (bucket_float, "should hold integers", True),
        (bucket_without_defaults, "(the default arguments) raised TypeError", True),
        (bucket_causal_default, "the defaults of the signature must be T5's", True),
        (bucket_abs_in_place, "changed its input relative_position in place", True),
    ],
}

CALLS_LIBRARY = {
    "relative_position_index": index_calls_library,
    "t5_relative_position_bucket": bucket_calls_library,
}
