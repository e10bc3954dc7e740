"""Dynamic NTK run as dynamic: the factor grows with the position decoded.

Chapter 12's table row "NTK at s = T/L" gives every token of a window of ``T``
tokens the factor ``T/L``: what dynamic NTK applies to a prompt of ``T`` tokens
processed in one pass. Dynamic NTK during generation is different: when token ``p``
is decoded the current length is ``p + 1``, so its factor is

.. math::

    s(p) = \\max\\!\\Big(1, \\frac{p + 1}{L}\\Big)

(emozilla 2023; Peng et al. 2023, section 3.3), and it grows token by token. This
module scores that rule: for every position ``p`` of every non-overlapping window it
runs the window's first ``p + 1`` tokens with the NTK base of ``s(p)`` and keeps the
prediction at ``p`` (positions below ``L`` use plain RoPE, ``s = 1``). Every earlier
token is rotated again with the current factor, as a model that recomputes its keys
does; a key cache rotated at older factors (Hugging Face's behaviour, chapter 11) is
not modelled. The cost is about ``T / 2`` forward passes per token, so it is run for
the RoPE models only, at the extension lengths, and stored apart
(``course_lib/data/lm_dynamic.json``).

The RoPE models are re-trained from the stored settings; :func:`run_dynamic` checks
that each re-trained model reproduces the stored record's scores at ``L``, block by
block, so the cells pair with the record's (same models, same text blocks).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from course_lib._validate import fail
from course_lib.experiments.lm import (
    LMConfig,
    encode,
    load_corpus,
    nll_blocks,
    rope_extension,
    train_lm,
)

__all__ = ["DYNAMIC_PATH", "dynamic_nll_blocks", "run_dynamic", "dynamic_main"]

DYNAMIC_PATH = Path(__file__).resolve().parents[1] / "data" / "lm_dynamic.json"
"""Where :func:`dynamic_main` writes the cells and chapter 12 reads them."""


@torch.no_grad()
def dynamic_nll_blocks(model, data: torch.Tensor, length: int, *, block: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL and token count per block, non-overlapping windows of ``length``,
    every position ``p`` scored with dynamic NTK's factor ``max(1, (p + 1) / L)``.

    Same windows, blocks and counts as :func:`~course_lib.experiments.lm.nll_blocks`
    with ``stride=None``. Leaves the model with plain RoPE.
    """
    L = model.config.train_length
    n = data.numel() - 1
    if length > n:
        fail("dynamic_nll_blocks", f"length {length} exceeds the {n} tokens")
    n_blocks = -(-n // block)
    sums = torch.zeros(n_blocks, dtype=torch.float64)
    counts = torch.zeros(n_blocks, dtype=torch.float64)
    starts = torch.arange(0, n - length + 1, length)  # (W,)

    def add(positions: torch.Tensor, nll: torch.Tensor) -> None:
        blk = positions // block
        sums.index_add_(0, blk, nll.double())
        counts.index_add_(0, blk, torch.ones_like(nll, dtype=torch.float64))

    head = min(L, length)
    rope_extension(model, None)  # s = 1 up to L
    per = max(1, 8192 // head)
    for b in range(0, starts.numel(), per):
        st = starts[b:b + per]
        idx = st[:, None] + torch.arange(head)  # (B, head)
        logits = model(data[idx])  # (B, head, V)
        nll = F.cross_entropy(logits.transpose(1, 2), data[idx + 1], reduction="none")
        add(idx.flatten(), nll.flatten())
    for p in range(head, length):
        rope_extension(model, {"method": "ntk", "factor": (p + 1) / L})
        per = max(1, 8192 // (p + 1))
        for b in range(0, starts.numel(), per):
            st = starts[b:b + per]
            idx = st[:, None] + torch.arange(p + 1)  # (B, p+1)
            logits = model(data[idx])[:, -1]  # (B, V): the prediction at p
            nll = F.cross_entropy(logits, data[st + p + 1], reduction="none")
            add(st + p, nll)
    rope_extension(model, None)
    return sums, counts


def run_dynamic(record: dict, seeds: list[int] | None = None, *, log=print) -> dict:
    """Re-train the record's RoPE models and score dynamic NTK at its extension
    lengths; returns ``{"cells": {T: {"blocks", "counts"}}, ...}`` for ``seeds``.

    Raises ``RuntimeError`` when a re-trained model does not reproduce the record's
    non-overlapping scores at ``L`` block by block (another model: not paired).
    """
    s = record["settings"]
    cfg = LMConfig(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in s.items() if k in LMConfig.__dataclass_fields__})
    _, digest, (train_text, val_text) = load_corpus()
    if digest != record["corpus_sha256"]:
        fail("run_dynamic", "the corpus differs from the record's")
    train_data, val_data = encode(train_text), encode(val_text)
    if cfg.eval_tokens is not None:
        val_data = val_data[: cfg.eval_tokens + 1]
    L, block = cfg.train_length, record["block_tokens"]
    seeds = list(record["seeds"]) if seeds is None else list(seeds)
    stored = record["perplexity"]["nonoverlap"]["rope"]
    cells: dict = {}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for seed in seeds:
        k = record["seeds"].index(seed)
        model, _ = train_lm("rope", seed, cfg, train_data)
        sums, _ = nll_blocks(model, val_data, L, block=block)
        if [round(float(x), 4) for x in sums] != stored[str(L)]["blocks"][k]:
            raise RuntimeError(f"run_dynamic: the re-trained RoPE model of seed {seed} "
                               "does not reproduce the record's scores at L")
        for m in cfg.extension_multipliers:
            T = m * L
            sums, counts = dynamic_nll_blocks(model, val_data, T, block=block)
            want = stored[str(T)]["counts"]
            if [round(float(c)) for c in counts] != want:
                fail("run_dynamic", f"the blocks at T = {T} differ from the record's")
            cell = cells.setdefault(str(T), {"blocks": [], "counts": want})
            cell["blocks"].append([round(float(x), 4) for x in sums])
            log(f"seed {seed}, T = {T}: done")
    return {"code_sha256": record["code_sha256"], "seeds": seeds, "cells": cells,
            "rule": "s(p) = max(1, (p + 1) / L), keys re-rotated at every step",
            "cpu_seconds": time.process_time() - cpu0,
            "wall_seconds": time.perf_counter() - wall0,
            "torch_threads": torch.get_num_threads()}


def merge_dynamic(parts: list[dict]) -> dict:
    """Join :func:`run_dynamic` results of disjoint seeds (in seed order)."""
    if not parts:
        fail("merge_dynamic", "parts must not be empty")
    seeds = sorted(s for p in parts for s in p["seeds"])
    if len(seeds) != len(set(seeds)):
        fail("merge_dynamic", "a seed is in more than one part")
    out = {k: v for k, v in parts[0].items() if k not in ("seeds", "cells")}
    out["seeds"], out["cells"] = seeds, {}
    out["cpu_seconds"] = sum(p["cpu_seconds"] for p in parts)
    out["wall_seconds"] = max(p["wall_seconds"] for p in parts)
    for T in parts[0]["cells"]:
        rows = {s: row for p in parts for s, row in zip(p["seeds"],
                                                        p["cells"][T]["blocks"],
                                                        strict=True)}
        out["cells"][T] = {"blocks": [rows[s] for s in seeds],
                           "counts": parts[0]["cells"][T]["counts"]}
    return out


def dynamic_main(argv=None) -> int:
    """``python -m course_lib.experiments.lm_dynamic [--seeds 0 1] [--record R]
    [--out F]``; ``--merge A B C --out F`` joins parts run with disjoint seeds."""
    import argparse

    from course_lib.experiments.lm import RESULTS_PATH

    p = argparse.ArgumentParser(prog="python -m course_lib.experiments.lm_dynamic")
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--out", type=Path, default=DYNAMIC_PATH)
    p.add_argument("--merge", type=Path, nargs="+", default=None)
    p.add_argument("--record", type=Path, default=RESULTS_PATH,
                   help="the LM record whose RoPE models to re-train (default: the "
                        "stored one; a part with the RoPE models will do)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.merge:
        out = merge_dynamic([json.loads(f.read_text()) for f in args.merge])
    else:
        record = json.loads(args.record.read_text())
        out = run_dynamic(record, args.seeds, log=lambda m: print(m, flush=True))
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(dynamic_main())
