from __future__ import annotations

from pathlib import Path

import pytest

from kz_common.llm.tiny import build_tiny_model
from tests.kz_common.llm.helpers import TEST_SPEC, corpus, make_lora_adapter


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-cache", corpus(),
                            train_steps=2, **TEST_SPEC)


@pytest.fixture(scope="session")
def lora_adapter(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_lora_adapter(tiny_model, tmp_path_factory.mktemp("lora") / "round-1")
