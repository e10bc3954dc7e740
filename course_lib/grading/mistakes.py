"""What a class got wrong: the graders' judgements of one assignment, counted.

When ``course autograde`` grades a test cell that fails, the grading tool replays the
cell's graders outside the student's kernel and records why it failed
(:class:`~course_lib.grading.notebooks.integrity.Judgement`, kept in the gradebook by
:func:`~course_lib.grading.gradebook.write_judgements`): the known mistake that
matched (``alibi_bias:bloom-form``), ``unrecognised`` (a wrong answer no grader
knows), or what happened instead of an answer (the stub, an exception, ...). This
module turns them into what ``course report`` shows and writes:

* :func:`class_mistakes`: per graded function, each reason with the number of
  students it concerns, their share of the graded submissions and their share of
  those who lost points on that function;
* ``mistakes.csv``: one row per student, cell and reason, with the explanation and
  an example of the wrong answer (the "unrecognised" examples are how the graders'
  list of known mistakes grows from real classes);
* ``mistakes.png``: the same counts as a bar chart.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .gradebook import JUDGEMENT_FIELDS

__all__ = [
    "MistakeCount",
    "class_mistakes",
    "format_mistakes",
    "mistakes_chart",
    "write_mistakes_csv",
]

# How each kind of judgement reads in the table (a named mistake reads as its id).
KIND_LABELS = {
    "unrecognised": "(unrecognised wrong answer)",
    "not-attempted": "(not attempted: the stub)",
    "raised": "(raised an exception)",
    "calls-library": "(calls the course_lib reference)",
    "changed-input": "(changed an input in place)",
    "time-limit": "(did not return in time)",
    "tampering": "(tampering detected)",
}
# Examples of unrecognised answers shown per function in the terminal.
EXAMPLES_SHOWN = 3


@dataclass
class MistakeCount:
    """One line of the table: a reason for lost points on ``function``."""

    function: str
    kind: str
    mistake: str  # the id of a named mistake, "" for the other kinds
    explanation: str
    students: list[str] = field(default_factory=list)
    share_of_submissions: float = 0.0
    share_of_lost: float = 0.0
    examples: list[tuple[str, str]] = field(default_factory=list)  # (student, text)

    @property
    def label(self) -> str:
        return self.mistake or KIND_LABELS.get(self.kind, f"({self.kind})")


def class_mistakes(
    judgements: list[dict[str, str]], graded: int, functions: list[str]
) -> list[MistakeCount]:
    """Count ``judgements`` (rows of
    :func:`~course_lib.grading.gradebook.read_judgements`) over ``graded`` graded
    submissions; ``functions`` gives the order (the notebook's), then the most
    common reason first. A student counts once per reason and function, whichever
    cells showed it; one who lost points for two reasons counts in both lines."""
    by_reason: dict[tuple[str, str, str], MistakeCount] = {}
    explanations: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    lost: dict[str, set[str]] = defaultdict(set)
    for row in judgements:
        function, kind = row["function"], row["kind"]
        key = (function, kind, row["mistake"] if kind == "mistake" else "")
        lost[function].add(row["student"])
        count = by_reason.setdefault(key, MistakeCount(function, kind, key[2], ""))
        if row["student"] not in count.students:
            count.students.append(row["student"])
            if row.get("example") and kind != "mistake":
                count.examples.append((row["student"], row["example"]))
        if row.get("explanation"):
            explanations[key][row["explanation"]] += 1
    order = {f: i for i, f in enumerate(functions)}
    for key, count in by_reason.items():
        if explanations[key]:
            count.explanation = explanations[key].most_common(1)[0][0]
        n = len(count.students)
        count.share_of_submissions = n / graded if graded else 0.0
        count.share_of_lost = n / len(lost[count.function])
    return sorted(
        by_reason.values(),
        key=lambda c: (
            order.get(c.function, len(order)),
            c.function,
            -len(c.students),
            c.kind != "mistake",
            c.label,
        ),
    )


def format_mistakes(counts: list[MistakeCount], graded: int) -> list[str]:
    """The lines ``course report`` prints about the class's mistakes."""
    if not counts:
        return []
    width = max(len("function"), *(len(c.function) for c in counts))
    label_width = max(len("reason"), *(len(c.label) for c in counts))
    lines = [
        f"What the class got wrong ({graded} graded submissions; judged by the "
        "graders outside the students' kernels):",
        "",
        f"  {'function':<{width}}  {'reason':<{label_width}}  students  "
        "of all  of those who lost points",
    ]
    for c in counts:
        lines.append(
            f"  {c.function:<{width}}  {c.label:<{label_width}}  "
            f"{len(c.students):>8}  {100 * c.share_of_submissions:>5.1f}%  "
            f"{100 * c.share_of_lost:>5.1f}%"
        )
    named = [c for c in counts if c.kind == "mistake"]
    if named:
        lines += ["", "The named mistakes, as the graders explain them to students:"]
        lines += [f"  {c.mistake}: {c.explanation}" for c in named]
    unknown = [c for c in counts if c.kind == "unrecognised" and c.examples]
    if unknown:
        lines += [
            "",
            "Unrecognised wrong answers (examples; all of them in mistakes.csv, "
            "candidates for a new known mistake):",
        ]
        for c in unknown:
            for student, text in c.examples[:EXAMPLES_SHOWN]:
                lines.append(f"  {c.function}, {student}: {text}")
    return lines


_CSV_COLUMNS = ["student_id", *JUDGEMENT_FIELDS]


def write_mistakes_csv(path: Path, judgements: list[dict[str, str]]) -> Path:
    """``mistakes.csv``: one row per student and failed cell, with the reason."""
    import csv

    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=_CSV_COLUMNS)
        writer.writeheader()
        for row in judgements:
            writer.writerow(
                {"student_id": row["student"]}
                | {c: row.get(c, "") for c in _CSV_COLUMNS[1:]}
            )
    return path


def mistakes_chart(path: Path, counts: list[MistakeCount], title: str) -> Path:
    """A horizontal bar per line of the table: how many students, named mistakes
    in one colour, the other reasons in another."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = list(reversed(counts))  # the first line of the table on top
    height = 1.2 + 0.32 * max(len(shown), 1)
    fig, ax = plt.subplots(figsize=(7.5, height), layout="constrained")
    if shown:
        ax.barh(
            range(len(shown)),
            [len(c.students) for c in shown],
            color=["#c44e52" if c.kind == "mistake" else "#8c8c8c" for c in shown],
        )
        ax.set_yticks(
            range(len(shown)),
            [f"{c.function}: {c.mistake.split(':', 1)[-1] or c.label}" for c in shown],
            fontsize="small",
        )
    else:
        ax.text(0.5, 0.5, "no test failed", ha="center", va="center")
        ax.set_yticks([])
    ax.set_xlabel("students (red: a known mistake; grey: other reasons)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{title}: why points were lost")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
