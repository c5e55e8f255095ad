"""A small synthetic archive (3 rounds), written once per module without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from kz_common.analytics.synthetic import generate
from services.archiver.offline import archive_messages


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive")
    archive_messages(generate(3_000, challenges_per_round=100), root, batch=1_000)
    return root
