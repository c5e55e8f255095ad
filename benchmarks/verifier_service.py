"""Verifier SERVICE throughput (GPU): the `verifier` service's real path next to verify_many.

    python benchmarks/verifier_service.py --out DIR [--workers 12] [--repeat N] [--limit N]

Same batch as benchmarks/verifier.py (its honest kernels and cheats), two passes side by
side, each with its own fresh compile cache:
  * batch:   verify_many, as benchmarks/verifier.py's cold pass;
  * service: the batch published as solution.extracted events on the embedded broker
             (Tansu), then one VerifierCore (`workers` at once) behind the real
             ServiceRunner (FastStream batch subscriber -> BatchProcessor.handle_many ->
             VerifierCore.process_many -> verify_batch), verdicts read back from
             solution.verified. Its rate counts from the runner's start (group join
             included) to the last verdict's production (the envelope's produced_at).
Skips (exit 0, JSON says why) where CUDA is unavailable. Writes DIR/verifier_service.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch

from benchmarks import verifier as bench
from benchmarks.verifier_summary import honest_cell, table, unjudged
from services.verifier.service import VerifierCore

PORT = 19392  # off the tests' and the pipeline benchmark's ports


def extraction_events(batch: list[tuple[str, str, str]]) -> list[Any]:
    """One solution.extracted event per candidate; one challenge per distinct problem."""
    from schemas import Producer, make_event
    from schemas.events import ChallengeContext, ChallengeCreated, SolutionExtracted, Target
    from services.verifier.reference import literal_meta

    origin = Producer(service="bench-extractor", version="1")
    events = []
    for i, (label, problem, solution) in enumerate(batch):
        cid = "c-" + hashlib.sha256(problem.encode()).hexdigest()[:12]
        meta = literal_meta(problem)
        dtype: Any = meta.get("dtype") if meta.get("dtype") in ("float32", "float16",
                                                                  "bfloat16") else "float32"
        challenge = ChallengeCreated(
            challenge_id=cid, op=str(meta.get("op") or "custom"),
            family=str(meta.get("family") or "custom"), dtype=dtype, shape_range={},
            target=Target(kind="naive_multiple", value=1.0), difficulty=0,
            generator="programmatic", round=0, problem_source=problem)
        payload = SolutionExtracted(
            challenge_id=cid, context=ChallengeContext.of(challenge), sample_index=i,
            accepted=True, code=solution, code_hash=hashlib.sha256(solution.encode()).hexdigest(),
            reason=None)
        events.append(make_event(payload, producer=origin, correlation_id=cid))
    return events


def run_service(batch: list[tuple[str, str, str]], workers: int, cache: str,
                options: Any = None) -> dict[str, Any]:
    """The service pass; `options` (default: the benchmark's, on `cache`) for a CPU smoke run."""
    from kafka import KafkaProducer

    from benchmarks.host_load import HostLoad
    from kz_common.admin import create_topics, scan
    from kz_common.broker import EmbeddedBroker
    from kz_common.config import KafkaConfig, Settings
    from kz_common.runner import ServiceRunner
    from kz_common.topics import physical
    from schemas import decode, encode

    settings = Settings(kafka=KafkaConfig(embedded_port=PORT, topic_prefix="vs."))
    core = CountedCore(options or bench.bench_options(cache, workers=workers))
    events = extraction_events(batch)
    with EmbeddedBroker(settings.kafka) as broker:
        boot = broker.bootstrap
        create_topics(settings.kafka, boot)
        producer = KafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5)
        for e in events:
            producer.send(physical(settings.kafka, "extracted"), key=e.correlation_id.encode(),
                          value=encode(e))
        producer.flush()
        producer.close()
        verified = physical(settings.kafka, "verified")
        t0 = time.time()
        with HostLoad() as load:
            _serve_until(ServiceRunner(core, settings, boot), lambda: _count(scan, boot, verified),
                         len(events))
        wall = time.time() - t0
        records: list[Any] = list(scan(boot, verified))
    core.close()
    verdicts = {e.payload.sample_index: e for e in map(decode, (r.value for r in records))}
    rows: list[dict[str, Any]] = []
    for i, (label, _, _) in enumerate(batch):
        v = verdicts.get(i)  # produced_at: when the runner wrapped the verdict
        rows.append({"label": label, "passed": v.payload.passed if v else None,
                     "stage": v.payload.stage if v else "missing",
                     "done_s": round(v.produced_at.timestamp() - t0, 3) if v else None})
    ends = [r["done_s"] for r in rows if r["done_s"] is not None]
    honest = [r for r in rows if not r["label"].startswith("cheat_")]
    cheats = [r for r in rows if r["label"].startswith("cheat_")]
    last = max(ends) if ends else float("nan")
    return {"n": len(rows), "verdicts": len(ends), "wall_s": round(wall, 2),
            "last_verdict_s": last, "per_minute": 60 * len(ends) / last if ends else None,
            "workers": workers, "batches": core.batches, "host": load.summary(),
            "honest_passed": sum(bool(r["passed"]) for r in honest), "honest_total": len(honest),
            "cheats_rejected": sum(r["passed"] is False for r in cheats),
            "cheats_total": len(cheats),
            "no_verdict": [r["label"] for r in unjudged(rows)],
            "rows": rows}


def _count(scan: Any, boot: str, topic: str) -> int:
    return sum(1 for _ in scan(boot, topic))  # high watermarks: ListOffsets is wrong on Tansu


class CountedCore(VerifierCore):
    """The real VerifierCore, recording the size and duration of each batch it is handed."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.batches: list[dict[str, float]] = []

    def process_many(self, events: list[Any]) -> list[Any]:
        t = time.monotonic()
        out = super().process_many(events)
        self.batches.append({"events": len(events), "seconds": round(time.monotonic() - t, 2)})
        return out


def _serve_until(runner: Any, count: Any, n: int, timeout_s: float = 900.0) -> None:
    """Run the service until `count()` reaches `n` verdicts (or the timeout)."""

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not task.done():
            if await asyncio.to_thread(count) >= n:
                break
            await asyncio.sleep(1.0)
        stop.set()
        await task

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=1, help="as benchmarks/verifier.py --repeat")
    ap.add_argument("--limit", type=int, default=0, help="at most this many candidates")
    ap.add_argument("--no-batch", action="store_true", help="the service pass only")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"torch": torch.__version__}
    path = args.out / "verifier_service.json"
    if not torch.cuda.is_available():
        result["skipped"] = "no CUDA device: nothing to benchmark"
        print(result["skipped"])
        path.write_text(json.dumps(result, indent=1))
        return 0
    result["gpu"] = torch.cuda.get_device_name()
    batch = bench.repeated((bench.honest_batch() + bench.cheat_batch())[:args.limit or None],
                           args.repeat)
    passes = [] if args.no_batch else ["batch"]
    for name in passes + ["service"]:
        cache = tempfile.mkdtemp(prefix=f"kzsvc-{name}-")
        result[name] = (bench.run_batch(batch, args.workers, cache) if name == "batch"
                        else run_service(batch, args.workers, cache))
        path.write_text(json.dumps(result, indent=1, default=str))
    print(table("\nverifier: verify_many next to the service", [
        {"pass": k, "n": result[k]["n"], "per_minute": result[k]["per_minute"],
         "mid_per_minute": result[k].get("mid_per_minute"),
         "honest": honest_cell(result[k]),
         "cheats": f"{result[k]['cheats_rejected']}/{result[k]['cheats_total']}",
         "cpu_busy": result[k]["host"].get("cpu_busy_mean"),
         "gpu_util": result[k]["host"].get("gpu_util_mean")}
        for k in passes + ["service"]],
        ["pass", "n", "per_minute", "mid_per_minute", "honest", "cheats", "cpu_busy",
         "gpu_util"]))
    print(f"service batches: {result['service']['batches']}\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
