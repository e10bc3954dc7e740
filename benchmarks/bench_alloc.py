"""How much of a fresh output's cost is the allocator's: the same operations timed
under three glibc malloc settings, each in its own process.

* default: glibc's dynamic threshold serves a freed block of up to 32 MiB again from
  its heap (pages already mapped), but a larger block gets its own ``mmap`` and every
  call faults its pages in again (and the kernel zeroes them).
* always mmap (``MALLOC_MMAP_THRESHOLD_=131072``): every output of 128 KiB or more is
  fresh memory, page faults on every call, at every size.
* keep the heap (``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` at 4 GiB):
  freed memory stays mapped and is reused, so a fresh output costs about a copy.

    python -m benchmarks.bench_alloc            # prints a markdown table
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SHAPES = [[4, 8, 1024, 64], [1, 32, 4096, 128]]
SETTINGS = {
    "default glibc": {},
    "always mmap": {"MALLOC_MMAP_THRESHOLD_": "131072"},
    "keep the heap": {
        "MALLOC_MMAP_THRESHOLD_": str(2**32),
        "MALLOC_TRIM_THRESHOLD_": str(2**32),
    },
}
OPS = [
    "clone()",
    "copy_() into a preallocated tensor",
    "RotaryEmbedding interleaved",
    "RotaryEmbedding half",
]


def _child(shape: list[int]) -> dict[str, float]:
    """Median time of each op in this process (its malloc settings are the parent's)."""
    import torch

    from benchmarks.harness import time_cases
    from course_lib import RotaryEmbedding

    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    out = torch.empty_like(x)
    inter = RotaryEmbedding(shape[-1], max_seq_len=shape[-2])
    half = RotaryEmbedding(shape[-1], convention="half", max_seq_len=shape[-2])
    fns = {
        OPS[0]: lambda: x.clone(),
        OPS[1]: lambda: out.copy_(x),
        OPS[2]: lambda: inter(x),
        OPS[3]: lambda: half(x),
    }
    return {k: t.median_s for k, t in time_cases(fns, rounds=9).items()}


def main(shapes: list[list[int]] = SHAPES) -> str:
    header = ["shape", "operation", *SETTINGS]
    rows = []
    results = {}
    for setting, env in SETTINGS.items():
        for shape in shapes:
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_alloc", json.dumps(shape)],
                capture_output=True,
                text=True,
                check=True,
                env=dict(os.environ, **env),
            )
            results[setting, tuple(shape)] = json.loads(proc.stdout)
    for shape in shapes:
        for op in OPS:
            cells = [f"{results[s, tuple(shape)][op] * 1e3:.2f} ms" for s in SETTINGS]
            rows.append([str(shape), op, *cells])
    from benchmarks.harness import markdown_table

    return markdown_table(header, rows)


if __name__ == "__main__":
    if len(sys.argv) > 1:  # child: torch reads OMP_NUM_THREADS itself
        print(json.dumps(_child(json.loads(sys.argv[1]))))
    else:
        print(main())
