"""Why a 23 us kernel's median moves by 2-3.5% between timings (GPU only).

    python benchmarks/flush_probe.py [--out DIR] [--rounds 8]

The run-to-run spread of our Timer on softmax 8192x2048 fp16 was 0.4% in one call and
2.2-3.5% in others; the five medians of one call fall in two groups ~3% apart, and the
group depends on the shadow (one flush pass vs a pass plus a slice), not on the order.
Hypothesis: the flush leaves ~50 MB of DIRTY lines in L2 (it writes zeros), and the
kernel that follows pays for writing them back; how much it pays depends on which lines
are dirty. This probe times the same kernels back to back (do_bench's loop) with one
pre-run flush at a time, interleaved over `--rounds`:

    zero         one zero_ pass over 256 MB (do_bench's flush; L2 left dirty)
    zero_slice   a pass plus the first 30% again (the timer's fixed tail, timing.TAIL)
    zero_slice2  two passes, then the same 30%
    var_tail     a pass, a slice of 5-95% (drawn each round), then the same 30% (the timer's)
    zero_fresh   one pass over a newly allocated 256 MB buffer each round (placement)
    read         a sum over 256 MB (L2 left full of CLEAN lines: nothing to write back)
    zero_read    a zero pass, then the read (dirty lines written back before the run)
    do_bench     triton.testing.do_bench, median
    timer        services.verifier.timing.Timer, median

and reports each mode's median and its spread over the rounds ((max-min)/median), with
the SM clock read by nvidia-smi after each round. Writes DIR/flush_probe.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FLUSH_WORDS = 256 << 18  # 256 MB of int32, do_bench's buffer
RUNS = 400  # back-to-back runs per median (do_bench's rep=300 ms is ~1000 such runs)
MODES = ("zero", "zero_slice", "zero_slice2", "var_tail", "zero_fresh", "read", "zero_read")


def flushes(buf: torch.Tensor, extra: torch.Tensor) -> dict[str, Callable[[], Any]]:
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    slice_ = buf[: int(0.3 * buf.numel()) // 1024 * 1024]

    def zero_slice() -> None:
        buf.zero_()
        slice_.zero_()

    def zero_slice2() -> None:
        buf.zero_()
        zero_slice()

    # the timer's shadow (timing.TAIL): a pass, a slice whose length follows the host (a new
    # one each round here), then the fixed slice
    part = buf[: int(random.uniform(0.05, 0.95) * buf.numel()) // 1024 * 1024]

    def var_tail() -> None:
        buf.zero_()
        part.zero_()
        slice_.zero_()

    def read() -> None:
        torch.sum(extra, 0, dtype=torch.int64, out=sink)

    def zero_read() -> None:
        buf.zero_()
        read()

    return {"zero": buf.zero_, "zero_slice": zero_slice, "zero_slice2": zero_slice2,
            "var_tail": var_tail, "read": read, "zero_read": zero_read}


def sm_clock() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,"
                               "power.draw", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def probe(name: str, fn: Callable[[], Any], rounds: int) -> dict[str, Any]:
    import triton.testing

    from benchmarks.timer_probe import loop_median
    from services.verifier.timing import Timer

    buf = torch.empty(FLUSH_WORDS, dtype=torch.int32, device="cuda")
    extra = torch.ones(FLUSH_WORDS, dtype=torch.int32, device="cuda")
    got: dict[str, list[float]] = {k: [] for k in (*MODES, "do_bench", "timer")}
    clocks, kept = [], []
    for _ in range(rounds):
        modes = flushes(buf, extra)  # var_tail's slice is drawn again
        for key in MODES:
            if key == "zero_fresh":
                kept.append(torch.empty(FLUSH_WORDS, dtype=torch.int32, device="cuda"))
                got[key].append(loop_median(fn, RUNS, False, kept[-1].zero_, warmup=20))
                if len(kept) > 3:
                    kept.pop(0)
            else:
                got[key].append(loop_median(fn, RUNS, False, modes[key], warmup=20))
        got["do_bench"].append(float(triton.testing.do_bench(fn, warmup=25, rep=100,
                                                             return_mode="median")))
        got["timer"].append(Timer().time([fn], warmup=5, runs=100)["median_ms"])
        clocks.append(sm_clock())
    row: dict[str, Any] = {"kernel": name, "rounds": got, "clocks": clocks}
    for k, v in got.items():
        med = statistics.median(v)
        row[f"{k}_ms"] = med
        row[f"{k}_spread"] = (max(v) - min(v)) / med
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    from benchmarks.verifier import timer_cases
    from kz_common.kernels import import_source

    rows = []
    for name, src, make in timer_cases():
        model = import_source(name, src).ModelNew()
        x = make()
        rows.append(probe(name, lambda m=model, x=x: m(*x), args.rounds))
    keys = (*MODES, "do_bench", "timer")
    print("kernel | " + " | ".join(f"{k} ms (spread)" for k in keys))
    print(" | ".join("---" for _ in range(len(keys) + 1)))
    for r in rows:
        print(f"{r['kernel']} | " + " | ".join(f"{r[k + '_ms'] * 1e3:.2f} us "
                                               f"({100 * r[k + '_spread']:.1f}%)" for k in keys))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "flush_probe.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
             "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
