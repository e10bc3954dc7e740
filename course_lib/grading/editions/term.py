"""The term: which variant of each exercise a class is asked, and the seed of its
hidden cases (``CourseTerm`` in ``nbgrader_config.py``).

::

    c.CourseTerm.variants = {"ex05_alibi": "causal"}  # assignment -> variant
    c.CourseTerm.seed = 20270101                       # hidden cases of this term

Nothing set (the repository's own configuration) is the open edition: every exercise
asks its default answer, and the hidden graders use their fixed cases.

An exercise declares its variants in its checks module
(``course_lib/checks/exNN_*.py``: ``VARIANTS``, see
:class:`course_lib.checks._core.Variant`); its graders take the variant (public and
hidden) and the seed (hidden only) as their last parameters, ``variant`` and
``seed``. Its source notebook (``solutions/<assignment>/``) keeps the default text
in its cells; a cell whose text changes in a variant (the task statement, the
solution) holds the variant's text in its metadata, ``course_variants``:
``{"causal": "<the cell's source in that variant>"}``.

``course release`` writes the release from :func:`term_notebook` of each source: the
chosen variant's text in those cells, ``course_variants`` removed from every cell
(no variant's solution reaches a release), and the term's values added to the
grader calls of the test cells as constants (``check_alibi_bias(alibi_bias,
"causal")``; hidden: ``grade_alibi_bias(alibi_bias, "causal", 20270101)``; nbgrader
strips hidden cells from the release, so the seed is in the gradebook only). The
gradebook keeps those cells as released, and autograde runs them: the kernel, the
grading edition's plans (:func:`course_lib.grading.editions.library.plan_hidden_graders`)
and the pristine replay all read the same values. A non-default release records its
variant in the notebook's metadata (``course.variant``), which ``course publish``
compares with the configuration.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CourseError

__all__ = [
    "VARIANT_KEY",
    "Term",
    "describe",
    "exercise_variants",
    "grader_values",
    "read_term",
    "released_term_problem",
    "released_variant",
    "set_variant_text",
    "term_at",
    "term_notebook",
    "variant_section",
]

# the cell metadata key of a variant's text, and the notebook metadata of a release
VARIANT_KEY = "course_variants"
_RELEASE_KEY = "course"
DEFAULT = "default"


def exercise_variants() -> dict[str, dict[str, Any]]:
    """``{assignment: {variant: Variant}}`` for every checks module that declares
    variants (its ``VARIANTS``); an exercise without any is absent."""
    import course_lib.checks as package

    out: dict[str, dict[str, Any]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not re.fullmatch(r"ex\d+_\w+", info.name):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        variants = getattr(module, "VARIANTS", None)
        if variants:
            out[info.name] = dict(variants)
    return out


def _known_list(variants: dict[str, dict[str, Any]]) -> str:
    if not variants:
        return "no exercise declares a variant"
    return "; ".join(
        f"{a}: {', '.join(sorted(v))}" for a, v in sorted(variants.items())
    )


@dataclass(frozen=True)
class Term:
    """A term's choices: ``variants`` (assignment -> variant, defaults left out) and
    ``seed`` (``None``: the graders' fixed hidden cases)."""

    variants: dict[str, str] = field(default_factory=dict)
    seed: int | None = None

    @classmethod
    def checked(cls, variants: Any = None, seed: Any = None) -> Term:
        """A term from configuration values, refused with a :class:`CourseError`
        naming what is wrong and what is known: an assignment that declares no
        variants, a variant it does not declare, a seed that is not a whole
        number."""
        variants = {} if variants is None else variants
        if not isinstance(variants, dict):
            raise CourseError(
                "CourseTerm.variants must be a dict {assignment: variant}, got "
                f"{type(variants).__name__}"
            )
        declared = exercise_variants()
        chosen: dict[str, str] = {}
        for assignment, variant in sorted(variants.items()):
            if assignment not in declared:
                raise CourseError(
                    f"CourseTerm.variants names {assignment!r}, which declares no "
                    f"variants; the variants there are: {_known_list(declared)}"
                )
            if variant == DEFAULT:
                continue
            if variant not in declared[assignment]:
                known = ", ".join([DEFAULT, *sorted(declared[assignment])])
                raise CourseError(
                    f"CourseTerm.variants asks {assignment} for the variant "
                    f"{variant!r}, which it does not declare; its variants: {known}"
                )
            chosen[assignment] = variant
        if seed is not None and (type(seed) is not int or seed < 0):
            raise CourseError(
                f"CourseTerm.seed must be a whole number >= 0 (e.g. 20270101), got "
                f"{seed!r}"
            )
        return cls(chosen, seed)

    def variant(self, assignment: str) -> str:
        """The variant ``assignment`` asks this term (``"default"`` unless set)."""
        return self.variants.get(assignment, DEFAULT)

    @property
    def is_default(self) -> bool:
        return not self.variants and self.seed is None

    def to_json(self) -> str:
        return json.dumps({"variants": self.variants, "seed": self.seed},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Term:
        data = json.loads(text) if text else {}
        return cls.checked(data.get("variants"), data.get("seed"))


def describe(term: Term) -> list[str]:
    """What ``course term`` prints: the seed, then each exercise that declares
    variants, its variants (the chosen one starred) and what each asks."""
    lines = [
        f"seed: {term.seed} (the hidden graders draw this term's cases from it)"
        if term.seed is not None
        else "seed: none (the hidden graders' fixed cases, the open edition's)"
    ]
    declared = exercise_variants()
    if not declared:
        return [*lines, "no exercise declares a variant"]
    lines.append("variants (c.CourseTerm.variants; * = this term's):")
    for assignment, variants in sorted(declared.items()):
        chosen = term.variant(assignment)
        mark = "*" if chosen == DEFAULT else " "
        lines.append(f"  {assignment}")
        lines.append(f"   {mark} {DEFAULT}: the open edition's exercise")
        for name, variant in sorted(variants.items()):
            mark = "*" if chosen == name else " "
            lines.append(f"   {mark} {name}: {variant.summary}")
    return lines


def read_term(course) -> Term:
    """The term of ``course`` (a :class:`~course_lib.grading.course.Course`): its
    ``CourseTerm.variants`` and ``CourseTerm.seed``, checked."""
    section = course.config.get("CourseTerm", {})
    return Term.checked(section.get("variants"), section.get("seed"))


def term_at(root) -> Term:
    """The term of the course folder ``root`` (its ``nbgrader_config.py``; none: the
    open edition's), checked, without opening a gradebook."""
    from pathlib import Path

    from traitlets.config.loader import PyFileConfigLoader

    root = Path(root)
    if not (root / "nbgrader_config.py").is_file():
        return Term()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    section = config.get("CourseTerm", {})
    return Term.checked(section.get("variants"), section.get("seed"))


def grader_values(grader: Callable, variant: str, seed: int | None) -> tuple:
    """The values of the term parameters (:data:`course_lib.checks._core.TERM_PARAMS`)
    that ``grader`` takes, as a test cell passes them after the student's functions:
    ``()`` for the open edition, else the variant (``"default"`` when only the seed
    is set) and, for a hidden grader, the seed, without trailing ``None``."""
    from course_lib.checks._core import TERM_PARAMS

    params = [p for p in inspect.signature(grader).parameters if p in TERM_PARAMS]
    given = {"variant": None if variant == DEFAULT else variant, "seed": seed}
    values = [given[p] for p in params]
    if "seed" in params and seed is not None and given["variant"] is None:
        values[params.index("variant")] = DEFAULT
    while values and values[-1] is None:
        values.pop()
    return tuple(values)


def _checks_module(assignment: str):
    try:
        return importlib.import_module(f"course_lib.checks.{assignment}")
    except ModuleNotFoundError:
        return None


def _with_term_values(source: str, module, variant: str, seed: int | None) -> str:
    """A test cell's source with the term's values added to each call of one of
    ``module``'s graders (a statement ``grader(name, ...)``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines(keepends=True)
    edits = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        grader = getattr(module, call.func.id, None)
        if not call.func.id.startswith(("check_", "grade_")) or grader is None:
            continue
        values = grader_values(grader, variant, seed)
        if values:
            if call.keywords or not call.args:
                raise CourseError(
                    f"a test cell calls {call.func.id} with keyword arguments or "
                    "none; the grading tool replays only grader(name, ...) calls"
                )
            extra = "".join(f", {v!r}" for v in values)
            last = call.args[-1]  # after it: a trailing comma or a line break stays
            edits.append((last.end_lineno - 1, last.end_col_offset, extra))
    for line, col, extra in sorted(edits, reverse=True):
        text = lines[line]
        # ast's offsets count UTF-8 bytes
        raw = text.encode()
        lines[line] = (raw[:col] + extra.encode() + raw[col:]).decode()
    return "".join(lines)


def term_notebook(notebook: dict, assignment: str, term: Term) -> dict:
    """The source notebook ``notebook`` (nbformat JSON) as ``term`` releases it: see
    the module docstring. A variant text for a variant the exercise does not declare,
    or a chosen variant that changes no cell, is a :class:`CourseError`."""
    out = copy.deepcopy(notebook)
    variant = term.variant(assignment)
    module = _checks_module(assignment)
    declared = getattr(module, "VARIANTS", None) or {}
    changed = False
    for index, cell in enumerate(out.get("cells", [])):
        meta = cell.get("metadata", {})
        texts = meta.pop(VARIANT_KEY, None)
        if texts is not None:
            unknown = sorted(set(texts) - set(declared))
            if unknown or not isinstance(texts, dict):
                raise CourseError(
                    f"{assignment}: cell {index} has text for the variant(s) "
                    f"{', '.join(map(repr, unknown))}, which "
                    f"course_lib/checks/{assignment}.py does not declare in VARIANTS"
                )
            if variant in texts:
                cell["source"] = texts[variant]
                changed = True
        nbgrader = meta.get("nbgrader", {})
        if module is not None and cell.get("cell_type") == "code" and nbgrader.get(
            "grade"
        ):
            source = "".join(cell.get("source", ""))
            new = _with_term_values(source, module, variant, term.seed)
            if new != source:
                cell["source"] = new
    if variant != DEFAULT:
        if not changed:
            raise CourseError(
                f"{assignment}: the term asks for the variant {variant!r}, but no "
                f"cell of its source notebook has {variant!r} text in its metadata "
                f"{VARIANT_KEY!r} (the task statement, at least, must change)"
            )
        out.setdefault("metadata", {})[_RELEASE_KEY] = {"variant": variant}
    return out


def released_variant(notebook: dict) -> str:
    """The variant a release notebook was released for (``"default"`` unless
    :func:`term_notebook` recorded another)."""
    return notebook.get("metadata", {}).get(_RELEASE_KEY, {}).get("variant", DEFAULT)


def variant_section(function: str, term: Term):
    """The :class:`~course_lib.checks.sections.Section` that teaches ``function``
    (a graded function's name) in this term: the chosen variant's own section
    when it names one, else :func:`course_lib.checks.sections.section_of`'s."""
    from course_lib.checks.sections import section_of

    declared = exercise_variants()
    for assignment, variant in term.variants.items():
        chosen = declared.get(assignment, {}).get(variant)
        if chosen is not None and function in chosen.sections:
            return chosen.sections[function]
    return section_of(function)


def set_variant_text(path, cell: int | str, variant: str, text: str) -> None:
    """Write ``text`` as ``variant``'s version of one cell of the source notebook at
    ``path`` (its ``course_variants`` metadata), for authors: ``cell`` is the cell's
    index or its nbgrader ``grade_id``. The file keeps its JSON layout (one-space
    indent, as Jupyter writes it)."""
    from pathlib import Path

    path = Path(path)
    notebook = json.loads(path.read_text())
    cells = notebook["cells"]
    if isinstance(cell, str):
        found = [
            i for i, c in enumerate(cells)
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == cell
        ]
        if len(found) != 1:
            raise CourseError(f"{path}: no single cell with grade_id {cell!r}")
        cell = found[0]
    if variant == DEFAULT:
        raise CourseError("the default text is the cell's own source: edit that")
    cells[cell].setdefault("metadata", {}).setdefault(VARIANT_KEY, {})[variant] = text
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def _cell_values(source: str, module) -> list[tuple[str, tuple]]:
    """``[(grader, the values it is passed for its term parameters)]`` for the
    grader calls of a test cell's source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        if not call.func.id.startswith(("check_", "grade_")):
            continue
        grader = getattr(module, call.func.id, None)
        if grader is None:
            continue
        from course_lib.checks._core import TERM_PARAMS

        params = list(inspect.signature(grader).parameters)
        at = [i for i, p in enumerate(params) if p in TERM_PARAMS]
        values = tuple(
            call.args[i].value if isinstance(call.args[i], ast.Constant) else None
            for i in at
            if i < len(call.args)
        )
        out.append((call.func.id, values))
    return out


def released_term_problem(gb, assignment: str, term: Term) -> str | None:
    """Why ``assignment``'s cells in the gradebook ``gb`` (as ``course release``
    wrote them) cannot be graded under ``term``, or ``None``: each grader call must
    pass the values this term gives it. The grading kernel is planned for the term
    of the configuration; a release of another term would find no plan."""
    module = _checks_module(assignment)
    if module is None:
        return None
    for notebook in gb.find_assignment(assignment).notebooks:
        for cell in notebook.source_cells:
            for name, values in _cell_values(cell.source or "", module):
                want = grader_values(getattr(module, name), term.variant(assignment),
                                     term.seed)
                if values != want:
                    return (
                        f"{assignment} was released for another term: its cell "
                        f"{cell.name} calls {name} with the term values {values}, "
                        f"where this term (CourseTerm in nbgrader_config.py) gives "
                        f"{want}. Restore that term's CourseTerm to grade this "
                        f"release, or release it again for this term (course "
                        f"release {assignment})"
                    )
    return None
