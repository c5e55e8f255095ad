"""Helpers for the fault-injection tests: events, real service processes, log read-back, checks.

Services run as `python -m kz_common.cli service NAME` (and `archive --follow`)
subprocesses configured through KZ_* environment variables, exactly as `kz run`
(kz_common/flywheel.py) launches them, so a test can SIGKILL one at any moment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Self

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kz_common.admin import scan
from kz_common.config import Settings
from kz_common.ops import cpu_test_range, get_op, render_problem
from kz_common.topics import physical
from schemas import (
    AnyEnvelope,
    ChallengeContext,
    Producer,
    Sampling,
    SchemaError,
    SolutionExtracted,
    SolutionSampled,
    Target,
    decode,
    encode,
    make_event,
)
from services.extractor.extract import code_hash

ROOT = Path(__file__).resolve().parents[2]
ORIGIN = Producer(service="fault-test", version="1")
NOISE = "I am not sure how to write this kernel, sorry."
# Which consumer group reads which topic, for the services these tests run.
INPUTS: dict[str, tuple[str, ...]] = {"extractor": ("solutions",), "verifier": ("extracted",),
                                      "curator": ("verified",)}


# ---------------------------------------------------------------------------- events


@lru_cache(maxsize=64)
def context(op: str = "add", rnd: int = 1, difficulty: int = 0) -> ChallengeContext:
    rng = cpu_test_range(op)
    return ChallengeContext(
        op=op, family=get_op(op).family, dtype="float32", shape_range=rng,
        target=Target(kind="naive_multiple", value=1.0), constraints=["no_optimized_library_call"],
        difficulty=difficulty, round=rnd, problem_source=render_problem(op, "float32", rng, device="cpu"),
    )


def fenced(code: str) -> str:
    return f"Here is the kernel.\n\n```python\n{code}\n```\n"


def sampled(cid: str, index: int, raw: str, *, rnd: int = 1, n_samples: int = 4, op: str = "add",
            difficulty: int = 0) -> AnyEnvelope:
    """A solver sample for challenge `cid` (of `op`) whose raw LLM output is `raw`."""
    payload = SolutionSampled(
        challenge_id=cid, context=context(op, rnd, difficulty), sample_index=index, n_samples=n_samples,
        backend="fault-test", model_id="hand-written", adapter=None, adapter_round=None,
        sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=2048, seed=index),
        prompt_hash="0" * 16, raw_output=raw,
    )
    return make_event(payload, producer=ORIGIN, correlation_id=cid)


def extracted(cid: str, index: int, code: str, *, rnd: int = 1) -> AnyEnvelope:
    """An accepted extraction of `code` for challenge `cid` (the verifier's input)."""
    payload = SolutionExtracted(challenge_id=cid, context=context("add", rnd), sample_index=index,
                                accepted=True, code=code, code_hash=code_hash(code), reason=None)
    return make_event(payload, producer=ORIGIN, correlation_id=cid)


def publish(settings: Settings, topic: str, values: list[bytes], keys: list[bytes]) -> None:
    """Publish raw values (acks=all); records up to 8 MB, so oversized ones reach the broker."""
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all",
                             max_request_size=8 << 20)
    try:
        for key, value in zip(keys, values, strict=True):
            producer.send(physical(settings.kafka, topic), key=key, value=value)
        producer.flush()
    finally:
        producer.close()


def publish_events(settings: Settings, topic: str, evs: list[AnyEnvelope]) -> None:
    publish(settings, topic, [encode(e) for e in evs], [e.correlation_id.encode() for e in evs])


# ---------------------------------------------------------------------------- services


def service_env(settings: Settings, data_dir: Path, services: dict[str, dict[str, Any]]) -> dict[str, str]:
    k = settings.kafka
    assert k.bootstrap_servers
    return {
        **os.environ,
        "KZ_KAFKA__BOOTSTRAP_SERVERS": k.bootstrap_servers,
        "KZ_KAFKA__TOPIC_PREFIX": k.topic_prefix,
        "KZ_KAFKA__PARTITIONS": str(k.partitions),
        "KZ_KAFKA__BATCH_MAX_RECORDS": str(k.batch_max_records),
        "KZ_KAFKA__SESSION_TIMEOUT_MS": str(k.session_timeout_ms),
        "KZ_KAFKA__HEARTBEAT_INTERVAL_MS": str(k.heartbeat_interval_ms),
        "KZ_PATHS__DATA_DIR": str(data_dir),
        "KZ_SERVICES": json.dumps(services),
        "KZ_RUNNER__METRICS_PORT": "0",
        "PYTHONUNBUFFERED": "1",
    }


class Services:
    """Real service processes on one broker; SIGKILL and restart any of them."""

    def __init__(self, settings: Settings, data_dir: Path, services: dict[str, dict[str, Any]]) -> None:
        self.env = service_env(settings, data_dir, services)
        self.logs = data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts: Counter[str] = Counter()
        self.down: set[str] = set()  # killed by the test and not started again

    def start(self, *names: str) -> None:
        for name in names:
            assert name not in self.procs or self.procs[name].poll() is not None, f"{name} is running"
            args = ["archive", "--follow"] if name == "archiver" else ["service", name]
            self.starts[name] += 1
            self.down.discard(name)
            with open(self._log(name), "ab") as log:  # the child keeps its own copy of the fd
                log.write(f"---- start {self.starts[name]} ---- {time.strftime('%H:%M:%S')}\n".encode())
                log.flush()
                self.procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "kz_common.cli", *args], cwd=ROOT, env=self.env,
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def kill(self, name: str) -> None:
        """SIGKILL the service's process group (no chance to flush or commit). Sandboxed candidates
        run in sessions of their own and are left to the sandbox's own parent-death handling."""
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)
        self.down.add(name)
        with open(self._log(name), "ab") as log:
            log.write(f"---- SIGKILL ---- {time.strftime('%H:%M:%S')}\n".encode())

    def stop(self, name: str, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (graceful: in-flight batch finishes, offsets commit), SIGKILL after timeout_s."""
        proc = self.procs.get(name)
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill(name)
            except ProcessLookupError:
                pass
        return proc.wait()

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def log_tail(self, name: str, n: int = 2500) -> str:
        try:
            return self._log(name).read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def check(self, *names: str) -> None:
        """Raise (with the log tail) if a service that should be running has exited."""
        for name in names or tuple(n for n in self.procs if n not in self.down):
            proc = self.procs[name]
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def wait(self, predicate: Callable[[], Any], timeout_s: float, what: str | Callable[[], str],
             *names: str) -> Any:
        """`wait_for(predicate)`, failing at once (with the log tail) if a service exits meanwhile,
        and with every service's log tail on a timeout."""
        def poll() -> Any:
            self.check(*names)
            return predicate()

        def described() -> str:
            return f"{what() if callable(what) else what}\n{self.describe()}"
        return wait_for(poll, timeout_s, described)

    def wait_consuming(self, name: str, timeout_s: float = 60.0) -> None:
        """Until the service's runner says it is consuming (this start's log section)."""
        marker = f"---- start {self.starts[name]} ----"

        def ready() -> bool:
            self.check(name)
            text = self._log(name).read_text("utf-8", "replace")
            return f"{name} consuming" in text[text.rfind(marker):]
        wait_for(ready, timeout_s, f"{name} to start consuming")

    def describe(self) -> str:
        return "\n".join(f"== {n} ==\n{self.log_tail(n, 1500)}" for n in self.procs)


# ---------------------------------------------------------------------------- read-back


def wait_for(predicate: Callable[[], Any], timeout_s: float = 60.0,
             what: str | Callable[[], str] = "condition", every_s: float = 0.5) -> Any:
    """The first truthy value of `predicate()`; `what` (a callable: built only on a timeout, as
    it may scan the log) says what was awaited. Predicates scan topics: polling is not free."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what() if callable(what) else what}")


def records(settings: Settings, topic: str) -> list[Any]:
    """Every record value of `topic` (logical name), in log order."""
    assert settings.kafka.bootstrap_servers
    return list(scan(settings.kafka.bootstrap_servers, physical(settings.kafka, topic)))


def events(settings: Settings, topic: str, type_: str | None = None, *,
           valid: bool = False) -> list[dict[str, Any]]:
    """The envelopes on `topic`; with `valid`, only those that pass schema validation (a
    malformed record the test published may look like an envelope)."""
    out = []
    for rec in records(settings, topic):
        try:
            doc = orjson.loads(rec.value)
        except orjson.JSONDecodeError:
            continue
        envelope = isinstance(doc, dict) and "event_id" in doc and "payload" in doc
        if envelope and (type_ is None or doc.get("type") == type_) and (
                not valid or _validates(rec.value)):
            out.append(doc)
    return out


def _validates(value: bytes) -> bool:
    try:
        decode(value)
    except SchemaError:
        return False
    return True


def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> end offset, from a scan (ListOffsets("latest") is wrong on Tansu)."""
    ends: dict[int, int] = {}
    for rec in scan(bootstrap, topic):
        ends[rec.partition] = max(ends.get(rec.partition, 0), rec.offset + 1)
    return ends


def lag(settings: Settings, group: str, topics: Iterable[str]) -> int:
    """Records of `topics` the group has not committed yet: per partition, the high watermark a
    fetch answer carries minus the committed offset (one consumer, no scan of the data)."""
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             fetch_max_wait_ms=20, request_timeout_ms=10_000)
    try:
        tps = [TopicPartition(t, p) for t in (physical(settings.kafka, n) for n in topics)
               for p in sorted(consumer.partitions_for_topic(t) or ())]
        if not tps:
            return 0
        consumer.assign(tps)
        committed = {tp: consumer.committed(tp) or 0 for tp in tps}
        for tp, offset in committed.items():
            consumer.seek(tp, offset)
        deadline = time.monotonic() + 5.0
        while any(consumer.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:  # no fetch answer: take the end from a scan instead
                ends = {(tp.topic, p): e for tp in tps for p, e in log_ends(bootstrap, tp.topic).items()}
                return sum(ends.get((tp.topic, tp.partition), 0) - committed[tp] for tp in tps)
            consumer.poll(timeout_ms=50, max_records=1)
        return sum(max(0, consumer.highwater(tp) - committed[tp]) for tp in tps)
    finally:
        consumer.close()


def drained(settings: Settings, groups: Mapping[str, tuple[str, ...]] = INPUTS) -> bool:
    return all(lag(settings, g, topics) == 0 for g, topics in groups.items())


# ---------------------------------------------------------------------------- the ledger


def assert_unique_ids(settings: Settings, topics: Iterable[str]) -> None:
    for topic in topics:
        ids = Counter(d["event_id"] for d in events(settings, topic))
        twice = {i: n for i, n in ids.items() if n > 1}
        assert not twice, f"{topic}: event ids on the log more than once: {twice}"


def assert_chain(settings: Settings, samples: list[AnyEnvelope]) -> dict[str, list[dict[str, Any]]]:
    """Every sample has exactly one extraction, verdict and curation decision; no id twice."""
    sample_ids = [s.event_id for s in samples]
    got = {
        "solutions": events(settings, "solutions", "solution.sampled", valid=True),
        "extracted": events(settings, "extracted", "solution.extracted", valid=True),
        "verified": events(settings, "verified", "solution.verified", valid=True),
        "curated": events(settings, "curated", "sample.curated", valid=True),
        "pairs": events(settings, "curated", "preference.recorded", valid=True),
        "requests": events(settings, "training-requests", "training.requested", valid=True),
    }
    assert_unique_ids(settings, ("solutions", "extracted", "verified", "curated", "training-requests",
                                 "dead-letters"))
    assert Counter(d["event_id"] for d in got["solutions"]) == Counter(sample_ids)

    def one_each(children: list[dict[str, Any]], parents: list[str], key: str, what: str) -> list[str]:
        per_parent = Counter(c[key] if key == "causation_id" else c["payload"][key] for c in children)
        lost = [p for p in parents if per_parent[p] == 0]
        twice = {p: n for p, n in per_parent.items() if n > 1}
        stray = [p for p in per_parent if p not in set(parents)]
        show = [{k: c[k] for k in ("event_id", "causation_id", "produced_at")}
                | {k: c["payload"].get(k) for k in ("challenge_id", "sample_index", "kept", "reason")}
                for c in children if (c[key] if key == "causation_id" else c["payload"][key]) in twice]
        assert not lost and not twice and not stray, (
            f"{what}: {len(lost)} lost {lost[:3]}, duplicated {twice} {show}, without a parent {stray[:3]}")
        return [c["event_id"] for c in children]

    extracted_ids = one_each(got["extracted"], sample_ids, "causation_id", "extractions per sample")
    verdict_ids = one_each(got["verified"], extracted_ids, "causation_id", "verdicts per extraction")
    one_each(got["curated"], verdict_ids, "verdict_event_id", "curation decisions per verdict")

    rounds = [r["payload"]["round"] for r in got["requests"]]
    assert sorted(rounds) == list(range(1, len(rounds) + 1)), f"training rounds {rounds}"
    kept = {c["payload"]["verdict_event_id"] for c in got["curated"] if c["payload"]["kept"]}
    requested = [i for r in got["requests"] for i in r["payload"]["new_sample_ids"]]
    assert len(requested) == len(set(requested)), "a sample was new in two training requests"
    assert set(requested) <= kept, "a training request names a sample that was never kept"
    return got


def dead_letters(settings: Settings) -> list[dict[str, Any]]:
    return [d["payload"] for d in events(settings, "dead-letters", "dead.letter")]


def summary(settings: Settings) -> dict[str, int]:
    """Records on the log by topic and event type: what reached where (for failure messages)."""
    from schemas import TOPICS

    out: Counter[str] = Counter()
    for topic in TOPICS:
        for rec in records(settings, topic):
            try:
                kind = orjson.loads(rec.value).get("type", "?")
            except (orjson.JSONDecodeError, AttributeError):
                kind = "<not json>"
            out[f"{topic}:{kind}"] += 1
    return dict(out)
