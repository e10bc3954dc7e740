"""The worked examples of an exercise's task text, run as doctests.

A task cell shows its function at work in a fenced ```python block with ``>>>``
prompts; :func:`worked_examples` finds them and :func:`assert_worked_examples_hold`
runs each against a solution's namespace, with the print options the notebooks use
(4 decimals, no scientific notation), and fails on the first block that does not
print what it says (a block must run at least one example)."""

from __future__ import annotations

import doctest
import re

import torch

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def worked_examples(text: str) -> list[str]:
    """The fenced python blocks of ``text`` that hold ``>>>`` examples."""
    return [block for block in _BLOCK.findall(text) if ">>>" in block]


def assert_worked_examples_hold(blocks: list[str], namespace: dict, name: str) -> None:
    """Each block, as a doctest in a copy of ``namespace``, prints what it shows."""
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    saved = torch._tensor_str.PRINT_OPTS.__dict__.copy()
    torch.set_printoptions(precision=4, sci_mode=False)
    try:
        for block in blocks:
            # A blank line inside a printed tensor is doctest's <BLANKLINE>.
            text = re.sub(r"\n[ \t]*\n(?=.)", "\n<BLANKLINE>\n", block)
            test = doctest.DocTestParser().get_doctest(
                text, dict(namespace), name, None, 0
            )
            report: list[str] = []
            result = runner.run(test, out=report.append)
            assert result.attempted > 0 and result.failed == 0, (
                f"{name}: a worked example is wrong:\n{block}\n{''.join(report)}"
            )
    finally:
        torch._tensor_str.PRINT_OPTS.__dict__.update(saved)
