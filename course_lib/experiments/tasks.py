"""Synthetic tasks for the length-extrapolation lab, generated on the fly from a seed.

Every task is read by a *causal* model that predicts one class per position; the task
says which positions are trained on and which are scored. Three tasks, each needing
order information in a different way:

``ascending`` (the ordering task of the course's source notes)
    Is the sequence in non-decreasing order? Half of the sequences are sorted draws
    from ``n_values`` values, the other half are the same with one pair of adjacent,
    distinct values swapped (the hardest negatives: a random shuffle would be
    recognised from a single glance). Training labels every prefix ("is the sequence
    so far ascending?"); the score is the answer at the last position, i.e. for the
    whole sequence. Chance: 1/2.

``recall`` (associative recall: Graves et al. 2014; Ba et al. 2016; multi-query form
of Arora et al. 2024)
    A stream of key-value pairs ``k1 v1 k2 v2 ...``; within a sequence each of the
    ``n_keys`` keys is bound to one random value. Whenever a key comes back, the model
    must predict its value before seeing it. The value of a key is the token *right
    after* it, so the model needs the previous-token relation; matching the key is
    content-based. Chance: ``1/n_values``.

``copy`` (string duplication: Delétang et al. 2023, "duplicate string"; Kazemnejad
et al. 2023, "copy")
    ``x_1 .. x_n`` followed by the same string written with a second alphabet. At
    each position of the copy the model predicts the next copied token. Symbols repeat
    (``n_symbols`` is small), so looking up the current symbol is ambiguous: the model
    must use *where* it is in the copy. Chance: ``1/n_symbols``.

Example:
    >>> g = torch.Generator().manual_seed(0)
    >>> batch = TASKS["copy"].sample(2, 6, generator=g)
    >>> batch.tokens.shape, batch.targets.shape
    (torch.Size([2, 6]), torch.Size([2, 6]))
    >>> batch.eval_mask[0].tolist()  # the copy's first two tokens predict the next
    [False, False, False, True, True, False]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._validate import fail, require_int, require_positive_int

__all__ = [
    "TASKS",
    "Batch",
    "Task",
    "ascending_batch",
    "copy_batch",
    "recall_batch",
]


@dataclass(frozen=True)
class Batch:
    """One batch of a task: tokens, per-position targets and which positions count.

    Attributes:
        tokens: ``(batch, seq)`` long input tokens.
        targets: ``(batch, seq)`` long class of each position (0 where unused).
        train_mask: ``(batch, seq)`` bool, positions the loss is computed on.
        eval_mask: ``(batch, seq)`` bool, positions the accuracy is computed on.
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    train_mask: torch.Tensor
    eval_mask: torch.Tensor


def _check(fn: str, batch: object, length: object, *, minimum: int, even: bool):
    b = require_positive_int(fn, "batch", batch)
    n = require_int(fn, "length", length, minimum=minimum)
    if even and n % 2:
        fail(fn, f"length must be even (the task is built from pairs), got {n}")
    return b, n


def ascending_batch(
    batch: int, length: int, *, generator: torch.Generator, n_values: int = 8
) -> Batch:
    """The ordering task: is the sequence non-decreasing?

    .. math::

        y_t = \\mathbb{1}[x_0 \\le x_1 \\le \\dots \\le x_t]

    Args:
        batch: number of sequences.
        length: sequence length, at least 2.
        generator: source of all randomness.
        n_values: values are ``0 .. n_values-1`` (at least 2).

    Returns:
        :class:`Batch` with ``targets`` in ``{0, 1}`` (1 = ascending so far), trained
        at every position, scored at the last one.

    >>> g = torch.Generator().manual_seed(1)
    >>> b = ascending_batch(3, 5, generator=g)
    >>> b.tokens.tolist(), b.targets[:, -1].tolist()
    ([[3, 0, 4, 5, 7], [0, 1, 3, 5, 7], [0, 1, 4, 7, 5]], [0, 1, 0])
    """
    fn = "ascending_batch"
    b, n = _check(fn, batch, length, minimum=2, even=False)
    n_values = require_int(fn, "n_values", n_values, minimum=2)
    x = torch.randint(0, n_values, (b, n), generator=generator).sort(dim=1).values
    negative = torch.rand(b, generator=generator) < 0.5  # (B,)
    steps = x[:, 1:] > x[:, :-1]  # (B, S-1): adjacent pairs that can be swapped
    pick = torch.rand(b, n - 1, generator=generator).masked_fill(~steps, -1.0)
    where = pick.argmax(dim=1)  # (B,) a random swappable pair
    swap = negative & steps.any(dim=1)  # all-equal sequences stay positive
    rows, i = torch.arange(b)[swap], where[swap]
    x[rows, i], x[rows, i + 1] = x[rows, i + 1], x[rows, i]
    targets = torch.ones(b, n, dtype=torch.long)
    targets[:, 1:] = (x[:, 1:] >= x[:, :-1]).long().cumprod(dim=1)  # (B, S)
    eval_mask = torch.zeros(b, n, dtype=torch.bool)
    eval_mask[:, -1] = True
    return Batch(x, targets, torch.ones(b, n, dtype=torch.bool), eval_mask)


def recall_batch(
    batch: int,
    length: int,
    *,
    generator: torch.Generator,
    n_keys: int = 8,
    n_values: int = 8,
) -> Batch:
    """Associative recall: predict the value bound to a key that comes back.

    Tokens ``0 .. n_keys-1`` are keys, ``n_keys .. n_keys+n_values-1`` values; the
    sequence is ``length/2`` pairs ``(k, f(k))`` with a random binding ``f`` per
    sequence. The target at a key position is ``f(k)`` (class ``0 .. n_values-1``),
    counted only when the key occurred earlier in the sequence.

    Args:
        batch: number of sequences.
        length: even sequence length, at least 4.
        generator: source of all randomness.
        n_keys: number of distinct keys.
        n_values: number of distinct values (the classes).

    Returns:
        :class:`Batch` trained and scored at repeated keys.

    >>> g = torch.Generator().manual_seed(0)
    >>> b = recall_batch(1, 8, generator=g, n_keys=2, n_values=3)
    >>> b.tokens.tolist(), b.eval_mask.long().tolist()
    ([[0, 3, 1, 2, 1, 2, 0, 3]], [[0, 0, 0, 0, 1, 0, 1, 0]])
    >>> b.targets[b.eval_mask].tolist()  # value token v is class v - n_keys
    [0, 1]
    """
    fn = "recall_batch"
    b, n = _check(fn, batch, length, minimum=4, even=True)
    n_keys = require_positive_int(fn, "n_keys", n_keys)
    n_values = require_int(fn, "n_values", n_values, minimum=2)
    pairs = n // 2
    keys = torch.randint(0, n_keys, (b, pairs), generator=generator)  # (B, P)
    binding = torch.randint(0, n_values, (b, n_keys), generator=generator)  # (B, K)
    values = binding.gather(1, keys)  # (B, P)
    tokens = torch.stack([keys, values + n_keys], dim=2).reshape(b, n)  # (B, S)
    earlier = torch.ones(pairs, pairs, dtype=torch.bool).tril(diagonal=-1)  # (P, P)
    seen = ((keys[:, :, None] == keys[:, None, :]) & earlier).any(dim=2)  # (B, P)
    targets = torch.zeros(b, n, dtype=torch.long)
    targets[:, 0::2] = values
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[:, 0::2] = seen
    return Batch(tokens, targets, mask, mask.clone())


def copy_batch(
    batch: int, length: int, *, generator: torch.Generator, n_symbols: int = 16
) -> Batch:
    """String duplication: ``x_1..x_n`` then ``x_1..x_n`` in a second alphabet.

    With ``n = length/2``, position ``n + k`` holds ``x_{k+1} + n_symbols`` and must
    predict ``x_{k+2}`` (class ``0 .. n_symbols-1``) for ``k = 0 .. n-2``. The last
    token of the first half is not scored (nothing tells a causal model that the copy
    starts next).

    Args:
        batch: number of sequences.
        length: even sequence length, at least 4.
        generator: source of all randomness.
        n_symbols: alphabet size (the classes).

    Returns:
        :class:`Batch` trained and scored on the copy.
    """
    fn = "copy_batch"
    b, n = _check(fn, batch, length, minimum=4, even=True)
    n_symbols = require_int(fn, "n_symbols", n_symbols, minimum=2)
    half = n // 2
    x = torch.randint(0, n_symbols, (b, half), generator=generator)  # (B, n/2)
    tokens = torch.cat([x, x + n_symbols], dim=1)  # (B, S)
    targets = torch.zeros(b, n, dtype=torch.long)
    targets[:, half : n - 1] = x[:, 1:]
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[:, half : n - 1] = True
    return Batch(tokens, targets, mask, mask.clone())


@dataclass(frozen=True)
class Task:
    """A task of the lab: its generator and what a model needs to know about it.

    Attributes:
        name: registry key.
        vocab_size: number of input tokens.
        n_classes: number of output classes per position.
        chance: accuracy of guessing (uniform over the classes, or the majority rate).
        description: one line for tables and plots.
        make: ``make(batch, length, generator=...) -> Batch``.
        min_length: shortest valid length.
    """

    name: str
    vocab_size: int
    n_classes: int
    chance: float
    description: str
    make: Callable[..., Batch]
    min_length: int = 4

    def sample(self, batch: int, length: int, *, generator: torch.Generator) -> Batch:
        """Draw ``batch`` sequences of ``length`` tokens (see the task's function)."""
        return self.make(batch, length, generator=generator)


TASKS: dict[str, Task] = {
    "ascending": Task(
        "ascending", 8, 2, 0.5, "is the sequence in ascending order?",
        ascending_batch, 2,
    ),
    "recall": Task(
        "recall", 16, 8, 1 / 8, "value of a key seen before (associative recall)",
        recall_batch,
    ),
    "copy": Task(
        "copy", 32, 16, 1 / 16, "copy a string (duplication)", copy_batch
    ),
}
"""The lab's tasks by name, with their default sizes."""
