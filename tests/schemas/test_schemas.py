"""Schemas: round trips, validation errors, deterministic ids, exported JSON Schema files."""

from __future__ import annotations

import uuid

import jsonschema
import orjson
import pytest

from schemas import (
    EVENTS,
    TOPICS,
    DecodeError,
    Producer,
    UnknownEventType,
    ValidationFailed,
    decode,
    derived_event_id,
    encode,
    make_event,
)
from schemas.envelope import event_time, new_event_id
from schemas.export import OUT, render_all, topic_schema
from tests.kz_common.relay import challenge, step

ORIGIN = Producer(service="test", version="1")


def _chain_events() -> list:
    root = make_event(challenge(1), producer=ORIGIN, correlation_id="c1")
    events = [root]
    for _ in range(4):
        parent = events[-1]
        events.append(make_event(step(parent.payload), producer=ORIGIN, correlation_id="c1", parent=parent))
    return events


def test_round_trip_keeps_every_field_and_type() -> None:
    for event in _chain_events():
        again = decode(encode(event))
        assert again == event and type(again.payload) is type(event.payload)


def test_ids_are_uuid7_time_ordered_and_derived_ids_are_deterministic() -> None:
    a, b = new_event_id(), new_event_id()
    assert uuid.UUID(a).version == 7 and event_time(a) <= event_time(b)
    assert derived_event_id(a, "svc", 0) == derived_event_id(a, "svc", 0)
    assert len({derived_event_id(a, "svc", i) for i in range(100)}) == 100
    assert derived_event_id(a, "svc", 0) != derived_event_id(a, "other", 0)
    assert event_time(derived_event_id(a, "svc", 3)) == event_time(a)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"\x00garbage", DecodeError),
        (b"42", DecodeError),
        (b'{"type": "nope"}', UnknownEventType),
        (b'{"type": "challenge.created", "schema_version": 99}', ValidationFailed),
        (b'{"type": "challenge.created", "schema_version": 1, "payload": {}}', ValidationFailed),
    ],
)
def test_bad_bytes_raise_clear_schema_errors(raw: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode(raw)


def test_invalid_shape_range_is_rejected() -> None:
    doc = orjson.loads(encode(_chain_events()[0]))
    doc["payload"]["shape_range"] = {"n": [8, 4]}
    with pytest.raises(ValidationFailed, match="shape_range"):
        decode(orjson.dumps(doc))


def test_every_event_type_is_on_exactly_one_topic() -> None:
    listed = [t for types in TOPICS.values() for t in types]
    assert sorted(listed) == sorted(EVENTS)


def test_exported_json_schemas_match_the_models() -> None:
    committed = {p.name: p.read_text() for p in OUT.glob("*.json")}
    assert committed == render_all(), "schemas drifted: run `python -m schemas.export` and commit"


def test_exported_schemas_accept_real_events_and_reject_wrong_ones() -> None:
    for event in _chain_events():
        schema = topic_schema(EVENTS[event.type].topic)
        doc = orjson.loads(encode(event))
        jsonschema.validate(doc, schema)
        doc["payload"].pop("challenge_id")
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema)
