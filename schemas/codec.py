"""orjson (de)serialisation of envelopes, with the payload typed by the registry."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from schemas.envelope import Envelope, Producer, derived_event_id, new_event_id
from schemas.exceptions import DecodeError, UnknownEventType, ValidationFailed
from schemas.registry import BY_MODEL, EVENTS

AnyEnvelope = Envelope[Any]
# Envelope[Model] classes, built once: parametrising a generic model per call is slow.
_TYPED = {spec.type: Envelope[spec.model] for spec in EVENTS.values()}  # type: ignore[name-defined]


def make_event(
    payload: BaseModel,
    *,
    producer: Producer,
    correlation_id: str,
    parent: AnyEnvelope | None = None,
    index: int | None = None,
) -> AnyEnvelope:
    """Wrap `payload` in an envelope.

    With a `parent`, causation points at it and the id is derived from
    (parent, producer, index) so reprocessing the parent yields the same id.
    """
    spec = BY_MODEL.get(type(payload))
    if spec is None:
        raise UnknownEventType(f"{type(payload).__name__} is not a registered payload model")
    if parent is not None:
        event_id = derived_event_id(parent.event_id, producer.service, index or 0)
    else:
        event_id = new_event_id()
    return _TYPED[spec.type](
        event_id=event_id,
        type=spec.type,
        schema_version=spec.version,
        produced_at=datetime.now(timezone.utc),
        producer=producer,
        causation_id=parent.event_id if parent is not None else None,
        correlation_id=correlation_id,
        payload=payload,
    )


def encode(event: AnyEnvelope) -> bytes:
    """Envelope -> compact JSON bytes (pydantic-core's serializer: no intermediate dict)."""
    return event.model_dump_json().encode()


def decode(raw: bytes) -> AnyEnvelope:
    """JSON bytes -> validated envelope with a typed payload; raises a SchemaError subclass."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DecodeError(f"expected a JSON object, got {type(data).__name__}")
    event_type = data.get("type")
    spec = EVENTS.get(event_type) if isinstance(event_type, str) else None
    if spec is None:
        raise UnknownEventType(f"unknown event type {event_type!r}")
    if data.get("schema_version") != spec.version:
        raise ValidationFailed(
            f"{spec.type}: schema_version {data.get('schema_version')!r}, expected {spec.version}"
        )
    try:
        return _TYPED[spec.type].model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(f"{spec.type}: {_summarise(exc)}") from exc


def peek_event_id(raw: bytes) -> str | None:
    """Best-effort event id of a message that may not validate (for dead letters)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    event_id = data.get("event_id") if isinstance(data, dict) else None
    return event_id if isinstance(event_id, str) else None


def _summarise(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
    more = f" (+{exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return "; ".join(parts) + more
