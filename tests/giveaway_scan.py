"""What the class edition of a chapter shows, compared with the graded answers.

Used by ``tests/test_giveaways.py`` (read its docstring first). Three parts:

* :func:`graded_calls`: every call that a public check (``check_<name>``) or a hidden
  grade (``grade_<name>``) of ``course_lib.checks`` makes of the student's function,
  read at run time by running each grader on a stand-in whose calls are answered by
  the grader's own planned reference
  (:func:`course_lib.grading.editions.library._plan_reference`): the inputs and the
  reference's output of each call.
* :func:`number_segments` and friends: the numbers a reader of a page sees, as
  *segments* (one printed output, one glued value, one array of a figure, one array
  of embedded JSON), each number with the tolerance its printed form allows (half a
  unit of its last printed digit), and :func:`find_answers`, which looks for every
  answer, also negated, as log2 or ln of its magnitude, and sorted, inside every
  segment.
* :func:`run_chapter`: a chapter's class-edition notebook run cell by cell in an
  IPython shell, collecting what each cell prints and displays (glued values
  included), the data of every matplotlib figure it draws, the JSON of its
  interactive figures, and every function it defines that computes a graded function
  in full (:func:`functions_computing_answers`).

Run alone on a chapter file::

    python tests/giveaway_scan.py book/11-long-context.md
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import math
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"

# A float32 answer and the same quantity computed another way (float64, another
# order of operations) differ by a few float32 ulps (1.2e-7 each): a relative 1e-5
# (~80 ulps) absorbs that and is far below any difference between two answers.
RTOL = 1e-5
# A match must carry at least this many significant decimal digits in all (summed
# over the answer's distinct non-zero values, each counted at the tolerance it was
# matched with): 8 digits make a coincidence about one in 10^8 per place tried.
MIN_DIGITS = 8.0
MAX_STRIDE = 8  # a column of a printed table: every s-th number, s <= 8
FUNCTION_CALL_SECONDS = 2


# --------------------------------------------------------------------------------------
# the answers


@dataclass
class GradedCall:
    """One call of a graded function by a grader: ``name(*args, **kwargs)``."""

    name: str  # the graded function (what the student writes)
    kind: str  # "public" (check_) or "hidden" (grade_)
    call: str  # how the grader's message reads the call
    args: tuple
    kwargs: dict
    output: object


def graded_calls() -> list[GradedCall]:
    """Every call of every public check and hidden grade of ``course_lib.checks``,
    answered by the grader's planned reference (read from the graders now, not
    copied: a changed exercise changes what is looked for)."""
    import torch

    from course_lib.checks import _record
    from course_lib.grading.editions.library import _plan_reference
    from course_lib.grading.notebooks.integrity import pristine_graders

    found: list[GradedCall] = []

    class StandIn:
        def __init__(self, reference) -> None:
            self.reference = reference

        def __call__(self, *args, **kwargs):
            raise RuntimeError("the grader called the student's function directly")

    class Session:
        def __init__(self, name: str, kind: str) -> None:
            self.name, self.kind = name, kind

        def call(self, impl, fn, args, kwargs, call):
            if not isinstance(fn, StandIn):
                raise RuntimeError(call)
            args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
            out = fn.reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            found.append(GradedCall(self.name, self.kind, call, args, kwargs, out))
            return out, []

    graders = pristine_graders()
    previous, dtype = _record._session, torch.get_default_dtype()
    try:
        for grade_name, modules in sorted(graders.items()):
            if not grade_name.startswith("grade_"):
                continue
            name = grade_name.removeprefix("grade_")
            for module_name, grade in sorted(modules.items()):
                try:
                    reference = _plan_reference(sys.modules[module_name], grade_name)
                except AttributeError:
                    continue
                if reference is None:  # graded by hand (ex03's hand computation)
                    continue
                check = graders.get("check_" + name, {}).get(module_name)
                for kind, grader in (("public", check), ("hidden", grade)):
                    if grader is None:
                        continue
                    n = len(inspect.signature(grader).parameters)
                    _record._session = Session(name, kind)
                    try:
                        with contextlib.redirect_stdout(io.StringIO()):
                            grader(StandIn(reference), *([None] * (n - 1)))
                    except Exception:  # noqa: BLE001 - its calls so far are kept
                        pass
                    finally:
                        _record._session = previous
                        torch.set_default_dtype(dtype)
    finally:
        _record._session = previous
        torch.set_default_dtype(dtype)
    return found


def flat_numbers(value, depth: int = 0) -> list[float]:
    """The numbers of a graded output in reading order: tensors and arrays
    flattened row-major, tuples, lists and dict values in turn (dict keys are the
    inputs, not the answer)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.layout != torch.strided:
            return []
        return value.detach().to("cpu", torch.float64).reshape(-1).tolist()
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value.astype(np.float64).reshape(-1).tolist()
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float | np.integer | np.floating):
        return [float(value)]
    if depth < 4 and isinstance(value, list | tuple):
        return [x for v in value for x in flat_numbers(v, depth + 1)]
    if depth < 4 and isinstance(value, dict):
        return [x for v in value.values() for x in flat_numbers(v, depth + 1)]
    return []


@dataclass
class Answer:
    """A graded output as it might appear on a page: ``form`` says which
    transformation of the output ``values`` is."""

    label: str
    form: str
    values: np.ndarray


def answer_forms(label: str, values: list[float]) -> list[Answer]:
    """The output and its simple transformations: negated, log2 and ln of its
    magnitude (when no entry is zero), each also sorted both ways."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return []
    forms = [("as is", a), ("negated", -a)]
    finite = a[np.isfinite(a)]
    if finite.size and (np.all(finite > 0) or np.all(finite < 0)):
        with np.errstate(divide="ignore", invalid="ignore"):
            mag = np.abs(a)
            forms += [
                ("log2", np.log2(mag)),
                ("-log2", -np.log2(mag)),
                ("ln", np.log(mag)),
                ("-ln", -np.log(mag)),
            ]
    out = []
    for form, v in forms:
        out.append(Answer(label, form, v))
        if v.size > 1:
            s = np.sort(v)  # nan and inf last: a printed "nan" still matches
            out.append(Answer(label, form + ", sorted", s))
            out.append(Answer(label, form + ", sorted descending", s[::-1].copy()))
    return out


def says_little(values: np.ndarray) -> bool:
    """Numbers that a page may show by coincidence, whatever the tolerance: fewer
    than three entries, fewer than two distinct finite values, or an arithmetic
    progression (``arange``, a constant: position indices, an axis). Applied to the
    answer and to the page's numbers it matched."""
    finite = values[np.isfinite(values)]
    if values.size < 3 or np.unique(finite).size < 2:
        return True
    if values.size >= 3 and np.all(np.isfinite(values)):
        steps = np.diff(values)
        if np.allclose(steps, steps[0], rtol=1e-9, atol=1e-12):
            return True
    return False


def digits(values: np.ndarray, tol: np.ndarray) -> float:
    """Significant decimal digits a match carries: for each distinct non-zero finite
    value, log10(|value| / tolerance), between 0 and 7. An integer (within the
    tolerance) is matched as an integer, to within 0.5: integers coincide with the
    integers of a page (positions, indices, counts) far more often than fractions
    do."""
    keep = np.isfinite(values) & (values != 0)
    v, t = np.abs(values[keep]), tol[keep]
    t = np.where(np.abs(v - np.round(v)) <= t, np.maximum(t, 0.5), t)
    if v.size == 0:
        return 0.0
    order = np.argsort(v)
    v, t = v[order], np.maximum(t[order], 1e-300)
    distinct = np.ones(v.size, dtype=bool)  # more than a tolerance above the last
    last = 0
    for i in range(1, v.size):
        if v[i] - v[last] <= max(t[i], t[last]):
            distinct[i] = False
        else:
            last = i
    d = np.log10(v[distinct] / t[distinct])
    return float(np.clip(d, 0, 7).sum())


# --------------------------------------------------------------------------------------
# the numbers on a page

_NUMBER = re.compile(
    r"(?<![\w.])(?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))"
    r"(?![\w])"
)


def number_tokens(text: str) -> tuple[list[float], list[float]]:
    """The numbers written in ``text`` (``1.5``, ``-2.``, ``3e-05``, ``nan``), each
    with half a unit of its last written digit (``0.1386`` -> 5e-5, ``4`` -> 0.5).
    A number glued to a word (``float32``, ``ex05``, ``2L``) is a name, not a value.
    The Unicode minus (matplotlib's tick and text labels) reads as ``-``."""
    text = text.replace("\u2212", "-")
    values, tols = [], []
    for m in _NUMBER.finditer(text):
        tok = m.group("num")
        low = tok.lower()
        if low.lstrip("+-") in ("nan", "inf"):
            values.append(float(low))
            tols.append(0.0)
            continue
        mant, _, exp = low.partition("e")
        decimals = len(mant.split(".", 1)[1]) if "." in mant else 0
        values.append(float(tok))
        tols.append(0.5 * 10.0 ** (-decimals + (int(exp) if exp else 0)))
    return values, tols


@dataclass
class Segment:
    """Numbers a reader sees together: one output, one glued value, one array."""

    where: str  # "book/NN.md:LINE <what>"
    values: list[float]
    tols: list[float]


def text_segment(where: str, text: str) -> Segment:
    values, tols = number_tokens(text)
    return Segment(where, values, tols)


def array_segment(where: str, values) -> Segment:
    """Numbers held as floats (a figure's data, JSON numbers): their tolerance is
    the relative :data:`RTOL` of the comparison alone."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    return Segment(where, v.tolist(), [0.0] * v.size)


def json_segments(where: str, data) -> list[Segment]:
    """Every list of numbers in a JSON document (nested lists flattened row-major) as
    a segment, each number with the tolerance of its shortest repr."""
    out: list[Segment] = []

    def numbers(x):
        if isinstance(x, bool):
            return None
        if isinstance(x, int | float):
            return [x]
        if isinstance(x, list):
            parts = [numbers(v) for v in x]
            if parts and all(p is not None for p in parts):
                return [n for p in parts for n in p]
        return None

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}")
        elif isinstance(x, list):
            nums = numbers(x)
            if nums is not None:
                seg = text_segment(
                    f"{where} {path}", " ".join(repr(float(n)) for n in nums)
                )
                out.append(seg)
            else:
                for i, v in enumerate(x):
                    walk(v, f"{path}[{i}]")

    scalars: list[str] = []

    def strays(x):
        if isinstance(x, dict):
            for v in x.values():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    scalars.append(repr(float(v)))
                else:
                    strays(v)
        elif isinstance(x, list):
            for v in x:
                strays(v)

    walk(data, "$")
    strays(data)
    if scalars:  # numbers held one by one (a factor per slider setting)
        out.append(text_segment(f"{where} single numbers", " ".join(scalars)))
    return out


def figure_segments(where: str, fig) -> list[Segment]:
    """The data a matplotlib figure was drawn from: each line's x and y, each
    collection's offsets (x, y) and colour values, each image's array, the heights,
    widths and positions of its bars, and the numbers written in its texts
    (annotations, titles, legends; tick labels are the axes' ranges and left out)."""
    import matplotlib.patches as mpatches

    out: list[Segment] = []
    texts = [t.get_text() for t in fig.texts]
    for i, ax in enumerate(fig.axes):
        here = f"{where} axes {i}"
        for j, line in enumerate(ax.get_lines()):
            xy = np.asarray(line.get_xydata(), dtype=np.float64)
            if xy.size:
                out.append(array_segment(f"{here} line {j} x", xy[:, 0]))
                out.append(array_segment(f"{here} line {j} y", xy[:, 1]))
        for j, coll in enumerate(ax.collections):
            with contextlib.suppress(Exception):
                offsets = np.asarray(coll.get_offsets(), dtype=np.float64)
                if offsets.ndim == 2 and offsets.shape[0] > 1:
                    out.append(array_segment(f"{here} collection {j} x", offsets[:, 0]))
                    out.append(array_segment(f"{here} collection {j} y", offsets[:, 1]))
            arr = coll.get_array() if hasattr(coll, "get_array") else None
            if arr is not None:
                arr = np.ma.filled(np.ma.asarray(arr, dtype=np.float64), np.nan)
                out.append(array_segment(f"{here} collection {j} values", arr))
        for j, image in enumerate(ax.images):
            arr = np.ma.filled(
                np.ma.asarray(image.get_array(), dtype=np.float64), np.nan
            )
            if arr.ndim == 2:
                out.append(array_segment(f"{here} image {j}", arr))
                out.append(array_segment(f"{here} image {j} by column", arr.T))
        bars = [p for p in ax.patches if isinstance(p, mpatches.Rectangle)]
        if bars:
            for what, get in (
                ("heights", "get_height"),
                ("widths", "get_width"),
                ("x", "get_x"),
                ("y", "get_y"),
            ):
                out.append(
                    array_segment(
                        f"{here} bars {what}", [getattr(p, get)() for p in bars]
                    )
                )
        words = [t.get_text() for t in ax.texts]
        words += [ax.get_title(loc) for loc in ("left", "center", "right")]
        words += [ax.get_xlabel(), ax.get_ylabel()]
        legend = ax.get_legend()
        if legend is not None:
            words += [t.get_text() for t in legend.get_texts()]
        texts += words
    if any(texts):
        out.append(text_segment(f"{where} texts", "\n".join(texts)))
    return out


# --------------------------------------------------------------------------------------
# the search


@dataclass
class Finding:
    where: str
    answer: str  # the call and its kind
    form: str
    digits: float

    def describe(self) -> str:
        return (
            f"{self.where}: shows {self.answer} ({self.form}; {self.digits:.0f} digits)"
        )


class Page:
    """All segments of a page in one array, so that one answer is looked for in
    all of them at once."""

    def __init__(self, segments: list[Segment]) -> None:
        segments = [s for s in segments if s.values]
        self.segments = segments
        self.values = (
            np.concatenate([np.asarray(s.values, dtype=np.float64) for s in segments])
            if segments
            else np.zeros(0)
        )
        self.tols = (
            np.concatenate([np.asarray(s.tols, dtype=np.float64) for s in segments])
            if segments
            else np.zeros(0)
        )
        self.seg = (
            np.concatenate([np.full(len(s.values), i) for i, s in enumerate(segments)])
            if segments
            else (np.zeros(0, dtype=int))
        )
        self.longest = max((len(s.values) for s in segments), default=0)

    def _hits(self, a: float, idx: np.ndarray) -> np.ndarray:
        c, t = self.values[idx], self.tols[idx]
        if math.isnan(a):
            return np.isnan(c)
        if math.isinf(a):
            return c == a
        return np.abs(c - a) <= t * (1 + 1e-9) + RTOL * abs(a)

    def find(self, answer: Answer) -> tuple[int, int, float] | None:
        """``(segment, stride, digits)`` of the first place where every entry of
        ``answer`` appears in order (contiguously, or every ``stride``-th number
        of one segment), within each page number's tolerance."""
        a = answer.values
        n = a.size
        if n == 0 or n > self.longest or says_little(a):
            return None
        everywhere = np.arange(self.values.size)
        starts = everywhere[self._hits(float(a[0]), everywhere)]
        if starts.size == 0:
            return None
        for stride in range(1, (MAX_STRIDE if n > 1 else 1) + 1):
            pos = starts
            last = pos + stride * (n - 1)
            pos = pos[last < self.values.size]
            pos = pos[self.seg[pos] == self.seg[pos + stride * (n - 1)]]
            for k in range(1, n):
                if pos.size == 0:
                    break
                pos = pos[self._hits(float(a[k]), pos + stride * k)]
            for p in pos:
                window = p + stride * np.arange(n)
                if says_little(self.values[window]):
                    continue  # an axis, an index: the page's numbers say little
                tol = self.tols[window] + RTOL * np.abs(a)
                d = digits(a, tol)
                if d >= MIN_DIGITS:
                    return int(self.seg[p]), stride, d
        return None


def _simple(v: float) -> bool:
    """An integer or a multiple of 1/64 (0.5, 0.25, 1.0): any page may show it."""
    return abs(v * 64 - round(v * 64)) < 1e-9


def find_small_answers(page: Page, calls: list[GradedCall]) -> list[Finding]:
    """Answers of fewer than three numbers (a YaRN attention factor, a correction
    range), taken together per graded function: the page shows them when it holds
    at least two of a function's distinct answer values that are not simple
    (:func:`_simple`), each to at least 3 significant digits, with at least
    :data:`MIN_DIGITS` digits in all (each value counted at the tightest tolerance
    it is matched with). Anywhere on the page:
    two hidden factors printed in two cells give both away."""
    groups: dict[str, dict[float, str]] = {}
    for c in calls:
        values = flat_numbers(c.output)
        if not 0 < len(values) < 3:
            continue
        for v in values:
            if math.isfinite(v) and not _simple(v):
                groups.setdefault(c.name, {}).setdefault(v, f"{c.kind} {c.call}")
    findings = []
    for name, answers in sorted(groups.items()):
        if len(answers) < 2:
            continue
        shown, total, where = [], 0.0, []
        for v, call in answers.items():
            hit = page._hits(v, np.arange(page.values.size))
            if not hit.any():
                continue
            best = int(np.flatnonzero(hit)[np.argmin(page.tols[hit])])
            d = float(np.log10(abs(v) / (page.tols[best] + RTOL * abs(v))))
            if d < 3:  # "1" for 1.35: the page does not resolve the value
                continue
            total += min(d, 7.0)
            shown.append(call)
            where.append(page.segments[int(page.seg[best])].where)
        if len(shown) >= 2 and total >= MIN_DIGITS:
            findings.append(
                Finding(
                    "; ".join(sorted(set(where))),
                    f"{name}: {len(shown)} of its {len(answers)} distinct answers "
                    f"({', '.join(shown)})",
                    "as is",
                    total,
                )
            )
    return findings


def find_answers(segments: list[Segment], calls: list[GradedCall]) -> list[Finding]:
    """Every graded output (in any of :func:`answer_forms`) that a page's segments
    show in full; one finding per call (its first form found)."""
    page = Page(segments)
    findings: list[Finding] = []
    if not page.segments:
        return findings
    seen: set[tuple] = set()
    for c in calls:
        values = flat_numbers(c.output)
        key = (c.name, tuple(np.round(values, 12)) if len(values) < 10_000 else id(c))
        if not values or key in seen:
            continue
        seen.add(key)
        for ans in answer_forms(f"{c.name} {c.kind} {c.call}", values):
            hit = page.find(ans)
            if hit is not None:
                seg, stride, d = hit
                form = ans.form + (f", every {stride}th number" if stride > 1 else "")
                findings.append(Finding(page.segments[seg].where, ans.label, form, d))
                break
    return findings + find_small_answers(page, calls)


# --------------------------------------------------------------------------------------
# functions a chapter defines that compute a graded function


class _LibraryCalled(Exception):
    pass


def _same_output(got, want) -> bool:
    g, w = flat_numbers(got), flat_numbers(want)
    if len(g) != len(w) or not w:
        return False
    g, w = np.asarray(g), np.asarray(w)
    scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=1.0))
    return bool(np.allclose(g, w, rtol=RTOL, atol=RTOL * scale, equal_nan=True))


@contextlib.contextmanager
def _alarm(seconds: int):
    """At most ``seconds`` for the block (SIGALRM); an alarm already set (the
    scan server's limit per chapter) is set again afterwards, less the time spent."""
    import time

    def stop(signum, frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, stop)
    earlier = signal.alarm(seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        if earlier:
            signal.alarm(max(1, earlier - int(time.monotonic() - start)))


def functions_computing_answers(
    namespace: dict,
    calls: list[GradedCall],
    counterparts: dict[str, object],
    tried: set | None = None,
) -> list[tuple]:
    """``(variable, graded name, calls agreed)`` for each function defined in
    ``namespace`` by the chapter (``__module__ == "__main__"``) that returns a graded
    function's reference output on at least two of its graders' inputs whose
    outputs are informative and on every such input it accepts (a call that does
    not bind or raises is not counted; one different output clears the function:
    a rule right for some inputs only, such as chapter 9's power-of-two slope
    formula, is a known mistake, not the answer), with the library's own graded
    functions made to
    raise meanwhile (a chapter function that only calls the library computes
    nothing itself). Inputs are given as the grader gives them (positional and
    keyword arguments bound by the function's signature). ``tried``: ids of
    functions tried before (skipped; the new ones are added)."""
    import torch

    library = [
        m
        for n, m in list(sys.modules.items())
        if m is not None
        and n.startswith("course_lib")
        and not n.startswith(("course_lib.checks", "course_lib.grading"))
    ]
    swapped: list[tuple[object, str, object]] = []
    targets = {id(f) for f in counterparts.values()}

    def refuse(*a, **k):
        raise _LibraryCalled

    for module in library + [None]:
        space = vars(module) if module is not None else namespace
        for key, value in list(space.items()):
            if id(value) in targets:
                swapped.append((space, key, value))
                space[key] = refuse
    by_name: dict[str, list[GradedCall]] = {}
    for c in calls:
        if len(flat_numbers(c.output)) >= 4 and not says_little(
            np.asarray(flat_numbers(c.output))
        ):
            by_name.setdefault(c.name, []).append(c)
    found = []
    try:
        for var, fn in list(namespace.items()):
            if var.startswith("_") or not inspect.isfunction(fn):
                continue
            if getattr(fn, "__module__", None) != "__main__":
                continue
            if tried is not None:
                if id(fn) in tried:
                    continue
                tried.add(id(fn))
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            for name, group in by_name.items():
                agreed = disagreed = 0
                for c in group[:24]:
                    try:
                        sig.bind(*c.args, **c.kwargs)
                    except TypeError:
                        continue
                    try:
                        with (
                            _alarm(FUNCTION_CALL_SECONDS),
                            contextlib.redirect_stdout(io.StringIO()),
                            torch.no_grad(),
                        ):
                            got = fn(*copy.deepcopy(c.args), **copy.deepcopy(c.kwargs))
                    except BaseException:  # noqa: BLE001 - any failure: no agreement
                        continue
                    if _same_output(got, c.output):
                        agreed += 1
                    else:
                        disagreed += 1
                        break
                if agreed >= 2 and not disagreed:
                    found.append((var, name, agreed))
    finally:
        for space, key, value in swapped:
            space[key] = value
    return found


# --------------------------------------------------------------------------------------
# running a chapter


def counterparts() -> dict[str, object]:
    """The library functions the graded functions are planned with: qualified name ->
    function (the graders' own ``_ref_*`` helpers excluded)."""
    import course_lib
    from course_lib.grading.editions.library import _plan_reference
    from course_lib.grading.notebooks.integrity import pristine_graders

    course_lib._load_all()
    out = {}
    for name, modules in pristine_graders().items():
        if not name.startswith("grade_"):
            continue
        for module_name in modules:
            try:
                ref = _plan_reference(sys.modules[module_name], name)
            except AttributeError:
                continue
            where = str(getattr(ref, "__module__", ""))
            if where.startswith("course_lib.") and not where.startswith(
                "course_lib.checks"
            ):
                out[f"{where}.{ref.__name__}"] = ref
    return out


def _source_line(lines: list[str], source: str) -> int:
    first = next((s for s in source.splitlines() if s.strip()), "")
    return next((i + 1 for i, s in enumerate(lines) if s == first), 0)


def interactive_figures(md_text: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each ``{interactive-figure}`` left in the class edition."""
    from course_lib.grading.editions.launch import strip_open_only

    kept = strip_open_only(md_text)
    lines = md_text.splitlines()
    out = []
    for m in re.finditer(r"^`{3,}\{interactive-figure\}\s+(\w+)", kept, re.M):
        line = next((i + 1 for i, s in enumerate(lines) if s.strip() == m.group(0)), 0)
        out.append((line, m.group(1)))
    return out


def page_contents(md_path: Path, calls: list[GradedCall]) -> dict:
    """Run the class edition of the chapter at ``md_path``: its segments (what it
    shows) and the functions it defines that compute a graded function."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    import matplotlib.figure
    from IPython.core.interactiveshell import InteractiveShell

    from course_lib.grading.editions.launch import (
        chapter_notebook,
        is_setup_cell,
        read_settings,
    )
    from course_lib.viz.interactive import figure_json

    matplotlib.use("Agg")
    rel = f"book/{md_path.name}"
    root = md_path.resolve().parent.parent
    md_text = md_path.read_text()
    lines = md_text.splitlines()
    if not (root / "_toc.yml").is_file():
        # a chapter outside the course (a planted page, an old version from git):
        # chapter_notebook reads the table of contents of the folder above it
        import tempfile

        root = Path(tempfile.mkdtemp())
        (root / "book").mkdir()
        (root / "book" / md_path.name).write_text(md_text)
        (root / "_toc.yml").write_text(f"format: jb-book\nroot: book/{md_path.stem}\n")
    nb = json.loads(
        chapter_notebook(
            root, f"book/{md_path.stem}", read_settings(ROOT), class_edition=True
        )
    )
    segments: list[Segment] = []
    for line, name in interactive_figures(md_text):
        segments += json_segments(
            f"{rel}:{line} interactive figure {name} (JSON)",
            json.loads(figure_json(name)),
        )

    made: list = []
    original_init = matplotlib.figure.Figure.__init__

    def init(self, *a, **k):
        original_init(self, *a, **k)
        made.append(self)

    matplotlib.figure.Figure.__init__ = init
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    shown = {
        "text/plain",
        "text/html",
        "text/markdown",
        "text/latex",
        "application/json",
    }
    for mime, formatter in shell.display_formatter.formatters.items():
        formatter.enabled = mime in shown
    published: list[tuple[dict, dict]] = []
    publish = shell.display_pub.publish

    def record(data, metadata=None, *a, **k):
        published.append((data, metadata or {}))

    shell.display_pub.publish = record
    parts = counterparts()
    functions: list[dict] = []
    reported: set[str] = set()
    tried: set[int] = set()
    here = os.getcwd()
    os.chdir(md_path.resolve().parent)
    try:
        for cell in nb["cells"]:
            if cell["cell_type"] != "code" or is_setup_cell(cell):
                continue
            source = "".join(cell["source"])
            line = _source_line(lines, source)
            where = f"{rel}:{line}"
            out = io.StringIO()
            published.clear()
            first_figure = len(made)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                shell.run_cell(source, store_history=False)
            if out.getvalue().strip():
                segments.append(text_segment(f"{where} printed output", out.getvalue()))
            for data, metadata in published:
                glued = (metadata.get("scrapbook") or {}).get("name")
                what = f"glued value {glued!r}" if glued else "displayed output"
                for mime, value in data.items():
                    if "image/" in mime:
                        continue
                    text = value if isinstance(value, str) else json.dumps(value)
                    if mime.endswith("html"):
                        text = re.sub(r"<[^>]+>", " ", text)
                    segments.append(text_segment(f"{where} {what} ({mime})", text))
            for k, fig in enumerate(made[first_figure:]):
                segments += figure_segments(f"{where} figure {k}", fig)
            for var, name, agreed in functions_computing_answers(
                shell.user_ns, calls, parts, tried
            ):
                if var not in reported:
                    reported.add(var)
                    functions.append(
                        {
                            "where": where,
                            "function": var,
                            "computes": name,
                            "agreed": agreed,
                        }
                    )
    finally:
        os.chdir(here)
        shell.display_pub.publish = publish
        matplotlib.figure.Figure.__init__ = original_init
    return {"segments": segments, "functions": functions}


def scan_chapter(md_path: Path, calls: list[GradedCall] | None = None) -> dict:
    """What :func:`page_contents` finds in a chapter, as JSON-ready findings:
    ``{"shown": [...], "functions": [...]}``."""
    calls = graded_calls() if calls is None else calls
    contents = page_contents(md_path, calls)
    shown = find_answers(contents["segments"], calls)
    return {
        "shown": [f.__dict__ | {"text": f.describe()} for f in shown],
        "functions": contents["functions"],
        "segments": len(contents["segments"]),
    }


def serve() -> None:
    """Scan chapters one after another, each in a fork of this process (which has
    computed the graded calls once). Requests on stdin, one per line:
    ``CHAPTER.md<TAB>RESULT.json<TAB>LOG``; the child's exit status on stdout."""
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("MPLBACKEND", "Agg")
    import IPython.core.interactiveshell  # noqa: F401 - loaded before the fork
    import matplotlib.pyplot  # noqa: F401

    import course_lib

    course_lib._load_all()
    calls = graded_calls()
    for request in sys.stdin:
        md, result, log = request.rstrip("\n").split("\t")
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                signal.alarm(1200)
                Path(result).write_text(json.dumps(scan_chapter(Path(md), calls)))
                status = 0
            except BaseException:  # noqa: BLE001 - reported through the log
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
        sys.exit(0)
    found = scan_chapter(Path(sys.argv[1]).resolve())
    for f in found["shown"]:
        print(f["text"])
    for f in found["functions"]:
        print(
            f"{f['where']}: function {f['function']} computes {f['computes']} "
            f"({f['agreed']} grader inputs agree)"
        )
    print(f"{found['segments']} segments looked at")
