"""``python -m course_lib.experiments``: re-run the length-extrapolation lab."""

from course_lib.experiments.train import main

if __name__ == "__main__":
    raise SystemExit(main())
