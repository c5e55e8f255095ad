"""How busy a batch kept its sandboxes: the verifier benchmark's reading of what bounds its rate.

A batch's rate is at most `workers` sandboxes, each busy for its candidate's sandbox run,
over the share of candidates that need one (static rejects never take a sandbox). The
benchmark reads how close it came from each verdict's `sandbox_batch_s` ([start, end] of its
sandbox run, seconds into the batch; a run made again after an out-of-memory failure adds a
second pair) between the 10th and 90th percentile completions, where
the first wave's bundle waits and the tail do not count (as `mid_per_minute`)."""

from __future__ import annotations

import statistics
from typing import Any, Sequence


def occupancy(rows: Sequence[dict[str, Any]], workers: int) -> dict[str, Any]:
    """`busy_mid`: sandboxes running on average over the middle of the batch (at most
    `workers`); `ideal_per_minute`: the batch's rate had all `workers` been busy all along."""
    held = [r["sandbox_batch_s"] for r in rows if r.get("sandbox_batch_s")]
    runs = [[(a, b) for a, b in zip(h[::2], h[1::2])] for h in held]  # per candidate
    ends = sorted(r["batch_s"][1] for r in rows if r.get("batch_s"))
    if not runs or len(ends) < 10:
        return {"sandboxed": len(runs)}
    lo, hi = ends[len(ends) // 10], ends[len(ends) - 1 - len(ends) // 10]
    overlap = sum(max(0.0, min(b, hi) - max(a, lo)) for pairs in runs for a, b in pairs)
    mean_s = statistics.fmean(sum(b - a for a, b in pairs) for pairs in runs)
    share = len(runs) / len(rows)
    return {"sandboxed": len(runs), "sandboxed_share": round(share, 3),
            "mean_sandbox_s": round(mean_s, 3),
            "busy_mid": round(overlap / (hi - lo), 2) if hi > lo else None,
            "workers": workers,
            "ideal_per_minute": round(60 * workers / mean_s / share, 1) if mean_s > 0 else None}
