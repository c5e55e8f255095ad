"""The archiver's consumer loop: every topic (dead letters included) -> Parquet.

A plain kafka-python group consumer rather than a ServiceCore: the archiver
must see the raw bytes of every record, including ones that do not decode.
Exactly-once effect: offsets are committed only after the file holding the
records is durably renamed into place; records redelivered after a crash
carry event ids the archive already holds (seeded from disk at start), so they
are skipped rather than written twice, and the views dedupe by id anyway. A
record that is not an event has no id: it is known by its coordinate and bytes
(`rows.identity`), so a broker restored from the archive does not add it twice.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from kz_common.config import Settings
from kz_common.dedupe import SeenIds
from kz_common.exceptions import BrokerUnavailable
from kz_common.topics import logical, topic_specs
from services.archiver.config import ArchiverConfig
from services.archiver.rows import LogRecord, identity, to_row
from services.archiver.store import ArchiveStore

log = logging.getLogger(__name__)


@dataclass
class ArchiveStats:
    records: int = 0  # log records consumed
    rows: int = 0  # rows written
    duplicates: int = 0  # records whose event id was already archived
    files: list[Path] = field(default_factory=list)


class _FlushOnRevoke(ConsumerRebalanceListener):
    """Write and commit what we hold before partitions move to another member."""

    def __init__(self, archiver: Archiver) -> None:
        self.archiver = archiver

    def on_partitions_revoked(self, revoked: object) -> None:
        self.archiver.flush()

    def on_partitions_assigned(self, assigned: object) -> None:
        pass  # a new member reads from the committed offsets; nothing to prepare


class Archiver:
    """One archiver process (several may share the group; partitions are split)."""

    def __init__(self, settings: Settings, bootstrap: str, config: ArchiverConfig | None = None) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.cfg = config or ArchiverConfig.from_settings(settings.services)
        self.store = ArchiveStore(self.cfg.archive_root(settings.paths.data_dir), self.cfg.row_group_rows)
        self.stats = ArchiveStats()
        self._seen = SeenIds(self.cfg.seen_capacity)
        self._rows: list[dict] = []
        self._next: dict[TopicPartition, int] = {}  # offsets to commit once _rows are on disk
        self._first_buffered = 0.0
        self._consumer: KafkaConsumer | None = None

    # ------------------------------------------------------------------ lifecycle

    def run(self, stop: threading.Event | None = None, *, until_caught_up: bool = False,
            max_s: float = 600.0) -> ArchiveStats:
        """Archive until `stop` is set or (with until_caught_up) every partition is at its end."""
        for key in self.store.identities():
            self._seen.add(key)
        self._consumer = self._connect()
        deadline = time.monotonic() + max_s
        try:
            while not (stop is not None and stop.is_set()):
                got = self._poll()
                if self._due() or (until_caught_up and not got):
                    self.flush()
                if until_caught_up and self._caught_up():
                    break
                if until_caught_up and time.monotonic() > deadline:
                    raise BrokerUnavailable(f"archiver did not catch up within {max_s:.0f} s")
            self.flush()
        finally:
            self._consumer.close(autocommit=False)
            self._consumer = None
        return self.stats

    def _connect(self) -> KafkaConsumer:
        k = self.settings.kafka
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=self.cfg.group, enable_auto_commit=False,
                auto_offset_reset="earliest",  # "latest" is wrong on Tansu; a new group reads everything
                session_timeout_ms=k.session_timeout_ms, heartbeat_interval_ms=k.heartbeat_interval_ms,
                max_poll_interval_ms=k.max_poll_interval_ms, fetch_max_wait_ms=100,
                max_partition_fetch_bytes=4 * 1024 * 1024, request_timeout_ms=30_000,
                client_id="kz-archiver",
            )
        except KafkaError as exc:
            raise BrokerUnavailable(f"archiver cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        consumer.subscribe(topics=[s.physical for s in topic_specs(k)], listener=_FlushOnRevoke(self))
        return consumer

    # ------------------------------------------------------------------ the loop

    def _poll(self) -> int:
        assert self._consumer is not None
        batch = self._consumer.poll(timeout_ms=200, max_records=self.cfg.flush_records)
        n = 0
        for tp, records in batch.items():
            name = logical(self.settings.kafka, tp.topic)
            for r in records:
                self._take(LogRecord(name, r.partition, r.offset, r.key, r.value or b"", r.timestamp))
                n += 1
            if records:
                self._next[tp] = records[-1].offset + 1
        return n

    def _take(self, rec: LogRecord) -> None:
        self.stats.records += 1
        row = to_row(rec)
        key = identity(row)
        if key is not None:
            if key in self._seen:
                self.stats.duplicates += 1
                return
            self._seen.add(key)
        if not self._rows:
            self._first_buffered = time.monotonic()
        self._rows.append(row)

    def _due(self) -> bool:
        if len(self._rows) >= self.cfg.flush_records:
            return True
        held = self._rows or self._next
        return bool(held) and time.monotonic() - self._first_buffered >= self.cfg.flush_interval_s

    def flush(self) -> None:
        """Write buffered rows durably, then commit the offsets they cover."""
        rows, self._rows = self._rows, []
        offsets, self._next = self._next, {}
        if rows:
            self.stats.files += self.store.write(rows)
            self.stats.rows += len(rows)
        if offsets and self._consumer is not None:
            self._consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        self._first_buffered = time.monotonic()

    def _caught_up(self) -> bool:
        """Every assigned partition read to its high watermark (and everything flushed).

        A partition with no Fetch answer yet is not caught up: an empty one answers too
        (watermark 0), and a slow first answer on a busy host must not end the run early.
        """
        assert self._consumer is not None
        assigned = self._consumer.assignment()
        if not assigned or self._rows or self._next:
            return False
        for tp in assigned:
            hw = self._consumer.highwater(tp)
            if hw is None or self._consumer.position(tp) < hw:
                return False
        return True


def archive_once(settings: Settings, bootstrap: str, config: ArchiverConfig | None = None,
                 max_s: float = 600.0) -> ArchiveStats:
    """Archive everything on the log now, then return (for `kz archive` and tests)."""
    return Archiver(settings, bootstrap, config).run(until_caught_up=True, max_s=max_s)


def archive_forever(settings: Settings, bootstrap: str, stop: threading.Event,
                    config: ArchiverConfig | None = None) -> ArchiveStats:
    """The long-running service: archive until `stop` is set (`kz archive --follow`)."""
    return Archiver(settings, bootstrap, config).run(stop)
