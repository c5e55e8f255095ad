"""Topic administration and log scans through kafka-python.

`end_offsets` / ListOffsets("latest") are wrong on Tansu, so the end of a
partition is taken from the high watermark a Fetch response carries.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from kz_common.config import KafkaConfig
from kz_common.exceptions import BrokerUnavailable
from kz_common.topics import topic_specs


def create_topics(kafka: KafkaConfig, bootstrap: str) -> list[str]:
    """Create every registered topic that does not exist yet; return the names created."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    except KafkaError as exc:
        raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(s.physical, s.partitions, kafka.replication_factor)
            for s in topic_specs(kafka)
            if s.physical not in existing
        ]
        for topic in wanted:  # one at a time: a concurrent creator must not fail the rest
            try:
                admin.create_topics([topic])
            except TopicAlreadyExistsError:
                pass
        return [t.name for t in wanted]
    finally:
        admin.close()


def list_topics(bootstrap: str) -> dict[str, int]:
    """Topic name -> partition count."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        return {t: len(consumer.partitions_for_topic(t) or ()) for t in consumer.topics()}
    finally:
        consumer.close()


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int = 0  # ms since the epoch, as the broker stamped it


def scan(
    bootstrap: str, *topics: str, partitions: set[int] | None = None,
    start: dict[tuple[str, int], int] | None = None, max_s: float = 300.0,
) -> Iterator[Record]:
    """Every record of `topics` (optionally only some partitions) up to the end the scan first sees.

    `start` maps (topic, partition) to a first offset (default: the beginning). The end of a
    partition is the high watermark of its first Fetch answer, so records written during the scan
    (e.g. a replay into the topic it reads) are not chased. A partition with no answer yet is never
    taken for empty: an empty partition answers too (watermark 0), so the scan waits for every
    answer and raises BrokerUnavailable after `max_s` instead of returning a silently short log.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
        auto_offset_reset="earliest", request_timeout_ms=10_000, fetch_max_wait_ms=20,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    try:
        tps = [
            TopicPartition(t, p)
            for t in topics
            for p in sorted(consumer.partitions_for_topic(t) or ())
            if partitions is None or p in partitions
        ]
        if not tps:
            return
        assign_from(consumer, tps, start or {})
        yield from _drain(consumer, tps, max_s)
    finally:
        consumer.close()


def assign_from(
    consumer: KafkaConsumer, tps: list[TopicPartition], start: dict[tuple[str, int], int],
) -> None:
    """Assign `tps` to `consumer`, each at its offset in `start` (default: the beginning)."""
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    for tp in tps:
        if start.get((tp.topic, tp.partition), 0) > 0:
            consumer.seek(tp, start[(tp.topic, tp.partition)])


def _drain(consumer: KafkaConsumer, tps: list[TopicPartition], max_s: float) -> Iterator[Record]:
    ends: dict[TopicPartition, int] = {}
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=100)
        for tp, records in batch.items():
            for r in records:
                if r.offset < ends.get(tp, r.offset + 1):
                    yield Record(r.topic, r.partition, r.offset, r.key, r.value or b"", r.timestamp)
        for tp in tps:
            hw = consumer.highwater(tp)
            if hw is not None and tp not in ends:
                ends[tp] = hw
        if len(ends) == len(tps) and all(consumer.position(tp) >= ends[tp] for tp in tps):
            return
    missing = sorted(f"{tp.topic}[{tp.partition}]" for tp in tps if tp not in ends)
    raise BrokerUnavailable(
        f"scan of {tps[0].topic}... did not reach the end within {max_s:.0f} s"
        + (f"; no Fetch answer at all for {', '.join(missing)}" if missing else ""))
