"""``course similarity`` on a class whose truth is known, and on 1,000 submissions.

    python -m benchmarks.bench_similarity                 # every assignment + 1,000
    python -m benchmarks.bench_similarity --only ex05_alibi --students 200

**The known class** (:func:`known_class`), per assignment. Independent students:
the course's solution (``sol``) and each round of the honest slow variants of
:mod:`benchmarks.honest_variants` (``v0``, ``v1``, ...; a function with fewer
variants than the round keeps the solution's answer, so that student's answer to
it has the solution as its origin). Copiers, of each independent student: variables
renamed (``renamed``), reformatted (``reformatted``: printed again by
``ast.unparse``, two-space indents, a blank line after every line, comments gone),
independent statements swapped (``reordered``), comments changed and one added
(``commented``), and all of these at once (``disguised``); and ``public_copy``, the
public solution with its variables renamed and its comments changed. The
transformations here are written apart from the normalisation of
:mod:`course_lib.grading.similarity`: text edits on tokens and lines, not its code.

Counted per function: a copier is **caught** when ``course similarity`` flags the
pair of it and the student it copied, or (for a copy of the solution) its match
with the public solution; an **independent pair** is a pair of students of different
origins, and is a false flag when flagged. The independent students' matches with
the public solution are counted apart (``sol`` is the solution, and matches it by
construction).

**Scale** (:func:`synthetic_class`): 1,000 submissions of one assignment, the
known class's answers with every student's own names (each a fresh renaming) and
a line or two of their own, timed from reading the notebooks to the written report.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import random
import re
import shutil
import sys
import tempfile
import time
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("renamed", "reformatted", "reordered", "commented", "disguised")
DEFAULT = ("ex05_alibi", "ex06_relative", "ex11_long_context")
_LIBRARY = {"torch", "math", "F", "np", "range", "len", "abs", "float", "int"}


# --- what copiers do, as text edits ---------------------------------------------------


def _bound(source: str, keep: set[str]) -> list[str]:
    """Names the code binds (arguments, assignments, loop variables, helpers)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg):
            names.append(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        elif isinstance(node, ast.FunctionDef):
            names.append(node.name)
    return [n for n in dict.fromkeys(names) if n not in keep]


def rename(source: str, keep: set[str], salt: str = "") -> str:
    """The same text with every bound name replaced (not attributes, keywords,
    strings or comments), by position of each NAME token."""
    names = _bound(source, keep)
    words = ["tmp", "val", "res", "acc", "buf", "cur", "aux", "out", "arr", "num"]
    mapping = {n: f"{words[i % len(words)]}{salt}_{i}" for i, n in enumerate(names)}
    keywords = {  # f(dim=1): the keyword is the callee's name, not the code's
        (k.lineno, k.col_offset)
        for k in ast.walk(ast.parse(source))
        if isinstance(k, ast.keyword) and k.arg
    }
    lines = source.splitlines(keepends=True)
    edits = []
    prev = None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if (
            tok.type == tokenize.NAME
            and tok.string in mapping
            and prev != "."
            and tok.start not in keywords
        ):
            edits.append((tok.start, tok.end, mapping[tok.string]))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok.string
    for (row, c0), (_, c1), new in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:c0] + new + line[c1:]
    return "".join(lines)


def reformat(source: str) -> str:
    """Printed again from the syntax tree, two-space indents, blank lines added."""
    out = []
    for line in ast.unparse(ast.parse(source)).splitlines():
        stripped = line.lstrip(" ")
        depth = (len(line) - len(stripped)) // 4
        out += ["  " * depth + stripped, ""]
    return "\n".join(out)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _changed(node: ast.AST) -> set[str]:
    """Names a statement assigns or may change (method calls, item assignment)."""
    out = {node.name} if isinstance(node, ast.FunctionDef) else set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.Attribute | ast.Subscript) and isinstance(
            n.ctx, ast.Store
        ):
            out |= _names(n.value)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            out |= _names(n.func.value) - _LIBRARY
    return out


def _swappable(a: ast.stmt, b: ast.stmt) -> bool:
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.FunctionDef)
    if not (isinstance(a, simple) and isinstance(b, simple)):
        return False
    return not (_changed(a) & _names(b) or _changed(b) & _names(a))


def reorder(source: str) -> str:
    """Adjacent independent statements swapped (whole lines, comments kept with
    their statement), in every block, top to bottom; unchanged when none are."""
    lines = source.splitlines()
    swaps = []
    for node in ast.walk(ast.parse(source)):
        for name in ("body", "orelse"):
            body = getattr(node, name, None)
            if not isinstance(body, list):
                continue
            i = 0
            while i + 1 < len(body):
                if _swappable(body[i], body[i + 1]):
                    swaps.append((body[i], body[i + 1]))
                    i += 2
                else:
                    i += 1
    for a, b in sorted(swaps, key=lambda p: -p[0].lineno):
        first = lines[a.lineno - 1 : a.end_lineno]
        second = lines[b.lineno - 1 : b.end_lineno]
        between = lines[a.end_lineno : b.lineno - 1]
        lines[a.lineno - 1 : b.end_lineno] = second + between + first
    return "\n".join(lines) + "\n"


def recomment(source: str) -> str:
    """Every comment's words changed, and a comment line added under each ``def``."""
    out = []
    for line in source.splitlines():
        code, sep, _ = line.partition("  #") if "  #" in line else (line, "", "")
        if line.lstrip().startswith("#"):
            line = line[: len(line) - len(line.lstrip())] + "# worked this out myself"
        elif sep:
            line = code + "  # see my notes"
        out.append(line)
        if line.lstrip().startswith("def ") and line.rstrip().endswith(":"):
            indent = len(line) - len(line.lstrip()) + 4
            out.append(" " * indent + "# my approach, step by step")
    return "\n".join(out) + "\n"


def copy_of(source: str, kind: str, keep: set[str]) -> str:
    """A copier's version of ``source``."""
    if kind == "renamed":
        return rename(source, keep)
    if kind == "reformatted":
        return reformat(source)
    if kind == "reordered":
        return reorder(source)
    if kind == "commented":
        return recomment(source)
    if kind == "disguised":
        return reformat(recomment(reorder(rename(source, keep))))
    raise ValueError(f"copy_of: unknown kind {kind!r}; one of {KINDS}")


# --- the known class ---------------------------------------------------------------


def known_class(assignment: str) -> tuple[dict, dict]:
    """``(answers, origin)``: ``answers[student][function]`` is the answer cell's
    source, ``origin[function][student]`` where it came from (a variant's name, or
    ``"solution"``)."""
    from benchmarks import honest_variants as hv

    functions = hv.graded_functions(assignment)
    solution = hv.answer_cells(assignment)
    keep = set(functions)
    answers = {"sol": dict(solution)}
    origin = {f: {"sol": "solution"} for f in functions}
    for k in range(hv.rounds(assignment)):
        student = f"v{k}"
        answers[student] = hv.variant_answers(assignment, k)
        for f in functions:
            origin[f][student] = hv.variant_of_round(assignment, f, k) or "solution"
    for source in list(answers):
        for kind in KINDS:
            student = f"{kind}_of_{source}"
            answers[student] = {
                f: copy_of(answers[source][f], kind, keep) for f in functions
            }
            for f in functions:
                origin[f][student] = origin[f][source]
    answers["public_copy"] = {
        f: recomment(rename(solution[f], keep, "p")) for f in functions
    }
    for f in functions:
        origin[f]["public_copy"] = "solution"
    return answers, origin


def write_class(
    dest: Path, assignment: str, answers: dict, root: Path = ROOT
) -> object:
    """A course folder at ``dest``: the configuration, the source and released
    notebooks, the bug zoo of ``assignment``, and one submitted notebook per
    student (``submitted/<student>/<assignment>/<assignment>.ipynb``)."""
    import nbformat

    from course_lib.grading.course import Course
    from course_lib.grading.synthetic import scratch_course, student_notebook

    scratch_course(dest, root, [assignment])
    course = Course(dest)
    release = course.release_dir / assignment
    shutil.copytree(root / "notebooks" / assignment, release, dirs_exist_ok=True)
    zoo = root / "tests" / "zoo" / f"{assignment}.py"
    if zoo.is_file():
        (dest / "tests" / "zoo").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(zoo, dest / "tests" / "zoo" / zoo.name)
    release_nb = release / f"{assignment}.ipynb"
    for student, funcs in answers.items():
        nb = student_notebook(
            release_nb, {f"{f}__answer": src for f, src in funcs.items()}
        )
        folder = course.submitted_dir / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(folder / f"{assignment}.ipynb"))
    return course


def evaluate(report, origin: dict) -> dict[str, dict]:
    """Per function: copiers, caught, the missed ones, independent pairs and how
    many were flagged, independent students matched with the public solution, the
    most similar independent pair and the least similar copier to its source."""
    out = {}
    for result in report.results:
        org = origin[result.function]
        flagged = {frozenset((p.a, p.b)) for p in result.flagged}
        public = {p.a for p in result.reference_matches if p.b == "public solution"}
        independent = [s for s in org if s == "sol" or re.fullmatch(r"v\d+", s)]
        copiers = [s for s in org if s not in independent]
        caught = [
            c
            for c in copiers
            if frozenset((c, _source(c))) in flagged
            or (org[c] == "solution" and c in public)
        ]
        people = sorted(org)
        pairs = [
            (a, b)
            for i, a in enumerate(people)
            for b in people[i + 1 :]
            if org[a] != org[b]
        ]
        score = _scores(result)
        to_source = [score(c, _source(c)) for c in copiers]
        out[result.function] = {
            "lowest_copier_to_source": min(to_source),
            "highest_independent": max(score(a, b) for a, b in pairs),
            "students": len(org),
            "copiers": len(copiers),
            "caught": len(caught),
            "missed": sorted(set(copiers) - set(caught)),
            "independent_pairs": len(pairs),
            "independent_flagged": sum(frozenset(p) in flagged for p in pairs),
            "independent_public": sorted(
                s for s in independent if s in public and org[s] != "solution"
            ),
            "cutoff": result.cutoff,
            "median": result.median,
        }
    return out


def _source(copier: str) -> str:
    """The student a copier copied (``public_copy``: ``sol``, who hands in the
    public solution)."""
    return copier.split("_of_")[-1] if "_of_" in copier else "sol"


def _scores(result):
    """Similarity of any two students, from their fingerprint sets."""
    sets = {w: set(a.fp.hashes.tolist()) for w, a in result.answers.items()}

    def score(a: str, b: str) -> float:
        small = min(len(sets[a]), len(sets[b]))
        return len(sets[a] & sets[b]) / small if small else 0.0

    return score


# --- scale -------------------------------------------------------------------------


def synthetic_class(assignment: str, n: int, seed: int = 0) -> dict:
    """``n`` students: the known class's answers in turn, each renamed with the
    student's own names and given one or two lines of their own."""
    answers, _ = known_class(assignment)
    pool = list(answers.values())
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        base = pool[i % len(pool)]
        student = {}
        for f, src in base.items():
            text = rename(src, set(base), salt=f"s{i}")
            extra = f"    check_{i} = {rng.randint(2, 999)} * {rng.randint(2, 99)}\n"
            lines = text.splitlines(keepends=True)
            at = next((j + 1 for j, ln in enumerate(lines) if ln.startswith("def ")), 0)
            if at and rng.random() < 0.7:
                lines.insert(at, extra)
            student[f] = "".join(lines)
        out[f"s{i:04d}"] = student
    return out


def time_class(assignment: str, n: int, workdir: Path) -> tuple[float, object]:
    """Seconds ``similarity`` takes on ``n`` synthetic submissions (notebooks read,
    every pair compared, the report written), and the report."""
    from course_lib.grading.similarity import similarity

    course = write_class(workdir / "scale", assignment, synthetic_class(assignment, n))
    start = time.perf_counter()
    report = similarity(course, assignment)
    return time.perf_counter() - start, report


def _table(assignments: list[str], workdir: Path) -> list[str]:
    from course_lib.grading.similarity import similarity

    rows = [
        "| assignment | function | students | copiers caught | independent pairs "
        "flagged | independent students matching the public solution | cut-off "
        "| most similar independent pair | least similar copier and its source |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for assignment in assignments:
        answers, origin = known_class(assignment)
        course = write_class(workdir / assignment, assignment, answers)
        report = similarity(course, assignment)
        for f, c in evaluate(report, origin).items():
            missed = f" (missed: {', '.join(c['missed'])})" if c["missed"] else ""
            rows.append(
                f"| {assignment} | `{f}` | {c['students']} | {c['caught']} of "
                f"{c['copiers']}{missed} | {c['independent_flagged']} of "
                f"{c['independent_pairs']} | "
                f"{', '.join(c['independent_public']) or 'none'} | {c['cutoff']:.2f} "
                f"| {c['highest_independent']:.2f} "
                f"| {c['lowest_copier_to_source']:.2f} |"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    from benchmarks import honest_variants as hv
    from benchmarks.harness import load, machine

    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_similarity")
    ap.add_argument("--only", default="", help="comma-separated assignments")
    ap.add_argument("--students", type=int, default=1000)
    ap.add_argument("--scale-assignment", default="ex05_alibi")
    args = ap.parse_args(argv)
    assignments = [a for a in args.only.split(",") if a] or sorted(hv.VARIANTS)
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as tmp:
        rows = _table(assignments, Path(tmp))
        seconds, report = time_class(args.scale_assignment, args.students, Path(tmp))
    flagged = sum(len(r.flagged) for r in report.results)
    print(
        f"The known class (see `benchmarks/bench_similarity.py`), one per "
        f"assignment; {machine()}.\n\n" + "\n".join(rows) + "\n\n"
        f"| class size | assignment | functions | seconds (read, compare, report) |"
        f"\n|---:|---|---:|---:|\n| {args.students} | {args.scale_assignment} | "
        f"{len(report.results)} | {seconds:.1f} |\n\n"
        f"{os.cpu_count()} CPUs, load average at the end {load()}; the synthetic "
        f"class has {flagged} flagged pairs (its students are renamed copies of "
        "the known class's answers, a worst case for the pages written)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
