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
    gpu = [_gpu_span(r) for r in _laps_of_one_run(rows)]
    on_gpu = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in gpu if b > a)
    return {"sandboxed": len(runs), "sandboxed_share": round(share, 3),
            "mean_sandbox_s": round(mean_s, 3),
            "busy_mid": round(overlap / (hi - lo), 2) if hi > lo else None,
            # of them, past their first GPU request (what VerifyOptions.gpu_places caps)
            "gpu_busy_mid": round(on_gpu / (hi - lo), 2) if hi > lo and gpu else None,
            "workers": workers,
            "ideal_per_minute": round(60 * workers / mean_s / share, 1) if mean_s > 0 else None}


# The parent's laps of a sandbox run, in order (sandbox_supervise.phases)
LAPS = ("start", "gpu_place_wait", "shared_wait", "shared", "idle", "exclusive_wait",
        "exclusive_pause", "exclusive", "exclusive_resume")


def stopped(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Seconds each sandboxed candidate spent, per phase, inside another candidate's timed
    runs (mean over the candidates; every other sandbox is stopped then), beside the phase's
    mean length. A lower bound: the bundles' timed baselines stop them too, and their clock
    is not in a verdict. Read from `sandbox_batch_s` and the laps in `phase_s` (candidates
    run once only); `after`: from the last lap to the sandbox's end (writing outputs)."""
    spans = [_spans(r) for r in _laps_of_one_run(rows)]
    if not spans:
        return {}
    timed = [s["exclusive"] for s in spans if "exclusive" in s]
    out: dict[str, Any] = {}
    for name in ("start", "gpu_place_wait", "shared_wait", "shared", "idle", "after"):
        own = [(s[name], [t for t in timed if t is not s.get("exclusive")])
               for s in spans if name in s]
        if own:
            out[name] = {"mean_s": round(statistics.fmean(b - a for (a, b), _ in own), 3),
                         "stopped_s": round(statistics.fmean(
                             sum(max(0.0, min(b, y) - max(a, x)) for x, y in others)
                             for (a, b), others in own), 3)}
    return out


def _laps_of_one_run(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose laps place them in the batch's clock: one sandbox run (a rerun's laps
    are its last run's only) with its laps."""
    return [r for r in rows if len(r.get("sandbox_batch_s") or ()) == 2 and r.get("phase_s")]


def _gpu_span(row: dict[str, Any]) -> tuple[float, float]:
    """When the run held a GPU place: from its first request granted to its last lap."""
    spans = _spans(row)
    begin = spans.get("gpu_place_wait", spans.get("start", spans["after"]))[1]
    return begin, spans["after"][0]


def _spans(row: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each lap's [start, end] in the batch's clock, and `after` (the rest of the run)."""
    t, end = row["sandbox_batch_s"]
    spans = {}
    for name in LAPS:
        if name in row["phase_s"]:
            spans[name] = (t, t + row["phase_s"][name])
            t += row["phase_s"][name]
    spans["after"] = (t, max(t, end))
    return spans


def slot_clock(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Were the pre-started sandboxes ready in time? Medians of each slot's age when its job
    came (`slot_age`) and of its start-up, from its start to WARM (`slot_startup`, stops
    during others' timed runs included), for warm and cold starts apart. A cold start came
    to a slot younger than its start-up."""
    out: dict[str, Any] = {}
    for kind, warm in (("warm", True), ("cold", False)):
        laps = [r["phase_s"] for r in rows if r.get("phase_s") and r.get("warm_start") is warm]
        for key in ("slot_age", "slot_startup"):
            xs = [p[key] for p in laps if isinstance(p.get(key), (int, float))]
            if xs:
                out[f"{kind}_{key}_s"] = round(statistics.median(xs), 3)
        out[f"{kind}_n"] = len(laps)
    return out
