"""Why our timer reads some short kernels lower than triton.testing.do_bench (GPU only).

    python benchmarks/timer_probe.py [--out DIR] [--rounds 5]

Our Timer synchronises the whole device after every run (so side-stream work is counted);
do_bench queues all its runs back to back and synchronises once. Between two of our runs
the device idles for the host's wake-up (~20-30 us); under do_bench it never idles. This
probe times the same kernels with loops that differ in one thing at a time, interleaved
`--rounds` times, all with do_bench's own flush (one `zero_` of 256 MB):

    do_bench     triton.testing.do_bench(rep=300 ms), median
    b2b_100      do_bench's loop, our code: flush, start, fn, end; no sync; 100 runs
    b2b_1000     the same, 1000 runs (do_bench runs ~300 ms: sustained load)
    sync_100     the same, plus a whole-device sync after each run (our loop's shape)
    sync_1000    the same, 1000 runs
    timer        services.verifier.timing.Timer (adaptive shadow, paired calibration)

If b2b_* matches do_bench and sync_* matches the timer, the gap is the idle between runs,
not the flush or the events. Writes DIR/timer_probe.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LOOPS = ("b2b_100", "b2b_1000", "sync_100", "sync_1000")


def loop_median(fn: Callable[[], Any], runs: int, sync_each: bool,
                flush: Callable[[], Any], warmup: int = 10) -> float:
    """Median device time of `runs` runs of `fn`, each after `flush()` (do_bench's: a zero_
    of 256 MB), back to back or synced after each; flush_probe.py varies the flush."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for _ in range(warmup):  # as do_bench's (time-based there)
        flush()
        fn()
    torch.cuda.synchronize()
    for s, e in zip(starts, ends):
        flush()
        s.record()
        fn()
        e.record()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def probe(name: str, fn: Callable[[], Any], rounds: int) -> dict[str, Any]:
    import triton.testing

    from services.verifier.timing import Timer

    flush = torch.empty(256 << 18, dtype=torch.int32, device="cuda")  # do_bench's 256 MB
    got: dict[str, list[float]] = {k: [] for k in ("do_bench", *LOOPS, "timer")}
    for _ in range(rounds):
        got["do_bench"].append(float(triton.testing.do_bench(fn, warmup=25, rep=300,
                                                             return_mode="median")))
        for key in LOOPS:
            kind, runs = key.split("_")
            got[key].append(loop_median(fn, int(runs), kind == "sync", flush.zero_))
        got["timer"].append(Timer().time([fn], warmup=5, runs=100)["median_ms"])
    ref = statistics.median(got["do_bench"])
    return {"kernel": name, "do_bench_ms": ref,
            **{f"{k}_ms": statistics.median(v) for k, v in got.items() if k != "do_bench"},
            **{f"{k}/do_bench": statistics.median(v) / ref for k, v in got.items()
               if k != "do_bench"},
            "rounds": got}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    from benchmarks.verifier import SOFTMAX_SOLUTION, timer_cases
    from kz_common.kernels import import_source

    def fp32_rows() -> list[torch.Tensor]:
        return [torch.randn(8192, 2048, device="cuda")]

    cases = timer_cases()  # the benchmark's three, plus the GPU test's fp32 softmax
    cases.insert(2, ("softmax_8192x2048_fp32", SOFTMAX_SOLUTION.format(min_block=16, warps=8),
                     fp32_rows))
    rows = []
    for name, src, make in cases:
        model = import_source(name, src).ModelNew()
        x = make()
        rows.append(probe(name, functools.partial(model, *x), args.rounds))
    cols = ["do_bench", *LOOPS, "timer"]
    print("kernel | do_bench ms | " + " | ".join(f"{c}/do_bench" for c in cols[1:]))
    print(" | ".join("---" for _ in range(len(cols) + 1)))
    for r in rows:
        print(f"{r['kernel']} | {r['do_bench_ms']:.5f} | "
              + " | ".join(f"{r[c + '/do_bench']:.4f}" for c in cols[1:]))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "timer_probe.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
             "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
