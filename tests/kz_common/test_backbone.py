"""The backbone against the real embedded broker: chain, redelivery, poison messages, crash."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from kz_common.config import Settings
from tests.kz_common.harness import challenge_events, publish, publish_events, read, run_until, wait_for
from schemas import make_event
from tests.kz_common.relay import Relay, chain, step

pytestmark = pytest.mark.broker
ROOT = Path(__file__).resolve().parents[2]


def test_events_pass_every_hop_with_lineage(settings: Settings) -> None:
    events = challenge_events(30)
    publish_events(settings, "challenges", events)
    asyncio.run(run_until(chain(), settings, lambda: len(read(settings, "curated")) >= 30))

    by_id: dict[str, dict] = {}
    for topic in ("challenges", "solutions", "extracted", "verified", "curated"):
        docs = read(settings, topic)
        assert len(docs) == 30, topic
        assert len({d["event_id"] for d in docs}) == 30, f"duplicate ids on {topic}"
        by_id.update({d["event_id"]: d for d in docs})
    for curated in read(settings, "curated"):
        hops, node = [], curated
        while node["causation_id"] is not None:
            hops.append(node["type"])
            node = by_id[node["causation_id"]]
            assert node["correlation_id"] == curated["correlation_id"]
        assert hops == ["sample.curated", "solution.verified", "solution.extracted", "solution.sampled"]
        assert node["type"] == "challenge.created"
        assert node["payload"]["challenge_id"] == curated["correlation_id"]
    assert read(settings, "dead-letters") == []


def test_redelivered_event_produces_one_downstream_event(settings: Settings) -> None:
    [event] = challenge_events(1)
    publish_events(settings, "challenges", [event, event])  # the same event, delivered twice
    [marker] = challenge_events(1, start=1)
    publish_events(settings, "challenges", [marker])
    solver = Relay("solver", ("challenges",))
    asyncio.run(run_until([solver], settings, lambda: len(read(settings, "solutions")) >= 2))
    causes = [d["causation_id"] for d in read(settings, "solutions")]
    assert sorted(causes) == sorted([event.event_id, marker.event_id])
    assert solver.seen == 2  # the duplicate never reached the core


def test_poison_messages_go_to_dead_letters_and_consumer_keeps_going(settings: Settings) -> None:
    [good] = challenge_events(1)
    wrong_schema = orjson.loads(orjson.dumps(good.model_dump(mode="json")))
    wrong_schema["payload"]["dtype"] = "float7"
    other = challenge_events(1, start=5)[0]
    wrong_topic = make_event(step(other.payload), producer=other.producer, correlation_id="c5",
                             parent=other).model_dump(mode="json")  # a valid solution, on the wrong topic
    poison = [b"\x00\xffnot json", b"[1, 2, 3]", orjson.dumps({"type": "no.such.event"}),
              orjson.dumps(wrong_schema), orjson.dumps(wrong_topic)]
    publish(settings, "challenges", poison)
    publish_events(settings, "challenges", [good])
    asyncio.run(run_until([Relay("solver", ("challenges",))], settings,
                          lambda: len(read(settings, "solutions")) >= 1 and len(read(settings, "dead-letters")) >= 5))

    letters = [d["payload"] for d in read(settings, "dead-letters")]
    assert sorted(base64.b64decode(x["original_b64"]) for x in letters) == sorted(poison)
    reasons = {base64.b64decode(x["original_b64"]): (x["error_kind"], x["error"]) for x in letters}
    assert reasons[b"\x00\xffnot json"][0] == "decode"
    assert "unknown event type" in reasons[orjson.dumps({"type": "no.such.event"})][1]
    assert "dtype" in reasons[orjson.dumps(wrong_schema)][1]
    assert "does not belong on challenges" in reasons[orjson.dumps(wrong_topic)][1]
    assert all(x["consumer"] == "solver" for x in letters)
    assert [d["causation_id"] for d in read(settings, "solutions")] == [good.event_id]


def test_processing_failure_is_dead_lettered_once_with_the_event(settings: Settings) -> None:
    events = challenge_events(3)
    publish_events(settings, "challenges", events + [events[1]])  # c1 fails, and is redelivered
    solver = Relay("solver", ("challenges",), fail_on="c1")
    asyncio.run(run_until([solver], settings, lambda: len(read(settings, "solutions")) >= 2
                          and len(read(settings, "dead-letters")) >= 1))
    [letter] = read(settings, "dead-letters")
    assert letter["payload"]["error_kind"] == "processing"
    assert letter["payload"]["original_event_id"] == events[1].event_id
    assert "refusing c1" in letter["payload"]["error"]


def test_a_concurrent_core_loses_and_repeats_nothing(settings: Settings) -> None:
    """A core with `concurrency` (the verifier's path): the runner's handle_many, end to end."""
    events = challenge_events(6)
    publish_events(settings, "challenges", events + [events[2]])  # one redelivered
    solver = Relay("solver", ("challenges",), fail_on="c4")
    solver.concurrency = 3  # type: ignore[attr-defined]
    asyncio.run(run_until([solver], settings, lambda: len(read(settings, "solutions")) >= 5
                          and len(read(settings, "dead-letters")) >= 1))
    causes = sorted(d["causation_id"] for d in read(settings, "solutions"))
    assert causes == sorted(e.event_id for e in events if e.payload.challenge_id != "c4")
    [letter] = read(settings, "dead-letters")
    assert letter["payload"]["original_event_id"] == events[4].event_id
    assert solver.seen == 6  # the redelivered copy never reached the core


def _worker(settings: Settings, delay: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KZ_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers or "",
           "KZ_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix, "KZ_KAFKA__PARTITIONS": "3",
           "KZ_KAFKA__BATCH_MAX_RECORDS": "10"}
    return subprocess.Popen([sys.executable, "-m", "tests.kz_common.crash_worker", str(delay)],
                            cwd=ROOT, env=env, start_new_session=True)


def test_killed_consumer_restarts_with_nothing_lost_or_duplicated(settings: Settings) -> None:
    n = 120
    events = challenge_events(n)
    publish_events(settings, "challenges", events)
    first = _worker(settings, delay=0.02)
    wait_for(lambda: len(read(settings, "solutions")) >= 30, what="first outputs")
    os.killpg(first.pid, signal.SIGKILL)  # mid-stream, no chance to commit or flush
    first.wait()
    killed_at = len(read(settings, "solutions"))
    assert killed_at < n, "worker finished before it could be killed; raise the delay"
    second = _worker(settings, delay=0.0)
    try:
        wait_for(lambda: len(read(settings, "solutions")) >= n, what="all outputs after restart")
        wait_for(lambda: False if second.poll() is not None else True, timeout_s=1, what="worker alive")
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(20)
    docs = read(settings, "solutions")
    assert sorted(d["causation_id"] for d in docs) == sorted(e.event_id for e in events)  # none lost
    assert len(docs) == n and len({d["event_id"] for d in docs}) == n  # none duplicated


def test_workers_share_partitions_and_survivors_take_over_a_killed_one(settings: Settings) -> None:
    n = 150
    events = challenge_events(n)
    publish_events(settings, "challenges", events)
    workers = [_worker(settings, delay=0.03) for _ in range(3)]  # one group, 3 partitions
    try:
        wait_for(lambda: len(read(settings, "solutions")) >= 20, what="first outputs")
        wait_for(lambda: len({d["payload"]["model_id"] for d in read(settings, "solutions")}) == 3,
                 what="all three workers producing")  # the group split the partitions
        os.killpg(workers[0].pid, signal.SIGKILL)  # its partitions move to the other two
        workers[0].wait()
        wait_for(lambda: len(read(settings, "solutions")) >= n, timeout_s=120, what="survivors finish")
        assert all(w.poll() is None for w in workers[1:]), "a surviving worker died"
    finally:
        for w in workers[1:]:
            os.killpg(w.pid, signal.SIGTERM)
            w.wait(20)
    docs = read(settings, "solutions")
    assert sorted(d["causation_id"] for d in docs) == sorted(e.event_id for e in events)
    assert len(docs) == n  # nothing lost, nothing duplicated across the hand-over
