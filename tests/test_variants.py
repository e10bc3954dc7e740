"""Answers that change each term (issue 34 item 3): exercise variants and the seed of
the hidden cases, chosen by ``CourseTerm`` in ``nbgrader_config.py``
(course_lib/grading/editions/term.py).

Every variant an exercise declares (its checks module's ``VARIANTS``) is tested here
without being listed: the open edition's solution fails the variant's graders with
the named mistake ``default-variant``; the variant's own solution (the source
notebook's ``course_variants`` text) passes them, with and without a seed; its worked
examples hold; a release with it carries its text and its grader values; the grading
kernel's plan and the pristine replay judge it as the graders do. The seed draws
different hidden calls for different seeds and the same for the same; nothing set
keeps the open edition's release and cases. One end-to-end release and autograde of
ex05 with its variant is marked slow.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from worked_examples import assert_worked_examples_hold, worked_examples

from course_lib.checks import _core, _record, _stored
from course_lib.checks._core import TERM_PARAMS, plan_key
from course_lib.checks._errors import CheckFailed
from course_lib.grading.editions.library import _plan_one, _plan_reference
from course_lib.grading.editions.term import (
    VARIANT_KEY,
    Term,
    exercise_variants,
    grader_values,
    term_notebook,
)
from course_lib.grading.errors import CourseError

ROOT = Path(__file__).resolve().parent.parent
DECLARED = exercise_variants()
CASES = [(a, v) for a, variants in sorted(DECLARED.items()) for v in sorted(variants)]
SEED = 20270101
TERM_CONFIG = "\nc.CourseTerm.variants = {{{a!r}: {v!r}}}\nc.CourseTerm.seed = {s}\n"


def _module(assignment: str):
    return importlib.import_module(f"course_lib.checks.{assignment}")


def _student_args(grader, namespace: dict, function: str) -> list:
    """The student's functions a grader takes, from a solution's namespace."""
    params = [p for p in inspect.signature(grader).parameters if p not in TERM_PARAMS]
    return [namespace[function if len(params) == 1 else p] for p in params]


def _quiet(fn, *args) -> None:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        fn(*args)


def test_at_least_one_exercise_declares_a_variant() -> None:
    assert ("ex05_alibi", "causal") in CASES
    for assignment, variants in DECLARED.items():
        for name, variant in variants.items():
            assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and name != "default"
            module = _module(assignment)
            assert "VARIANTS" not in module.__all__  # __all__ lists graders only
            for function, ref in variant.references.items():
                assert isinstance(ref, str) and callable(getattr(module, ref)), ref
                # the student edition stores it: the public check needs it there
                assert ref in _stored.local_references(inspect.getsource(module))
                assert hasattr(module, f"grade_{function}")


@pytest.mark.parametrize("assignment,variant", CASES)
def test_the_open_edition_solution_fails_the_variant_the_variant_solution_passes(
    assignment: str, variant: str
) -> None:
    module = _module(assignment)
    default = _stored._solution_namespace(ROOT, assignment)
    own = _stored._solution_namespace(ROOT, assignment, variant)
    for function in DECLARED[assignment][variant].references:
        grade = getattr(module, f"grade_{function}")
        check = getattr(module, f"check_{function}", None)
        for seed in (None, SEED, 7):
            _quiet(grade, *_student_args(grade, own, function), variant, seed)
            with pytest.raises(CheckFailed) as failed:
                _quiet(grade, *_student_args(grade, default, function), variant, seed)
            assert failed.value.mistake == "default-variant", str(failed.value)
            assert "open edition" in str(failed.value)
        # the variant's answer is not the default's either
        with pytest.raises(CheckFailed):
            _quiet(grade, *_student_args(grade, own, function))
        if check is not None and "variant" in inspect.signature(check).parameters:
            _quiet(check, *_student_args(check, own, function), variant)
            with pytest.raises(CheckFailed) as failed:
                _quiet(check, *_student_args(check, default, function), variant)
            assert failed.value.mistake == "default-variant"


@pytest.mark.parametrize("assignment,variant", CASES)
def test_the_variant_s_worked_examples_hold_for_its_solution(
    assignment: str, variant: str
) -> None:
    source = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb")
                        .read_text())
    texts = [
        c["metadata"][VARIANT_KEY][variant]
        for c in source["cells"]
        if c["cell_type"] == "markdown" and variant in c["metadata"].get(VARIANT_KEY, {})
    ]
    blocks = [b for t in texts for b in worked_examples(t)]
    assert blocks, f"{assignment}/{variant}: its task text has no worked example"
    namespace = _stored._solution_namespace(ROOT, assignment, variant)
    assert_worked_examples_hold(blocks, namespace, f"{assignment}/{variant}")


def test_an_unknown_exercise_variant_or_seed_is_refused_with_the_known_ones() -> None:
    with pytest.raises(CourseError, match=r"'cached'.*default, causal"):
        Term.checked({"ex05_alibi": "cached"})
    with pytest.raises(CourseError, match=r"ex01_permutation.*ex05_alibi: .*causal"):
        Term.checked({"ex01_permutation": "causal"})
    with pytest.raises(CourseError, match="whole number"):
        Term.checked({}, "20270101")
    with pytest.raises(CourseError, match="dict"):
        Term.checked(["ex05_alibi"])
    # the graders refuse it too (a hand-edited cell)
    bias = _stored._solution_namespace(ROOT, "ex05_alibi")["alibi_bias"]
    with pytest.raises(ValueError, match="variants: default, causal"):
        _module("ex05_alibi").check_alibi_bias(bias, "cached")
    # "default" is the open edition's and is left out
    assert Term.checked({"ex05_alibi": "default"}, None).is_default


def test_grader_values_are_what_the_cells_pass() -> None:
    m = _module("ex05_alibi")
    assert grader_values(m.grade_alibi_bias, "default", None) == ()
    assert grader_values(m.grade_alibi_bias, "causal", None) == ("causal",)
    assert grader_values(m.grade_alibi_bias, "causal", 5) == ("causal", 5)
    assert grader_values(m.grade_alibi_bias, "default", 5) == ("default", 5)
    assert grader_values(m.check_alibi_bias, "causal", 5) == ("causal",)
    assert grader_values(m.check_alibi_slopes, "causal", 5) == ()


def test_release_refuses_variant_text_no_module_declares() -> None:
    source = json.loads(
        (ROOT / "solutions/ex05_alibi/ex05_alibi.ipynb").read_text()
    )
    source["cells"][1]["metadata"][VARIANT_KEY] = {"cached": "text"}
    with pytest.raises(CourseError, match="'cached'.*does not declare"):
        term_notebook(source, "ex05_alibi", Term())
    plain = json.loads((ROOT / "solutions/ex01_permutation/ex01_permutation.ipynb")
                       .read_text())
    # the open edition's staged source is the source without variant text
    assert term_notebook(plain, "ex01_permutation", Term()) == plain


def _graders_with_seed() -> list[tuple[str, str]]:
    from course_lib.grading.notebooks.integrity import pristine_graders

    return sorted(
        (module, name)
        for name, modules in pristine_graders().items()
        for module, fn in modules.items()
        if name.startswith("grade_") and "seed" in inspect.signature(fn).parameters
        # a grader of values the task fixes (ex03's hand computation) calls no
        # student function: nothing to draw
        and _plan_reference(importlib.import_module(module), name) is not None
    )


@pytest.mark.parametrize("module_name,name", _graders_with_seed())
def test_a_seed_draws_the_hidden_calls(module_name: str, name: str) -> None:
    module = importlib.import_module(module_name)
    grader = getattr(module, name)
    reference = _plan_reference(module, name)

    def calls(seed):
        values = ("default", seed) if seed is not None else (None, None)
        return [(c, repr(a), repr(k)) for _p, c, a, k in _plan_one(grader, reference,
                                                                   values)]

    fixed, first, again, other = calls(None), calls(SEED), calls(SEED), calls(SEED + 1)
    assert first == again  # the same term, the same cases, on every run
    assert first != other  # last term's list does not carry over
    assert first != fixed  # nor the open edition's
    # the open edition's plan (no term) is the fixed list
    assert [c for c, _a, _k in fixed] == [
        c for _p, c, _a, _k in _plan_one(grader, reference, ())
    ]


def test_ex05_seeded_cases_keep_what_the_fixed_ones_were_chosen_for() -> None:
    m = _module("ex05_alibi")
    for seed in range(50):
        cases = m._hidden_bias_cases(seed)
        assert len(cases) == 8 and cases[-1][0] == 1 and 150 <= cases[-1][1] <= 200
        assert any(s == 1 for _n, s in cases[:-1])
        assert all(17 <= n <= 64 for n, _s in cases[:-1])  # more heads than ch. 5
        counts = m._hidden_slope_counts(seed)
        assert len(set(counts)) == 12 and min(counts) >= 17
        assert sum(1 for n in counts if n & (n - 1) == 0) == 1  # one power of two
    assert m._hidden_bias_cases(1) != m._hidden_bias_cases(2)


def _deferred_then_replayed(module_name, name, student, values) -> None:
    """The grading edition's deferred grader on ``student`` under a recorder, with
    the plan the term gives it, then the pristine grader on the record."""
    module = importlib.import_module(module_name)
    grader = getattr(module, name)
    variant = values[0] if values and values[0] else "default"
    plan = _plan_one(grader, _plan_reference(module, name, variant), values)
    previous_plans, previous_session = _core._plans, _record._session
    _core._plans = {"float32": {plan_key(name, values): plan}}
    try:
        recorder = _record._Recorder()
        _record._session = recorder
        n = len([p for p in inspect.signature(grader).parameters
                 if p not in TERM_PARAMS])
        _core.deferred_grade(name, (student,) + (None,) * (n - 1), values)
        _record._session = previous_session
        stand_in = _record.StudentFunction(name.removeprefix("grade_"))
        with _record.replaying(list(recorder.events), "float32"):
            _quiet(grader, stand_in, *(None,) * (n - 1), *values)
    finally:
        _core._plans, _record._session = previous_plans, previous_session


@pytest.mark.parametrize("assignment,variant", CASES)
def test_the_grading_kernel_s_plan_and_the_replay_follow_the_term(
    assignment: str, variant: str
) -> None:
    module_name = f"course_lib.checks.{assignment}"
    default = _stored._solution_namespace(ROOT, assignment)
    own = _stored._solution_namespace(ROOT, assignment, variant)
    for function in DECLARED[assignment][variant].references:
        name = f"grade_{function}"
        values = (variant, SEED)
        _deferred_then_replayed(module_name, name, own[function], values)
        with pytest.raises(CheckFailed) as failed:
            _deferred_then_replayed(module_name, name, default[function], values)
        assert failed.value.mistake == "default-variant"
    # a kernel written for another term has no plan for this one: it says so
    with pytest.raises(RuntimeError, match="another term"):
        previous = _core._plans
        _core._plans = {"float32": {}}
        try:
            _core.deferred_grade(f"grade_{function}", (own[function],), values)
        finally:
            _core._plans = previous


def _scratch(tmp_path: Path, assignment: str, variant: str | None):
    from course_lib.grading.course import Course
    from course_lib.grading.synthetic import scratch_course

    course = scratch_course(tmp_path / "course", ROOT, [assignment])
    if variant is not None:
        with open(course.root / "nbgrader_config.py", "a") as f:
            f.write(TERM_CONFIG.format(a=assignment, v=variant, s=SEED))
        course = Course(course.root)
    return course


def _cells(path: Path) -> list[tuple]:
    nb = json.loads(path.read_text())
    return [(c["cell_type"], "".join(c["source"]), c["metadata"]) for c in nb["cells"]]


@pytest.mark.parametrize("assignment", sorted(DECLARED))
def test_without_a_term_the_release_is_the_open_edition_s(tmp_path, assignment) -> None:
    from course_lib.grading.release import release

    course = _scratch(tmp_path, assignment, None)
    release(course, assignment)
    for committed in sorted((ROOT / "notebooks" / assignment).glob("*.ipynb")):
        made = course.release_dir / assignment / committed.name
        assert _cells(made) == _cells(committed)
        assert VARIANT_KEY not in made.read_text()


@pytest.mark.parametrize("assignment,variant", CASES)
def test_a_release_with_a_variant_carries_it(tmp_path, assignment, variant) -> None:
    from nbgrader.api import Gradebook

    from course_lib.grading.release import release

    course = _scratch(tmp_path, assignment, variant)
    release(course, assignment)
    source = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb")
                        .read_text())
    path = course.release_dir / assignment / f"{assignment}.ipynb"
    text = path.read_text()
    released = json.loads(text)
    assert VARIANT_KEY not in text and str(SEED) not in text
    assert released["metadata"]["course"] == {"variant": variant}
    by_index = dict(enumerate(released["cells"]))
    functions = DECLARED[assignment][variant].references
    for index, cell in enumerate(source["cells"]):
        own = cell["metadata"].get(VARIANT_KEY, {}).get(variant)
        got = "".join(by_index[index]["source"])
        if own is None:
            continue
        if cell["cell_type"] == "markdown":
            assert got == own  # the variant's task statement
        else:
            # the variant's solution cell, its solution cut by nbgrader: the lines
            # outside the solution region are the variant's
            head = own.split("### BEGIN SOLUTION")[0]
            assert got.startswith(head) and "BEGIN SOLUTION" not in got
    public = [
        "".join(c["source"]) for c in released["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade")
    ]
    for function in functions:
        check = getattr(_module(assignment), f"check_{function}", None)
        if check is not None and "variant" in inspect.signature(check).parameters:
            assert any(f"check_{function}({function}, {variant!r})" in s
                       for s in public), public
    with Gradebook(course.gradebook_url) as gb:
        cells = gb.find_notebook(assignment, assignment).source_cells
        hidden = [c.source for c in cells if "BEGIN HIDDEN TESTS" in c.source]
    for function in functions:
        assert any(f"grade_{function}({function}, {variant!r}, {SEED})" in s
                   for s in hidden), hidden


def test_publish_refuses_a_release_of_another_term(tmp_path) -> None:
    from course_lib.grading.editions.publish import PublishError, _check_term

    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\n" + TERM_CONFIG.format(a="ex05_alibi", v="causal", s=SEED)
    )
    folder = tmp_path / "notebooks" / "ex05_alibi"
    folder.mkdir(parents=True)
    notebook = json.loads(
        (ROOT / "notebooks/ex05_alibi/ex05_alibi.ipynb").read_text()
    )
    (folder / "ex05_alibi.ipynb").write_text(json.dumps(notebook))
    with pytest.raises(PublishError, match=r"'default'.*'causal'.*course release"):
        _check_term(tmp_path)
    notebook["metadata"]["course"] = {"variant": "causal"}
    (folder / "ex05_alibi.ipynb").write_text(json.dumps(notebook))
    _check_term(tmp_path)  # this term's release
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    with pytest.raises(PublishError, match=r"'causal'.*'default'"):
        _check_term(tmp_path)  # the open edition's configuration


@pytest.mark.slow
def test_ex05_released_and_autograded_with_the_causal_variant(tmp_path) -> None:
    """The class path end to end: release with the term, two submissions (the open
    edition's solution, the variant's), ``course autograde`` with the launcher it
    uses (the sandbox and its grading edition, planned for the term)."""
    script = textwrap.dedent(f"""
        import json
        from pathlib import Path
        from course_lib.grading.autograde import AutogradeOptions, autograde
        from course_lib.grading.collect import collect
        from course_lib.grading.course import Course
        from course_lib.grading.editions.term import Term, term_notebook
        from course_lib.grading.errors import CourseError
        from course_lib.grading.kernels.sandbox import grading_launcher
        from course_lib.grading.kernels.start import RlimitLauncher
        from course_lib.grading.release import release
        from course_lib.grading.synthetic import (
            scratch_course, solution_answers, student_notebook, write_submission)
        tmp, A = Path({str(tmp_path)!r}), "ex05_alibi"
        course = scratch_course(tmp / "course", {str(ROOT)!r}, [A])
        with open(tmp / "course" / "nbgrader_config.py", "a") as f:
            f.write({TERM_CONFIG.format(a="ex05_alibi", v="causal", s=SEED)!r})
        course = Course(tmp / "course")
        release(course, A)
        src = course.source_dir / A / (A + ".ipynb")
        rel = course.release_dir / A / (A + ".ipynb")
        own = tmp / "causal.ipynb"
        own.write_text(json.dumps(term_notebook(
            json.loads(src.read_text()), A, Term.checked({{A: "causal"}}))))
        inbox = tmp / "inbox"
        write_submission(inbox, "public", A,
                         student_notebook(rel, solution_answers(src)))
        write_submission(inbox, "causal", A,
                         student_notebook(rel, solution_answers(own)))
        collect(course, inbox, A)
        try:
            launcher = grading_launcher(course)[0]
        except CourseError:
            launcher = RlimitLauncher()
        s = autograde(course, A, AutogradeOptions(jobs=2, progress=False,
                                                  launcher=launcher))
        print(json.dumps({{o.student: [o.score, o.max_score, o.failures]
                          for o in s.outcomes}}))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    graded = json.loads(run.stdout.strip().splitlines()[-1])
    assert graded["causal"][:2] == [6.0, 6.0], graded["causal"]
    # the open edition's answer loses the bias's public (1) and hidden (2) points,
    # and is told why
    score, total, failures = graded["public"]
    assert (score, total) == (3.0, 6.0)
    assert set(failures) == {"alibi_bias__public", "alibi_bias__hidden"}
    assert all("open edition" in text for text in failures.values())


_IN_STUDENT_EDITION = """
import contextlib, io, json, sys
from pathlib import Path
import course_lib
assert course_lib.__file__.startswith(sys.argv[2]), course_lib.__file__
from course_lib.checks import _stored
from course_lib.checks._errors import CheckFailed
import importlib
root, cases = Path(sys.argv[1]), json.loads(sys.argv[3])
out = []
for assignment, variant, function in cases:
    check = getattr(importlib.import_module("course_lib.checks." + assignment),
                    "check_" + function)
    own = _stored._solution_namespace(root, assignment, variant)[function]
    default = _stored._solution_namespace(root, assignment)[function]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        check(own, variant)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(default, variant)
        told = "accepted"
    except CheckFailed as exc:
        told = getattr(exc, "mistake", None) or str(exc)
    out.append([assignment, variant, function, printed.getvalue(), told])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_student_edition_s_public_checks_follow_the_variant(tmp_path) -> None:
    """The public checks a student's wheel runs (stored expected values, no
    reference) check each variant: its solution passes, the open edition's is named."""
    import os

    from course_lib.grading.editions.library import write_student_edition

    tree = write_student_edition(tmp_path / "edition")
    cases = [
        (a, v, f)
        for a, v in CASES
        for f in DECLARED[a][v].references
        if "variant" in inspect.signature(
            getattr(_module(a), f"check_{f}", lambda: None)).parameters
    ]
    assert cases
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree.parent)
    run = subprocess.run(
        [sys.executable, "-c", _IN_STUDENT_EDITION, str(ROOT), str(tree),
         json.dumps(cases)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for assignment, variant, function, printed, told in json.loads(
        run.stdout.strip().splitlines()[-1]
    ):
        assert "all public checks passed" in printed, (assignment, variant, printed)
        assert told == "default-variant", (assignment, variant, function, told)


def test_a_variant_s_own_section_is_where_its_hints_point(monkeypatch) -> None:
    from course_lib.checks._core import Variant, variant_named, with_hint
    from course_lib.checks.sections import SECTIONS, Section

    monkeypatch.delenv(_core.HINTS_VARIABLE, raising=False)
    cache = Section("book/05-alibi", "alibi-kv-cache",
                    "Key/value caches: queries are the last positions")
    variants = {"cached": Variant("queries last", {"alibi_bias": "_r"},
                                  sections={"alibi_bias": cache})}
    variant_named(variants, "cached", "ex05_alibi")
    told = with_hint("wrong.", "mask it", "alibi_bias(4, 5)")
    assert f'"{cache.title}" of chapter 5' in told
    variant_named(variants, None, "ex05_alibi")  # the next grader: the default
    told = with_hint("wrong.", "mask it", "alibi_bias(4, 5)")
    assert f'"{SECTIONS["alibi_bias"].title}" of chapter 5' in told
    assert cache.title not in told


def test_feedback_links_follow_the_term_s_variant(tmp_path, monkeypatch) -> None:
    from course_lib.checks.sections import Section
    from course_lib.grading.feedback import teaching_links

    ex05 = _module("ex05_alibi")
    root = tmp_path / "course"
    root.mkdir()
    (root / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    config = "c = get_config()\n" + TERM_CONFIG.format(a="ex05_alibi", v="causal",
                                                       s=SEED)
    (root / "nbgrader_config.py").write_text(config)
    name, links = teaching_links(root, "alibi_bias")
    assert name == 'Chapter 5, section "The bias"'  # the causal form is taught there
    cache = Section("book/05-alibi", "alibi-kv-cache",
                    "Key/value caches: queries are the last positions")
    moved = {
        "causal": _core.Variant(
            ex05.VARIANTS["causal"].summary, ex05.VARIANTS["causal"].references,
            sections={"alibi_bias": cache},
        )
    }
    monkeypatch.setattr(ex05, "VARIANTS", moved)
    name, moved_links = teaching_links(root, "alibi_bias")
    assert name == 'Chapter 5, section "Key/value caches: queries are the last positions"'
    assert moved_links[0][1].endswith("#alibi-kv-cache")
    assert links[0][1].endswith("#alibi-bias")
    (root / "nbgrader_config.py").write_text("c = get_config()\n")  # the open edition
    assert teaching_links(root, "alibi_bias")[0] == 'Chapter 5, section "The bias"'


def test_autograde_refuses_a_release_of_another_term(tmp_path) -> None:
    """The grading kernel is planned for the configured term: a gradebook whose
    cells pass another term's values is refused before anything is graded (never
    graded as "tampering" for want of a plan)."""
    from course_lib.grading.autograde import AutogradeOptions, autograde
    from course_lib.grading.course import Course
    from course_lib.grading.editions.term import read_term, released_term_problem
    from course_lib.grading.release import release

    course = _scratch(tmp_path, "ex05_alibi", "causal")
    release(course, "ex05_alibi")
    with course.gradebook() as gb:
        assert released_term_problem(gb, "ex05_alibi", read_term(course)) is None
        for other in (Term(), Term.checked({"ex05_alibi": "causal"}, SEED + 1),
                      Term.checked({}, SEED)):
            problem = released_term_problem(gb, "ex05_alibi", other)
            assert problem and "release it again" in problem
            assert f"('causal', {SEED})" in problem
    config = course.root / "nbgrader_config.py"
    config.write_text(config.read_text().replace(str(SEED), str(SEED + 1)))
    with pytest.raises(CourseError, match="released for another term"):
        autograde(Course(course.root), "ex05_alibi", AutogradeOptions(progress=False))


@pytest.mark.parametrize("n,seq_len", [(4, 5), (8, 6), (6, 4)])
def test_ex05_causal_names_each_of_its_mistakes(n: int, seq_len: int) -> None:
    """Every wrong answer the causal variant knows is named by its own slug when a
    student's alibi_bias returns it (the public case (n, seq_len))."""
    m = _module("ex05_alibi")
    expected = m._reference_causal_bias(n, seq_len).double()
    slugs = []
    for mistake in m._causal_bias_mistakes(n, seq_len):
        answer = mistake.answer.float()
        if torch.allclose(answer.double(), expected):
            # power-of-two slopes ARE the rule's for 4 and 8 heads: not a mistake there
            assert mistake.slug == "power-of-two-slopes" and n & (n - 1) == 0
            continue

        def student(heads, length, __answer=answer):
            if (heads, length) == (n, seq_len):
                return __answer.clone()
            return m._reference_causal_bias(heads, length) + 1.0  # wrong elsewhere

        with pytest.raises(CheckFailed) as failed:
            m._check_bias(student, n, seq_len, properties=True, variant="causal")
        assert failed.value.mistake == mistake.slug, str(failed.value)
        slugs.append(mistake.slug)
    assert slugs[0] == "default-variant" and len(set(slugs)) == len(slugs)


def test_course_term_shows_the_term_and_refuses_unknown_names(tmp_path, capsys) -> None:
    from course_lib.cli import main

    course = _scratch(tmp_path, "ex05_alibi", "causal")
    assert main(["term", "--root", str(course.root)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == f"seed: {SEED} (the hidden graders draw this term's cases from it)"
    at = shown.index("  ex05_alibi")
    assert shown[at + 1].startswith("     default:")
    assert shown[at + 2].startswith("   * causal: alibi_bias returns the paper's causal")
    config = course.root / "nbgrader_config.py"
    config.write_text(config.read_text().replace("'causal'", "'cached'"))
    assert main(["term", "--root", str(course.root)]) == 2
    err = capsys.readouterr().err
    assert "asks ex05_alibi for the variant 'cached'" in err
    assert "its variants: default, causal" in err


def test_the_repository_s_own_configuration_is_the_open_edition() -> None:
    """notebooks/ and the book are the open edition's: the repository sets no term."""
    from course_lib.grading.editions.term import term_at

    assert term_at(ROOT).is_default


def test_term_values_are_added_to_any_layout_of_a_grader_call() -> None:
    import ast

    from course_lib.grading.editions.term import _with_term_values

    m = _module("ex05_alibi")
    cases = {
        "grade_alibi_bias(alibi_bias)": "grade_alibi_bias(alibi_bias, 'causal', 5)",
        "# é\ngrade_alibi_bias(\n    alibi_bias,\n)\n":
            "# é\ngrade_alibi_bias(\n    alibi_bias, 'causal', 5,\n)\n",
        "grade_alibi_bias(alibi_bias)  # end": "grade_alibi_bias(alibi_bias, 'causal', 5)"
                                              "  # end",
        "print(alibi_bias)": "print(alibi_bias)",  # not a grader
    }
    for source, want in cases.items():
        got = _with_term_values(source, m, "causal", 5)
        assert got == want
        ast.parse(got)
    assert _with_term_values("check_alibi_bias(alibi_bias)", m, "default", 5) == (
        "check_alibi_bias(alibi_bias)"  # a public check takes no seed
    )
    with pytest.raises(CourseError, match="keyword"):
        _with_term_values("grade_alibi_bias(fn=alibi_bias)", m, "causal", 5)
