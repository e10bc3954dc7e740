"""Review of book/class-mistakes.md (the instructors' page on the mistakes table): the
claims the page makes about ALiBi, the ex05 graders and the table, each checked here.

- Slopes: the paper's text (§3) gives one rule for every head count, the geometric
  sequence that starts at 2^(-8/n) with that same ratio; the authors' code
  (``get_slopes``) keeps it for powers of two only and builds other head counts from the
  slopes of the largest power of two below and every other slope of twice that power.
  The two agree on powers of two and differ on 3, 5, 6, 7, 12, ... heads; the course
  follows the code. With the code's rule the largest slope is not the first head's
  when the head count is not a power of two (so the graders' ``reversed-heads``
  sentences name the rule's order, not the largest slope; they find the mistake at 8
  and 4 heads).
- The Bloom form +m_h j and ALiBi's -m_h |i - j|: never the same matrix (they agree only
  at the first query and key); under a causal mask the visible entries of row i differ
  by m_h i, so the softmax weights agree with each other and with a loop written from
  the paper's equation; without the mask the difference varies along every row but the
  last, the weights differ there, and with equal scores every query's largest weight is
  on the last key.
- The ex05 graders: the hidden tests start with the public cases (a wrong answer fails
  both cells at the same call, for the same reason); the public check already fails
  power-of-two-only slopes at 6 heads and a distance clipped at 16 at one head over 20
  positions; a right bias on wrong slopes is named after the slopes, or not named.
- The worked table: "of all" is students / graded, "of those who lost points" is
  students / those who failed a cell of the function, and in this class each function's
  lines add up to 100 % to rounding.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from zoo.ex05_alibi import slopes_from_zero, slopes_power_of_two_only, slopes_reversed

from course_lib.alibi import alibi_bias, alibi_slopes
from course_lib.checks import ex05_alibi as graders
from course_lib.checks._errors import CheckFailed
from course_lib.conventions import alibi_bias_bloom_style

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "book" / "class-mistakes.md").read_text()
# float32's unit roundoff: course_lib's slopes and biases are float32.
U32 = 2.0**-24

POWERS = (1, 2, 4, 8, 16, 32, 64, 128)
OTHERS = (3, 5, 6, 7, 12, 20, 24, 40, 112)


# --------------------------------------------------------------------------------------
# two slope rules, written here from their descriptions


def paper_text_slopes(n: int) -> list[float]:
    """§3 of the paper: the geometric sequence that starts at 2^(-8/n) and uses that
    same value as its ratio (float64)."""
    r = 2.0 ** (-8.0 / n)
    out, m = [], 1.0
    for _ in range(n):
        m *= r
        out.append(m)
    return out


def code_rule_slopes(n: int) -> list[float]:
    """The rule of the authors' code, from its description: the paper's slopes for the
    largest power of two c <= n, then the first n - c of every other slope (the 1st,
    3rd, 5th, ...) of the paper's slopes for 2c heads."""
    c = 1
    while 2 * c <= n:
        c *= 2
    return paper_text_slopes(c) + paper_text_slopes(2 * c)[0::2][: n - c]


def _largest_power_of_two_below(n: int) -> int:
    return max(p for p in POWERS if p <= n)


@pytest.mark.parametrize("n", POWERS)
def test_paper_text_and_code_rule_agree_on_powers_of_two(n: int) -> None:
    text = torch.tensor(paper_text_slopes(n), dtype=torch.float64)
    assert code_rule_slopes(n) == paper_text_slopes(n)
    # course_lib rounds each slope to float32 once: relative error <= u32 (plus the
    # float64 product's n roundings, far below it)
    assert torch.allclose(alibi_slopes(n).double(), text, rtol=2 * U32, atol=0)
    assert int(alibi_slopes(n).argmax()) == 0  # the first head has the largest slope


@pytest.mark.parametrize("n", OTHERS)
def test_paper_text_and_code_rule_differ_on_other_head_counts(n: int) -> None:
    course = alibi_slopes(n).double()
    code = torch.tensor(code_rule_slopes(n), dtype=torch.float64)
    text = torch.tensor(paper_text_slopes(n), dtype=torch.float64)
    assert torch.allclose(course, code, rtol=2 * U32, atol=0)  # the course: the code
    # in -log2 units the two rules are far apart: the code's exponents are multiples of
    # 4/c, the paper text's of 8/n, and the text's last slope is always 2^-8
    gap = (course.log2() - text.log2()).abs().max().item()
    assert gap > 0.25, (n, gap)
    assert text[-1].item() == pytest.approx(2.0**-8, rel=1e-12)
    assert course[-1].item() > 2.0**-8
    # the largest slope is the first extra head's (head c, counted from 0), not head 0
    c = _largest_power_of_two_below(n)
    assert int(course.argmax()) == c
    assert course[c].item() == pytest.approx(2.0 ** (-4.0 / c), rel=2 * U32)


def test_six_and_twelve_heads_exponents() -> None:
    """The exponents -log2 m_h, as the graders' sentence for 6 heads states them."""
    tol = 4 * U32 / math.log(2)  # log2 of a float32 rounding of 2^-e
    six = (-alibi_slopes(6).double().log2()).tolist()
    assert six == pytest.approx([2, 4, 6, 8, 1, 3], abs=tol)
    assert [-math.log2(m) for m in paper_text_slopes(6)] == pytest.approx(
        [4 * h / 3 for h in range(1, 7)], abs=1e-12
    )
    twelve = (-alibi_slopes(12).double().log2()).tolist()
    assert twelve == pytest.approx(
        [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5], abs=tol
    )


# --------------------------------------------------------------------------------------
# the Bloom form against ALiBi's bias


def _pair(n: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m = alibi_slopes(n).double()[:, None, None]  # (H, 1, 1)
    return (
        alibi_bias_bloom_style(n, length).double(),
        alibi_bias(n, length).double(),
        m,
    )


@pytest.mark.parametrize("n", (8, 6, 12))
def test_bloom_minus_alibi_is_m_i_on_visible_keys_and_varies_after(n: int) -> None:
    length = 9
    bloom, sym, m = _pair(n, length)
    i = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    j = torch.arange(length, dtype=torch.float64)[None, :]  # (1, L)
    diff = bloom - sym  # (H, L, L)
    # each entry is one float32 product m * d (<= 1 ulp); the differences are
    # compared with float64 products of the same float32 slopes
    atol = 4 * length * U32
    visible = (j <= i).expand(length, length)
    expected_visible = (m * i).expand(n, length, length)
    assert torch.allclose(
        diff[:, visible], expected_visible[:, visible], atol=atol, rtol=0
    )
    after = ~visible
    expected_after = (m * (2 * j - i)).expand(n, length, length)
    assert torch.allclose(diff[:, after], expected_after[:, after], atol=atol, rtol=0)
    # after the query the difference is not one number per row: it grows by 2 m per key
    for row in range(length - 1):
        spread = diff[:, row, row:].amax(-1) - diff[:, row, row:].amin(-1)  # (H,)
        assert torch.all(spread > 2 * m[:, 0, 0] - atol)


@pytest.mark.parametrize("n", (8, 6))
def test_bloom_and_alibi_agree_only_at_the_first_query_and_key(n: int) -> None:
    bloom, sym, _ = _pair(n, 7)
    same = bloom == sym  # the signs differ elsewhere: m*j >= 0 >= -m|i - j|
    assert same[:, 0, 0].all()
    same[:, 0, 0] = False
    assert not same.any()
    assert (bloom >= 0).all() and (sym <= 0).all()


def _paper_loop(scores: torch.Tensor, slopes: list[float]) -> torch.Tensor:
    """softmax(q_i K^T + m [-(i-1), ..., -1, 0]) over the first i keys (the paper's
    equation, positions from 1), one query and one head at a time; 0 for keys after
    the query."""
    heads, length, _ = scores.shape
    out = torch.zeros(heads, length, length, dtype=torch.float64)
    for h in range(heads):
        for i in range(1, length + 1):
            logits = [
                scores[h, i - 1, j - 1].item() + slopes[h] * (-(i - j))
                for j in range(1, i + 1)
            ]
            top = max(logits)
            e = [math.exp(x - top) for x in logits]
            total = sum(e)
            for j in range(1, i + 1):
                out[h, i - 1, j - 1] = e[j - 1] / total
    return out


@pytest.mark.parametrize("n", (8, 6, 12))
def test_under_a_causal_mask_both_forms_give_the_papers_weights(n: int) -> None:
    length = 10
    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(n, length, length, generator=gen, dtype=torch.float64)
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    bloom, _, _ = _pair(n, length)
    w_bloom = torch.softmax(scores + bloom.masked_fill(future, -math.inf), dim=-1)
    w_alibi = torch.softmax(
        scores + alibi_bias(n, length, causal=True).double(), dim=-1
    )
    w_paper = _paper_loop(scores, code_rule_slopes(n))
    # the float32 slopes move a logit by at most m * L * u32 <= L * u32; a softmax
    # weight moves by at most twice the largest logit change (first order)
    atol = 4 * length * U32 + 1e-12
    assert torch.allclose(w_alibi, w_paper, atol=atol, rtol=0)
    assert torch.allclose(w_bloom, w_paper, atol=atol, rtol=0)


@pytest.mark.parametrize("n", (8, 6))
def test_without_a_mask_the_forms_differ_in_every_row_but_the_last(n: int) -> None:
    length = 10
    gen = torch.Generator().manual_seed(6)
    scores = torch.randn(n, length, length, generator=gen, dtype=torch.float64)
    bloom, sym, _ = _pair(n, length)
    gap = (torch.softmax(scores + bloom, -1) - torch.softmax(scores + sym, -1)).abs()
    gap = gap.amax(dim=(0, 2))  # (L,): the largest difference in each query row
    tol = 4 * length * U32
    assert gap[-1] < tol  # the last query has no key after it
    assert torch.all(gap[:-1] > 100 * tol), gap
    # with equal scores, +m j puts every query's largest weight on the last key;
    # ALiBi puts it on the query's own position
    flat = torch.zeros(n, length, length, dtype=torch.float64)
    top_bloom = torch.softmax(flat + bloom, -1).argmax(-1)  # (H, L)
    top_sym = torch.softmax(flat + sym, -1).argmax(-1)
    assert torch.equal(top_bloom, torch.full((n, length), length - 1))
    assert torch.equal(top_sym, torch.arange(length).expand(n, length))


# --------------------------------------------------------------------------------------
# the ex05 graders, as the page describes them


def slopes_right(n_heads):
    return torch.tensor(code_rule_slopes(n_heads), dtype=torch.float32)


def _bias_on(slopes):
    """A right bias built on the given slopes (as a student's bias calls their own
    alibi_slopes)."""

    def bias(n_heads, seq_len):
        pos = torch.arange(seq_len)
        distance = (pos[:, None] - pos[None, :]).abs()  # (L, L)
        return -slopes(n_heads)[:, None, None] * distance  # (H, L, L)

    return bias


def bias_clipped_at_16(n_heads, seq_len):
    pos = torch.arange(seq_len)
    distance = (pos[:, None] - pos[None, :]).abs().clamp(max=16)
    return -slopes_right(n_heads)[:, None, None] * distance


def bias_bloom(n_heads, seq_len):
    j = torch.arange(seq_len, dtype=torch.float32)
    return (slopes_right(n_heads)[:, None, None] * j).expand(-1, seq_len, -1)


def _failure(check, fn) -> CheckFailed:
    with pytest.raises(CheckFailed) as info:
        check(fn)
    return info.value


def _recording(fn):
    calls: list[tuple] = []

    def wrapped(*args):
        calls.append(args)
        return fn(*args)

    return wrapped, calls


def test_the_hidden_tests_start_with_the_public_cases() -> None:
    for check, grade, right in (
        (graders.check_alibi_slopes, graders.grade_alibi_slopes, slopes_right),
        (graders.check_alibi_bias, graders.grade_alibi_bias, _bias_on(slopes_right)),
    ):
        public, public_calls = _recording(right)
        check(public)
        hidden, hidden_calls = _recording(right)
        grade(hidden)
        assert len(hidden_calls) > len(public_calls) > 0
        assert hidden_calls[: len(public_calls)] == public_calls


@pytest.mark.parametrize(
    ("check", "grade", "fn"),
    [
        (
            graders.check_alibi_slopes,
            graders.grade_alibi_slopes,
            slopes_power_of_two_only,
        ),
        (graders.check_alibi_slopes, graders.grade_alibi_slopes, slopes_reversed),
        (graders.check_alibi_bias, graders.grade_alibi_bias, bias_bloom),
        (graders.check_alibi_bias, graders.grade_alibi_bias, bias_clipped_at_16),
        (
            graders.check_alibi_bias,
            graders.grade_alibi_bias,
            _bias_on(slopes_from_zero),
        ),
    ],
)
def test_a_wrong_answer_fails_both_cells_for_the_same_reason(check, grade, fn) -> None:
    public, hidden = _failure(check, fn), _failure(grade, fn)
    assert (public.mistake, public.cause) == (hidden.mistake, hidden.cause)
    assert str(public) == str(hidden)


def test_the_public_check_fails_power_of_two_only_slopes_at_six_heads() -> None:
    exc = _failure(graders.check_alibi_slopes, slopes_power_of_two_only)
    assert exc.mistake == "power-of-two-only"
    assert "alibi_slopes(6)" in str(exc)


def test_reversed_heads_is_found_at_a_power_of_two() -> None:
    slopes = _failure(graders.check_alibi_slopes, slopes_reversed)
    assert slopes.mistake == "reversed-heads" and "alibi_slopes(8)" in str(slopes)
    bias = _failure(graders.check_alibi_bias, _bias_on(slopes_reversed))
    assert bias.mistake == "reversed-heads" and "alibi_bias(4, 5)" in str(bias)


def test_a_right_bias_on_wrong_slopes_is_named_after_the_slopes_or_not_at_all() -> None:
    two = _failure(graders.check_alibi_bias, _bias_on(slopes_power_of_two_only))
    assert two.mistake == "power-of-two-slopes" and "alibi_bias(6, 4)" in str(two)
    zero = _failure(graders.check_alibi_bias, _bias_on(slopes_from_zero))
    assert zero.mistake is None and zero.cause is None  # unrecognised wrong answer
    assert "alibi_bias(4, 5)" in str(zero)


def test_a_distance_clipped_at_16_is_right_up_to_17_tokens_only() -> None:
    for length in range(1, 18):
        assert torch.allclose(
            bias_clipped_at_16(3, length).double(),
            alibi_bias(3, length).double(),
            atol=0,
            rtol=2 * U32,
        )
    assert not torch.allclose(bias_clipped_at_16(3, 18), alibi_bias(3, 18))
    exc = _failure(graders.check_alibi_bias, bias_clipped_at_16)
    assert exc.mistake is None and exc.cause is None
    assert "alibi_bias(1, 20)" in str(exc)


def test_the_bloom_form_is_named_in_the_first_public_case() -> None:
    exc = _failure(graders.check_alibi_bias, bias_bloom)
    assert exc.mistake == "bloom-form" and "alibi_bias(4, 5)" in str(exc)


# --------------------------------------------------------------------------------------
# the worked table


def _table() -> tuple[int, list[tuple[str, str, int, float, float]]]:
    block = TEXT.split("<!-- mistakes table: tests/test_class_mistakes.py -->", 1)[1]
    block = block.split("```text\n", 1)[1].split("```", 1)[0]
    graded = int(re.search(r"\((\d+) graded submissions", block).group(1))
    rows = []
    for line in block.splitlines():
        m = re.fullmatch(r"  (\w+)\s+(.+?)\s+(\d+)\s+([\d.]+)%\s+([\d.]+)%", line)
        if m:
            rows.append((m[1], m[2], int(m[3]), float(m[4]), float(m[5])))
    return graded, rows


def test_the_tables_columns_are_what_the_page_says() -> None:
    graded, rows = _table()
    assert graded > 0 and len(rows) >= 10
    functions = list(dict.fromkeys(r[0] for r in rows))
    assert functions == ["alibi_slopes", "alibi_bias"]  # the notebook's order
    half = 0.05 + 1e-9  # the table rounds to 0.1 %
    for function in functions:
        lines = [r for r in rows if r[0] == function]
        counts = [r[2] for r in lines]
        assert counts == sorted(counts, reverse=True)  # most common first
        # each student has one reason per function here: the lines' students are
        # those who lost points, and the last column adds up to 100 % to rounding
        lost = sum(counts)
        for _, _, students, of_all, of_lost in lines:
            assert abs(100 * students / graded - of_all) <= half
            assert abs(100 * students / lost - of_lost) <= half
        assert abs(sum(r[4] for r in lines) - 100) <= half * len(lines)
        # at equal counts, the named mistakes first, then alphabetical
        for a, b in zip(lines, lines[1:], strict=False):
            if a[2] == b[2]:
                assert (a[1].startswith("("), a[1]) <= (b[1].startswith("("), b[1])


# --------------------------------------------------------------------------------------
# the page's text


def test_the_page_quotes_the_papers_rule_and_says_the_course_follows_the_code() -> None:
    prose = re.sub(r"\s+", " ", TEXT)
    assert (
        '"for $n$ heads, our set of slopes is the geometric sequence that starts at '
        '$2^{-8/n}$ and uses that same value as its ratio" (§3)' in prose
    )
    assert "its models have 8 heads, §2.1, or 16, §4.2" in prose
    assert "the course, its exercise and its graders follow the code" in prose
    assert "these students did not misread the paper" in prose
    assert "the public check already fails their slopes at 6 heads" in prose


def test_the_page_states_the_bloom_equivalence_precisely() -> None:
    prose = re.sub(r"\s+", " ", TEXT)
    assert "It is not the same matrix as `-m_h·|i-j|`" in prose
    assert (
        "exceeds ALiBi's by `m_h·i`, the same number for every key of the row" in prose
    )
    assert "the weights differ in every query row but the last" in prose
    assert "every query gives its largest weight to the last key" in prose


def test_the_page_has_no_number_the_class_contradicts() -> None:
    # the worked class has most students losing the bias's points, not a third
    assert "a third of the class" not in TEXT
    prose = re.sub(r"\s+", " ", TEXT)
    assert "each function's last column adds up to 100 % (to rounding)" in prose
    assert "right only while no distance exceeds 16 (up to 17 tokens)" in prose
