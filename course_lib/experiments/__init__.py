"""The length-extrapolation lab (chapter 10): tiny models, synthetic tasks, harness.

Train a :class:`TinyTransformer` with each position method of the library on
synthetic tasks at length ``L`` and measure its accuracy at ``L``, ``2L``, ``4L`` and
``8L``. ``python -m course_lib.experiments`` (or ``course lab``) re-runs the full lab
and writes ``course_lib/data/lab_results.json``; the chapter reads that file. The
language-model experiment of chapter 12 lives in :mod:`course_lib.experiments.lm`
(``course lab --lm``), its dynamic-NTK scoring token by token in
``course_lib.experiments.lm_dynamic``.

>>> from course_lib.experiments import LabConfig, train_run
>>> cfg = LabConfig(steps=5, eval_sequences=8, train_length=8, multipliers=(1, 2))
>>> sorted(train_run("copy", "alibi", seed=0, config=cfg)["accuracy"])
['16', '8']
"""

from . import lm, model, tasks, train
from .model import *  # noqa: F403
from .tasks import *  # noqa: F403
from .train import *  # noqa: F403

__all__ = ["lm", *model.__all__, *tasks.__all__, *train.__all__]
