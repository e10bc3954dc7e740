"""Book build time: a clean build (empty execution cache) and a cached rebuild."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(out: Path) -> float:
    jb = Path(sys.executable).with_name("jupyter-book")
    t0 = time.perf_counter()
    subprocess.run(
        [str(jb), "build", str(ROOT), "--path-output", str(out), "-q"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


def main() -> str:
    out = Path(tempfile.mkdtemp(prefix="bench-book-"))
    try:
        clean = build(out)
        cached = build(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return (
        "| build | wall time |\n|---|---|\n"
        f"| clean (every chapter executed) | {clean:.0f} s |\n"
        f"| cached rebuild (nothing changed) | {cached:.0f} s |"
    )


if __name__ == "__main__":
    print(main())
