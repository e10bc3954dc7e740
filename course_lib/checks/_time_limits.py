"""How long a student's function may take in a check: the course's one table of
time limits, read by ``course autograde`` (through ``nbgrader_config.py``), by
``course check`` and by the public checks in a student's own notebook.

The numbers come from ``python -m benchmarks.solution_cost --variants``: each
assignment's solution and the slow but correct answers students really hand in
(``benchmarks/honest_variants.py``), timed cold in the sandboxed grading kernel; the
record, with the machine and its load, is ``benchmarks/honest_costs.json``, and
``nbgrader_config.py`` says how the limits follow from it. An infinite loop costs
one limit, seconds rather than minutes, and no honest answer comes near it.
"""

from __future__ import annotations

import os

__all__ = [
    "CELL_TIME_LIMIT",
    "SOLUTION_CHECK_SECONDS",
    "check_time_limit",
]

# seconds per cell, per assignment (benchmarks/solution_cost.py: derived_limit)
CELL_TIME_LIMIT = {
    "ex01_permutation": 10,
    "ex02_sinusoidal": 10,
    "ex03_rotation": 10,
    "ex04_rope": 10,
    "ex05_alibi": 10,
    "ex06_relative": 10,
    "ex07_transformer_xl": 10,
    "ex08_da": 10,
    "ex09_bug_zoo": 10,
    "ex10_lab": 30,
    "ex11_long_context": 10,
}

# seconds the solution's public check cell took, cold, per function (the same
# record): what a message about a function that did not return compares with
SOLUTION_CHECK_SECONDS = {
    "ex01_permutation": {"self_attention": 0.32, "permutation_matrix": 0.04},
    "ex02_sinusoidal": {
        "sinusoidal_encoding": 0.22,
        "position_ids_from_attention_mask": 0.06,
    },
    "ex03_rotation": {"offset_matrix": 0.33, "hand_computation": 0.02},
    "ex04_rope": {
        "rope_frequencies": 0.36,
        "apply_rope": 0.14,
        "interleaved_to_half_weights": 0.08,
    },
    "ex05_alibi": {"alibi_slopes": 0.26, "alibi_bias": 0.05},
    "ex06_relative": {
        "shaw_relative_attention": 0.18,
        "t5_relative_position_bucket": 0.04,
    },
    "ex07_transformer_xl": {
        "rel_shift": 0.32,
        "rel_attention_scores": 0.04,
        "rel_shift_bidirectional": 0.07,
    },
    "ex08_da": {"da_rescale": 0.27, "da_attention": 0.1},
    "ex09_bug_zoo": {
        "fixed_rope_cos_sin": 0.19,
        "fixed_decode_position_ids": 0.03,
        "fixed_sliding_window_mask": 0.02,
    },
    "ex10_lab": {"log_distance_bias": 1.17, "retained_skill": 0.03},
    "ex11_long_context": {
        "yarn_correction_range": 0.39,
        "yarn_attention_factor": 0.06,
        "llama3_scaled_frequencies": 0.07,
    },
}


def check_time_limit(assignment: str) -> float | None:
    """Seconds a check of ``assignment`` gives the student's function; ``None``:
    no limit. ``COURSE_CHECK_TIME_LIMIT`` (seconds; 0 = none) overrides the table."""
    override = os.environ.get("COURSE_CHECK_TIME_LIMIT", "").strip()
    if override:
        try:
            value = float(override)
        except ValueError:
            value = 0.0
        return value if value > 0 else None
    limit = CELL_TIME_LIMIT.get(assignment)
    return float(limit) if limit else None
