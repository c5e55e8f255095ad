"""Archive messages that never went through a broker (benchmarks, imports, tests of views).

Partitions and offsets are assigned as a broker would: a stable hash of the key
picks the partition, offsets count up per (topic, partition).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from services.archiver.rows import LogRecord, to_row
from services.archiver.store import ArchiveStore


class Message(Protocol):
    topic: str
    key: bytes
    value: bytes


def archive_messages(messages: Iterable[Message], root: Path, *, partitions: int = 6,
                     batch: int = 100_000, row_group_rows: int = 100_000) -> int:
    """Write `messages` to the archive at `root` in batches of `batch`; return rows written."""
    store = ArchiveStore(root, row_group_rows)
    offsets: dict[tuple[str, int], int] = defaultdict(int)
    rows: list[dict] = []
    written = 0
    for msg in messages:
        p = zlib.crc32(msg.key) % partitions
        offset = offsets[(msg.topic, p)]
        offsets[(msg.topic, p)] = offset + 1
        rows.append(to_row(LogRecord(msg.topic, p, offset, msg.key, msg.value)))
        if len(rows) >= batch:
            store.write(rows)
            written, rows = written + len(rows), []
    if rows:
        store.write(rows)
        written += len(rows)
    return written
