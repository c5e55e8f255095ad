"""The broker-independent half of a service: bytes in, bytes out, nothing lost.

`BatchProcessor` turns input records into output messages for one
`ServiceCore`: it validates, deduplicates, calls the core, wraps payloads in
envelopes and turns every failure into a dead letter. The Kafka adapter in
`kz_common.runner` only moves bytes and commits offsets.

Restart hooks a core may define besides those of `kz_common.core`:
`observe_output(event)` is handed each of the service's own events that the
warm-up scan finds on the log (decoded; a later rescan may repeat them), before
the committed inputs are replayed through `observe`.
"""

from __future__ import annotations

import base64
import logging
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import orjson
from pydantic import BaseModel

from kz_common.core import ProcessingError, ServiceCore
from kz_common.dedupe import SeenIds
from schemas import (
    EVENTS,
    TOPICS,
    AnyEnvelope,
    DeadLetter,
    DecodeError,
    Producer,
    SchemaError,
    derived_event_id,
    encode,
    make_event,
    peek_event_id,
)
from schemas import decode as decode_event

log = logging.getLogger(__name__)
DEAD_LETTER_INDEX = 1 << 20  # output index reserved for the dead letter of an input
# Boolean payload fields that are a verdict (verifier, extractor, curator, evaluator): counted
# by value so a pass rate is passed / total of one event type.
OUTCOME_FIELDS = ("passed", "accepted", "kept", "promoted")


@dataclass(frozen=True)
class InRecord:
    topic: str  # logical topic name
    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True)
class OutMessage:
    topic: str  # logical topic name
    key: bytes  # correlation id: keeps a challenge's events on one partition
    value: bytes
    event_id: str
    # What the adapter's metrics need to know without decoding the bytes again:
    event_type: str = ""
    outcome: tuple[str, bool] | None = None  # (field, value) of the payload's boolean verdict
    reason: str | None = None  # error kind of a dead letter


ErrorKind = Literal["decode", "schema", "processing", "oversize"]


class BatchProcessor:
    """Idempotent, never-raising processing of records for one core."""

    def __init__(self, core: ServiceCore, *, max_bytes: int, capacity: int) -> None:
        self.core = core
        self.producer = Producer(service=core.name, version=core.version)
        self.max_bytes = max_bytes
        self.done = SeenIds(capacity)  # inputs whose effect this process has applied
        self.emitted = SeenIds(capacity)  # inputs whose outputs are already on the log
        # Keys fixed here: metrics read this dict from the HTTP thread. The skip counters:
        # duplicate = an event already handled (redelivered or copied), redelivered = a
        # dead-lettered record delivered again, on_log = its outputs were on the log already.
        self.counts = {"in": 0, "out": 0, "dead": 0, "duplicate": 0, "redelivered": 0, "on_log": 0}

    # ------------------------------------------------------------------ entry points

    def handle(self, rec: InRecord) -> list[OutMessage]:
        """Outputs (or one dead letter) for one input record."""
        self.counts["in"] += 1
        outs = self._handle(rec, emit=True)
        self._count(outs)
        return outs

    def handle_many(self, recs: list[InRecord], workers: int) -> list[OutMessage]:
        """The outputs `handle` gives for `recs` one by one, in the same order, with the
        core's `process` calls on up to `workers` threads, or one `process_many` call (for
        a core whose work is slow and parallel: the verifier). Bookkeeping (dedupe,
        validation, the log checks, wrapping) stays in input order on this thread."""
        if workers <= 1 or len(recs) <= 1:
            return [o for r in recs for o in self.handle(r)]
        staged: list[list[OutMessage] | tuple[InRecord, AnyEnvelope]] = []
        for rec in recs:
            self.counts["in"] += 1
            got = self._admit(rec, emit=True)
            if isinstance(got, list):
                staged.append(got)
                continue
            skip = self._before_core(rec, got, emit=True)
            staged.append(skip if skip is not None else (rec, got))
        calls = [s for s in staged if isinstance(s, tuple)]
        results = iter(self._call_many([s[1] for s in calls], workers))
        outs: list[OutMessage] = []
        for s in staged:
            done = self._after_core(*s, next(results), emit=True) if isinstance(s, tuple) else s
            self._count(done)
            outs += done
        return outs

    def replay(self, rec: InRecord) -> None:
        """Apply an already-committed input to the core's state; its outputs exist already."""
        self._handle(rec, emit=False)

    def note_output(self, value: bytes) -> None:
        """Remember that an event on the log was caused by an input this service handled."""
        try:
            doc = orjson.loads(value)
            producer = doc["producer"]["service"]
            causation = doc["causation_id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        if producer != self.core.name:
            return
        self._observe_output(value)
        if isinstance(causation, str):
            self.emitted.add(causation)
        elif doc.get("type") == "dead.letter":
            # A record that did not decode has no event id: its letter is known by the record's
            # log coordinate, so a redelivery (or a restored log read by a new group) is not
            # dead-lettered again.
            letter = doc.get("payload") or {}
            self.emitted.add(_coordinate(letter.get("source_topic"), letter.get("partition"),
                                         letter.get("offset")))

    # ------------------------------------------------------------------ internals

    def _observe_output(self, value: bytes) -> None:
        # A core may rebuild state from its own earlier outputs (`observe_output`): state whose
        # inputs span partitions cannot be rebuilt from the replayed inputs, which the runner
        # replays partition by partition, not in the order they were consumed (the curator's
        # global window). Decoded only for such a core: the scan reads every output topic.
        hook = getattr(self.core, "observe_output", None)
        if hook is None:
            return
        try:
            event = decode_event(value)
        except SchemaError:
            return  # not an event this service can have learnt anything from
        try:
            hook(event)
        except Exception:  # a bug in a core's recovery must not keep the service from starting
            log.exception("core %s failed to observe its output %s", self.core.name, event.event_id)

    def _count(self, outs: list[OutMessage]) -> None:
        for out in outs:
            self.counts["dead" if out.topic == "dead-letters" else "out"] += 1

    def _handle(self, rec: InRecord, *, emit: bool) -> list[OutMessage]:
        got = self._admit(rec, emit=emit)
        if isinstance(got, list):
            return got
        skip = self._before_core(rec, got, emit)
        if skip is not None:
            return skip
        return self._after_core(rec, got, self._call(got), emit)

    def _admit(self, rec: InRecord, *, emit: bool) -> list[OutMessage] | AnyEnvelope:
        """The record's outputs if it ends here (a duplicate, a dead letter), else its event."""
        coordinate = _coordinate(rec.topic, rec.partition, rec.offset)
        if coordinate in self.done:
            self.counts["redelivered"] += int(emit)  # replays are not skips
            return []
        if len(rec.value) > self.max_bytes:
            self.done.add(coordinate)
            return self._dead(rec, None, "oversize", f"{len(rec.value)} bytes > {self.max_bytes}", emit)
        try:
            event = decode_event(rec.value)
        except SchemaError as exc:
            self.done.add(coordinate)
            kind: ErrorKind = "decode" if isinstance(exc, DecodeError) else "schema"
            return self._dead(rec, None, kind, str(exc), emit)
        if event.type not in TOPICS[rec.topic]:
            self.done.add(coordinate)
            return self._dead(rec, event, "schema", f"{event.type} does not belong on {rec.topic}", emit)
        if event.event_id in self.done:
            self.counts["duplicate"] += int(emit)
            return []
        self.done.add(event.event_id)
        return event

    def _already_on_log(self) -> list[OutMessage]:
        self.counts["on_log"] += 1
        return []

    def _before_core(self, rec: InRecord, event: AnyEnvelope,
                     emit: bool) -> list[OutMessage] | None:
        """The outputs if the core need not process `event` (None: it must)."""
        # On replay a core may offer `observe` (state only): re-sampling an LLM to rebuild
        # state would be slow and, at temperature > 0 without a seed, not even the same.
        observe = getattr(self.core, "observe", None)
        stateless = not getattr(self.core, "stateful", True)
        on_log = emit and event.event_id in self.emitted
        if (not emit or on_log) and observe is not None:
            try:
                observe(event)
            except Exception as exc:  # noqa: BLE001  (dead-lettered by _failed)
                return self._failed(rec, event, exc, emit)
            return self._already_on_log() if on_log else []
        if on_log and stateless:  # its outputs are on the log; nothing to rebuild
            return self._already_on_log()
        return None

    def _call(self, event: AnyEnvelope) -> list[BaseModel] | Exception:
        try:
            return self.core.process(event)
        except Exception as exc:  # noqa: BLE001  judged by _after_core, in input order
            return exc

    def _call_many(self, events: list[AnyEnvelope],
                   workers: int) -> list[list[BaseModel] | Exception]:
        """`_call` of each event: through the core's own `process_many` if it has one (a
        batch it can plan as a whole), else `process` on up to `workers` threads."""
        many = getattr(self.core, "process_many", None)
        if many is None or not events:
            with ThreadPoolExecutor(max_workers=max(1, min(workers, len(events) or 1))) as pool:
                return list(pool.map(self._call, events))
        try:
            results = list(many(events))
        except Exception as exc:  # noqa: BLE001  every event of the batch is dead-lettered
            return [exc] * len(events)
        if len(results) != len(events):
            bad = RuntimeError(f"process_many returned {len(results)} results for "
                               f"{len(events)} events")
            return [bad] * len(events)
        return results

    def _failed(self, rec: InRecord, event: AnyEnvelope, exc: Exception,
                emit: bool) -> list[OutMessage]:
        if isinstance(exc, ProcessingError):
            return self._dead(rec, event, "processing", str(exc), emit)
        # a bug in a core must cost one event, not the pipeline
        log.error("core %s failed on %s", self.core.name, event.event_id, exc_info=exc)
        detail = "".join(traceback.format_exception_only(exc)).strip()
        return self._dead(rec, event, "processing", f"unexpected: {detail}", emit)

    def _after_core(self, rec: InRecord, event: AnyEnvelope,
                    result: list[BaseModel] | Exception, emit: bool) -> list[OutMessage]:
        if isinstance(result, Exception):
            return self._failed(rec, event, result, emit)
        payloads = result
        if not emit:
            return []
        if event.event_id in self.emitted:
            return self._already_on_log()
        outs: list[OutMessage] = []
        for i, p in enumerate(payloads):
            try:
                outs.append(self._wrap(p, event, i))
            except _Oversize as exc:
                # Only the output that does not fit is lost (to a dead letter): its siblings are
                # decisions downstream counts on, e.g. a curator window's sample.curated events
                # next to a preference pair of two long kernels.
                outs += self._dead(rec, event, "oversize", str(exc), emit, output_index=i)
        return outs

    def _wrap(self, payload: BaseModel, parent: AnyEnvelope, index: int) -> OutMessage:
        correlation = getattr(payload, "challenge_id", None) or parent.correlation_id
        event = make_event(
            payload, producer=self.producer, correlation_id=correlation, parent=parent, index=index
        )
        value = encode(event)
        if len(value) > self.max_bytes:
            raise _Oversize(f"output {event.type} is {len(value)} bytes > {self.max_bytes}")
        return OutMessage(EVENTS[event.type].topic, correlation.encode(), value, event.event_id,
                          event.type, _outcome(payload))

    def _dead(
        self, rec: InRecord, event: AnyEnvelope | None, kind: ErrorKind, error: str, emit: bool,
        output_index: int | None = None,
    ) -> list[OutMessage]:
        log.warning("dead-letter %s from %s: %s", kind, rec.topic, error[:300])
        if not emit:
            return []
        if event is not None and event.event_id in self.emitted:
            self.counts["on_log"] += 1
            return []
        if event is None and _coordinate(rec.topic, rec.partition, rec.offset) in self.emitted:
            self.counts["on_log"] += 1
            return []
        original_id = event.event_id if event else peek_event_id(rec.value)
        original = rec.value
        if len(original) * 4 // 3 > self.max_bytes // 2:  # the letter itself must fit on the topic
            original = original[: self.max_bytes * 3 // 8]
            error = f"{error} [original truncated to {len(original)} of {len(rec.value)} bytes]"
        letter = DeadLetter(
            source_topic=rec.topic, partition=rec.partition, offset=rec.offset,
            consumer=self.core.name, error_kind=kind, error=error[:10_000],
            original_b64=base64.b64encode(original).decode(), original_event_id=original_id,
        )
        correlation = event.correlation_id if event else "dead-letter"
        dead = make_event(letter, producer=self.producer, correlation_id=correlation)
        if event is not None:  # deterministic id: a redelivered poison event is one letter
            # (one per oversized output: an input may have several that do not fit)
            index = DEAD_LETTER_INDEX + (0 if output_index is None else 1 + output_index)
            dead = dead.model_copy(
                update={"event_id": derived_event_id(event.event_id, self.core.name, index),
                        "causation_id": event.event_id}
            )
        return [OutMessage("dead-letters", correlation.encode(), encode(dead), dead.event_id,
                           dead.type, reason=kind)]


def _coordinate(topic: object, partition: object, offset: object) -> str:
    """A record's place on the log (logical topic/partition/offset)."""
    return f"{topic}/{partition}/{offset}"


def _outcome(payload: BaseModel) -> tuple[str, bool] | None:
    for field in OUTCOME_FIELDS:
        value = getattr(payload, field, None)
        if isinstance(value, bool):
            return field, value
    return None


class _Oversize(Exception):
    pass
