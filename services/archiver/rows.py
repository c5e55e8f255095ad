"""One log record -> one flat archive row (and back to message bytes for restore).

Envelope fields become columns; the payload is kept whole as JSON text, and a
slim copy without long strings (code, raw LLM output, problem source) goes in
`facts`, so analytic views never parse kilobytes of code to read a pass flag.
A record that is not an envelope is still archived (the log is the log), with
its original bytes in `raw` and NULL envelope columns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa

FACT_STRING_MAX = 256  # longer strings are bulk (code, prompts), not facts to group by

SCHEMA = pa.schema([
    ("event_id", pa.string()),
    ("type", pa.string()),
    ("schema_version", pa.int32()),
    ("produced_at", pa.timestamp("us", tz="UTC")),
    ("producer_service", pa.string()),
    ("producer_version", pa.string()),
    ("causation_id", pa.string()),
    ("correlation_id", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("key", pa.binary()),
    ("broker_ts", pa.timestamp("ms", tz="UTC")),
    ("size_bytes", pa.int32()),
    ("payload", pa.string()),
    ("facts", pa.string()),
    ("raw", pa.binary()),
])
ENVELOPE_KEYS = ("event_id", "type", "schema_version", "produced_at", "producer",
                 "causation_id", "correlation_id", "payload")


@dataclass(frozen=True)
class LogRecord:
    topic: str  # logical topic name
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int | None = None


def slim(value: Any) -> Any:
    """`value` without strings longer than FACT_STRING_MAX (recursively)."""
    if isinstance(value, dict):
        return {k: slim(v) for k, v in value.items()
                if not (isinstance(v, str) and len(v) > FACT_STRING_MAX)}
    if isinstance(value, list):
        return [slim(v) for v in value if not (isinstance(v, str) and len(v) > FACT_STRING_MAX)]
    return value


def to_row(rec: LogRecord) -> dict[str, Any]:
    """The archive row of one record; never raises on bad input."""
    row: dict[str, Any] = {
        "topic": rec.topic, "partition": rec.partition, "offset": rec.offset, "key": rec.key,
        "broker_ts": _ts_ms(rec.timestamp_ms), "size_bytes": len(rec.value),
    }
    doc = _envelope(rec.value)
    if doc is None:
        row["event_id"] = _peek_id(rec.value)
        row["raw"] = rec.value
        return row
    producer = doc["producer"]
    row.update(
        event_id=doc["event_id"], type=doc["type"], schema_version=doc["schema_version"],
        produced_at=doc["produced_at"], producer_service=producer.get("service"),
        producer_version=producer.get("version"), causation_id=doc["causation_id"],
        correlation_id=doc["correlation_id"],
        payload=orjson.dumps(doc["payload"]).decode(), facts=orjson.dumps(slim(doc["payload"])).decode(),
    )
    return row


def identity(row: dict[str, Any]) -> str | None:
    """What makes two rows the same record: an event's id; for a record that is not an event
    (its bytes kept in `raw`), its log coordinate and a digest of the bytes, because a broker
    restored from the archive hands the archiver those records again at the same places."""
    raw = row.get("raw")
    if raw is None:
        return row.get("event_id")
    digest = hashlib.blake2b(bytes(raw), digest_size=12).hexdigest()
    return f"raw:{row['topic']}/{row['partition']}/{row['offset']}/{digest}"


def _envelope(value: bytes) -> dict[str, Any] | None:
    """The decoded envelope if `value` has the envelope's shape, else None."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or any(k not in doc for k in ENVELOPE_KEYS):
        return None
    if not (isinstance(doc["event_id"], str) and isinstance(doc["type"], str)
            and isinstance(doc["schema_version"], int) and isinstance(doc["producer"], dict)):
        return None
    try:
        doc["produced_at"] = datetime.fromisoformat(doc["produced_at"])
    except (TypeError, ValueError):
        return None
    return doc


def _peek_id(value: bytes) -> str | None:
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    event_id = doc.get("event_id") if isinstance(doc, dict) else None
    return event_id if isinstance(event_id, str) else None


def _ts_ms(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms is not None and ms >= 0 else None


def to_message(row: dict[str, Any]) -> bytes:
    """The message bytes of an archived row: the original bytes, or the envelope rebuilt.

    Rebuilt envelopes are equal as JSON documents to the originals (same ids,
    same payload); only whitespace-free key order and timestamp spelling may differ.
    """
    if row.get("raw") is not None:
        return bytes(row["raw"])
    produced_at: datetime = row["produced_at"]
    return orjson.dumps({
        "event_id": row["event_id"], "type": row["type"], "schema_version": row["schema_version"],
        "produced_at": produced_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "producer": {"service": row["producer_service"], "version": row["producer_version"]},
        "causation_id": row["causation_id"], "correlation_id": row["correlation_id"],
        "payload": orjson.Fragment(row["payload"]),
    })
