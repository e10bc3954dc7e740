"""``course similarity``: which students' answers are far more alike than the class's.

For each graded function of an assignment (the ``grade_<name>`` graders of
``course_lib/checks/<assignment>.py``, read from its ``__all__`` at run time), every
student's answer is compared with every other student's, with the open edition's
solution (``solutions/``) and with the bug zoo's published code (``tests/zoo``).

1. **The answer.** The code cells whose nbgrader ``grade_id`` is
   ``<function>__answer`` (all of them, when a student pasted the cell twice), from
   ``autograded/`` (the notebook as graded, repaired) or else ``submitted/``; when
   no cell carries the metadata, the code cell that defines the function.
2. **What the release gives** is removed: docstrings, the ``raise
   NotImplementedError()`` of the stub, and every k-gram of the released answer
   cell (the signature), as copydetect removes "boilerplate" fingerprints.
3. **What copying changes cheaply** is normalised on the syntax tree: comments,
   blank lines and layout disappear (the code is printed again by ``ast.unparse``);
   the names the cell binds (arguments, variables, helper functions) become
   ``V0, V1, ...`` in order of first use, while library names (``torch.arange``,
   ``math.log2``), attributes and keywords stay; string literals become ``S``; and in
   every block, statements that do not depend on each other (neither writes a name
   the other reads or writes, method calls counting as writes of their object) are
   put in one canonical order (a topological sort that takes, among the statements
   ready, the one whose text with every bound name blanked sorts first), before the
   names are numbered. ``return``, ``raise``, ``break``, ``continue``, ``assert``,
   ``global`` and ``nonlocal`` are fixed points nothing moves across.
4. **Fingerprints** by winnowing (Schleimer, Wilkerson and Aiken, "Winnowing: local
   algorithms for document fingerprinting", SIGMOD 2003, the method of MOSS), with
   ``copydetect.utils.winnow`` (copydetect 0.5.0, MIT licence) over k-grams of
   ``K`` normalised tokens in windows of ``WINDOW``: every match of at least
   ``K + WINDOW - 1`` tokens shares a fingerprint. The k-gram hashes are computed
   here (BLAKE2 of each token, a polynomial over the k-gram), not with copydetect's
   ``hash()``, which Python salts per process: the scores are the same every run.
5. **Similarity** of two answers: the shared fingerprints over the fingerprints of
   the smaller answer (what share of the shorter answer is found in the other, the
   larger of copydetect's two percentages). All pairs at once: a 0/1 matrix of
   students by fingerprints times its transpose.
6. **Far above the class** (:func:`threshold`): a pair is flagged when its
   similarity is at least ``FLOOR`` and ``median + Z * 1.4826 * MAD`` of the
   class's own pair similarities for that function (the robust z-score of Iglewicz
   and Hoaglin, "How to detect and handle outliers", 1993, whose cut-off is 3.5;
   the median moves little while copies are a minority of the pairs). Where the
   median pair shares less than ``FLOOR``, a pair sharing ``NEAR`` (90 %) is
   flagged whatever the spread (copies widen the MAD too). The same cut-off marks
   a student's match with the public solution or a zoo entry.
   Answers with fewer than ``MIN_FINGERPRINTS`` fingerprints left are too short to
   tell apart and are listed, not compared.

The report (``reports/<assignment>/similarity/``): ``index.html``, ``pairs.csv`` (every
flagged pair and every flagged match with a reference) and one side-by-side page per
flagged pair, the matched lines marked. The pages are built from escaped text
(``html.escape``) under a Content-Security-Policy that allows no script: a
student's ``<script>`` shows as text. A similarity is evidence for a person to
look at, never a grade: nothing here touches the gradebook.

copydetect's own ``CopyDetector`` is not used: it compares files one pair at a time
in Python (1,000 students make 499,500 pairs per function), renames every name,
``torch`` and ``arange`` included, to ``V``, reorders nothing and, through ``hash()``,
gives other scores in another process.
"""

from __future__ import annotations

import ast
import copy
import csv
import hashlib
import html
import json
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import CourseError

__all__ = [
    "FLOOR",
    "K",
    "MIN_FINGERPRINTS",
    "NEAR",
    "WINDOW",
    "Z",
    "Answer",
    "FunctionResult",
    "Normalised",
    "SimilarityReport",
    "compare_function",
    "format_report",
    "graded_functions",
    "normalise",
    "read_answers",
    "similarity",
    "threshold",
    "write_report",
]

K = 5
"""Tokens per k-gram: a shared run shorter than this is noise (``x = V0 [ :``)."""
WINDOW = 4
"""Winnowing window: every shared run of ``K + WINDOW - 1`` = 8 tokens is found."""
Z = 3.5
"""Robust z-score above which a pair stands out (Iglewicz and Hoaglin's cut-off)."""
FLOOR = 0.5
"""A pair is flagged only when at least half of the smaller answer is shared,
whatever the class: in a class whose answers share nothing (median and MAD 0),
a few common idioms must not stand out."""
NEAR = 0.9
"""In a class whose median pair shares less than ``FLOOR``, a pair sharing this much
is far above it whatever the spread: many copies (or a class of a dozen) widen the
MAD until median + 3.5 sigma passes 100 %."""
MIN_FINGERPRINTS = 4
"""Answers with fewer fingerprints (after the release's are removed) are too short
to compare: a one-line answer matches every other one-line answer."""
MAX_PAGES = 200
"""Side-by-side pages per function (the most similar flagged pairs first)."""
_MASK = (1 << 52) - 1  # copydetect's winnow keeps hashes in float64: 52 bits exact
_P = np.uint64(1_000_003)
_TOKEN = re.compile(
    r"[A-Za-z_]\w*|\d[\w.]*(?:[eE][+-]?\d+)?|\.\d+\w*"
    r"|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\""
    r"|\*\*=?|//=?|>>=?|<<=?|->|:=|[-+*/%&|^@<>=!]=|\S"
)
_BARRIERS = (
    ast.Return,
    ast.Raise,
    ast.Break,
    ast.Continue,
    ast.Assert,
    ast.Global,
    ast.Nonlocal,
)
_BODIES = ("body", "orelse", "finalbody")


# --- normalising one answer ----------------------------------------------------------


@dataclass
class Normalised:
    """One answer, normalised: ``tokens`` and, per token, the first and last line of
    the original cell it comes from (1-based)."""

    tokens: list[str]
    lines: list[tuple[int, int]]


class _Binder(ast.NodeVisitor):
    """The names a cell binds: arguments, assigned names, loop and comprehension
    variables, functions and classes it defines, ``except ... as`` names."""

    def __init__(self) -> None:
        self.bound: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.bound.add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self.bound.add(node.arg)

    def visit_FunctionDef(self, node) -> None:
        self.bound.add(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.bound.add(node.name)
        self.generic_visit(node)


class _Rename(ast.NodeTransformer):
    """Renames bound names by ``mapping`` (a name not in it stays)."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = mapping

    def visit_Name(self, node: ast.Name):
        node.id = self.mapping.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg):
        node.arg = self.mapping.get(node.arg, node.arg)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node):
        node.name = self.mapping.get(node.name, node.name)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_ExceptHandler(self, node):
        if node.name:
            node.name = self.mapping.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_Global(self, node):
        node.names = [self.mapping.get(n, n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global


class _FirstUse(ast.NodeVisitor):
    """The bound names in the order the (reordered) tree first uses them."""

    def __init__(self, bound: set[str]) -> None:
        self.bound, self.order = bound, {}

    def see(self, name: str | None) -> None:
        if name in self.bound and name not in self.order:
            self.order[name] = f"V{len(self.order)}"

    def visit_Name(self, node):
        self.see(node.id)

    def visit_arg(self, node):
        self.see(node.arg)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        self.see(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_ExceptHandler(self, node):
        self.see(node.name)
        self.generic_visit(node)


def _strip_given(tree: ast.Module) -> None:
    """Remove docstrings and the stub's ``raise NotImplementedError`` everywhere."""
    for node in ast.walk(tree):
        for name in _BODIES:
            body = getattr(node, name, None)
            if not isinstance(body, list) or not body:
                continue
            kept = [s for s in body if not _is_stub_raise(s)]
            docstring_owner = isinstance(
                node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            )
            if (
                name == "body"
                and docstring_owner
                and kept
                and isinstance(kept[0], ast.Expr)
                and isinstance(kept[0].value, ast.Constant)
                and isinstance(kept[0].value.value, str)
            ):
                kept = kept[1:]
            if name == "body" and not kept and not isinstance(node, ast.Module):
                kept = [ast.Pass(lineno=body[0].lineno, end_lineno=body[0].end_lineno)]
            setattr(node, name, kept)


def _is_stub_raise(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.Raise) or stmt.exc is None:
        return False
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _reads_writes(stmt: ast.stmt, bound: set[str]) -> tuple[set[str], set[str]]:
    """Names a statement reads and writes; ``obj.method(...)`` (for a name the cell
    binds: ``torch.zeros`` changes no ``torch``), ``obj[i] = ...`` and
    ``obj.attr = ...`` write ``obj`` (they may change it)."""
    reads, writes = set(), set()
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        writes.add(stmt.name)
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (writes if isinstance(node.ctx, ast.Store | ast.Del) else reads).add(
                node.id
            )
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            writes.update(_base_names(node.func.value) & bound)
        elif isinstance(node, ast.Attribute | ast.Subscript) and isinstance(
            node.ctx, ast.Store | ast.Del
        ):
            writes.update(_base_names(node.value))
        elif isinstance(node, ast.AugAssign):
            reads.update(_base_names(node.target))
    return reads, writes


def _base_names(node: ast.AST) -> set[str]:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return {node.id} if isinstance(node, ast.Name) else set()


def _depends(a: tuple[set, set], b: tuple[set, set]) -> bool:
    (ra, wa), (rb, wb) = a, b
    return bool(wa & (rb | wb) or ra & wb)


def _is_compound(stmt: ast.stmt) -> bool:
    return any(isinstance(getattr(stmt, n, None), list) for n in _BODIES)


class _Canon:
    """Canonical order and numbering of the bound names, block by block, top down.

    In each block, between fixed points, statements are taken in a topological
    order of their dependencies; among those ready, the one whose key sorts first:
    its tokens with the names numbered so far as their numbers (the arguments, the
    names earlier statements defined) and the others as ``_`` (a compound
    statement: its header, then its inner statements' keys sorted). A statement's
    names are numbered when it is taken, before the blocks inside it."""

    def __init__(self, bound: set[str]) -> None:
        self.bound = bound
        self.first = _FirstUse(bound)
        self._parts: dict[int, tuple[list[str], list[list[str]]]] = {}

    def _mapped(self, toks: list[str]) -> str:
        order = self.first.order
        return " ".join(
            t
            if i and toks[i - 1] == "."
            else order.get(t) or ("_" if t in self.bound else t)
            for i, t in enumerate(toks)
        )

    def key(self, stmt: ast.stmt) -> str:
        parts = self._parts.get(id(stmt))
        if parts is None:
            if not _is_compound(stmt):
                parts = (_TOKEN.findall(ast.unparse(stmt)), [])
            else:
                inner = [
                    _TOKEN.findall(ast.unparse(n))
                    for n in ast.walk(stmt)
                    if isinstance(n, ast.stmt) and n is not stmt and not _is_compound(n)
                ]
                parts = (_TOKEN.findall(_header(stmt)), inner)
            self._parts[id(stmt)] = parts
        head, inner = parts
        return " | ".join([self._mapped(head), *sorted(map(self._mapped, inner))])

    def block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        segment: list[ast.stmt] = []
        for s in stmts:
            if isinstance(s, _BARRIERS):
                out += self._segment(segment)
                self._place(s)
                out.append(s)
                segment = []
            else:
                segment.append(s)
        return out + self._segment(segment)

    def _segment(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        effects = [_reads_writes(s, self.bound) for s in stmts]
        before = [
            {i for i in range(j) if _depends(effects[i], effects[j])}
            for j in range(len(stmts))
        ]
        done: set[int] = set()
        order = []
        while len(order) < len(stmts):
            ready = [
                j for j in range(len(stmts)) if j not in done and before[j] <= done
            ]
            j = (
                ready[0]
                if len(ready) == 1
                else min(ready, key=lambda j: (self.key(stmts[j]), j))
            )
            done.add(j)
            self._place(stmts[j])
            order.append(stmts[j])
        return order

    def _place(self, stmt: ast.stmt) -> None:
        """Number the names ``stmt`` uses, its header first, then its blocks (each
        put in canonical order)."""
        if not _is_compound(stmt):
            self.first.visit(stmt)
            return
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.first.see(stmt.name)
        for part, value in ast.iter_fields(stmt):
            if part in (*_BODIES, "handlers"):
                continue
            for node in value if isinstance(value, list) else [value]:
                if isinstance(node, ast.AST):
                    self.first.visit(node)
        for name in _BODIES:
            body = getattr(stmt, name, None)
            if isinstance(body, list) and body:
                setattr(stmt, name, self.block(body))
            if name == "body":
                for h in getattr(stmt, "handlers", []) or []:
                    self.first.see(h.name)
                    if h.type is not None:
                        self.first.visit(h.type)
                    h.body = self.block(h.body)


def _tokens(text: str) -> list[str]:
    """Python tokens of normalised code; a string literal is ``S``."""
    return ["S" if t[0] in "'\"" else t for t in _TOKEN.findall(text)]


def _header(stmt: ast.stmt) -> str:
    """The first line(s) of a compound statement, its blocks left out."""
    shell = copy.copy(stmt)
    for name in _BODIES:
        if isinstance(getattr(shell, name, None), list):
            setattr(shell, name, [ast.Pass()] if name == "body" else [])
    if hasattr(shell, "handlers"):
        shell.handlers = []
    text = ast.unparse(shell)
    return "\n".join(ln for ln in text.splitlines() if ln.strip() != "pass")


def _emit(stmts: list[ast.stmt], out: Normalised) -> None:
    """Tokens of ``stmts``, each with the lines of the statement it comes from."""
    for s in stmts:
        where = (s.lineno, s.end_lineno or s.lineno)
        if not any(isinstance(getattr(s, n, None), list) for n in _BODIES):
            toks = _tokens(ast.unparse(s))
            out.tokens += toks
            out.lines += [where] * len(toks)
            continue
        toks = _tokens(_header(s))
        out.tokens += toks
        out.lines += [(s.lineno, s.lineno)] * len(toks)
        for name in _BODIES:
            body = getattr(s, name, None)
            if not isinstance(body, list) or not body:
                continue
            if name != "body":
                out.tokens.append(name)
                out.lines.append((body[0].lineno, body[0].lineno))
            out.tokens.append("{")
            out.lines.append((body[0].lineno, body[0].lineno))
            _emit(body, out)
            out.tokens.append("}")
            out.lines.append(out.lines[-1])
            if name == "body":
                for h in getattr(s, "handlers", []) or []:
                    out.tokens += _tokens(_header(h))
                    out.lines += [(h.lineno, h.lineno)] * len(_tokens(_header(h)))
                    _emit(h.body, out)


def normalise(source: str, keep: Iterable[str] = ()) -> Normalised:
    """The normalised tokens of an answer cell (see the module docstring).

    ``keep``: bound names that stay as they are (the graded functions' names, which
    the release gives). A cell that does not parse is compared by its raw tokens,
    comments and blank lines dropped.

    >>> a = normalise("def f(n):\\n    # twice\\n    y = n * 2\\n    return y", ["f"])
    >>> b = normalise("def f(k):\\n    out = k*2  # !\\n\\n    return out", ["f"])
    >>> a.tokens == b.tokens, " ".join(a.tokens)
    (True, 'def f ( V0 ) : { V1 = V0 * 2 return V1 }')
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _raw_tokens(source)
    _strip_given(tree)
    binder = _Binder()
    binder.visit(tree)
    bound = binder.bound - set(keep)
    canon = _Canon(bound)
    tree.body = canon.block(tree.body)
    _Rename(canon.first.order).visit(tree)
    out = Normalised([], [])
    _emit(tree.body, out)
    return out


def _raw_tokens(source: str) -> Normalised:
    out = Normalised([], [])
    for number, line in enumerate(source.splitlines(), 1):
        toks = _tokens(line.split("#", 1)[0])
        out.tokens += toks
        out.lines += [(number, number)] * len(toks)
    return out


# --- fingerprints --------------------------------------------------------------------

_TOKEN_IDS: dict[str, int] = {}


def _token_id(token: str) -> int:
    value = _TOKEN_IDS.get(token)
    if value is None:
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        value = _TOKEN_IDS[token] = int.from_bytes(digest, "little")
    return value


def kgram_hashes(tokens: list[str], k: int = K) -> np.ndarray:
    """The hash of every k-gram of ``tokens`` (52 bits, the same in every process)."""
    if len(tokens) < k:
        return np.zeros(0, dtype=np.int64)
    ids = np.array([_token_id(t) for t in tokens], dtype=np.uint64)
    n = len(tokens) - k + 1
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for t in range(k):
            h = h * _P + ids[t : t + n]
    return (h & np.uint64(_MASK)).astype(np.int64)


@dataclass
class Fingerprint:
    """The winnowed fingerprints of one answer: ``hashes`` (unique, sorted) and, per
    hash, the token indexes where its k-gram starts."""

    hashes: np.ndarray
    where: dict[int, list[int]]


def fingerprint(norm: Normalised, boilerplate: set[int]) -> Fingerprint:
    """Winnowed fingerprints of a normalised answer, the release's k-grams removed."""
    from copydetect.utils import winnow

    all_hashes = kgram_hashes(norm.tokens)
    if len(all_hashes) == 0:
        return Fingerprint(np.zeros(0, dtype=np.int64), {})
    hashes, idx = winnow(all_hashes, window_size=WINDOW, remove_duplicates=False)
    where: dict[int, list[int]] = {}
    for h, i in zip(hashes.tolist(), idx.tolist(), strict=True):
        if h not in boilerplate:
            where.setdefault(h, []).append(i)
    return Fingerprint(np.array(sorted(where), dtype=np.int64), where)


def _matrix(fps: list[Fingerprint]) -> tuple[np.ndarray, np.ndarray]:
    """``(shared, sizes)``: shared fingerprints of every pair, and each one's count."""
    sizes = np.array([len(f.hashes) for f in fps], dtype=np.int64)
    if not sizes.sum():
        return np.zeros((len(fps), len(fps)), dtype=np.int64), sizes
    _, inverse, counts = np.unique(
        np.concatenate([f.hashes for f in fps]),
        return_inverse=True,
        return_counts=True,
    )
    rows = np.repeat(np.arange(len(fps)), sizes)
    # a fingerprint only one answer holds adds to no pair: its column is left out
    held = counts[inverse] > 1
    column = np.cumsum(counts > 1) - 1
    m = np.zeros((len(fps), int((counts > 1).sum())), dtype=np.float32)
    m[rows[held], column[inverse[held]]] = 1.0
    shared = np.rint(m @ m.T).astype(np.int64)  # counts < 2^24: exact in float32
    return shared, sizes


def threshold(values: Iterable[float]) -> tuple[float, float, float]:
    """``(median, MAD, cut-off)`` of a class's pair similarities: a pair is far
    above the class when its similarity is at least the cut-off,
    ``max(FLOOR, median + Z * 1.4826 * MAD)`` (1.4826 MAD estimates a normal
    spread's sigma), lowered to ``NEAR`` when the median is below ``FLOOR``.

    >>> med, mad, cut = threshold([0.1, 0.2, 0.2, 0.3, 1.0])
    >>> med, round(mad, 12), round(cut, 6)  # 0.2 + 3.5 * 1.4826 * 0.1
    (0.2, 0.1, 0.71891)
    >>> threshold([0.0, 0.0, 0.0, 0.9])[2] == FLOOR
    True
    >>> threshold([0.1, 0.4, 0.4, 1.0, 1.0])[2] == NEAR  # 0.4 + 3.5 * 1.4826 * 0.3
    True
    """
    values = list(values)
    if not values:
        return 0.0, 0.0, FLOOR
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    cutoff = max(FLOOR, med + Z * 1.4826 * mad)
    return med, mad, min(cutoff, NEAR) if med < FLOOR else cutoff


# --- one function across the class --------------------------------------------------


@dataclass
class Answer:
    """One student's (or reference's) answer to one function."""

    who: str
    source: str
    how: str = "answer cell"
    norm: Normalised | None = None
    fp: Fingerprint | None = None


@dataclass
class Pair:
    a: str
    b: str
    similarity: float
    shared: int
    sizes: tuple[int, int]
    flagged: bool
    page: str = ""


@dataclass
class FunctionResult:
    """The comparison of one graded function across the class."""

    function: str
    answers: dict[str, Answer]
    references: dict[str, Answer]
    median: float
    mad: float
    cutoff: float
    pairs_compared: int
    flagged: list[Pair]
    reference_matches: list[Pair]
    too_short: list[str]
    missing: list[str] = field(default_factory=list)


def compare_function(
    function: str,
    answers: Mapping[str, Answer],
    release: str,
    references: Mapping[str, Answer],
    keep: Iterable[str] = (),
) -> FunctionResult:
    """Compare every student's answer to ``function`` with every other's and with
    each reference (the public solution, the zoo's entries)."""
    keep = {function, *keep}
    boilerplate = set(kgram_hashes(normalise(release, keep).tokens).tolist())
    everyone = [*answers.values(), *references.values()]
    for ans in everyone:
        ans.norm = normalise(ans.source, keep)
        ans.fp = fingerprint(ans.norm, boilerplate)
    students = [a for a in answers.values() if len(a.fp.hashes) >= MIN_FINGERPRINTS]
    refs = [r for r in references.values() if len(r.fp.hashes) >= MIN_FINGERPRINTS]
    shared, sizes = _matrix([a.fp for a in students + refs])
    smaller = np.minimum.outer(sizes, sizes)
    sim = shared / np.maximum(smaller, 1)
    n = len(students)
    iu = np.triu_indices(n, 1)
    med, mad, cutoff = threshold(sim[iu].tolist())
    flag = sim >= cutoff

    def pairs(rows, cols) -> list[Pair]:
        out = []
        for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
            people = (students + refs)[i].who, (students + refs)[j].who
            out.append(
                Pair(
                    *people,
                    float(sim[i, j]),
                    int(shared[i, j]),
                    (int(sizes[i]), int(sizes[j])),
                    True,
                )
            )
        return sorted(out, key=lambda p: (-p.similarity, p.a, p.b))

    sub = flag[:n, :n] & np.triu(np.ones((n, n), dtype=bool), 1)
    ref_rows, ref_cols = np.nonzero(flag[:n, n:])
    return FunctionResult(
        function=function,
        answers=dict(answers),
        references=dict(references),
        median=float(med),
        mad=float(mad),
        cutoff=float(cutoff),
        pairs_compared=len(iu[0]),
        flagged=pairs(*np.nonzero(sub)),
        reference_matches=pairs(ref_rows, ref_cols + n),
        too_short=sorted(
            a.who for a in answers.values() if len(a.fp.hashes) < MIN_FINGERPRINTS
        ),
    )


def matched_lines(a: Answer, b: Answer) -> tuple[set[int], set[int]]:
    """The lines of each answer that hold a fingerprint the other has (through
    ``copydetect.utils.get_copied_slices``: runs of matched k-grams)."""
    from copydetect.utils import get_copied_slices

    common = set(a.fp.where) & set(b.fp.where)
    out = []
    for ans in (a, b):
        starts = [i for h in common for i in ans.fp.where[h]]
        slices = get_copied_slices(np.array(starts, dtype=np.int64), K)
        lines: set[int] = set()
        for lo, hi in zip(slices[0].tolist(), slices[1].tolist(), strict=True):
            for t in range(int(lo), min(int(hi), len(ans.norm.lines))):
                first, last = ans.norm.lines[t]
                lines.update(range(first, last + 1))
        out.append(lines)
    return out[0], out[1]


# --- reading a class ---------------------------------------------------------------


def graded_functions(assignment: str, release_cells: list[dict]) -> list[str]:
    """The graded functions of ``assignment``: the ``grade_<name>`` graders that
    ``course_lib/checks/<assignment>.py`` exports (read from its ``__all__``, so this
    follows the checks as they are now), in the order of their answer cells in the
    release. Without a checks module: every ``<name>__answer`` cell of the release."""
    answer_ids = [
        _grade_id(c)[: -len("__answer")]
        for c in release_cells
        if _grade_id(c).endswith("__answer")
    ]
    module = Path(__file__).resolve().parents[1] / "checks" / f"{assignment}.py"
    if not module.is_file():
        return answer_ids
    graded = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            graded = {
                name.removeprefix("grade_")
                for name in ast.literal_eval(node.value)
                if name.startswith("grade_")
            }
    return [name for name in answer_ids if name in graded]


def _grade_id(cell: dict) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or "")


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _cells(path: Path) -> list[dict]:
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return []
    return [c for c in cells if isinstance(c, dict)]


def _defines(source: str, function: str) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return f"def {function}(" in source
    return any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
        for n in tree.body
    )


def read_answers(cells: list[dict], functions: list[str], who: str) -> dict:
    """``{function: Answer}`` from one notebook's cells: the ``<function>__answer``
    cells, or else the code cell that defines the function."""
    out = {}
    for function in functions:
        found = [_source(c) for c in cells if _grade_id(c) == f"{function}__answer"]
        how = "answer cell"
        if not found:
            found = [
                _source(c)
                for c in cells
                if c.get("cell_type") == "code" and _defines(_source(c), function)
            ][:1]
            how = "the cell that defines it (its metadata was lost)"
        if found:
            out[function] = Answer(who, "\n".join(found), how)
    return out


def _solution_source(source: str) -> str:
    return "\n".join(
        ln
        for ln in source.splitlines()
        if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def _zoo_answers(zoo: Path, functions: list[str]) -> dict[str, dict[str, Answer]]:
    """``{function: {"zoo:<name>": Answer}}`` from a zoo module's ``CORRECT``,
    ``WRONG`` and ``CALLS_LIBRARY`` tables (read, not imported), each entry's
    ``def`` renamed to the graded function's name."""
    if not zoo.is_file():
        return {}
    text = zoo.read_text()
    tree = ast.parse(text)
    defs = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    out: dict[str, dict[str, Answer]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            if not (isinstance(key, ast.Constant) and key.value in functions):
                continue
            for name in {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}:
                if name in defs:
                    src = ast.get_source_segment(text, defs[name]) or ""
                    src = src.replace(f"def {name}(", f"def {key.value}(", 1)
                    out.setdefault(key.value, {})[f"zoo:{name}"] = Answer(
                        f"zoo:{name}", src, "tests/zoo"
                    )
    return out


# --- the whole assignment -------------------------------------------------------------


@dataclass
class SimilarityReport:
    assignment: str
    out: Path
    students: int
    results: list[FunctionResult]
    notes: list[str]


def _notebook(folder: Path, assignment: str) -> Path | None:
    preferred = folder / f"{assignment}.ipynb"
    if preferred.is_file():
        return preferred
    found = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
    return found[0] if found else None


def _class_answers(course, assignment: str, functions: list[str]) -> dict:
    """``{student: {function: Answer}}`` from ``autograded/`` (as graded) or else
    ``submitted/``."""
    out = {}
    for student, folder in course.submissions(assignment).items():
        graded = _notebook(course.autograded_dir / student / assignment, assignment)
        path = graded or _notebook(folder, assignment)
        if path is not None:
            out[student] = read_answers(_cells(path), functions, student)
    return out


def similarity(course, assignment: str, out: Path | None = None) -> SimilarityReport:
    """Compare a class's answers to ``assignment`` and write the report."""
    try:
        import copydetect  # noqa: F401
    except ModuleNotFoundError:
        raise CourseError(
            "course similarity needs the package copydetect, which is not installed "
            "(pip install 'course_lib[grading]', or pip install copydetect)"
        ) from None
    assignment = course.resolve_assignment(assignment)
    release_nb = _notebook(course.release_dir / assignment, assignment)
    if release_nb is None:
        raise CourseError(
            f"{assignment} has no released notebook in {course.release_dir}; "
            f"release it first: course release {assignment}"
        )
    release_cells = _cells(release_nb)
    functions = graded_functions(assignment, release_cells)
    if not functions:
        raise CourseError(f"{assignment} has no graded function with an answer cell")
    release = {
        f: a.source for f, a in read_answers(release_cells, functions, "").items()
    }
    klass = _class_answers(course, assignment, functions)
    if not klass:
        raise CourseError(
            f"no submissions of {assignment} in {course.submitted_dir} "
            f"(course collect first)"
        )
    refs, notes = _references(course, assignment, functions)
    results = []
    for function in functions:
        answers = {s: a[function] for s, a in sorted(klass.items()) if function in a}
        result = compare_function(
            function,
            answers,
            release.get(function, ""),
            refs.get(function, {}),
            keep=functions,
        )
        result.missing = sorted(s for s, a in klass.items() if function not in a)
        results.append(result)
    out = Path(out) if out else course.root / "reports" / assignment / "similarity"
    report = SimilarityReport(assignment, out, len(klass), results, notes)
    write_report(report)
    return report


def _references(course, assignment: str, functions: list[str]) -> tuple[dict, list]:
    """The public solution's answers and the zoo's entries, per function."""
    refs: dict[str, dict[str, Answer]] = {f: {} for f in functions}
    notes = []
    source_nb = _notebook(course.source_dir / assignment, assignment)
    if source_nb is None:
        notes.append(f"no source notebook of {assignment}: no public solution compared")
    else:
        for f, a in read_answers(_cells(source_nb), functions, "solution").items():
            refs[f]["public solution"] = Answer(
                "public solution", _solution_source(a.source), "solutions/"
            )
    zoo = course.root / "tests" / "zoo" / f"{assignment}.py"
    if not zoo.is_file():
        notes.append(f"no bug zoo at {zoo}: its published code is not compared")
    for f, entries in _zoo_answers(zoo, functions).items():
        refs[f].update(entries)
    return refs, notes


# --- writing the report ---------------------------------------------------------------

_CSP = (
    '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
    "style-src 'unsafe-inline'\">"
)
_STYLE = (
    "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
    "td,th{border:1px solid #bbb;padding:2px 6px;vertical-align:top}"
    "pre{margin:0;font-size:13px}mark{background:#ffd54f}"
    ".side{width:50%}.n{color:#777;text-align:right}</style>"
)
_EVIDENCE = (
    "A similarity is evidence for a person to look at, never a grade change: short "
    "answers to the same task converge, and a match with the public solution may "
    "be a student who read it after solving the exercise."
)


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{_CSP}'
        f"<title>{html.escape(title)}</title>{_STYLE}</head><body>\n{body}\n"
        "</body></html>\n"
    )


def _side(ans: Answer, marked: set[int]) -> str:
    rows = []
    for number, line in enumerate(ans.source.splitlines(), 1):
        text = html.escape(line) or " "
        if number in marked:
            text = f"<mark>{text}</mark>"
        rows.append(f'<tr><td class="n">{number}</td><td><pre>{text}</pre></td></tr>')
    return "<table>" + "".join(rows) + "</table>"


def pair_page(result: FunctionResult, pair: Pair) -> str:
    """The side-by-side page of one pair, matched lines marked; escaped text only."""
    everyone = {**result.answers, **result.references}
    a, b = everyone[pair.a], everyone[pair.b]
    marks_a, marks_b = matched_lines(a, b)
    title = f"{result.function}: {pair.a} and {pair.b}"
    body = (
        f"<h1>{html.escape(title)}</h1><p>Similarity {pair.similarity:.0%}: "
        f"{pair.shared} fingerprints shared, of {pair.sizes[0]} and {pair.sizes[1]} "
        f"(after normalisation; the class's cut-off for this function is "
        f"{result.cutoff:.0%}). Marked: lines holding shared code. "
        f"{html.escape(_EVIDENCE)}</p><table><tr>"
        f'<th class="side">{html.escape(pair.a)} ({html.escape(a.how)})</th>'
        f'<th class="side">{html.escape(pair.b)} ({html.escape(b.how)})</th></tr>'
        f"<tr><td>{_side(a, marks_a)}</td><td>{_side(b, marks_b)}</td></tr></table>"
    )
    return _page(title, body)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def write_report(report: SimilarityReport) -> None:
    """``index.html``, ``pairs.csv`` and the pair pages under ``report.out``."""
    out = report.out
    (out / "pairs").mkdir(parents=True, exist_ok=True)
    for old in (out / "pairs").glob("*.html"):
        old.unlink()
    rows = []
    for result in report.results:
        shown = result.flagged[:MAX_PAGES] + result.reference_matches[:MAX_PAGES]
        for pair in shown:
            name = _slug(f"{result.function}__{pair.a}__{pair.b}") + ".html"
            pair.page = f"pairs/{name}"
            (out / pair.page).write_text(pair_page(result, pair), encoding="utf-8")
        for kind, pairs in (
            ("students", result.flagged),
            ("reference", result.reference_matches),
        ):
            rows += [
                [
                    result.function,
                    kind,
                    p.a,
                    p.b,
                    f"{p.similarity:.4f}",
                    p.shared,
                    p.sizes[0],
                    p.sizes[1],
                    f"{result.cutoff:.4f}",
                    p.page,
                ]
                for p in pairs
            ]
    with open(out / "pairs.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "function",
                "kind",
                "a",
                "b",
                "similarity",
                "shared_fingerprints",
                "fingerprints_a",
                "fingerprints_b",
                "cutoff",
                "page",
            ]
        )
        writer.writerows(rows)
    (out / "index.html").write_text(_index(report), encoding="utf-8")


def _pair_rows(pairs: list[Pair]) -> str:
    if not pairs:
        return "<p>None.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(p.a)}</td><td>{html.escape(p.b)}</td>"
        f"<td>{p.similarity:.0%}</td><td>{p.shared} of {min(p.sizes)}</td><td>"
        + (f'<a href="{html.escape(p.page)}">side by side</a>' if p.page else "")
        + "</td></tr>"
        for p in pairs
    )
    return (
        "<table><tr><th>a</th><th>b</th><th>similarity</th>"
        "<th>shared fingerprints</th><th></th></tr>" + rows + "</table>"
    )


def _index(report: SimilarityReport) -> str:
    parts = [
        f"<h1>Similar answers: {html.escape(report.assignment)}</h1>",
        f"<p>{report.students} submissions. {html.escape(_EVIDENCE)} How it is "
        "computed and how to read it: the instructor guide, 'Similar submissions'.</p>",
    ]
    parts += [f"<p>{html.escape(n)}</p>" for n in report.notes]
    for r in report.results:
        parts.append(
            f"<h2>{html.escape(r.function)}</h2><p>{len(r.answers)} answers, "
            f"{r.pairs_compared} pairs. Class median {r.median:.0%}, MAD {r.mad:.0%}: "
            f"cut-off {r.cutoff:.0%} (median + {Z} x 1.4826 x MAD, at least "
            f"{FLOOR:.0%}; at most {NEAR:.0%} while the median is below "
            f"{FLOOR:.0%}). {len(r.flagged)} pairs far above the class.</p>"
        )
        if r.too_short:
            parts.append(
                "<p>Too short to compare (fewer than "
                f"{MIN_FINGERPRINTS} fingerprints once the release's code is "
                "removed, e.g. unanswered): "
                + html.escape(", ".join(r.too_short))
                + "</p>"
            )
        if r.missing:
            parts.append(
                "<p>No answer found: " + html.escape(", ".join(r.missing)) + "</p>"
            )
        for title, pairs in (
            ("Pairs of students", r.flagged),
            ("Matches with the public solution and the bug zoo", r.reference_matches),
        ):
            parts += [f"<h3>{title}</h3>", _pair_rows(pairs[:MAX_PAGES])]
            if len(pairs) > MAX_PAGES:
                parts.append(
                    f"<p>The {MAX_PAGES} most similar of {len(pairs)}; all of them "
                    "are in pairs.csv.</p>"
                )
    return _page(f"Similar answers: {report.assignment}", "\n".join(parts))


def format_report(report: SimilarityReport) -> str:
    """The command's summary: per function, the cut-off and what stands out."""
    lines = [f"{report.assignment}: {report.students} submissions compared"]
    for r in report.results:
        public = sum(1 for p in r.reference_matches if p.b == "public solution")
        lines.append(
            f"  {r.function}: {len(r.flagged)} of {r.pairs_compared} pairs far above "
            f"the class (cut-off {r.cutoff:.0%}, median {r.median:.0%}), "
            f"{public} matching the public solution, "
            f"{len(r.reference_matches) - public} the bug zoo"
            + (f", {len(r.too_short)} too short to compare" if r.too_short else "")
        )
    lines += [f"  note: {n}" for n in report.notes]
    lines.append(f"wrote {report.out / 'index.html'} and {report.out / 'pairs.csv'}")
    lines.append("a similarity is evidence for a person to look at, never a grade")
    return "\n".join(lines)
