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
    proc = subprocess.run(
        [str(jb), "build", str(ROOT), "--path-output", str(out), "-q"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:  # say why, not where in this script
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise SystemExit("jupyter-book build failed:\n" + "\n".join(tail))
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
