"""The Kafka adapter: runs one ServiceCore as a FastStream (aiokafka) batch consumer.

Per batch: decode + process every record (in a worker thread, so heartbeats go
on), publish all outputs concurrently with acks=all, and only then commit the
offsets (manual ack). A crash between publish and commit redelivers the batch;
the processor then recognises inputs whose outputs are already on the log.

Restart and rebalance: the first time a partition reaches this process, the
runner (1) scans the log for outputs this service already produced (and hands
them to a core that rebuilds state from them, `observe_output`) and (2) replays
that partition's committed inputs through the core with outputs discarded, so
stateful cores get their state back. Inputs replay partition by partition, not
in the order they were consumed: state that spans partitions (the curator's
window) has to come from the outputs. Both scans are O(log); a snapshot store
would bound them and is future work.

Metrics (`kz_common.metrics`) are recorded here, never in the processor: inputs and
core time per record as they are processed, outputs once the broker acknowledged
them, and consumer lag from the high watermarks of fetch responses (Tansu answers
ListOffsets("latest") wrongly) every loop tick.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import IllegalStateError
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from kafka import KafkaConsumer, TopicPartition

from kz_common.admin import scan
from kz_common.config import Settings
from kz_common.core import ServiceCore
from kz_common.metrics import MetricsServer, ServiceMetrics
from kz_common.processing import BatchProcessor, InRecord, OutMessage
from kz_common.topics import logical, physical
from schemas import TOPICS

log = logging.getLogger(__name__)
BatchHook = Callable[[list[InRecord], list[OutMessage]], None]


async def _raw_bytes(msg: Any) -> Any:
    """FastStream decoder that leaves message bodies as they came off the wire."""
    return msg.body


class _Revocations(ConsumerRebalanceListener):
    """Forget warm state for partitions taken away, so a later return replays again."""

    def __init__(self, warm: set[int], on_revoked: Callable[[AioTopicPartition], None]) -> None:
        self.warm = warm
        self.on_revoked = on_revoked

    async def on_partitions_revoked(self, revoked: Iterable[AioTopicPartition]) -> None:
        for tp in revoked:
            self.warm.discard(tp.partition)
            self.on_revoked(tp)

    async def on_partitions_assigned(self, assigned: Iterable[AioTopicPartition]) -> None:
        return None


class ServiceRunner:
    """One service process: a core, a processor and a FastStream broker connection."""

    def __init__(
        self, core: ServiceCore, settings: Settings, bootstrap: str, on_batch: BatchHook | None = None
    ) -> None:
        self.core = core
        self.settings = settings
        self.bootstrap = bootstrap
        self.on_batch = on_batch
        self.processor = BatchProcessor(
            core, max_bytes=settings.kafka.max_message_bytes, capacity=settings.runner.dedupe_capacity
        )
        self._warm: set[int] = set()
        self.metrics = ServiceMetrics(core.name)
        self.metrics.watch_counts(self.processor.counts)
        self.metrics_server: MetricsServer | None = None  # set while run() serves /metrics
        # (logical topic, partition) -> next offset this process has finished (committed) there.
        self._finished: dict[tuple[str, int], int] = {}
        self._failed: BaseException | None = None
        self._producer: AIOKafkaProducer | None = None
        self.broker = self._build_broker()

    # ------------------------------------------------------------------ wiring

    def _build_broker(self) -> KafkaBroker:
        k = self.settings.kafka
        broker = KafkaBroker(
            self.bootstrap, consumer_only=True, graceful_timeout=self.settings.runner.shutdown_grace_s,
            client_id=f"kz-{self.core.name}", logger=None,
        )
        subscriber = broker.subscriber(
            *(physical(k, t) for t in self.core.inputs),
            group_id=self.core.name, batch=True, max_records=k.batch_max_records,
            batch_timeout_ms=k.batch_timeout_ms, fetch_max_wait_ms=k.fetch_max_wait_ms,
            auto_offset_reset="earliest",  # "latest" is wrong on Tansu; new groups read from the start
            session_timeout_ms=k.session_timeout_ms, heartbeat_interval_ms=k.heartbeat_interval_ms,
            max_poll_interval_ms=k.max_poll_interval_ms, ack_policy=AckPolicy.MANUAL,
            # Range keeps partition p of every input topic on one member: a challenge stays local.
            partition_assignment_strategy=(RangePartitionAssignor,),
            listener=_Revocations(self._warm, self._revoked),
            decoder=_raw_bytes,  # we decode and validate ourselves: garbage must reach the DLQ
        )
        subscriber(self._on_batch)
        self._subscriber = subscriber
        return broker

    def _revoked(self, tp: AioTopicPartition) -> None:
        name = logical(self.settings.kafka, tp.topic)
        self._finished.pop((name, tp.partition), None)
        self.metrics.forget_lag(name, tp.partition)

    # ------------------------------------------------------------------ the handler

    async def _on_batch(self, body: Any, msg: KafkaMessage) -> None:
        # Never raise here: under manual ack FastStream would skip the batch.
        raw = msg.raw_message if isinstance(msg.raw_message, tuple) else (msg.raw_message,)
        k = self.settings.kafka
        records = [InRecord(logical(k, r.topic), r.partition, r.offset, r.value or b"") for r in raw]
        assigned = {tp.partition for tp in msg.consumer.assignment()}  # type: ignore[attr-defined]
        started = time.perf_counter()
        for rec in records:  # a partition's first record after assignment sits at its committed offset
            self._finished.setdefault((rec.topic, rec.partition), rec.offset)
        try:
            outs = await asyncio.to_thread(self._process, records, assigned)
            assert self._producer is not None
            futures = [await self._producer.send(physical(k, o.topic), o.value, key=o.key) for o in outs]
            await asyncio.gather(*futures)
            await msg.ack()
            self.metrics.published(outs)
            self.metrics.batch_done(time.perf_counter() - started)
            for rec in records:
                tp = (rec.topic, rec.partition)
                self._finished[tp] = max(self._finished.get(tp, 0), rec.offset + 1)
            await self._refresh_lag()
            if self.on_batch:
                self.on_batch(records, outs)
        except Exception as exc:  # broker trouble: leave offsets uncommitted and stop
            log.exception("batch failed in %s; stopping so a restart can resume cleanly", self.core.name)
            self.metrics.batch_failed()
            self._failed = exc
            await msg.nack()

    def _process(self, records: list[InRecord], assigned: set[int]) -> list[OutMessage]:
        # Warm every assigned partition at once: each warm-up scans the log, so one scan per
        # rebalance, not one per partition as its first record happens to arrive.
        cold = sorted(({r.partition for r in records} | assigned) - self._warm)
        if cold and self.settings.runner.rebuild_from_log:
            self._warm_up(cold)
        self._warm.update(cold)
        workers = max(1, int(getattr(self.core, "concurrency", 1)))
        if workers > 1:  # the core's process() runs on several threads (the verifier)
            for rec in records:
                self.metrics.received(rec.topic)
            started = time.perf_counter()
            outs = self.processor.handle_many(records, workers)
            each = (time.perf_counter() - started) / max(1, len(records))
            for _ in records:  # per record: the batch's wall time shared out
                self.metrics.processed(each)
            return outs
        outs = []
        for rec in records:
            self.metrics.received(rec.topic)
            started = time.perf_counter()
            outs.extend(self.processor.handle(rec))
            self.metrics.processed(time.perf_counter() - started)
        return outs

    async def _refresh_lag(self) -> None:
        """Lag per assigned partition: the last fetch's high watermark minus what we finished."""
        consumer = getattr(self._subscriber, "consumer", None)  # FastStream's aiokafka consumer
        if consumer is None:
            return
        k = self.settings.kafka
        for tp in list(consumer.assignment()):
            try:
                high = consumer.highwater(tp)  # None until a fetch for tp was answered
                if high is None:
                    continue
                name = logical(k, tp.topic)
                done = self._finished.get((name, tp.partition))
                if done is None:  # nothing handed to us yet: the fetch position is the committed one
                    done = await consumer.position(tp)
            except (AssertionError, IllegalStateError, KeyError):  # revoked meanwhile
                continue
            self.metrics.set_lag(name, tp.partition, max(0, high - done))

    # ------------------------------------------------------------------ restart recovery

    def _warm_up(self, partitions: list[int]) -> None:
        k = self.settings.kafka
        outputs = [physical(k, name) for name in TOPICS if name not in self.core.inputs]
        for rec in scan(self.bootstrap, *outputs):
            self.processor.note_output(rec.value)
        if not getattr(self.core, "stateful", True):
            return
        committed = self._committed(partitions)
        for name in self.core.inputs:  # in the core's order: e.g. challenges before verdicts
            for p in partitions:
                end = committed.get((name, p), 0)
                if end:
                    self._replay(physical(k, name), p, end)
        log.info("%s warmed partitions %s", self.core.name, partitions)

    def _committed(self, partitions: list[int]) -> dict[tuple[str, int], int]:
        k = self.settings.kafka
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.core.name,
                                 enable_auto_commit=False)
        try:
            return {
                (name, p): consumer.committed(TopicPartition(physical(k, name), p)) or 0
                for name in self.core.inputs for p in partitions
            }
        finally:
            consumer.close()

    def _replay(self, topic: str, partition: int, end: int) -> None:
        name = logical(self.settings.kafka, topic)
        for r in scan(self.bootstrap, topic, partitions={partition}):  # raises, never hangs, if unanswered
            if r.offset >= end:
                break
            self.processor.replay(InRecord(name, partition, r.offset, r.value))

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set or a batch fails; raise if a batch failed."""
        k = self.settings.kafka
        # Outputs go through a plain aiokafka producer: FastStream's publish path adds
        # per-message headers and middleware we do not need (~3x slower per event).
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=2,
            max_request_size=k.max_message_bytes + 64_000, max_batch_size=512 * 1024,
            client_id=f"kz-{self.core.name}",
        )
        r = self.settings.runner
        if r.metrics_port:
            self.metrics_server = self.metrics.serve(r.metrics_host, r.metrics_port)
        try:
            await self._producer.start()
            await self.broker.start()
            log.info("%s consuming %s", self.core.name, ", ".join(self.core.inputs))
            try:
                while not stop.is_set() and self._failed is None:
                    try:
                        await asyncio.wait_for(stop.wait(), timeout=0.2)
                    except TimeoutError:  # between batches too: a partition caught up shows 0
                        await self._refresh_lag()
            finally:
                await self.broker.stop()
                await self._producer.stop()
        finally:
            if self.metrics_server is not None:  # shutdown() waits up to a poll interval: off the loop
                await asyncio.to_thread(self.metrics_server.close)
                self.metrics_server = None
        if self._failed is not None:
            raise RuntimeError(f"{self.core.name} stopped after a failed batch") from self._failed


def install_signal_handlers(stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT set `stop`: in-flight batches finish, offsets are committed, then exit."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
