"""Fixtures of the fault-injection tests: settings for service subprocesses, a verifier cache,
the tiny model, brokers of a test's own (for the test that stops one)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kz_common.admin import create_topics
from kz_common.broker import EmbeddedBroker
from kz_common.config import KafkaConfig, Settings
from tests.conftest import free_port

# Group timeouts half the default (6000 ms): Tansu makes every join wait session_timeout / 2,
# and a SIGKILLed member keeps its partitions until its session expires; these tests kill
# about a dozen consumers. 1 s heartbeats keep live members in even on a loaded 2-core box.
# Small batches, so a SIGKILL lands between many commits.
KAFKA: dict[str, Any] = {"partitions": 3, "batch_max_records": 8, "session_timeout_ms": 3000,
                         "heartbeat_interval_ms": 1000}


def verifier_section(cache: Path, **overrides: Any) -> dict[str, Any]:
    """Honest-but-small CPU limits: a sandboxed torch import plus a small `add` fits easily."""
    return {"device": "cpu", "cache_dir": str(cache), "wall_timeout_s": 20.0, "cpu_seconds": 60,
            "memory_limit_mb": 2048, "reference_timeout_s": 60.0, "max_shapes": 2, **overrides}


def curator_section(**overrides: Any) -> dict[str, Any]:
    # CPU verdicts carry no timing; small windows so they open and close while services die.
    return {"require_perf": False, "window_verdicts": 4, "keep_fraction": 1.0, "train_threshold": 1,
            **overrides}


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The locally built tiny Llama (solver and trainer base). Content-addressed and reused
    across sessions under the system temp dir: building it costs seconds of a 2-core budget."""
    from kz_common.kernels import available_ops, reference_solution
    from kz_common.llm.tiny import build_tiny_model

    texts = [reference_solution(op) for op in available_ops()]
    cache = Path(tempfile.gettempdir()) / "kz-faults-models"
    return build_tiny_model(cache, texts, vocab_size=512, hidden=64, layers=1)


@pytest.fixture
def fault_settings(broker: str) -> Settings:
    """The session broker, a topic namespace of this test's own."""
    s = Settings(kafka=KafkaConfig(bootstrap_servers=broker, topic_prefix=f"f{uuid.uuid4().hex[:8]}.", **KAFKA))
    create_topics(s.kafka, broker)
    return s


@pytest.fixture
def start_broker() -> Iterator[Callable[[], tuple[EmbeddedBroker, Settings]]]:
    """Start a broker of the test's own (fresh port, empty memory); all are stopped at teardown."""
    started: list[EmbeddedBroker] = []

    def start() -> tuple[EmbeddedBroker, Settings]:
        port = free_port()
        broker = EmbeddedBroker(KafkaConfig(embedded_port=port)).start()
        started.append(broker)
        settings = Settings(kafka=KafkaConfig(bootstrap_servers=broker.bootstrap, topic_prefix="kz.", **KAFKA))
        return broker, settings

    yield start
    for b in started:
        b.stop()
