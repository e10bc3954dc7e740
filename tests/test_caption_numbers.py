"""Issue 33, deliver 4: figures agree with their captions.

Every number a figure's caption states is computed from the plotted data at build
time: it reaches the caption through a glued value (``{glue:}``, ``{glue:text}``), or
it is one of the kinds a caption may write literally, listed here with the reason:

* a reference number: a chapter, section, equation, table, figure or appendix named
  with its word (``chapter 4``, ``section 3.2``, ``§3.5``, ``eq. 21``), or inside a
  role that refers to something (``{ref}``, ``{numref}``, ``{eq}``, ``{cite}``);
* a setting the figure's own code writes: a numeric literal of the code cell that
  draws the figure (for an ``{interactive-figure}``, of
  ``course_lib/viz/interactive.py``, where its data is computed). The caption then
  repeats an input, not a result, and a change of the code that drops the literal
  fails this test;
* a number inside a formula (``$\\ln 2/m$``, ``$2^{-i}$``): it belongs to the formula.
  A value a formula *states* is written after ``=``, ``\\approx``, ``<``, ``>``,
  ``\\le`` or ``\\ge`` and is checked like any other number;
* a constant that defines the method (:data:`METHOD_CONSTANTS`, each with its
  source), and a model's version (``Llama 3.1``).

Captions read: the ``mystnb.figure.caption`` of a code cell, the body of a MyST
``{figure}`` or ``{glue:figure}`` directive, and the body of an
``{interactive-figure}``, in ``book/*.md``. Numbers written as words ("one half")
are not read. A caption number that is none of these fails, with its file and line,
unless :data:`NOT_YET` lists it (with the page, as "not yet computed: <page>").
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
INTERACTIVE = ROOT / "course_lib" / "viz" / "interactive.py"

# Constants that define a method, not a result of the figure.
METHOD_CONSTANTS = {
    10000.0: "the base of the sinusoidal encoding and of RoPE (Vaswani et al. 2017, "
    "section 3.5; Su et al., RoFormer, eq. 15)",
    95.0: "the confidence level of the intervals (a choice of the analysis)",
    500000.0: "Llama 3's RoPE base, rope_theta = 500000 in Meta's released "
    "configurations (Grattafiori et al. 2024, The Llama 3 Herd of Models)",
}

# Caption numbers not yet computed from the plotted data, as (file, the three words
# before the number, the number as written); each entry's reason names its page.
# Remove an entry when its caption glues the number (a stale entry fails).
_NOT_YET_COMPUTED = [
]  # fmt: skip
NOT_YET: dict[tuple[str, str, str], str] = {
    key: f"not yet computed: {key[0]}" for key in _NOT_YET_COMPUTED
}

_REFERENCE_WORDS = (
    r"(?:chapters?|Chapters?|sections?|Sections?|§\s*|eqs?\.|Eqs?\.|equations?|"
    r"Equations?|tables?|Tables?|figures?|Figures?|appendix|Appendix|App\.|p\.|"
    r"pp\.|exercises?|Exercises?|ex|Llama)"
)
_STATES = re.compile(r"(?:=|\\approx|<|>|\\le|\\ge|\\leq|\\geq)\s*([^=,;$]*)")
# a number: digits, thousands grouped by 3 (10 000, 10\\,000, 10,000), a decimal part;
# not part of a word or a name (float32, ex05), an exponent or a subscript
_NUMBER = re.compile(
    r"(?<![\w.\\^_{])(?<!\^\{-)(?<!\^-)(?<!_\{)"
    r"(\d{1,3}(?:(?:,|\\,|\s)\d{3})+(?![\d])|\d+)(\.\d+)?(?![\w])"
)


@dataclass
class CaptionNumber:
    file: str
    line: int
    text: str  # the number as written
    value: float
    context: str

    before: str = ""  # the (up to) three words before it in the caption

    @property
    def key(self) -> tuple[str, str, str]:
        """How :data:`NOT_YET` names it: file, number, the words before it."""
        return (self.file, self.before, self.text)

    def describe(self) -> str:
        return f"{self.file}:{self.line}: {self.text!r} in '... {self.context} ...'"


@dataclass
class Caption:
    file: str
    line: int  # of the caption's first line
    text: str
    code: str  # the code that draws the figure


def captions(path: Path) -> list[Caption]:
    """Every figure caption of a MyST page, with the code that draws its figure."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    rel = f"book/{path.name}"
    out: list[Caption] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(
            r"^(`{3,}|:{3,})\{(code-cell|figure|glue:figure|"
            r"interactive-figure)\}(.*)$",
            line,
        )
        if not m:
            i += 1
            continue
        fence, kind = m.group(1), m.group(2)
        end = next((j for j in range(i + 1, len(lines)) if lines[j] == fence), None)
        if end is None:
            raise AssertionError(f"{rel}:{i + 1}: a {kind} block is never closed")
        body = lines[i + 1 : end]
        if kind == "code-cell":
            if body and body[0] == "---":
                close = body.index("---", 1)
                meta = yaml.safe_load("\n".join(body[1:close])) or {}
                caption = ((meta.get("mystnb") or {}).get("figure") or {}).get(
                    "caption"
                )
                if caption:
                    first = next(k for k, s in enumerate(body) if "caption:" in s)
                    out.append(
                        Caption(
                            rel,
                            i + 2 + first + 1,
                            caption,
                            "\n".join(body[close + 1 :]),
                        )
                    )
        else:
            k = 0
            while k < len(body) and re.match(r"^:\w[\w-]*:", body[k]):
                k += 1  # the directive's options
            code = INTERACTIVE.read_text() if kind == "interactive-figure" else ""
            out.append(Caption(rel, i + 2 + k, "\n".join(body[k:]), code))
        i = end + 1
    return out


def code_literals(code: str) -> set[float]:
    """The numeric literals of a code cell (IPython magics left out), negated too."""
    source = "\n".join(
        ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!"))
    )
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            found |= {float(node.value), -float(node.value)}
    return found


def _value(text: str) -> float:
    return float(re.sub(r"[,\\ ]", "", text))


def _masked(text: str) -> str:
    """``text`` with roles (glued values, references, citations) blanked out."""
    return re.sub(r"\{[\w:-]+\}`[^`]*`", lambda m: " " * len(m.group(0)), text)


def literal_numbers(caption: Caption) -> list[CaptionNumber]:
    """The numbers a caption writes that are none of the allowed kinds."""
    text = _masked(caption.text)
    literals = code_literals(caption.code)
    # math spans, and the parts of them that state a value (after =, <, ...)
    math = [(m.start(), m.end()) for m in re.finditer(r"\$[^$]+\$", text)]
    stated = [
        (s + m.start(1), s + m.end(1))
        for s, e in math
        for m in _STATES.finditer(text[s:e])
    ]
    out = []
    for m in _NUMBER.finditer(text):
        written = m.group(0)
        value = _value(written)
        start = m.start(1)
        if re.match(r"/[A-Za-z\\]", text[m.end() : m.end() + 2]):
            continue  # a formula in words: 1/classes
        in_math = any(s <= start < e for s, e in math)
        if in_math and not any(s <= start < e for s, e in stated):
            continue  # part of a formula
        before = text[max(0, start - 12) : start]
        if re.search(
            _REFERENCE_WORDS + r"\s*(?:\d+[.,]?\s*(?:and|to|-|–)\s*)?$", before
        ):
            continue  # a reference number
        if value in literals or value in METHOD_CONSTANTS:
            continue
        offset = caption.text[:start].count("\n")
        context = " ".join(text[max(0, start - 30) : m.end() + 30].split())
        before = " ".join(text[:start].split()[-3:])
        out.append(
            CaptionNumber(
                caption.file, caption.line + offset, written, value, context, before
            )
        )
    return out


PAGES = sorted(BOOK.glob("*.md"))


def _all_failures() -> list[CaptionNumber]:
    return [n for page in PAGES for c in captions(page) for n in literal_numbers(c)]


# --- the reader itself ----------------------------------------------------------------

SAMPLE = """\
# A page

```{code-cell} ipython3
---
mystnb:
  figure:
    caption: |
      Recall at {glue:text}`recall:.2f` for 8 heads over 64 keys (chapter 5,
      eq. 3, {cite}`press2022alibi`); the curve crosses one half at 44 tokens
      ($\\ln 2/m$ with $m = 2^{-6}$ gives $d \\approx 44.4$), base 10 000.
    name: fig-sample
---
plot(heads=8, keys=64)
```

```{interactive-figure} yarn
Sliders at $L = 2048$ and 9973 pairs.
```
"""


def test_the_reader_finds_literal_numbers_and_allows_the_listed_kinds(
    tmp_path: Path,
) -> None:
    page = tmp_path / "99-sample.md"
    page.write_text(SAMPLE)
    found = captions(page)
    assert [c.line for c in found] == [8, 17]
    failures = [(n.text, n.line) for c in found for n in literal_numbers(c)]
    # 8 and 64 are the cell's settings, 5 and 3 references, 10 000 the base, ln 2 and
    # 2^{-6} formulas; 44 (twice) and 44.4 are stated values not glued; in the
    # interactive figure 2048 is a constant of its data module, 9973 is not
    assert failures == [("44", 9), ("2", 10), ("44.4", 10), ("9973", 17)]


def test_a_glued_caption_number_passes() -> None:
    glued = Caption("x.md", 1, "crosses at {glue:text}`half:.0f` tokens", "")
    assert literal_numbers(glued) == []
    literal = Caption("x.md", 1, "crosses at 44 tokens", "")
    assert [n.value for n in literal_numbers(literal)] == [44.0]


def test_every_page_with_figures_has_captions_read() -> None:
    read = {c.file for page in PAGES for c in captions(page)}
    assert {
        "book/05-alibi.md",
        "book/11-long-context.md",
        "book/12-lm-extrapolation.md",
    } <= read
    assert sum(len(captions(p)) for p in PAGES) >= 30


# --- the book -------------------------------------------------------------------------


def test_not_yet_lists_only_numbers_that_still_fail() -> None:
    failing = {n.key for n in _all_failures()}
    stale = [key for key in NOT_YET if key not in failing]
    assert not stale, f"NOT_YET entries no longer needed (remove them): {stale}"
    for reason in NOT_YET.values():
        assert reason.startswith("not yet computed: book/"), reason


@pytest.mark.parametrize("page", [p.name for p in PAGES if captions(p)])
def test_caption_numbers_are_glued(page: str) -> None:
    failures = [
        n
        for c in captions(BOOK / page)
        for n in literal_numbers(c)
        if n.key not in NOT_YET
    ]
    assert not failures, "caption numbers not computed from the plotted data:\n" + (
        "\n".join(n.describe() for n in failures)
    )
