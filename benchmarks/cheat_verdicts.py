"""Verify chosen cheats and an honest twin on CUDA, with whatever code is checked out.

    python benchmarks/cheat_verdicts.py CHEAT [CHEAT ...] [--honest softmax_ok] [--out DIR]

Shows whether a cheat fools a given verifier version: run it in an old checkout (with the
cheat file copied into its tests/services/verifier/cheats/) and in the new one, side by
side in one device call. Prints verdict, stage, reported time and the first reason of each;
writes DIR/cheat_verdicts.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path.cwd()  # the checkout under test, not necessarily this file's
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("cheats", nargs="+")
    ap.add_argument("--honest", default="softmax_ok", help="solution file stem to compare")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    from services.verifier.core import Session
    from tests.services.verifier.conftest import ALL_CHEATS, GPU_OPTIONS, SOLUTIONS, problem_src

    by_name = {c.name: c for c in ALL_CHEATS}
    session = Session(GPU_OPTIONS)
    rows = []
    try:
        for name in args.cheats:
            c = by_name[name]
            problem = problem_src(c.problem_for("cuda"))
            for label, src in ((name, c.source),
                               (f"{args.honest} ({c.problem_for('cuda')})",
                                (SOLUTIONS / f"{args.honest}.py").read_text())):
                r = session.verify(problem, src)
                t = r.timings
                rows.append({"label": label, "passed": r.passed, "stage": r.stage,
                             "candidate_ms": t.candidate_ms if t else None,
                             "reason": r.reasons[0][:160] if r.reasons else ""})
    finally:
        session.close()
    for row in rows:
        print(" | ".join(str(v) for v in row.values()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cheat_verdicts.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
