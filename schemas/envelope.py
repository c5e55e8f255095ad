"""The event envelope shared by every KernelZero event.

Every message on every topic is one `Envelope[P]`: metadata that makes the log
replayable and traceable (time-ordered id, causation and correlation ids,
producer) around a typed payload `P` registered in `schemas.registry`.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from datetime import datetime, timezone
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

P = TypeVar("P", bound=BaseModel)


class Record(BaseModel):
    """Base for every schema record: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Producer(Record):
    """Which service (and which version of it) produced an event."""

    service: str = Field(min_length=1)
    version: str = Field(min_length=1)


class Envelope(Record, Generic[P]):
    """Metadata around one typed payload."""

    event_id: str = Field(description="UUIDv7, time-ordered")
    type: str = Field(description="event type, e.g. 'challenge.created'")
    schema_version: int = Field(ge=1)
    produced_at: datetime
    producer: Producer
    causation_id: str | None = Field(description="event id of the parent event; None for roots")
    correlation_id: str = Field(min_length=1, description="lineage root: the challenge id")
    payload: P


def _uuid7_from(ms: int, rand: bytes) -> str:
    """Lay out a UUIDv7 (RFC 9562) from a millisecond timestamp and 10 random bytes."""
    value = (ms & ((1 << 48) - 1)) << 80
    tail = int.from_bytes(rand[:10], "big")
    value |= 0x7 << 76  # version
    value |= ((tail >> 68) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= tail & ((1 << 62) - 1)  # rand_b, 62 bits
    return str(uuid.UUID(int=value))


def new_event_id() -> str:
    """A fresh random UUIDv7."""
    return _uuid7_from(time.time_ns() // 1_000_000, uuid.uuid4().bytes)


def derived_event_id(parent_id: str, service: str, index: int) -> str:
    """The id of output `index` that `service` derives from event `parent_id`.

    Deterministic, so a service that reprocesses an event after a crash emits
    the same ids again and downstream dedupe-by-id drops the repeats. It keeps
    the parent's millisecond, so ids still sort in causal order.
    """
    parent_ms = uuid.UUID(parent_id).int >> 80
    digest = hashlib.blake2b(f"{parent_id}|{service}|{index}".encode(), digest_size=10).digest()
    return _uuid7_from(parent_ms, digest)


def event_time(event_id: str) -> datetime:
    """The creation time encoded in a UUIDv7."""
    ms = uuid.UUID(event_id).int >> 80
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
