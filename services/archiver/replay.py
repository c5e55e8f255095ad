"""Replay a topic as fresh events, and restore a fresh broker from the archive.

`replay` re-publishes the events of one topic (from broker offsets, a time
window, or the archive) as new copies: each copy gets a new id derived from
(original id, replay tag), keeps the original's parent (causation) and
correlation, and names the replay as producer. Consumers' dedupe therefore
treats the copies as new inputs -- a new verifier version re-verifies every
extracted kernel, and its verdicts get new ids too -- while the same replay run
twice yields the same ids and is dropped the second time.

`restore` is the opposite: the archived events themselves, same ids, same
partitions and order, into a broker that lost them (Tansu keeps memory only).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import duckdb
import orjson
from kafka import KafkaProducer
from kafka.errors import KafkaError

from kz_common.admin import Record, create_topics, list_topics, scan
from kz_common.config import Settings
from kz_common.exceptions import BrokerUnavailable
from kz_common.topics import physical
from schemas import TOPICS, derived_event_id
from services.archiver.exceptions import ArchiveNotFound, ReplayError
from services.archiver.rows import to_message

Source = Literal["broker", "archive"]
COLUMNS = ("event_id, type, schema_version, produced_at, producer_service, producer_version, "
           "causation_id, correlation_id, \"partition\", \"offset\", key, payload, raw")


@dataclass
class ReplayStats:
    read: int = 0
    published: int = 0
    skipped: int = 0  # not envelopes, or outside the requested window
    per_topic: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------- replay


def replay(settings: Settings, bootstrap: str, topic: str, *, tag: str, source: Source = "broker",
           archive_root: Path | None = None, from_offsets: dict[int, int] | None = None,
           since: datetime | None = None, until: datetime | None = None,
           to_topic: str | None = None) -> ReplayStats:
    """Re-publish `topic` (logical name) as fresh copies tagged `tag` onto `to_topic` (default: same)."""
    _check_topic(topic)
    _check_topic(to_topic or topic)
    if not tag or any(c.isspace() for c in tag):
        raise ReplayError(f"replay tag must be a non-empty word, got {tag!r}")
    if source == "archive":
        if from_offsets:
            raise ReplayError("from_offsets applies to the broker source; the archive spans incarnations")
        docs = _archive_docs(_require_root(settings, archive_root), topic, since, until)
    elif source == "broker":
        docs = _broker_docs(settings, bootstrap, topic, from_offsets or {}, since, until)
    else:
        raise ReplayError(f"unknown replay source {source!r}; use 'broker' or 'archive'")
    stats = ReplayStats()
    target = physical(settings.kafka, to_topic or topic)
    with _producer(settings, bootstrap) as send:
        for doc in docs:
            stats.read += 1
            copy = _fresh_copy(doc, tag) if doc is not None else None
            if copy is None:
                stats.skipped += 1
                continue
            send(target, copy["correlation_id"].encode(), orjson.dumps(copy), None)
            stats.published += 1
    stats.per_topic[to_topic or topic] = stats.published
    return stats


def _fresh_copy(doc: dict[str, Any], tag: str) -> dict[str, Any] | None:
    if not isinstance(doc.get("event_id"), str) or not isinstance(doc.get("correlation_id"), str):
        return None
    if doc.get("producer") == {"service": "replay", "version": tag}:
        return None  # already a copy under this tag: copying it again would compound replays
    return {**doc, "event_id": derived_event_id(doc["event_id"], f"replay:{tag}", 0),
            "produced_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "producer": {"service": "replay", "version": tag}}


def _broker_docs(settings: Settings, bootstrap: str, topic: str, from_offsets: dict[int, int],
                 since: datetime | None, until: datetime | None) -> Iterator[dict[str, Any] | None]:
    since_ms, until_ms = _ms(since), _ms(until)
    for rec in _scan_from(bootstrap, physical(settings.kafka, topic), from_offsets):
        ts = rec.timestamp
        if (since_ms is not None and ts < since_ms) or (until_ms is not None and ts >= until_ms):
            yield None
            continue
        try:
            doc = orjson.loads(rec.value)
        except orjson.JSONDecodeError:
            doc = None
        yield doc if isinstance(doc, dict) else None


def _scan_from(bootstrap: str, topic: str, from_offsets: dict[int, int]) -> Iterator[Record]:
    """Records of `topic` from per-partition start offsets (default 0) to the high watermark."""
    parts = list_topics(bootstrap).get(topic, 0)
    unknown = {p for p in from_offsets if not 0 <= p < parts}
    if unknown:
        raise ReplayError(
            f"{topic} has no partition(s) {sorted(unknown)}; it has {list(range(parts))}")
    yield from scan(bootstrap, topic, start={(topic, p): o for p, o in from_offsets.items()})


def _archive_docs(root: Path, topic: str, since: datetime | None,
                  until: datetime | None) -> Iterator[dict[str, Any] | None]:
    where = ["type IS NOT NULL"]
    params: list[Any] = []
    if since is not None:
        where.append("produced_at >= ?")
        params.append(since)
    if until is not None:
        where.append("produced_at < ?")
        params.append(until)
    sql = f"SELECT {COLUMNS} FROM {_log_view(topic)} WHERE {' AND '.join(where)} ORDER BY produced_at, event_id"
    for row in _archive_rows(root, sql, params):
        yield orjson.loads(to_message(row))


# ---------------------------------------------------------------------------- restore


def restore(settings: Settings, bootstrap: str, archive_root: Path | None = None,
            topics: list[str] | None = None, force: bool = False) -> ReplayStats:
    """`kz replay --to-broker`: publish archived events (same ids) into a fresh broker."""
    root = _require_root(settings, archive_root)
    names = topics or list(TOPICS)
    for name in names:
        _check_topic(name)
    create_topics(settings.kafka, bootstrap)
    if not force:
        busy = [n for n in names if _has_records(bootstrap, physical(settings.kafka, n))]
        if busy:
            raise ReplayError(f"topics {', '.join(busy)} are not empty: restoring would duplicate "
                              "their events (pass force=True to publish anyway)")
    stats = ReplayStats()
    n_parts = settings.kafka.partitions
    with _producer(settings, bootstrap) as send:
        for name in names:
            target = physical(settings.kafka, name)
            sql = f'SELECT {COLUMNS} FROM {_log_view(name)} ORDER BY "partition", "offset", produced_at'
            count = 0
            for row in _archive_rows(root, sql, []):
                key = bytes(row["key"]) if row["key"] is not None else None
                part = row["partition"] if row["partition"] < n_parts else zlib.crc32(key or b"") % n_parts
                send(target, key, to_message(row), part)
                count += 1
            stats.per_topic[name] = count
            stats.read += count
            stats.published += count
    return stats


# ---------------------------------------------------------------------------- helpers


def _check_topic(name: str) -> None:
    if name not in TOPICS:
        raise ReplayError(f"unknown topic {name!r}; known: {', '.join(TOPICS)}")


def _log_view(topic: str) -> str:
    return "log_" + topic.replace("-", "_")


def _require_root(settings: Settings, archive_root: Path | None) -> Path:
    from services.archiver.config import ArchiverConfig

    root = archive_root or ArchiverConfig.from_settings(settings.services).archive_root(settings.paths.data_dir)
    if not any(Path(root).glob("*/*/*.parquet")):
        raise ArchiveNotFound(f"no archive at {root} (run `kz archive` first)")
    return Path(root)


def _archive_rows(root: Path, sql: str, params: list[Any], chunk: int = 10_000) -> Iterator[dict[str, Any]]:
    from kz_common.analytics.views import connect

    con = connect(root)
    try:
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        while rows := cur.fetchmany(chunk):
            for r in rows:
                yield dict(zip(names, r))
    except duckdb.Error as exc:
        raise ReplayError(f"cannot read the archive at {root}: {exc}") from exc
    finally:
        con.close()


def _has_records(bootstrap: str, topic: str) -> bool:
    for _ in scan(bootstrap, topic, max_s=30):
        return True
    return False


def _ms(when: datetime | None) -> int | None:
    if when is None:
        return None
    if when.tzinfo is None:
        raise ReplayError(f"timestamps must carry a time zone, got {when.isoformat()}")
    return int(when.timestamp() * 1000)


class _producer:
    """A kafka-python producer as a context manager yielding send(topic, key, value, partition)."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        try:
            self.p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                   max_request_size=settings.kafka.max_message_bytes + 64_000,
                                   batch_size=256 * 1024)
        except KafkaError as exc:
            raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
        self.futures: list[Any] = []

    def __enter__(self):  # type: ignore[no-untyped-def]
        def send(topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
            self.futures.append(self.p.send(topic, key=key, value=value, partition=partition))
            if len(self.futures) >= 5_000:
                self._settle()
        return send

    def _settle(self) -> None:
        self.p.flush()
        for f in self.futures:
            f.get(timeout=30)  # surfaces a failed send instead of losing it
        self.futures = []

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self._settle()
        finally:
            self.p.close()
