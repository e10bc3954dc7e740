"""The instructor guide's "Answers that change each term" says what the code does:
its table lists exactly the variants the exercises declare, each refusal it quotes
is the message the term check gives for that configuration, and the release line it
quotes is what ``course release`` prints for that term."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course_lib.grading.editions.term import Term, exercise_variants
from course_lib.grading.errors import CourseError

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "book" / "instructor-guide.md"


def _section() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("### Answers that change each term")
    return text[start:text.index("\n## ", start)]


def test_the_table_lists_every_declared_variant() -> None:
    rows = re.findall(r"^\| (ex\d\d_\w+) \| `([a-z0-9-]+)` \|", _section(), re.M)
    declared = {(ex, v) for ex, variants in exercise_variants().items()
                for v in variants}
    assert len(declared) >= 4
    assert sorted(rows) == sorted(declared)


@pytest.mark.parametrize(
    "variants",
    [{"ex05_alibi": "cached"}, {"ex01_permutation": "causal"}],
    ids=["unknown variant", "exercise without variants"],
)
def test_each_quoted_refusal_is_the_code_s(variants) -> None:
    with pytest.raises(CourseError) as err:
        Term.checked(variants, None)
    assert f"course release: error: {err.value}" in _section()


def test_the_quoted_release_is_what_course_release_prints(tmp_path, monkeypatch,
                                                         capsys) -> None:
    """The guide's two configuration lines, appended to a scratch course's
    nbgrader_config.py, make ``course release ex05`` print the line it quotes."""
    from course_lib.cli import main
    from course_lib.grading.synthetic import scratch_course

    section = _section()
    config = re.findall(r"^c\.CourseTerm\.\w+ = .*?(?=\s+#|$)", section, re.M)
    assert len(config) == 2, config
    course = scratch_course(tmp_path / "course", ROOT, ["ex05_alibi"])
    with (course.root / "nbgrader_config.py").open("a") as f:
        f.write("\n" + "\n".join(config) + "\n")
    monkeypatch.chdir(course.root)
    assert main(["release", "ex05"]) == 0
    (printed,) = [line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("released ")]
    assert f"  {printed}\n" in section
