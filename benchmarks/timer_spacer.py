"""Does the pre-start spin hide the host's launch time? (GPU; services/verifier/timing.py)

    python benchmarks/timer_spacer.py --out DIR

Times small and large Triton kernels with the verifier's Timer at several spin lengths
(spacer_us=0 is the old behaviour) and with triton.testing.do_bench, each on an idle
host and with busy CPU spinners (as in a verification batch, where other sandboxes
import torch and compile). Writes DIR/timer_spacer.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _spin() -> None:
    while True:
        pass


def _cases() -> list[tuple[str, Any]]:
    from kz_common.kernels import import_source, reference_solution

    add = import_source("add_ref", reference_solution("add")).ModelNew()
    small = [torch.randn(4731, 1037, device="cuda") for _ in range(2)]  # 59 MB moved: ~14 us
    big = [torch.randn(1 << 24, device="cuda") for _ in range(2)]  # 201 MB: ~47 us
    return [("add_4731x1037_fp32", lambda: add(*small)), ("add_16M_fp32", lambda: add(*big))]


SPACERS_US = (0.0, 50.0, 200.0, 500.0)


def _measure(fn: Any) -> dict[str, float]:
    import triton.testing

    from services.verifier.timing import Timer

    row: dict[str, float] = {}
    for us in SPACERS_US:
        runs = [Timer(spacer_us=us).time([fn], 5, 100) for _ in range(3)]
        row[f"spacer{us:g}_ms"] = statistics.median(r["median_ms"] for r in runs)
        row[f"spacer{us:g}_spread"] = statistics.median(r["spread"] for r in runs)
    row["do_bench_ms"] = float(triton.testing.do_bench(fn, warmup=25, rep=200,
                                                       return_mode="median"))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--spinners", type=int, default=max(1, (os.cpu_count() or 4) - 1))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 0
    rows = []
    for load in ("idle", "busy"):
        procs = [mp.Process(target=_spin, daemon=True) for _ in range(args.spinners if load == "busy" else 0)]
        for p in procs:
            p.start()
        try:
            for name, fn in _cases():
                rows.append({"kernel": name, "host": load, **_measure(fn)})
                print(rows[-1], flush=True)
        finally:
            for p in procs:
                p.kill()
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    (args.out / "timer_spacer.json").write_text(json.dumps(result, indent=1))
    cols = [f"spacer{us:g}" for us in SPACERS_US]
    print("kernel | host | " + " | ".join(f"{c} ms (spread)" for c in cols) + " | do_bench ms")
    for r in rows:
        cells = " | ".join(f"{r[c + '_ms']:.4f} ({r[c + '_spread']:.2f})" for c in cols)
        print(f"{r['kernel']} | {r['host']} | {cells} | {r['do_bench_ms']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
