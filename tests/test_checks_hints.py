"""Issue 33: a public check's message for a known mistake says what is wrong and where
to look, and leaves the fix to the student; the fix (the hint) is a second level, shown
only when asked for (``course check --hint``, or ``COURSE_HINTS=1`` in the notebook).

Each case is a zoo mistake whose fix is the step its exercise asks for; the test runs
its public check twice, without and with hints, and looks for the fix's words."""

from __future__ import annotations

import pytest
from zoo import ex06_relative as z06
from zoo import ex07_transformer_xl as z07
from zoo import ex08_da as z08
from zoo import ex11_long_context as z11

from course_lib.checks import CheckFailed, _core
from course_lib.checks import ex06_relative as g06
from course_lib.checks import ex07_transformer_xl as g07
from course_lib.checks import ex08_da as g08
from course_lib.checks import ex11_long_context as g11
from course_lib.cli import build_parser

# (public check, wrong implementation, words of the fix, the section the message names)
CASES = [
    (
        g11.check_yarn_attention_factor,
        z11.attention_squared,
        "sqrt(1/t) = 0.1 ln(s) + 1",
        '"YaRN" of chapter 11',
    ),
    (
        g11.check_yarn_attention_factor,
        z11.attention_reciprocal,
        "not sqrt(t)",
        '"YaRN" of chapter 11',
    ),
    (
        g11.check_yarn_correction_range,
        z11.range_turns_in_radians,
        "a turn is 2 pi radians",
        '"YaRN" of chapter 11',
    ),
    (
        g11.check_yarn_correction_range,
        z11.range_ceil_both,
        "floor",
        '"YaRN" of chapter 11',
    ),
    (
        g06.check_t5_relative_position_bucket,
        z06.bucket_rounded_up,
        "round the logarithmic value down",
        '"Which offsets share a bucket" of chapter 6',
    ),
    (
        g06.check_t5_relative_position_bucket,
        z06.bucket_rounded_to_nearest,
        "round the logarithmic value down",
        '"Which offsets share a bucket" of chapter 6',
    ),
    (
        g06.check_shaw_relative_attention,
        z06.shaw_no_value_term,
        "sum their weights per table row",
        '"Shaw et al.: relative key and value vectors" of chapter 6',
    ),
    (
        g07.check_rel_shift_bidirectional,
        z07.bishift_xlnet_without_pad,
        "pad one zero column on the left",
        '"Why the mask is mandatory after the shift" of chapter 7',
    ),
    (
        g08.check_da_rescale,
        z08.rescale_ratio,
        "take logarithms",
        '"The distance function" of chapter 8',
    ),
]


def _message(check, fn) -> str:
    with pytest.raises(CheckFailed) as info:
        check(fn)
    return str(info.value)


@pytest.mark.parametrize(
    ("check", "fn", "fix", "section"), CASES, ids=[c[1].__name__ for c in CASES]
)
def test_the_fix_is_shown_only_when_asked_for(
    check, fn, fix, section, monkeypatch, capsys
) -> None:
    monkeypatch.delenv(_core.HINTS_VARIABLE, raising=False)
    plain = _message(check, fn)
    assert fix not in plain, plain
    assert f"Reread the section {section}" in plain, plain
    assert "course check --hint" in plain and "COURSE_HINTS" in plain, plain
    monkeypatch.setenv(_core.HINTS_VARIABLE, "1")
    hinted = _message(check, fn)
    assert f"Hint: {fix}" in hinted or ("Hint: " in hinted and fix in hinted), hinted
    assert "course check --hint" not in hinted
    capsys.readouterr()


def test_the_recorded_explanation_is_what_the_student_was_told(monkeypatch) -> None:
    """The grading tool records the sentence after "is wrong in a known way: "."""
    monkeypatch.delenv(_core.HINTS_VARIABLE, raising=False)
    with pytest.raises(CheckFailed) as info:
        g11.check_yarn_attention_factor(z11.attention_squared)
    exc = info.value
    assert exc.mistake == "squared"
    assert str(exc).split(" is wrong in a known way: ", 1)[1] == exc.explanation
    assert exc.explanation.startswith("this is 1/t")


def test_a_mistake_without_a_hint_reads_as_before(monkeypatch) -> None:
    monkeypatch.setenv(_core.HINTS_VARIABLE, "1")
    m = _core.Mistake(0.0, "the slopes are reversed", "reversed-heads")
    assert str(_core.known_mistake("alibi_slopes(3)", m)) == (
        "alibi_slopes(3) is wrong in a known way: the slopes are reversed"
    )


@pytest.mark.parametrize("value", ["", "0", "no"])
def test_hints_are_off_unless_the_variable_says_yes(value, monkeypatch) -> None:
    monkeypatch.setenv(_core.HINTS_VARIABLE, value)
    assert not _core.hints_wanted()
    monkeypatch.setenv(_core.HINTS_VARIABLE, "1")
    assert _core.hints_wanted()


def test_course_check_takes_hint() -> None:
    args = build_parser().parse_args(["check", "nb.ipynb", "--hint"])
    assert args.hint is True
    assert build_parser().parse_args(["check", "nb.ipynb"]).hint is False
