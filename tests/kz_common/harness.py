"""Helpers for backbone tests: run relay cores, publish events, read topics back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson
from kafka import KafkaProducer

from kz_common.admin import scan
from kz_common.config import Settings
from kz_common.core import ServiceCore
from kz_common.runner import ServiceRunner
from kz_common.topics import physical
from schemas import AnyEnvelope, Producer, encode, make_event
from tests.kz_common.relay import challenge

ORIGIN = Producer(service="test", version="1")


def challenge_events(n: int, start: int = 0) -> list[AnyEnvelope]:
    return [make_event(challenge(i), producer=ORIGIN, correlation_id=f"c{i}") for i in range(start, start + n)]


def publish(settings: Settings, topic: str, values: list[bytes], keys: list[bytes] | None = None) -> None:
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    for i, value in enumerate(values):
        producer.send(physical(settings.kafka, topic), key=keys[i] if keys else b"k", value=value)
    producer.flush()
    producer.close()


def publish_events(settings: Settings, topic: str, events: list[AnyEnvelope]) -> None:
    publish(settings, topic, [encode(e) for e in events], [e.correlation_id.encode() for e in events])


def read(settings: Settings, topic: str) -> list[dict]:
    assert settings.kafka.bootstrap_servers
    return [orjson.loads(r.value) for r in scan(settings.kafka.bootstrap_servers, physical(settings.kafka, topic))]


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


async def run_until(cores: list[ServiceCore], settings: Settings, done: Callable[[], bool],
                    timeout_s: float = 90.0) -> None:
    """Run `cores` in this process until `done()` (checked off the event loop) holds."""
    assert settings.kafka.bootstrap_servers
    stop = asyncio.Event()
    tasks = [asyncio.create_task(ServiceRunner(c, settings, settings.kafka.bootstrap_servers).run(stop))
             for c in cores]
    deadline = time.monotonic() + timeout_s
    try:
        while not await asyncio.to_thread(done):
            if time.monotonic() > deadline:
                raise AssertionError("pipeline did not finish in time")
            for t in tasks:
                if t.done():
                    t.result()  # surface a runner that died
            await asyncio.sleep(0.3)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
