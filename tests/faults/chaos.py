"""Fault injection over running services: a publisher that keeps a stream flowing in the
background, SIGKILLs recorded together with what the victim was doing, keys chosen per partition.

A kill is only evidence if it lands mid-stream, so every `Kill` records whether the
victim had produced output already, how many of its input records were uncommitted
and whether the stream was still being published; the tests assert on those.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafka import KafkaProducer
from kafka.partitioner.default import murmur2

from kz_common.config import Settings
from kz_common.topics import physical
from schemas import AnyEnvelope, encode
from tests.faults.pipeline import Services, events, lag


def partition_of(key: str, partitions: int) -> int:
    """The partition kafka-python and aiokafka both pick for a keyed record (Java's murmur2)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def key_on(partition: int, partitions: int, prefix: str) -> str:
    """The first `prefix-N` key that lands on `partition`: all of its events share that partition."""
    for n in range(10_000):
        if partition_of(key := f"{prefix}-{n}", partitions) == partition:
            return key
    raise AssertionError(f"no key with prefix {prefix!r} on partition {partition}")


Item = tuple[str, bytes, bytes]  # (logical topic, key, value)


def item(topic: str, event: AnyEnvelope) -> Item:
    return topic, event.correlation_id.encode(), encode(event)


class Trickle(threading.Thread):
    """Publishes `items` one by one, `every_s` apart (each acknowledged before the next), so
    services are busy with a stream that is still arriving when they are killed."""

    def __init__(self, settings: Settings, items: list[Item], every_s: float) -> None:
        super().__init__(name="fault-trickle", daemon=True)
        self.settings, self.items, self.every_s = settings, items, every_s
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.settings.kafka.bootstrap_servers, acks="all")
        try:
            for topic, key, value in self.items:
                producer.send(physical(self.settings.kafka, topic), key=key, value=value).get(timeout=30)
                self.sent += 1
                time.sleep(self.every_s)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test through check()
            self.error = exc
        finally:
            producer.close()

    @property
    def unpublished(self) -> int:
        return len(self.items) - self.sent

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the stream publisher failed: {self.error!r}") from self.error


@dataclass(frozen=True)
class Kill:
    service: str
    produced_before: int  # events the victim had put on its output topics
    uncommitted: int  # its input records not committed yet (measured just before the kill)
    upstream_pending: int  # records still to come its way: unpublished or uncommitted upstream

    @property
    def mid_stream(self) -> bool:
        return self.produced_before > 0 and (self.uncommitted > 0 or self.upstream_pending > 0)


def produced_by(settings: Settings, service: str, topics: Iterable[str]) -> int:
    return sum(1 for t in topics for d in events(settings, t) if d["producer"]["service"] == service)


def kill_and_restart(svc: Services, settings: Settings, name: str, inputs: tuple[str, ...],
                     outputs: tuple[str, ...], upstream: Mapping[str, tuple[str, ...]],
                     unpublished: int) -> Kill:
    """SIGKILL `name` (no chance to flush or commit) and start it again at once.

    `upstream`: group -> input topics of the services before it; `unpublished`: stream
    records the test has not published yet."""
    produced = produced_by(settings, name, outputs)
    pending = unpublished + sum(lag(settings, g, t) for g, t in upstream.items())
    uncommitted = lag(settings, name, inputs)
    svc.kill(name)
    svc.start(name)
    return Kill(name, produced, uncommitted, pending)
