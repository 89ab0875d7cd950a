"""Shared pytest set-up: offline Hugging Face libraries and a few generic fixtures.

Keep this file small and generic; fixtures specific to one area belong in that area's tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests never reach the Hugging Face hub (there is no network here, and CI must not depend on it).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (the directory holding pyproject.toml)."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir(repo_root: Path) -> Path:
    """The shared data directory (`../shared/data` next to the repository), e.g. GSM8K jsonl."""
    return repo_root.parent / "shared" / "data"


@pytest.fixture
def seed() -> int:
    """Seeds torch's global RNG (0) for tests that build random models or tensors."""
    import torch

    torch.manual_seed(0)
    return 0
