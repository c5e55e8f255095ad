"""Backbone benchmark: events/s per hop and p50/p99 hop latency on the embedded broker.

Processing is a no-op: each hop answers every input with one prebuilt payload of
the next stage's type, so the numbers measure the backbone alone: decode +
validate + dedupe + wrap + encode + publish + commit.

  throughput: N events preloaded on a hop's input; one consumer process drains them.
  latency:    the whole 4-hop chain runs (one process per hop) while events are
              published at a steady rate; hop latency = broker timestamp of the
              output minus broker timestamp of its input (CreateTime, one clock).

Usage: python benchmarks/pipeline.py [--events 20000] [--rate 1000] [--seconds 10] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import platform
import statistics
import sys
import time
from pathlib import Path

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kz_common.admin import create_topics, scan  # noqa: E402
from kz_common.broker import EmbeddedBroker  # noqa: E402
from kz_common.config import Settings  # noqa: E402
from kz_common.runner import ServiceRunner  # noqa: E402
from schemas import Producer, encode, make_event  # noqa: E402
from tests.kz_common.relay import Relay, challenge, chain, step  # noqa: E402

HOPS = ["challenges", "solutions", "extracted", "verified", "curated"]


class NoOp:
    """A hop that does no work: it answers every input with a prebuilt next-stage payload."""

    stateful = False

    def __init__(self, relay: Relay) -> None:
        self.name, self.version, self.inputs = relay.name, "bench", relay.inputs
        payload = challenge(0)
        for _ in range(HOPS.index(relay.inputs[0]) + 1):
            payload = step(payload)
        self.payload = payload

    def process(self, event):  # type: ignore[no-untyped-def]
        # keep the challenge id: it is the partition key, so the next hop's load stays spread
        return [self.payload.model_copy(update={"challenge_id": event.payload.challenge_id})]


def _serve(index: int, bootstrap: str, seconds: float, prefix: str) -> None:
    settings = Settings(kafka={"topic_prefix": prefix})
    core = NoOp(chain()[index])

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(ServiceRunner(core, settings, bootstrap).run(stop))
        await asyncio.sleep(seconds)
        stop.set()
        await task

    asyncio.run(main())


def _records(bootstrap: str, topic: str) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=1500)
    tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out = list(consumer)
    consumer.close()
    return out


def _publish(bootstrap: str, topic: str, n: int, rate: float | None) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    origin = Producer(service="bench", version="1")
    start = time.perf_counter()
    for i in range(n):
        event = make_event(challenge(i), producer=origin, correlation_id=f"c{i}")
        producer.send(topic, key=event.correlation_id.encode(), value=encode(event))
        if rate:
            delay = start + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    producer.flush()
    producer.close()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def throughput(bootstrap: str, n: int) -> list[dict]:
    rows = []
    for index, hop in enumerate(HOPS[:-1]):
        prefix = f"tp{index}."
        settings = Settings(kafka={"topic_prefix": prefix})
        create_topics(settings.kafka, bootstrap)
        src, dst = prefix + hop, prefix + HOPS[index + 1]
        # preload the hop's input with events of the right type by running the hops before it
        _publish(bootstrap, prefix + "challenges", n, None)
        for j in range(index):
            _run_until(j, bootstrap, prefix, prefix + HOPS[j + 1], n)
        t0 = time.perf_counter()
        _run_until(index, bootstrap, prefix, dst, n)
        wall = time.perf_counter() - t0
        out = _records(bootstrap, dst)
        stamps = sorted(r.timestamp for r in out)
        span = (stamps[-1] - stamps[0]) / 1000 if len(stamps) > 1 else float("nan")
        rows.append({"hop": f"{hop} -> {HOPS[index + 1]}", "events": len(out),
                     "events_per_s": len(out) / span if span else float("nan"),
                     "wall_s_incl_join": wall, "input": src})
    return rows


def _run_until(index: int, bootstrap: str, prefix: str, dst: str, n: int) -> None:
    proc = mp.Process(target=_serve, args=(index, bootstrap, 600.0, prefix))
    proc.start()
    deadline = time.time() + 600
    while time.time() < deadline and _count(bootstrap, dst) < n:
        time.sleep(0.5)
    proc.terminate()
    proc.join(30)


def _count(bootstrap: str, topic: str) -> int:
    return sum(1 for _ in scan(bootstrap, topic))  # high watermarks: ListOffsets is wrong on Tansu


def latency(bootstrap: str, rate: float, seconds: float) -> list[dict]:
    prefix = "lat."
    create_topics(Settings(kafka={"topic_prefix": prefix}).kafka, bootstrap)
    procs = [mp.Process(target=_serve, args=(i, bootstrap, seconds + 25, prefix)) for i in range(4)]
    for p in procs:
        p.start()
    time.sleep(8)  # group joins (Tansu waits session_timeout/2) and warm-up scans
    n = int(rate * seconds)
    _publish(bootstrap, prefix + "challenges", n, rate)
    for p in procs:
        p.join()
    stamp: dict[str, int] = {}
    rows = []
    for i, hop in enumerate(HOPS):
        lat = []
        for r in _records(bootstrap, prefix + hop):
            doc = orjson.loads(r.value)
            stamp[doc["event_id"]] = r.timestamp
            cause = doc["causation_id"]
            if i and cause in stamp:
                lat.append(r.timestamp - stamp[cause])
        if i:
            rows.append({"hop": f"{HOPS[i - 1]} -> {hop}", "events": len(lat),
                         "p50_ms": statistics.median(lat) if lat else None,
                         "p99_ms": _pct(lat, 0.99) if lat else None,
                         "max_ms": max(lat) if lat else None})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--only", choices=["throughput", "latency"], default=None)
    args = ap.parse_args()
    settings = Settings(kafka={"embedded_port": 19192})
    with EmbeddedBroker(settings.kafka) as broker:
        tput = throughput(broker.bootstrap, args.events) if args.only != "latency" else []
        lat = latency(broker.bootstrap, args.rate, args.seconds) if args.only != "throughput" else []
    print(f"\nthroughput, {args.events} preloaded events, one consumer process per hop")
    print(f"{'hop':28} {'events':>8} {'events/s':>10}")
    for r in tput:
        print(f"{r['hop']:28} {r['events']:>8} {r['events_per_s']:>10.0f}")
    print(f"\nlatency, 4-hop chain, {args.rate:.0f} events/s for {args.seconds:.0f} s")
    print(f"{'hop':28} {'events':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r in lat:
        print(f"{r['hop']:28} {r['events']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['max_ms']:>8}")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"machine": {"cpus": mp.cpu_count(), "platform": platform.platform(),
                       "python": platform.python_version()},
           "throughput": tput, "latency": lat, "args": {k: str(v) for k, v in vars(args).items()}}
    path = args.out / "pipeline.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
