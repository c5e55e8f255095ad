"""One embedded broker per test module; a fresh topic prefix and archive dir per test."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kz_common.admin import create_topics
from kz_common.broker import EmbeddedBroker
from kz_common.config import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def module_broker() -> Iterator[str]:
    with EmbeddedBroker(Settings(kafka={"embedded_port": free_port()}).kafka) as b:
        yield b.bootstrap


def settings_for(bootstrap: str, data_dir: Path, prefix: str | None = None) -> Settings:
    s = Settings(kafka={"bootstrap_servers": bootstrap, "topic_prefix": prefix or f"t{uuid.uuid4().hex[:8]}.",
                        "partitions": 3},
                 paths={"data_dir": str(data_dir)},
                 services={"archiver": {"flush_interval_s": 0.5}})
    create_topics(s.kafka, bootstrap)
    return s


@pytest.fixture
def arch_settings(module_broker: str, tmp_path: Path) -> Settings:
    return settings_for(module_broker, tmp_path)
