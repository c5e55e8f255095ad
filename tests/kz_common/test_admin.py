"""Log scans against the real broker: complete, bounded by the end first seen, never silently short."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition

from kz_common.admin import _drain, assign_from, scan
from kz_common.config import Settings
from kz_common.exceptions import BrokerUnavailable
from kz_common.topics import physical
from tests.kz_common.harness import publish


def _twelve(settings: Settings) -> str:
    publish(settings, "extracted", [b"%d" % i for i in range(12)], [b"%d" % i for i in range(12)])
    return physical(settings.kafka, "extracted")


def _slow_consumer(bootstrap: str, topic: str, wait_ms: int) -> tuple[KafkaConsumer, list[TopicPartition]]:
    """A consumer whose every Fetch answer takes `wait_ms`: the broker waits for bytes that never come,
    as a first answer on a busy host can be late."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", fetch_min_bytes=64 * 1024 * 1024,
                             fetch_max_wait_ms=wait_ms)
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    assign_from(consumer, tps, {})
    return consumer, tps


def test_a_scan_reads_every_partition_to_its_end(settings: Settings) -> None:
    topic = _twelve(settings)
    records = list(scan(settings.kafka.bootstrap_servers or "", topic))
    assert sorted(r.value for r in records) == sorted(b"%d" % i for i in range(12))
    assert {r.partition for r in records} == {0, 1, 2}
    assert all(r.timestamp > 0 for r in records)


def test_a_late_first_fetch_answer_does_not_shorten_the_scan(settings: Settings) -> None:
    # The CI failure this guards against: an empty scan because no answer came within 0.3 s.
    topic = _twelve(settings)
    consumer, tps = _slow_consumer(settings.kafka.bootstrap_servers or "", topic, wait_ms=1000)
    try:
        assert len(list(_drain(consumer, tps, max_s=30))) == 12
    finally:
        consumer.close()


def test_a_scan_with_no_answer_raises_instead_of_returning_short(settings: Settings) -> None:
    topic = _twelve(settings)
    consumer, tps = _slow_consumer(settings.kafka.bootstrap_servers or "", topic, wait_ms=3000)
    try:
        with pytest.raises(BrokerUnavailable, match=r"no Fetch answer at all for .*extracted\[0\]"):
            list(_drain(consumer, tps, max_s=0.5))
    finally:
        consumer.close()


def test_a_scan_stops_at_the_end_it_first_saw(settings: Settings) -> None:
    topic = _twelve(settings)
    bootstrap = settings.kafka.bootstrap_servers or ""
    seen: list[bytes] = []
    for rec in scan(bootstrap, topic):
        if not seen:  # written while the scan runs, e.g. a replay into the topic it reads
            publish(settings, "extracted", [b"late%d" % i for i in range(6)], [b"%d" % i for i in range(6)])
        seen.append(rec.value)
    assert sorted(seen) == sorted(b"%d" % i for i in range(12))
    assert len(list(scan(bootstrap, topic))) == 18


def test_a_scan_starts_at_the_given_offsets(settings: Settings) -> None:
    topic = _twelve(settings)
    bootstrap = settings.kafka.bootstrap_servers or ""
    full = list(scan(bootstrap, topic))
    counts = {p: sum(r.partition == p for r in full) for p in (0, 1, 2)}
    part = max(counts, key=lambda p: counts[p])
    rest = list(scan(bootstrap, topic, start={(topic, part): 1}))
    assert len(rest) == 11
    assert {(r.partition, r.offset) for r in full} - {(r.partition, r.offset) for r in rest} == {(part, 0)}
