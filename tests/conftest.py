"""Shared fixtures: one real embedded broker per test session, a fresh topic namespace per test."""

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


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """Bootstrap address of a Tansu broker started for this test session."""
    settings = Settings(kafka={"embedded_port": free_port()})
    with EmbeddedBroker(settings.kafka) as b:
        yield b.bootstrap


@pytest.fixture
def settings(broker: str) -> Settings:
    """Settings pointing at the session broker, with topics under a prefix unique to this test."""
    s = Settings(kafka={"bootstrap_servers": broker, "topic_prefix": f"t{uuid.uuid4().hex[:8]}.",
                        "partitions": 3})
    create_topics(s.kafka, broker)
    return s


@pytest.fixture
def verifier_cache(tmp_path: Path) -> Path:
    """The verifier's shared cache dir. pytest's tmp_path is 0700: the sandbox uid cannot
    traverse it, and need not, since sandboxes work on private copies of the cache."""
    return tmp_path / "verifier-cache"
