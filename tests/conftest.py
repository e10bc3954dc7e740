"""Shared pytest configuration: deterministic torch, repository paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # The tensors in tests are small: one thread avoids thread start-up and
    # contention on the 2-core machines (about 4x faster here for the grader tests).
    torch.set_num_threads(1)


@pytest.fixture
def root() -> Path:
    """The repository root."""
    return ROOT


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator: tests draw random inputs only through it."""
    return torch.Generator().manual_seed(0)
