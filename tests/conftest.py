"""Shared pytest configuration: deterministic torch, repository paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def root() -> Path:
    """The repository root."""
    return ROOT


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator: tests draw random inputs only through it."""
    return torch.Generator().manual_seed(0)
