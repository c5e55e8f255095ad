"""KernelZero event schemas: the single source of truth for every event on every topic."""

from schemas.codec import AnyEnvelope, decode, encode, make_event, peek_event_id
from schemas.envelope import Envelope, Producer, derived_event_id, new_event_id
from schemas.events import *  # noqa: F403  (payload models are the public surface)
from schemas.exceptions import DecodeError, SchemaError, UnknownEventType, ValidationFailed
from schemas.registry import EVENTS, TOPICS, EventSpec

__all__ = [
    "AnyEnvelope", "decode", "encode", "make_event", "peek_event_id", "Envelope", "Producer",
    "derived_event_id", "new_event_id", "DecodeError", "SchemaError", "UnknownEventType",
    "ValidationFailed", "EVENTS", "TOPICS", "EventSpec",
]
