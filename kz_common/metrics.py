"""Prometheus metrics of one service process, and the HTTP endpoint that serves them.

Each `ServiceMetrics` owns its own `CollectorRegistry` instead of the global one,
so several runners in one process (tests, `benchmarks/pipeline.py`) neither
collide on metric names nor see each other's numbers. The runner records; the
processing core stays pure and only reports what happened in its return values
(`OutMessage.event_type/outcome/reason`) and in `BatchProcessor.counts`.

Metric names (every one carries a constant `service` label):

- `kz_events_in_total{topic}`: records handed to the processor (poison included);
- `kz_events_out_total{topic,type}`: pipeline events published (dead letters excluded);
- `kz_outcomes_total{type,field,outcome}`: published events whose payload has a boolean
  verdict (`passed`, `accepted`, `kept`, `promoted`), by that value ("true"/"false");
- `kz_dead_letters_total{reason}`: dead letters published, by error kind;
- `kz_duplicates_skipped_total{why}`: inputs recognised as already handled: `event_id` (an
  event seen before), `record` (a dead-lettered record again), `on_log` (outputs already on
  the log, e.g. after a crash between publish and commit);
- `kz_batch_failures_total`: batches that could not be published or committed;
- `kz_event_processing_seconds`, `kz_batch_seconds`: histograms (core time per record;
  process + publish + commit per batch);
- `kz_consumer_lag{topic,partition}`: high watermark minus the offset this service has
  finished, per assigned input partition;
- `kz_last_batch_timestamp_seconds`: when the last batch was committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from kz_common.exceptions import ConfigError
from kz_common.processing import OutMessage

log = logging.getLogger(__name__)

# Core time per record: a relay hop takes ~100 us, a verification seconds, a training step minutes.
EVENT_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800)
# A batch adds publish + commit round trips (milliseconds) on top of its records' core time.
BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300, 1800)
# BatchProcessor.counts key -> `why` label of kz_duplicates_skipped_total.
DUPLICATE_COUNTS = {"duplicate": "event_id", "redelivered": "record", "on_log": "on_log"}


class ServiceMetrics:
    """Counters, histograms and gauges of one service, in a registry of its own."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        s = ["service"]
        reg = self.registry
        self._in = Counter("kz_events_in", "Input records received", [*s, "topic"], registry=reg)
        self._out = Counter("kz_events_out", "Pipeline events published (dead letters excluded)",
                            [*s, "topic", "type"], registry=reg)
        self._outcomes = Counter("kz_outcomes", "Published events by the boolean verdict of their payload",
                                 [*s, "type", "field", "outcome"], registry=reg)
        self._dead = Counter("kz_dead_letters", "Dead letters published, by error kind",
                             [*s, "reason"], registry=reg)
        self._failures = Counter("kz_batch_failures", "Batches that could not be published or committed",
                                 s, registry=reg).labels(service)
        self._event_s = Histogram("kz_event_processing_seconds", "Core processing time per input record",
                                  s, buckets=EVENT_BUCKETS, registry=reg).labels(service)
        self._batch_s = Histogram("kz_batch_seconds", "Process + publish + commit time per batch",
                                  s, buckets=BATCH_BUCKETS, registry=reg).labels(service)
        self._lag = Gauge("kz_consumer_lag", "High watermark minus the offset this service has finished",
                          [*s, "topic", "partition"], registry=reg)
        self._last = Gauge("kz_last_batch_timestamp_seconds", "Unix time of the last committed batch",
                           s, registry=reg).labels(service)
        # A label lookup takes a lock; the label sets are few, so the children are cached.
        self._children: dict[tuple[int, tuple[str, ...]], Counter] = {}

    # ------------------------------------------------------------------ recording

    def received(self, topic: str) -> None:
        """One input record reached the processor (called from the worker thread)."""
        self._child(self._in, topic).inc()

    def processed(self, seconds: float) -> None:
        """Core time of one input record."""
        self._event_s.observe(seconds)

    def published(self, outs: Iterable[OutMessage]) -> None:
        """Outputs acknowledged by the broker: count them by topic, type, verdict and reason."""
        for out in outs:
            if out.topic == "dead-letters":
                self._child(self._dead, out.reason or "unknown").inc()
                continue
            self._child(self._out, out.topic, out.event_type).inc()
            if out.outcome is not None:
                field, value = out.outcome
                self._child(self._outcomes, out.event_type, field, "true" if value else "false").inc()

    def _child(self, counter: Counter, *labels: str) -> Counter:
        key = (id(counter), labels)
        child = self._children.get(key)
        if child is None:  # setdefault: two threads may race here; both get the same child
            child = self._children.setdefault(key, counter.labels(self.service, *labels))
        return child

    def batch_done(self, seconds: float) -> None:
        """A batch was processed, published and committed."""
        self._batch_s.observe(seconds)
        self._last.set_to_current_time()

    def batch_failed(self) -> None:
        self._failures.inc()

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        self._lag.labels(self.service, topic, str(partition)).set(lag)

    def forget_lag(self, topic: str, partition: int) -> None:
        """A revoked partition is another member's lag now: stop reporting a stale value."""
        try:
            self._lag.remove(self.service, topic, str(partition))
        except KeyError:
            pass

    def watch_counts(self, counts: Mapping[str, int]) -> None:
        """Expose the processor's duplicate counters, read at scrape time (no double bookkeeping)."""
        self.registry.register(_DuplicateCollector(self.service, counts))

    # ------------------------------------------------------------------ serving

    def serve(self, host: str, port: int) -> MetricsServer:
        """Serve /metrics on host:port in a daemon thread until `close()`."""
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"{self.service}: cannot serve metrics on {host}:{port}: {exc}") from exc
        log.info("%s metrics on http://%s:%d/metrics", self.service, host, server.server_port)
        return MetricsServer(server, thread)


class MetricsServer:
    """A running /metrics endpoint; `close()` stops it and frees the port."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.port: int = server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _DuplicateCollector(Collector):
    def __init__(self, service: str, counts: Mapping[str, int]) -> None:
        self.service = service
        self.counts = counts  # keys are fixed at construction, so reading from another thread is safe

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("kz_duplicates_skipped", "Inputs recognised as already handled",
                                     labels=["service", "why"])
        for key, why in DUPLICATE_COUNTS.items():
            family.add_metric([self.service, why], self.counts.get(key, 0))
        yield family
