"""The sinusoidal table: vectorised (course_lib) against the double Python loop that
tutorials print (with its exponent corrected, so both compute the same table)."""

from __future__ import annotations

import math

import torch

from course_lib import sinusoidal_encoding

SIZES = [{"max_len": 2048, "d_model": 512}]
QUICK_SIZES = [{"max_len": 8, "d_model": 8}]
BASELINE = "course_lib sinusoidal_encoding (vectorised)"


def _vectorised(max_len, d_model):
    return lambda: sinusoidal_encoding(max_len, d_model)


def _loop(max_len, d_model):
    def run():
        pe = [[0.0] * d_model for _ in range(max_len)]
        for p in range(max_len):
            for i in range(0, d_model, 2):
                angle = p / 10000 ** (i / d_model)  # i is already 2*(pair index)
                pe[p][i] = math.sin(angle)
                pe[p][i + 1] = math.cos(angle)
        return torch.tensor(pe)

    return run


CASES = {
    "course_lib sinusoidal_encoding (vectorised)": _vectorised,
    "double Python loop": _loop,
}
