"""Side by side: two or more `benchmarks/verifier.py` runs, one column each, and each
column's ratio to the first (the baseline). Reads the JSONs the benchmark writes; prints a
markdown table; writes it as JSON and CSV.

    python benchmarks/verifier_ab.py old=PATH/verifier_bench.json new=PATH/... \
        [--pass cold] [--out DIR]

Only runs from one machine compare code (machines of one kind differ by 20% or more):
put the runs of one device call side by side, and read two calls in opposite orders.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
from pathlib import Path
from typing import Any

# (row name, path into a pass's summary)
METRICS: list[tuple[str, tuple[str, ...]]] = [
    ("rate /min", ("per_minute",)),
    ("mid-pass rate /min", ("mid_per_minute",)),
    ("first verdict s", ("first_done_s",)),
    ("mean sandbox s", ("occupancy", "mean_sandbox_s")),
    ("warm starts", ("warm_starts",)),
    ("start s", ("median_phase_s", "start")),
    ("slot start-up s", ("median_phase_s", "slot_startup")),
    ("shared s", ("median_phase_s", "shared")),
    ("idle s", ("median_phase_s", "idle")),
    ("exclusive wait s", ("median_phase_s", "exclusive_wait")),
    ("exit s", ("median_phase_s", "exit")),
    ("harness compile s", ("median_harness_steps_s", "compile")),
    ("harness warm_triton s", ("median_harness_steps_s", "warm_triton")),
    ("harness C builds", ("median_harness_steps_s", "c_builds")),
    ("harness timing_inputs s", ("median_harness_steps_s", "timing_inputs")),
    ("pause laps s (sum)", ("exclusive_s", "pause")),
    ("phases unsettled", ("exclusive_s", "unsettled")),
    ("settled by threads", ("exclusive_s", "settled_threads")),
    ("lock drains s", ("lock", "drain_s")),
    ("lock closed s", ("lock", "closed_s")),
    ("CPU s per candidate", ("cpu_s_per_candidate",)),
    ("holdout ratio max", ("holdout", "max_ratio")),
    ("OOM reruns", ("gpu_memory", "oom_reruns")),
]


def _get(summary: dict[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = summary
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return cur


def compare(runs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per metric: each run's value and its ratio to the first run's."""
    rows = []
    for name, path in METRICS:
        values = [_get(s, path) for _, s in runs]
        row: dict[str, Any] = {"metric": name}
        base = values[0]
        for (label, _), v in zip(runs, values):
            row[label] = v
            if label != runs[0][0]:
                ok = isinstance(v, (int, float)) and isinstance(base, (int, float)) and base
                row[f"{label}/{runs[0][0]}"] = round(v / base, 3) if ok else None
        rows.append(row)
    honest: dict[str, Any] = {"metric": "honest passed"}
    cheats: dict[str, Any] = {"metric": "cheats rejected"}  # every verdict must be right
    for label, s in runs:
        honest[label] = f"{s.get('honest_passed')}/{s.get('honest_total')}"
        cheats[label] = f"{s.get('cheats_rejected')}/{s.get('cheats_total')}"
    rows += [honest, cheats]
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(out)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def read_saved(p: Path) -> dict[str, Any]:
    """A benchmark's JSON, plain or gzipped (results kept in the repository are:
    benchmarks/results/README.md)."""
    data: dict[str, Any] = json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz"
                                      else p.read_text())
    return data


def load(spec: str, pass_name: str) -> tuple[str, dict[str, Any]]:
    """`label=path` (or a bare path, labelled by its parent dir) -> (label, pass summary)."""
    label, _, path = spec.rpartition("=")
    p = Path(path)
    data = read_saved(p)
    if pass_name not in data:
        raise SystemExit(f"{p}: no pass named {pass_name!r} (has {sorted(data)})")
    return label or p.parent.name, data[pass_name]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="label=path of a verifier_bench.json; the first "
                                            "is the baseline")
    ap.add_argument("--pass", dest="pass_name", default="cold")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if len(args.runs) < 2:
        raise SystemExit("give at least two runs")
    runs = [load(s, args.pass_name) for s in args.runs]
    if len({label for label, _ in runs}) != len(runs):
        raise SystemExit("two runs have the same label: name them label=path")
    rows = compare(runs)
    print(render(rows))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "verifier_ab.json").write_text(json.dumps(rows, indent=1))
        cols = list(dict.fromkeys(k for r in rows for k in r))
        with open(args.out / "verifier_ab.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
