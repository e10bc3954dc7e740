"""Issue 19 for chapters 5-8: the class edition of a chapter prints no graded answer.

Two checks on the chapter sources, with the open-edition-only blocks removed as the
class build removes them: no line of the exercises' solutions (longer than a trivial
one) appears in a chapter, and no code cell of a chapter uses the inline expressions
that made up ex05-ex08's answers before issue 19 (the slope exponents, the
queries-last distance matrix multiplied by the slopes, the T5 bucket arithmetic, the
pad/view/drop steps of the shift, DA's rescaled logits).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_lib.grading.editions.launch import strip_open_only

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = {
    "05-alibi": "ex05_alibi",
    "06-relative": "ex06_relative",
    "07-transformer-xl": "ex07_transformer_xl",
    "08-da-transformer": "ex08_da",
}
_TRIVIAL = re.compile(r"(return|[\w, ]+=)?\s*[\w.]+(\(.*\))?\s*(#.*)?")

# Inline forms of the graded computations (regular expressions on code cells).
_INLINE = {
    "05-alibi": [
        r"8\s*\*\s*\(?\s*2\s*\*\s*j\s*\+\s*1",  # extra slope exponents
        r"math\.floor\(math\.log2",  # closest power of two
        r"alibi_slopes\([^)]*\)\[:, None, None\]\s*\*\s*distance",
    ],
    "06-relative": [
        r"math\.log\(r\s*/\s*E\)",  # the logarithmic bucket, one value at a time
        r"\.clamp\(-K, K\)\s*\+\s*K",
    ],
    "07-transformer-xl": [
        r"F\.pad\(x,\s*\(1,\s*0\)\)",  # the shift's pad
        r"\.reshape\(k_len \+ 1, q_len\)",
        r"for j in range\(pos_i \+ 1\)",  # the four-term loop
    ],
    "08-da-transformer": [
        r"F\.relu\(q @ k\.transpose\(-2, -1\)\) \* R_hat",
        r"\(1 \+ v_h\.exp\(\)\)",
    ],
}


def _code_cells(chapter: str) -> list[str]:
    text = strip_open_only((ROOT / "book" / f"{chapter}.md").read_text())
    return re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S)


def _solution_lines(assignment: str) -> list[str]:
    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    lines = []
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if "### BEGIN SOLUTION" not in source:
            continue
        body = source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
        for line in body.splitlines():
            line = line.split("#")[0].strip()
            if len(line) > 25 and not _TRIVIAL.fullmatch(line):
                lines.append(line)
    return lines


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_no_solution_line_in_the_class_edition_of_the_chapter(chapter) -> None:
    lines = _solution_lines(CHAPTERS[chapter])
    assert len(lines) >= 3
    code = "\n".join(_code_cells(chapter))
    assert [line for line in lines if line in code] == []


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_no_inline_graded_computation_in_the_class_edition(chapter) -> None:
    cells = _code_cells(chapter)
    assert len(cells) >= 5
    found = [p for p in _INLINE[chapter] for cell in cells if re.search(p, cell)]
    assert found == []


def test_the_inline_patterns_match_the_computations_they_stand_for() -> None:
    """Each pattern catches the code it describes (the cells before issue 19)."""
    samples = {
        "05-alibi": [
            "extra = [8 * (2 * j + 1) / (2 * c) for j in range(n - c)]",
            "c = 2 ** int(math.floor(math.log2(n)))",
            "derived = (\n    -cl.alibi_slopes(n_heads)[:, None, None] * distance\n)",
        ],
        "06-relative": [
            "E + int(math.log(r / E) / math.log(D / E) * (B - E))",
            "rows = (j - i).clamp(-K, K) + K",
        ],
        "07-transformer-xl": [
            "padded = F.pad(x, (1, 0))",
            "viewed = padded.reshape(k_len + 1, q_len)",
            "        for j in range(pos_i + 1):  # keys up to the query",
        ],
        "08-da-transformer": [
            "logits = F.relu(q @ k.transpose(-2, -1)) * R_hat / math.sqrt(d)",
            "R_hat = (1 + v_h.exp()) / (1 + torch.exp(v_h - w_h * R))",
        ],
    }
    for chapter, patterns in _INLINE.items():
        for pattern in patterns:
            assert any(re.search(pattern, s) for s in samples[chapter]), pattern


def test_class_edition_leaves_the_graded_steps_to_the_exercises() -> None:
    """Issue 33: the steps that ex05, ex07 and ex08 ask for are not spelled out in the
    class edition of the chapters. Chapter 8's overflow-free form of R_hat (the
    softplus identity, the step ex08 asks for) is only in the open edition's solution
    block; chapter 7 no longer points the bidirectional shift at the causal proof or
    at XLNet's column; chapter 5 no longer rebuilds the slopes from the rule or prints
    the slopes of a hidden head count that is not a power of two."""
    ch8_open = (ROOT / "book" / "08-da-transformer.md").read_text()
    ch8_class = strip_open_only(ch8_open)
    assert "softplus" in ch8_open and "softplus" not in ch8_class.lower()
    assert "log f(x; v)" not in ch8_class and "\\log(1 + e^{v})" not in ch8_class
    ch7 = " ".join(
        strip_open_only((ROOT / "book" / "07-transformer-xl.md").read_text()).split()
    )
    assert "the proof above is the tool for it" not in ch7
    assert "differs from the one you need by exactly that column" not in ch7
    ch5_cells = "\n".join(_code_cells("05-alibi"))
    assert (
        "left_over" not in ch5_cells and "set(cl.alibi_slopes(2 * c)" not in ch5_cells
    )
    assert "cl.alibi_slopes(12).log2()).tolist()" not in ch5_cells
    assert "cl.alibi_slopes(16).log2().tolist()" not in ch5_cells


@pytest.mark.parametrize(
    ("chapter", "listing"),
    [
        ("05-alibi", ":pyobject: alibi_bias_bloom_style"),
        ("06-relative", ":pyobject: relative_position_index"),
    ],
)
def test_near_answers_are_listed_in_the_open_edition_only(
    chapter: str, listing: str
) -> None:
    """Issue 33, review G5 and G6: the Bloom-style ALiBi listing (the graded
    alibi_bias with j for -|i' - j|) and relative_position_index (the clipped rows
    Shaw's attention needs) stay in the open edition; the class edition names the
    function and its formula only."""
    text = (ROOT / "book" / f"{chapter}.md").read_text()
    assert listing in text
    assert listing not in strip_open_only(text)


def test_chapter_4_prints_no_permutation_of_exercise_4() -> None:
    """Review G6: chapter 4 no longer prints interleaved_to_half_permutation's
    output (an exercise-4 target); the prose states P as evens-then-odds."""
    text = (ROOT / "book" / "04-rope.md").read_text()
    assert 'print("P =", P.tolist())' not in text
    assert "evens-then-odds" in text
