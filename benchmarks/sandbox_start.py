"""Sandbox backends side by side: what a batch of honest candidates costs with each.

    python benchmarks/sandbox_start.py [--device cpu|cuda] [--repeat 2] [--out DIR]

Verifies the CPU suites' five honest kernels (tests/services/verifier/solutions) with
`verify_many` (2 workers) under each backend in turn, alternating, `--repeat` times:
the classic `unshare+uid` chain (a fresh interpreter per sandbox) and the fork server
`unshare+zygote+uid`. Reports the batch's wall time and, per sandbox, the CPU seconds the
harness spent before its job (its own clock: a forked sandbox starts at zero) and in all.
Needs root and unshare. Writes DIR/sandbox_start.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.verifier.core import verify_many
from services.verifier.options import VerifyOptions
from services.verifier.sandbox import ZYGOTE_MODE, available_modes
from tests.services.verifier.conftest import CORRECT, SOLUTIONS, problem_src

BACKENDS = ("unshare+uid", ZYGOTE_MODE)


def one_batch(options: VerifyOptions) -> dict[str, Any]:
    pairs = [(problem_src(p), (SOLUTIONS / f"{s}.py").read_text()) for p, s in CORRECT]
    t0 = time.monotonic()
    reports = verify_many(pairs, options, workers=2)
    cpu = [r.details.get("harness_cpu_s") or {} for r in reports]
    return {"wall_s": round(time.monotonic() - t0, 2),
            "passed": sum(r.passed for r in reports), "n": len(reports),
            "isolation": sorted({r.isolation for r in reports}),
            "rejected": [{"solution": s, "stage": r.stage, "reasons": r.reasons[:3]}
                         for (_, s), r in zip(CORRECT, reports) if not r.passed],
            "startup_cpu_s": [c.get("warm") for c in cpu],
            "sandbox_cpu_s": [c.get("total") for c in cpu]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    missing = [b for b in BACKENDS if b not in available_modes(args.device)]
    if missing:
        print(f"skipped: {missing} unavailable here (needs root and unshare)")
        return 0
    base = VerifyOptions(device=args.device, wall_timeout_s=120, cpu_seconds=60,
                         memory_limit_mb=8192, reference_timeout_s=120)
    runs = [(b, one_batch(replace(base, isolation=b)))
            for _ in range(args.repeat) for b in BACKENDS]
    rows = []
    for b in BACKENDS:
        mine = [r for name, r in runs if name == b]
        start = [c for r in mine for c in r["startup_cpu_s"] if c is not None]
        total = [c for r in mine for c in r["sandbox_cpu_s"] if c is not None]
        rows.append({"backend": b, "walls_s": [r["wall_s"] for r in mine],
                     "passed": f"{sum(r['passed'] for r in mine)}/{sum(r['n'] for r in mine)}",
                     "startup_cpu_s_median": statistics.median(start) if start else None,
                     "sandbox_cpu_s_median": statistics.median(total) if total else None})
    print("backend | batch walls s | passed | start-up CPU-s / sandbox (median) | "
          "sandbox CPU-s (median)\n--- | --- | --- | --- | ---")
    for r in rows:
        print(f"{r['backend']} | {r['walls_s']} | {r['passed']} | "
              f"{r['startup_cpu_s_median']} | {r['sandbox_cpu_s_median']}")
    for name, r in runs:
        for rej in r["rejected"]:
            print(f"rejected under {name}: {rej['solution']} at {rej['stage']}: "
                  f"{'; '.join(rej['reasons'])[:300]}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sandbox_start.json").write_text(json.dumps(
            {"device": args.device, "rows": rows, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
