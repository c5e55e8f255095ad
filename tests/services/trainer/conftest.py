"""A tiny base model built once per test session (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kz_common.llm.tiny import build_tiny_model
from tests.services.curator.samples import CLEAN


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("models"), [CLEAN, "def forward(self, x):\n"] * 2,
                            vocab_size=400, hidden=64, layers=1)
