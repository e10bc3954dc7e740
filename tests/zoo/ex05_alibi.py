"""Bug zoo of exercise 5: correct variants the graders must accept and wrong
implementations they must reject, with the message fragment each rejection shows.

``WRONG[name]`` lists ``(function, fragment, public)``: ``public`` says whether the
public check (not only the hidden grader) must reject it too. ``CALLS_LIBRARY[name]``
lists functions that only call the reference, through ``course_lib.<name>`` and
through a module-level ``from course_lib import <name>``.
"""

from __future__ import annotations

import math

import torch

import course_lib
from course_lib import alibi_bias, alibi_slopes

# --- alibi_slopes: correct


def _paper_slopes(n: int) -> list[float]:
    """The authors' get_slopes (ofirpress/attention_with_linear_biases), as Python."""

    def power_of_2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def slopes_paper_recursion(n_heads):
    return torch.tensor(_paper_slopes(n_heads))


def slopes_vectorised(n_heads):
    c = 2 ** math.floor(math.log2(n_heads))
    first = 2.0 ** (-8.0 * torch.arange(1, c + 1) / c)
    extra = 2.0 ** (-8.0 * (2 * torch.arange(n_heads - c) + 1) / (2 * c))
    return torch.cat([first, extra])


def slopes_float64_loop(n_heads):
    c = 1
    while 2 * c <= n_heads:
        c *= 2
    out = [2 ** (-8 * h / c) for h in range(1, c + 1)]
    out += [2 ** (-8 * (2 * j + 1) / (2 * c)) for j in range(n_heads - c)]
    return torch.tensor(out, dtype=torch.float64)


# --- alibi_slopes: wrong


def slopes_power_of_two_only(n_heads):
    return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)


def slopes_from_zero(n_heads):
    return 2.0 ** (-8.0 * torch.arange(n_heads) / n_heads)


def slopes_reversed(n_heads):
    return slopes_vectorised(n_heads).flip(0)


def slopes_sorted(n_heads):
    return slopes_vectorised(n_heads).sort(descending=True).values


def slopes_rounded_up(n_heads):
    c = 2 ** math.ceil(math.log2(n_heads))
    return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / c)


def slopes_second_of_each_pair(n_heads):
    c = 2 ** math.floor(math.log2(n_heads))
    doubled = 2.0 ** (-8.0 * torch.arange(1, 2 * c + 1) / (2 * c))
    return torch.cat([slopes_vectorised(c), doubled[1::2][: n_heads - c]])


# --- alibi_bias: correct


def bias_broadcast(n_heads, seq_len):
    pos = torch.arange(seq_len)
    return -slopes_vectorised(n_heads)[:, None, None] * (pos[:, None] - pos).abs()


def bias_loops(n_heads, seq_len):
    slopes = _paper_slopes(n_heads)
    return torch.tensor([[[-m * abs(i - j) for j in range(seq_len)]
                          for i in range(seq_len)] for m in slopes])


def bias_float64_cdist(n_heads, seq_len):
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    distance = torch.cdist(pos, pos, p=1)  # (seq, seq) = |i - j|
    return -slopes_float64_loop(n_heads)[:, None, None] * distance


# --- alibi_bias: wrong


def bias_positive(n_heads, seq_len):
    return -bias_broadcast(n_heads, seq_len)


def bias_bloom(n_heads, seq_len):
    """+m * j: Bloom's (and the authors') causal form, broadcast over queries."""
    j = torch.arange(seq_len).float()
    return (slopes_vectorised(n_heads)[:, None, None] * j).expand(-1, seq_len, -1)


def bias_no_abs(n_heads, seq_len):
    pos = torch.arange(seq_len)
    return -slopes_vectorised(n_heads)[:, None, None] * (pos[:, None] - pos)


def bias_causal(n_heads, seq_len):
    future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
    return bias_broadcast(n_heads, seq_len).masked_fill(future, float("-inf"))


def bias_power_of_two_slopes(n_heads, seq_len):
    pos = torch.arange(seq_len)
    slopes = slopes_power_of_two_only(n_heads)
    return -slopes[:, None, None] * (pos[:, None] - pos).abs()


def bias_heads_reversed(n_heads, seq_len):
    return bias_broadcast(n_heads, seq_len).flip(0)


def bias_unscaled(n_heads, seq_len):
    pos = torch.arange(seq_len)
    return -(pos[:, None] - pos).abs().float().expand(n_heads, -1, -1)


def bias_heads_last(n_heads, seq_len):
    return bias_broadcast(n_heads, seq_len).permute(1, 2, 0)


# --- calls the library


def slopes_calls_library(n_heads):
    return course_lib.alibi_slopes(n_heads)


def slopes_imported_from_library(n_heads):
    return alibi_slopes(n_heads)


def bias_calls_library(n_heads, seq_len):
    return course_lib.alibi_bias(n_heads, seq_len)


def bias_imported_from_library(n_heads, seq_len):
    return alibi_bias(n_heads, seq_len)


# --- found by the red team: a bug the first graders missed


def bias_clipped_distance(n_heads, seq_len):
    """|i - j| clipped at 16 (as for a learned table): right on short sequences only,
    where ALiBi is meant to extrapolate."""
    pos = torch.arange(seq_len)
    distance = (pos[:, None] - pos[None, :]).abs().clamp(max=16)  # (seq, seq)
    return -slopes_vectorised(n_heads)[:, None, None] * distance


CORRECT = {
    "alibi_slopes": [slopes_paper_recursion, slopes_vectorised, slopes_float64_loop],
    "alibi_bias": [bias_broadcast, bias_loops, bias_float64_cdist],
}

WRONG = {
    "alibi_slopes": [
        (slopes_power_of_two_only, "matches only when the number of heads is a "
                                   "power of two", True),
        (slopes_from_zero, "the slopes start at 2^0", True),
        (slopes_reversed, "reversed order", True),
        (slopes_sorted, "the right slopes, but sorted", True),
        (slopes_rounded_up, "rounding the head count up", True),
        (slopes_second_of_each_pair, "starting with the SECOND one", True),
    ],
    "alibi_bias": [
        (bias_positive, "the bias is positive", True),
        (bias_bloom, "Bloom form +m_h * j", True),
        (bias_no_abs, "without the absolute value", True),
        (bias_causal, "a causal mask (-inf above the diagonal)", True),
        (bias_power_of_two_slopes, "matches only for a power-of-two number of heads",
         True),
        (bias_heads_reversed, "reversed order", True),
        (bias_unscaled, "not multiplied by the head's slope", True),
        (bias_heads_last, "the axes are (seq, seq, heads)", True),
        (bias_clipped_distance, "alibi_bias(1, 20) has", True),
    ],
}

CALLS_LIBRARY = {
    "alibi_slopes": [slopes_calls_library, slopes_imported_from_library],
    "alibi_bias": [bias_calls_library, bias_imported_from_library],
}
