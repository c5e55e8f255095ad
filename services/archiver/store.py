"""The Parquet archive on disk: <root>/<topic>/<YYYY-MM-DD>/p<partition>-<first>-<last>-<digest>.parquet.

Files are written to a temp name, fsynced and renamed, so a reader (or a
crash) never sees half a file. The name is a function of the rows' log
coordinates and event ids: writing the same rows again replaces the same
file instead of adding a copy, and rows from a later broker incarnation whose
offsets restart at 0 get a different digest, so they never overwrite history.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from services.archiver.exceptions import ArchiveError, ArchiveNotFound
from services.archiver.rows import SCHEMA, identity

NO_DATE = "undated"  # records that carried no parseable time


class ArchiveStore:
    """Append-only Parquet files under `root`."""

    def __init__(self, root: Path, row_group_rows: int = 100_000) -> None:
        self.root = Path(root)
        self.row_group_rows = row_group_rows

    # ------------------------------------------------------------------ writing

    def write(self, rows: Iterable[dict[str, Any]]) -> list[Path]:
        """Durably write `rows`, one file per (topic, day, partition); return the files."""
        groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            groups[(row["topic"], _day(row), row["partition"])].append(row)
        return [self._write_group(t, d, p, g) for (t, d, p), g in sorted(groups.items())]

    def _write_group(self, topic: str, day: str, partition: int, rows: list[dict[str, Any]]) -> Path:
        rows.sort(key=lambda r: r["offset"])
        digest = hashlib.blake2b(digest_size=4)
        for r in rows:
            digest.update(f"{r['offset']}:{r.get('event_id')}|".encode())
        folder = self.root / topic / day
        name = f"p{partition:03d}-{rows[0]['offset']:012d}-{rows[-1]['offset']:012d}-{digest.hexdigest()}"
        final = folder / f"{name}.parquet"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.Table.from_pylist(rows, schema=SCHEMA)
            _atomic_write(table, final, self.row_group_rows)
        except (OSError, pa.ArrowException) as exc:
            raise ArchiveError(f"cannot write {final}: {exc}") from exc
        return final

    # ------------------------------------------------------------------ reading

    def files(self, topic: str | None = None) -> list[Path]:
        """Every archive file (of one logical topic), in name order."""
        if not self.root.is_dir():
            return []
        pattern = f"{topic}/*/*.parquet" if topic else "*/*/*.parquet"
        return sorted(self.root.glob(pattern))

    def require(self) -> list[Path]:
        files = self.files()
        if not files:
            raise ArchiveNotFound(f"no archive at {self.root} (run `kz archive` first)")
        return files

    def event_ids(self) -> Iterator[str]:
        """Event ids of every archived row."""
        for path in self.files():
            column = pq.read_table(path, columns=["event_id"]).column("event_id")
            yield from (e for e in column.to_pylist() if e is not None)

    def identities(self) -> Iterator[str]:
        """`rows.identity` of every archived row (for dedupe at start-up)."""
        for path in self.files():
            table = pq.read_table(path, columns=["event_id", "topic", "partition", "offset", "raw"])
            yield from (i for row in table.to_pylist() if (i := identity(row)) is not None)


def _day(row: dict[str, Any]) -> str:
    when: datetime | None = row.get("produced_at") or row.get("broker_ts")
    return when.strftime("%Y-%m-%d") if when is not None else NO_DATE


def _atomic_write(table: pa.Table, final: Path, row_group_rows: int) -> None:
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        pq.write_table(table, fh, compression="zstd", row_group_size=row_group_rows)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(final.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
