"""``python -m course_lib.experiments``: re-run the length-extrapolation lab.

``python -m course_lib.experiments --lm`` runs the language-model experiment
(:mod:`course_lib.experiments.lm`) instead.
"""

import sys

from course_lib.experiments.train import main

if __name__ == "__main__":
    if "--lm" in sys.argv[1:]:
        from course_lib.experiments.lm import lm_main

        raise SystemExit(lm_main(sys.argv[1:]))
    raise SystemExit(main())
