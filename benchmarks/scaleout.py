"""Scale-out: does a second and third worker in one consumer group add throughput?

    python benchmarks/scaleout.py [--events 300] [--delay 0.02] [--out DIR]

Starts the embedded broker, publishes N challenges on a 3-partition topic, then runs
1, 2 and 3 worker PROCESSES of a relay "solver" (tests/kz_common/crash_worker.py: a
fixed `delay` of work per event, like a verifier candidate) in one consumer group, each
count on a fresh topic prefix. Throughput = events / (last output - first output),
broker timestamps, so the group join (session_timeout/2 on Tansu) is not counted.
Prints a table and writes DIR/scaleout.json. The speed-up is bounded by the partition
count (3) and, on a 2-core box, by the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer  # noqa: E402

from kz_common.admin import create_topics  # noqa: E402
from kz_common.broker import EmbeddedBroker  # noqa: E402
from kz_common.config import Settings  # noqa: E402
from kz_common.topics import physical  # noqa: E402
from tests.kz_common.harness import challenge_events, publish_events  # noqa: E402


def _outputs(settings: Settings, bootstrap: str, n: int, timeout_s: float) -> list[int]:
    """Broker timestamps (ms) of the first `n` solutions, waiting up to `timeout_s`."""
    consumer = KafkaConsumer(physical(settings.kafka, "solutions"), bootstrap_servers=bootstrap,
                             group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    stamps: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(stamps) < n and time.monotonic() < deadline:
            for rec in consumer:
                stamps.append(rec.timestamp)
                if len(stamps) >= n:
                    break
    finally:
        consumer.close()
    return stamps


def _run(bootstrap: str, workers: int, n: int, delay: float) -> dict[str, Any]:
    prefix = f"kzscale{uuid.uuid4().hex[:6]}."
    env = {**os.environ, "KZ_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
           "KZ_KAFKA__TOPIC_PREFIX": prefix, "KZ_KAFKA__PARTITIONS": "3",
           "KZ_KAFKA__BATCH_MAX_RECORDS": "10"}
    settings = Settings(kafka={"bootstrap_servers": bootstrap, "topic_prefix": prefix,
                               "partitions": 3})
    create_topics(settings.kafka, bootstrap)
    publish_events(settings, "challenges", challenge_events(n))
    procs = [subprocess.Popen([sys.executable, "-m", "tests.kz_common.crash_worker", str(delay)],
                              cwd=ROOT, env=env, start_new_session=True) for _ in range(workers)]
    try:
        stamps = _outputs(settings, bootstrap, n, timeout_s=60 + 3 * n * delay)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(20)
    span = (max(stamps) - min(stamps)) / 1e3 if len(stamps) > 1 else float("nan")
    return {"workers": workers, "events": len(stamps), "span_s": span,
            "events_per_s": (len(stamps) - 1) / span if span > 0 else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--delay", type=float, default=0.02, help="seconds of work per event")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    kafka = Settings().kafka.model_copy(update={"embedded_port": 19000 + os.getpid() % 1000})
    with EmbeddedBroker(kafka) as broker:
        rows = [_run(broker.bootstrap, w, args.events, args.delay) for w in (1, 2, 3)]
    base = rows[0]["events_per_s"] or float("nan")
    for r in rows:
        r["speedup"] = (r["events_per_s"] or float("nan")) / base
    result = {"host": platform.node(), "cpus": os.cpu_count(), "delay_s": args.delay,
              "ideal_events_per_s_per_worker": 1 / args.delay, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaleout.json").write_text(json.dumps(result, indent=1))
    print("workers | events | span s | events/s | speed-up vs 1")
    for r in rows:
        print(f"{r['workers']} | {r['events']} | {r['span_s']:.2f} | {r['events_per_s']:.1f} | "
              f"{r['speedup']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
