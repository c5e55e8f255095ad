"""Prometheus metrics: the class on its own, and a real runner's /metrics against the test broker."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from pydantic import BaseModel
from typer.testing import CliRunner

from kz_common.cli import app
from kz_common.config import Settings
from kz_common.core import ProcessingError
from kz_common.exceptions import ConfigError
from kz_common.metrics import ServiceMetrics
from kz_common.processing import BatchProcessor, InRecord, OutMessage
from kz_common.runner import ServiceRunner
from schemas import AnyEnvelope, SolutionVerified, encode, make_event
from tests.conftest import free_port
from tests.kz_common.harness import ORIGIN, publish, publish_events, read
from tests.kz_common.relay import Relay, challenge, step

# ----------------------------------------------------------------------------- helpers


def scrape(port: int) -> list[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels` (0 when there are none)."""
    return sum(s.value for s in samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def series(samples: list[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.name == name]


def extracted(i: int) -> AnyEnvelope:
    """An extracted solution of challenge c{i}, with its lineage."""
    c = make_event(challenge(i), producer=ORIGIN, correlation_id=f"c{i}")
    s = make_event(step(c.payload), producer=ORIGIN, correlation_id=f"c{i}", parent=c)
    return make_event(step(s.payload), producer=ORIGIN, correlation_id=f"c{i}", parent=s)


def numbered(event: AnyEnvelope) -> int:
    return int(event.payload.challenge_id[1:])  # type: ignore[union-attr]


class GatedVerifier:
    """A verifier-like core: fails every third challenge, refuses one, and holds until `gate` opens.

    Holding the first batch keeps a backlog on the partitions, so the lag gauge must show it.
    """

    stateful = False

    def __init__(self, gate: threading.Event, refuse: int) -> None:
        self.name, self.version, self.inputs = "verifier", "test", ("extracted",)
        self.gate, self.refuse = gate, refuse

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        assert self.gate.wait(60), "test never opened the gate"
        i = numbered(event)
        if i == self.refuse:
            raise ProcessingError(f"refusing c{i}")
        verdict = step(event.payload)
        assert isinstance(verdict, SolutionVerified)
        if i % 3 == 0:
            verdict = verdict.model_copy(update={"passed": False, "stage": "numerics", "reasons": ["off"]})
        return [verdict]


def with_port(settings: Settings, port: int, batch_max_records: int | None = None) -> Settings:
    kafka = settings.kafka
    if batch_max_records is not None:
        kafka = kafka.model_copy(update={"batch_max_records": batch_max_records})
    runner = settings.runner.model_copy(update={"metrics_port": port})
    return settings.model_copy(update={"runner": runner, "kafka": kafka})


def poll(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# ----------------------------------------------------------------------------- the class


def _out(topic: str, event_type: str, outcome: tuple[str, bool] | None = None,
         reason: str | None = None) -> OutMessage:
    return OutMessage(topic, b"k", b"{}", "id", event_type, outcome, reason)


def test_metrics_class_counts_by_topic_type_outcome_and_reason() -> None:
    m = ServiceMetrics("verifier")
    server = m.serve("127.0.0.1", 0)  # 0: any free port (the runner treats 0 as "off")
    try:
        for topic in ("extracted", "extracted", "extracted", "rounds"):
            m.received(topic)
        m.processed(0.002)
        m.processed(0.3)
        m.published([
            _out("verified", "solution.verified", ("passed", True)),
            _out("verified", "solution.verified", ("passed", True)),
            _out("verified", "solution.verified", ("passed", False)),
            _out("dead-letters", "dead.letter", reason="decode"),
            _out("curriculum", "curriculum.adjusted"),
        ])
        m.batch_done(0.5)
        m.set_lag("extracted", 0, 7)
        m.set_lag("extracted", 1, 3)
        m.forget_lag("extracted", 1)
        m.forget_lag("extracted", 2)  # never reported: no error
        counts = {"duplicate": 2, "redelivered": 0, "on_log": 1}
        m.watch_counts(counts)
        counts["redelivered"] = 5  # read at scrape time
        s = scrape(server.port)
    finally:
        server.close()

    assert value(s, "kz_events_in_total", service="verifier", topic="extracted") == 3
    assert value(s, "kz_events_in_total", topic="rounds") == 1
    assert value(s, "kz_events_out_total", topic="verified", type="solution.verified") == 3
    assert value(s, "kz_events_out_total", topic="curriculum") == 1
    assert value(s, "kz_events_out_total", topic="dead-letters") == 0  # counted as dead letters only
    assert value(s, "kz_outcomes_total", type="solution.verified", field="passed", outcome="true") == 2
    assert value(s, "kz_outcomes_total", type="solution.verified", outcome="false") == 1
    assert value(s, "kz_outcomes_total", type="curriculum.adjusted") == 0
    assert value(s, "kz_dead_letters_total", reason="decode") == 1
    assert value(s, "kz_event_processing_seconds_count") == 2
    assert value(s, "kz_event_processing_seconds_sum") == pytest.approx(0.302)
    assert value(s, "kz_event_processing_seconds_bucket", le="0.005") == 1
    assert value(s, "kz_batch_seconds_count") == 1
    assert value(s, "kz_last_batch_timestamp_seconds") == pytest.approx(time.time(), abs=60)
    assert [(x.labels["partition"], x.value) for x in series(s, "kz_consumer_lag")] == [("0", 7.0)]
    assert value(s, "kz_duplicates_skipped_total", why="event_id") == 2
    assert value(s, "kz_duplicates_skipped_total", why="record") == 5
    assert value(s, "kz_duplicates_skipped_total", why="on_log") == 1


def test_each_instance_has_its_own_registry() -> None:
    a, b = ServiceMetrics("solver"), ServiceMetrics("solver")  # same names, no collision
    a.received("challenges")
    assert a.registry.get_sample_value("kz_events_in_total", {"service": "solver", "topic": "challenges"}) == 1
    assert b.registry.get_sample_value("kz_events_in_total", {"service": "solver", "topic": "challenges"}) is None


def test_serving_on_a_busy_port_is_a_config_error_and_close_frees_the_port() -> None:
    m = ServiceMetrics("extractor")
    server = m.serve("127.0.0.1", 0)
    try:
        with pytest.raises(ConfigError, match="cannot serve metrics"):
            ServiceMetrics("other").serve("127.0.0.1", server.port)
    finally:
        server.close()
    with pytest.raises(urllib.error.URLError):
        scrape(server.port)


def test_processor_reports_type_outcome_and_reason_without_recording_metrics() -> None:
    processor = BatchProcessor(Relay("verifier", ("extracted",)), max_bytes=1_000_000, capacity=100)
    event = extracted(1)
    [out] = processor.handle(InRecord("extracted", 0, 0, encode(event)))
    assert (out.topic, out.event_type, out.outcome, out.reason) == (
        "verified", "solution.verified", ("passed", True), None)
    [dead] = processor.handle(InRecord("extracted", 0, 1, b"\x00garbage"))
    assert (dead.topic, dead.event_type, dead.reason) == ("dead-letters", "dead.letter", "decode")
    assert processor.handle(InRecord("extracted", 0, 0, encode(event))) == []  # same record again
    assert processor.handle(InRecord("extracted", 1, 5, encode(event))) == []  # same event, copied
    assert processor.handle(InRecord("extracted", 0, 1, b"\x00garbage")) == []  # poison again
    assert processor.counts["duplicate"] == 2 and processor.counts["redelivered"] == 1
    processor.replay(InRecord("extracted", 0, 0, encode(event)))  # replays are not skips
    assert processor.counts["duplicate"] == 2


def test_metrics_port_setting_from_env_and_cli_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KZ_RUNNER__METRICS_PORT", raising=False)
    monkeypatch.setenv("KZ_CONFIG", "/nonexistent/kz.toml")  # defaults, not a developer's kz.toml
    assert Settings().runner.metrics_port == 0  # off unless asked for
    monkeypatch.setenv("KZ_RUNNER__METRICS_PORT", "9123")
    assert Settings().runner.metrics_port == 9123
    assert "--metrics-port" in CliRunner().invoke(app, ["service", "--help"]).output
    assert "--metrics-base-port" in CliRunner().invoke(app, ["run", "--help"]).output


# ----------------------------------------------------------------------------- a real runner


@pytest.mark.broker
def test_runner_serves_metrics_that_match_the_log(settings: Settings) -> None:
    events = [extracted(i) for i in range(12)]
    publish_events(settings, "extracted", events)
    publish_events(settings, "extracted", [events[5]])  # a duplicate of c5
    publish(settings, "extracted", [b"\x00\xffnot json"])  # poison
    sent = len(events) + 2
    port = free_port()
    gate = threading.Event()
    # Small batches: while the first one is held, the rest of the backlog stays unconsumed.
    runner = ServiceRunner(GatedVerifier(gate, refuse=4), with_port(settings, port, batch_max_records=2),
                           settings.kafka.bootstrap_servers or "")

    def scenario() -> list[Sample]:
        poll(lambda: _answers(port), "the metrics endpoint to answer")
        poll(lambda: value(scrape(port), "kz_consumer_lag") > 0, "a backlog in the lag gauge", 30)
        assert value(scrape(port), "kz_events_out_total") == 0  # held: nothing published yet
        gate.set()

        def caught_up() -> bool:
            s = scrape(port)
            return (value(s, "kz_events_in_total") == sent and value(s, "kz_dead_letters_total") == 2
                    and len(series(s, "kz_consumer_lag")) > 0 and value(s, "kz_consumer_lag") == 0)

        poll(caught_up, "every event processed and the lag back to 0")
        return scrape(port)

    async def main() -> list[Sample]:
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        try:
            return await asyncio.to_thread(scenario)
        finally:
            gate.set()  # a failed check must not leave the core blocked through shutdown
            stop.set()
            await task

    s = asyncio.run(main())

    assert value(s, "kz_events_in_total", service="verifier", topic="extracted") == sent
    assert value(s, "kz_events_out_total", topic="verified", type="solution.verified") == 11
    assert len(read(settings, "verified")) == 11  # the counter agrees with the log
    failed = sum(1 for e in events if numbered(e) % 3 == 0 and numbered(e) != 4)
    assert value(s, "kz_outcomes_total", type="solution.verified", field="passed", outcome="false") == failed
    assert value(s, "kz_outcomes_total", type="solution.verified", outcome="true") == 11 - failed
    assert value(s, "kz_dead_letters_total", reason="decode") == 1
    assert value(s, "kz_dead_letters_total", reason="processing") == 1
    assert len(read(settings, "dead-letters")) == 2
    assert value(s, "kz_duplicates_skipped_total", why="event_id") == 1
    assert value(s, "kz_event_processing_seconds_count") == sent
    assert value(s, "kz_event_processing_seconds_sum") > 0
    assert value(s, "kz_batch_seconds_count") >= sent / 2  # at most 2 records per batch
    assert value(s, "kz_batch_failures_total") == 0
    assert {x.labels["partition"] for x in series(s, "kz_consumer_lag")} <= {"0", "1", "2"}
    # The endpoint stops with the service.
    assert runner.metrics_server is None
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def _answers(port: int) -> bool:
    try:
        scrape(port)
        return True
    except (urllib.error.URLError, ConnectionError):
        return False
