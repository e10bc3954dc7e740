"""The ids the grading tool counts a class's mistakes by (issue 22).

Every known mistake of every grader has a slug (``Mistake(answer, explanation,
slug)``): kebab-case, required, unique among the mistakes of one graded function.
A failure that names a known mistake carries it (``exc.mistake``, ``exc.explanation``,
from ``known_mistake``); one that is not a wrong value carries its ``cause``; one
that is a wrong value a short preview of it (``exc.answer``). The replay outside the
student's kernel keeps the cause the kernel recorded when it is a known one. And
every graded function has the section of the book that teaches it
(``course_lib.checks.sections``), labelled in its chapter.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from zoo import ex01_permutation as z01
from zoo import ex02_sinusoidal as z02
from zoo import ex03_rotation as z03
from zoo import ex04_rope as z04
from zoo import ex05_alibi as z05
from zoo import ex06_relative as z06
from zoo import ex07_transformer_xl as z07
from zoo import ex08_da as z08
from zoo import ex09_bug_zoo as z09
from zoo import ex11_long_context as z11
from zoo import harness

import course_lib.checks as checks
from course_lib.checks import CheckFailed, _core, _record, _stored
from course_lib.checks import ex01_permutation as g01
from course_lib.checks import ex02_sinusoidal as g02
from course_lib.checks import ex03_rotation as g03
from course_lib.checks import ex04_rope as g04
from course_lib.checks import ex05_alibi as g05
from course_lib.checks import ex06_relative as g06
from course_lib.checks import ex07_transformer_xl as g07
from course_lib.checks import ex08_da as g08
from course_lib.checks import ex09_bug_zoo as g09
from course_lib.checks import ex10_lab as g10
from course_lib.checks import ex11_long_context as g11
from course_lib.checks._core import Mistake, known_mistake, preview
from course_lib.checks._errors import CAUSES
from course_lib.checks.sections import SECTIONS, Section, section_of

ROOT = Path(__file__).resolve().parent.parent
MODULES = [g01, g02, g03, g04, g05, g06, g07, g08, g09, g10, g11]
PAIRS = [
    (g01, z01), (g02, z02), (g03, z03), (g04, z04), (g05, z05), (g06, z06),
    (g07, z07), (g08, z08), (g09, z09), (g11, z11),
]
KEBAB = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
KNOWN = " is wrong in a known way: "
# A module-level function of a checks module that builds known mistakes: its name
# says so (the rule the student edition stores them by, _stored.local_references).
HELPER = re.compile(r"_\w*(mistakes|variants?)\w*")


def _graded_functions() -> dict[str, object]:
    """graded function name -> its checks module."""
    out = {}
    for module in MODULES:
        for name in module.__all__:
            kind, _, function = name.partition("_")
            if kind in ("check", "grade"):
                out[function] = module
    return out


GRADED = _graded_functions()


# --- the slug: required, kebab-case, in every Mistake of the graders' code


def test_a_mistake_without_a_kebab_case_slug_fails_when_it_is_made() -> None:
    with pytest.raises(TypeError):
        Mistake(torch.zeros(2), "an explanation")  # type: ignore[call-arg]
    for bad in ("", "Bloom", "bloom_form", "bloom form", "-bloom", "bloom--form",
                "bloom-", "x" * 41, None, 3):
        with pytest.raises(ValueError, match="kebab-case"):
            Mistake(torch.zeros(2), "an explanation", bad)  # type: ignore[arg-type]
    assert Mistake(1.0, "text", "exponent-4i").slug == "exponent-4i"


def _mistake_calls() -> list[tuple[str, int, ast.Call]]:
    out = []
    for path in sorted((ROOT / "course_lib" / "checks").glob("ex*_*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Mistake"
            ):
                out.append((path.name, node.lineno, node))
    return out


def test_every_mistake_in_the_graders_code_names_its_slug() -> None:
    """Each ``Mistake(...)`` of a checks module passes three arguments; a literal
    slug is kebab-case; the others copy the slug of a mistake (``m.slug``) or take
    it from a table of literal slugs (ex06's keys, ex11's ends)."""
    calls = _mistake_calls()
    assert len(calls) >= 100, len(calls)  # every helper's mistakes, one call each
    literal = 0
    for name, line, call in calls:
        where = f"{name}:{line}"
        assert len(call.args) == 3 and not call.keywords, where
        slug = call.args[2]
        if isinstance(slug, ast.Constant):
            assert isinstance(slug.value, str) and KEBAB.fullmatch(slug.value), where
            literal += 1
        else:
            assert isinstance(slug, ast.Name | ast.Attribute), where
    assert literal >= len(calls) - 5


def test_slugs_of_one_helper_are_unique_in_its_source() -> None:
    """Within one helper's code a literal slug appears once (a second mistake with
    the same slug would be counted as the first)."""
    for path in sorted((ROOT / "course_lib" / "checks").glob("ex*_*.py")):
        tree = ast.parse(path.read_text())
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            slugs = [
                node.args[2].value
                for node in ast.walk(fn)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Mistake"
                and len(node.args) == 3
                and isinstance(node.args[2], ast.Constant)
            ]
            assert len(slugs) == len(set(slugs)), (path.name, fn.name, slugs)


# --- every grader, run on the course's solution: the mistakes it builds


def _mistakes_in(value: object) -> list[list[Mistake]]:
    """The lists of mistakes a helper returned (a list, or a tuple of lists)."""
    if isinstance(value, list) and value and all(isinstance(m, Mistake) for m in value):
        return [value]
    if isinstance(value, tuple):
        return [found for v in value for found in _mistakes_in(v)]
    return []


def _run_quietly(grader, *args) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        grader(*args)


@pytest.fixture(scope="module")
def built() -> dict[str, dict[str, set[str]]]:
    """function -> {slug: names of the helpers that built it}, from every public and
    hidden grader run on the instructor's solution, with each helper's result lists
    checked as they are made: pairwise distinct slugs in one list."""
    mp = pytest.MonkeyPatch()
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    current = {"function": ""}
    try:
        for module in MODULES:
            for name, obj in list(vars(module).items()):
                if HELPER.fullmatch(name) and inspect.isfunction(obj):

                    def wrapper(*a, __fn=obj, __name=f"{module.__name__}.{name}", **k):
                        result = __fn(*a, **k)
                        for found in _mistakes_in(result):
                            slugs = [m.slug for m in found]
                            assert len(slugs) == len(set(slugs)), (__name, slugs)
                            for slug in slugs:
                                seen[current["function"]][slug].add(__name)
                        return result

                    mp.setattr(module, name, wrapper)
        for module in MODULES:
            assignment = module.__name__.rsplit(".", 1)[1]
            namespace = _stored._solution_namespace(ROOT, assignment)
            for grader_name in module.__all__:
                grader = getattr(module, grader_name)
                function = grader_name.split("_", 1)[1]
                params = [p for p in inspect.signature(grader).parameters
                          if p not in ("variant", "seed")]  # a term's
                args = [namespace[function if len(params) == 1 else p] for p in params]
                current["function"] = function
                _run_quietly(grader, *args)
    finally:
        mp.undo()
    return {f: dict(s) for f, s in seen.items()}


def test_every_graded_function_has_named_mistakes(built) -> None:
    assert set(built) == set(GRADED)
    for function, slugs in built.items():
        assert len(slugs) >= 2, (function, sorted(slugs))


def test_a_slug_means_one_mistake_per_function(built) -> None:
    """Unique per function: no two helpers of one function use the same slug (one
    helper may return the same mistake twice, as a wrong output and as wrong
    weights: ex06 and ex08)."""
    for function, slugs in built.items():
        for slug, helpers in slugs.items():
            assert len(helpers) == 1, (function, slug, helpers)


def test_the_brief_s_examples_are_the_ids(built) -> None:
    """The ids of the issue's examples: the lead's records and the instructor guide
    use them."""
    assert {"power-of-two-only", "reversed-heads"} <= set(built["alibi_slopes"])
    assert {"bloom-form", "positive-sign"} <= set(built["alibi_bias"])


# --- the zoo: a known-way rejection carries the mistake, no other one does


def _wrong_entries(function: str) -> list[tuple[str, object, bool]]:
    """``(label, call the grader with it, public)`` for each wrong implementation."""
    if function == "hand_computation":
        return [(f"{v}", v, public) for v, _fragment, public in z03.HAND_WRONG]
    for _grader, zoo in PAIRS:
        if function in zoo.WRONG:
            return [(fn.__name__, (fn,), public)
                    for fn, _fragment, public in zoo.WRONG[function]]
    return []


ZOO_FUNCTIONS = ["hand_computation", *harness.names(PAIRS)]


def _judge(grader, args) -> CheckFailed | None:
    try:
        _run_quietly(grader, *args)
    except CheckFailed as exc:
        return exc
    return None


def _assert_consistent(exc: CheckFailed, slugs: set[str], where: str) -> bool:
    """``exc`` names a known mistake exactly when its message says so; returns
    whether it does."""
    message = str(exc)
    if KNOWN in message:
        assert exc.mistake in slugs, (where, exc.mistake, sorted(slugs))
        assert exc.explanation == message.split(KNOWN, 1)[1], where
        assert isinstance(exc.answer, str) and 0 < len(exc.answer) <= 200, where
        assert exc.cause is None, where
        return True
    assert exc.mistake is None and exc.explanation is None, (where, message)
    return False


@pytest.mark.parametrize("function", ZOO_FUNCTIONS)
def test_the_zoo_s_known_mistakes_carry_their_slug(function, built) -> None:
    check = getattr(GRADED[function], f"check_{function}")
    grade = getattr(GRADED[function], f"grade_{function}")
    slugs = set(built[function])
    named = set()
    for label, args, public in _wrong_entries(function):
        for grader in (grade, check) if public else (grade,):
            exc = _judge(grader, args)
            assert exc is not None, (label, grader.__name__)
            if _assert_consistent(exc, slugs, f"{grader.__name__}({label})"):
                named.add(exc.mistake)
    # the zoo holds known mistakes of every function: some are named
    assert named, function


def test_ex10_mistakes_carry_their_slug(built) -> None:
    """ex10 has no zoo module: the lab's linear-instead-of-log bias and a ratio
    without chance subtracted, written here."""

    def linear_bias(n_heads, seq_len):
        h = torch.arange(1, n_heads + 1, dtype=torch.float32)
        slopes = 2.0 ** (-8.0 * h / n_heads)
        pos = torch.arange(seq_len, dtype=torch.float32)
        back = pos[:, None] - pos[None, :]
        bias = -slopes[:, None, None] * back.clamp(min=0)
        return bias.masked_fill(back < 0, float("-inf"))

    def plain_ratio(summary, task, method, chance):
        rows = sorted((r["length"], r["mean"]) for r in summary
                      if r["task"] == task and r["method"] == method)
        return {n: a / rows[0][1] for n, a in rows}

    for function, fn, slug in (("log_distance_bias", linear_bias, "linear-penalty"),
                               ("retained_skill", plain_ratio,
                                "no-chance-subtracted")):
        exc = _judge(getattr(g10, f"check_{function}"), (fn,))
        assert exc is not None and exc.mistake == slug, (function, exc)
        assert _assert_consistent(exc, set(built[function]), function)


def test_known_mistake_builds_the_message_of_before() -> None:
    m = Mistake(torch.zeros(3), "the slopes are reversed", "reversed-heads")
    exc = known_mistake("alibi_slopes(3)", m)
    assert str(exc) == (
        "alibi_slopes(3) is wrong in a known way: the slopes are reversed"
    )
    assert (exc.mistake, exc.explanation, exc.cause, exc.answer) == (
        "reversed-heads", "the slopes are reversed", None, None)
    exc = known_mistake("x", m, got=torch.tensor([1.0, 2.0]))
    assert exc.answer == "tensor of shape (2,), float32: 1, 2"


# --- the cause of a failure that is not a wrong value


def _stub(n_heads):
    raise NotImplementedError()


def _raises(n_heads):
    return torch.zeros(n_heads) / torch.zeros(3, 3)  # a shape error


def _changes_its_input(x, positions):
    x.mul_(2.0)  # in place
    return x.clone()


@pytest.mark.parametrize(
    "grader,fn,cause",
    [
        (g05.check_alibi_slopes, _stub, "not-attempted"),
        (g05.check_alibi_slopes, _raises, "raised"),
        (g05.check_alibi_slopes, z05.slopes_calls_library, "calls-library"),
        (g05.check_alibi_slopes, z05.slopes_imported_from_library, "calls-library"),
        (g04.check_apply_rope, _changes_its_input, "changed-input"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_the_cause_of_a_failure(grader, fn, cause) -> None:
    exc = _judge(grader, (fn,))
    assert exc is not None and exc.cause == cause, (exc, getattr(exc, "cause", None))
    assert exc.mistake is None and exc.explanation is None and exc.answer is None


def test_every_library_call_of_the_zoo_has_its_cause() -> None:
    for function, fn in [p.values for p in harness.calls_library_params(PAIRS)]:
        exc = _judge(getattr(GRADED[function], f"check_{function}"), (fn,))
        assert exc is not None and exc.cause == "calls-library", (function, fn)


def test_a_function_that_does_not_return_has_its_cause(monkeypatch) -> None:
    monkeypatch.setenv("COURSE_CHECK_TIME_LIMIT", "0.3")
    monkeypatch.setattr(_core, "_HUNG", {})

    def loops(n_heads):
        while True:
            pass

    first = _judge(g05.check_alibi_slopes, (loops,))
    assert first is not None and "did not return" in str(first)
    assert first.cause == "time-limit"
    again = _judge(g05.check_alibi_slopes, (loops,))  # not waited for twice
    assert again is not None and str(again).startswith("not run:")
    assert again.cause == "time-limit"


def test_a_wrong_value_has_no_cause_and_a_short_preview() -> None:
    exc = _judge(g05.check_alibi_slopes, (lambda n: torch.zeros(n),))
    assert exc is not None and exc.cause is None and exc.mistake is None
    assert exc.answer == "tensor of shape (8,), float32: 0, 0, 0, 0, 0, 0, ..."
    exc = _judge(g05.check_alibi_slopes, (lambda n: [0.5] * n,))
    assert exc is not None and exc.answer == "list of 8: (0.5; 0.5; 0.5, ...)"
    exc = _judge(g11.check_yarn_attention_factor, (lambda *a: 3.25,))
    assert exc is not None and exc.answer == "3.25" and exc.mistake is None


def test_a_value_judged_by_its_properties_has_a_preview() -> None:
    """ex02 and ex05 explain a wrong table by the property it breaks (bounded, a
    zero diagonal): those failures show the answer too."""
    exc = _judge(g05.check_alibi_bias, (lambda n, seq: -torch.ones(n, seq, seq),))
    assert exc is not None and "should be 0" in str(exc) and exc.mistake is None
    assert exc.answer == (
        "tensor of shape (4, 5, 5), float32: -1, -1, -1, -1, -1, -1, ..."
    )
    exc = _judge(g02.check_sinusoidal_encoding, (lambda n, d: 2 * torch.ones(n, d),))
    assert exc is not None and "lies in [-1, 1]" in str(exc) and exc.mistake is None
    assert exc.answer == "tensor of shape (6, 4), float32: 2, 2, 2, 2, 2, 2, ..."


def test_a_preview_is_short_and_runs_no_student_code() -> None:
    big = torch.randn(64, 64, 64, generator=torch.Generator().manual_seed(0))
    text = preview(big)
    assert text.startswith("tensor of shape (64, 64, 64), float32: ")
    assert len(text) <= 200 and text.endswith(", ...") and text.count(",") == 3 + 6
    assert len(preview(tuple(big[:, 0] for _ in range(50)))) <= 200
    assert preview({512: 0.5, 1024: float("nan")}) == "dict of 2: {512: 0.5, 1024: nan}"

    class Sneaky(float):
        def __format__(self, spec):  # pragma: no cover - must not run
            raise AssertionError("student code ran")

        __repr__ = __str__ = __format__

    assert preview(Sneaky(1.0)) == "Sneaky"
    assert preview([Sneaky(1.0)]) == "list of 1: (Sneaky)"
    assert preview(torch.zeros(2, 2).to_sparse()) == (
        "tensor of shape (2, 2), float32 (sparse_coo, cpu)")


def test_a_check_failed_keeps_its_fields_through_pickle() -> None:
    import pickle

    exc = _judge(g05.check_alibi_bias, (z05.bias_bloom,))
    assert exc is not None and exc.mistake == "bloom-form"
    back = pickle.loads(pickle.dumps(exc))
    assert str(back) == str(exc)
    assert (back.mistake, back.explanation, back.answer, back.cause) == (
        exc.mistake, exc.explanation, exc.answer, exc.cause)
    assert CheckFailed("x").mistake is None  # class-level defaults


# --- the replay outside the kernel keeps a known cause, drops any other


def _record_events(grader, fn) -> list[dict]:
    recorder = _record._Recorder()
    previous, _record._session = _record._session, recorder
    try:
        exc = _judge(grader, (fn,))
    finally:
        _record._session = previous
    assert exc is not None
    return json.loads(json.dumps(recorder.events))  # what crosses from the kernel


def _replay(grader, events, name) -> CheckFailed:
    with _record.replaying(events):
        exc = _judge(grader, (_record.StudentFunction(name),))
    assert exc is not None
    return exc


@pytest.mark.parametrize(
    "fn,cause",
    [(_stub, "not-attempted"), (_raises, "raised"),
     (z05.slopes_calls_library, "calls-library")],
    ids=["stub", "raises", "library"],
)
def test_the_replay_keeps_the_recorded_cause(fn, cause) -> None:
    events = _record_events(g05.check_alibi_slopes, fn)
    assert events[-1]["cause"] == cause and "raised" in events[-1]
    replayed = _replay(g05.check_alibi_slopes, events, "alibi_slopes")
    assert replayed.cause == cause
    assert str(replayed) == events[-1]["raised"]


@pytest.mark.parametrize("forged", ["forged", "", ["raised"], {"a": 1}, 3, None])
def test_the_replay_drops_an_unknown_cause(forged) -> None:
    events = _record_events(g05.check_alibi_slopes, _stub)
    events[-1]["cause"] = forged
    replayed = _replay(g05.check_alibi_slopes, events, "alibi_slopes")
    assert replayed.cause is None
    del events[-1]["cause"]
    assert _replay(g05.check_alibi_slopes, events, "alibi_slopes").cause is None


def test_the_replay_names_the_mistake_from_the_recorded_answer() -> None:
    """The replay judges the recorded answer itself: the mistake comes from the
    trusted grader, not from the kernel's message."""
    events = _record_events(g05.check_alibi_bias, z05.bias_bloom)
    assert "raised" not in events[-1]  # the call returned; the kernel judged it
    replayed = _replay(g05.check_alibi_bias, events, "alibi_bias")
    assert replayed.mistake == "bloom-form" and replayed.cause is None
    assert replayed.answer.startswith("tensor of shape (4, 5, 5), float32: ")


# --- where each graded function is taught


def _labels() -> dict[str, list[tuple[Path, int]]]:
    found: dict[str, list[tuple[Path, int]]] = defaultdict(list)
    for path in sorted((ROOT / "book").glob("**/*.md")):
        for i, line in enumerate(path.read_text().splitlines()):
            m = re.fullmatch(r"\(([\w-]+)\)=", line.strip())
            if m:
                found[m.group(1)].append((path, i))
    return found


def test_every_graded_function_has_a_section() -> None:
    assert set(SECTIONS) == set(GRADED)
    names = {n.split("_", 1)[1] for n in checks.__all__ if "_" in n}
    assert set(SECTIONS) == names
    assert section_of("alibi_bias") == SECTIONS["alibi_bias"]
    assert section_of("no_such_function") is None


@pytest.mark.parametrize("function", sorted(SECTIONS))
def test_a_section_label_stands_once_above_its_heading(function) -> None:
    section = SECTIONS[function]
    assert isinstance(section, Section) and KEBAB.fullmatch(section.label)
    assert re.fullmatch(r"book/\d\d-[a-z0-9-]+", section.page), section.page
    page = ROOT / f"{section.page}.md"
    places = _labels()[section.label]
    assert len(places) == 1 and places[0][0] == page, places
    lines = page.read_text().splitlines()
    heading = lines[places[0][1] + 1]
    m = re.fullmatch(r"(#{2,4}) (.+)", heading)
    assert m and m.group(2) == section.title, (heading, section.title)


def test_labels_are_unique_book_wide() -> None:
    """The new section labels and every other explicit target of the book
    (chapter labels, equation labels) are all distinct."""
    labels = _labels()
    assert all(len(places) == 1 for places in labels.values()), {
        k: v for k, v in labels.items() if len(v) > 1}
    equations = set()
    for path in sorted((ROOT / "book").glob("*.md")):
        equations |= set(re.findall(r"^\$\$ \(([\w-]+)\)$", path.read_text(), re.M))
    assert not equations & {s.label for s in SECTIONS.values()}


def test_the_causes_are_the_documented_ones() -> None:
    assert CAUSES == ("not-attempted", "raised", "calls-library", "changed-input",
                      "time-limit")
    assert all(KEBAB.fullmatch(c) for c in CAUSES)
