"""The pure-core interface every service implements.

A service is a `ServiceCore` (pure: event in, payloads out, no I/O) plus the
generic Kafka adapter in `kz_common.runner`. The adapter wraps each returned
payload in an envelope whose causation id is the input event, whose event id is
derived from (input id, service, output index), and publishes it to the topic
the schema registry assigns to that payload type.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from schemas import AnyEnvelope


class ProcessingError(Exception):
    """A core could not process an event; the adapter dead-letters it with this message."""


@runtime_checkable
class ServiceCore(Protocol):
    """Pure processing logic of one service."""

    name: str  # service name, used as consumer group and producer.service
    version: str  # bumped whenever outputs for the same input may change
    inputs: tuple[str, ...]  # logical topics consumed (keys of schemas.TOPICS)

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        """Payloads to emit for `event` (possibly none). Raise ProcessingError to dead-letter."""
        ...


# Optional members a core may define (looked up with getattr by the adapter):
#   stateful: bool = True   -- False skips replaying committed inputs on restart.
#   concurrency: int = 1    -- how many events of a batch `process` may handle at once
#                              (threads; only for a thread-safe core whose work is slow).
#   def process_many(self, events) -> list[list[BaseModel] | Exception]  -- with
#                              concurrency > 1: the batch's events at once, one result per
#                              event in order (payloads, or the exception `process` raised).
#   def observe(self, event) -> None  -- rebuild state from an already-processed event
#                                        without the work of `process` (used on replay).
#   def observe_output(self, event) -> None  -- rebuild state from one of the core's own
#                                        events found on the log at warm-up (before replay):
#                                        decisions whose order replay cannot restore.
