"""The verifier benchmark's summaries: what one pass's per-candidate rows add up to, and the
table line each pass prints. Pure functions over the rows `benchmarks/verifier.py` records
(and saves in its JSON), so they are tested on CPU against a saved GPU run."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from benchmarks.occupancy import occupancy, slot_clock, stopped
from schemas.events import UNJUDGED_STAGES


def summarize(rows: list[dict[str, Any]], problems: list[str], wall: float,
              workers: int) -> dict[str, Any]:
    """One pass's rows (in batch order; `problems[i]` is row i's problem source) summed up."""
    honest = [x for x in rows if not x["label"].startswith("cheat_")]
    cheats = [x for x in rows if x["label"].startswith("cheat_")]
    walls = [x["wall_s"] for x in rows if x["wall_s"]]
    spreads = [x["spread"] for x in honest if x["spread"] is not None]
    return {**_mid_rate([x["batch_s"][1] for x in rows if x.get("batch_s")]),
            # within-run spread (p90-p10)/median of the honest candidates' timed runs
            "median_in_batch_spread": statistics.median(spreads) if spreads else None,
            # honest candidates' timer diagnostics (share of runs whose host outlasted the
            # flush shadow; flush device time) and the host CPU busy during timed phases
            "median_timing_diag": _medians([x["timing_diag"] for x in honest]),
            # why the timer retried attempts (host outlasted the shadow / runs spread out)
            "retry_reasons": dict(Counter(w for x in honest
                                          for w in x["timing_diag"].get("retried", []))),
            "median_candidate_wall_s": statistics.median(walls) if walls else None,
            # parent-side: start, lock waits, locked phases
            "median_phase_s": _medians([x["phase_s"] for x in rows]),
            # parent-side steps: slot wait, cache copy-in, sandbox, judge (load, compare), bundle
            "median_steps_s": _medians([x["steps_s"] for x in rows]),
            "sum_steps_s": _sums([x["steps_s"] for x in rows]),
            # the harness's own clock inside the sandbox (import, compile, calls, saving)
            "median_harness_steps_s": _medians([x["harness_steps_s"] for x in rows]),
            # CPU seconds of each candidate's sandbox (start-up before its job, total)
            "median_harness_cpu_s": _medians([x["harness_cpu_s"] for x in rows]),
            "sum_harness_cpu_s": _sums([x["harness_cpu_s"] for x in rows]),
            # the reference worker's own clock (startup is hidden when it was pre-started)
            "median_reference_steps_s": _medians([x["reference_steps_s"] for x in rows]),
            "warm_starts": sum(bool(x["warm_start"]) for x in rows),
            # sandboxes busy mid-batch (of `workers`), and the rate had all been busy all along
            "occupancy": occupancy(rows, workers),
            # per phase: mean s of a sandbox run, and of it inside others' timed runs (stopped)
            "stopped": stopped(rows),
            # the pre-started sandboxes: age at their job, start-up, warm and cold apart
            "slot_clock": slot_clock(rows),
            "exclusive_s": _exclusive(rows, problems, wall),
            "gpu_memory": _gpu_memory(rows),
            # honest candidates' fastest holdout run / reported time; times raised to it
            "holdout": _holdout_summary(honest),
            "honest_passed": sum(x["passed"] for x in honest), "honest_total": len(honest),
            "cheats_rejected": sum(not x["passed"] for x in cheats), "cheats_total": len(cheats),
            "no_verdict": [x["label"] for x in unjudged(rows)]}


def unjudged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with no verdict on the kernel (stage internal/problem: e.g. the device short of
    memory in every run), neither passed nor rejected."""
    return [x for x in rows if x["stage"] in UNJUDGED_STAGES]


def honest_cell(v: dict[str, Any]) -> str:
    """A pass's honest kernels passed, of all, and how many got no verdict."""
    n = len(v.get("no_verdict") or [])
    return f"{v['honest_passed']}/{v['honest_total']}" + (f" ({n} no verdict)" if n else "")


def _gpu_memory(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak device memory (MiB) per candidate sandbox and per reference worker (each
    bundle once): median, max and whose; candidates run again after an out-of-memory
    failure (core.Session._run)."""
    out: dict[str, Any] = {"oom_reruns": sum(len(x.get("oom_reruns") or []) for x in rows),
                           "oom_rerun_labels": [x["label"] for x in rows if x.get("oom_reruns")],
                           # correctness calls whose allocator poisoning reserved new memory
                           "poison_reserved": sum(x.get("poison_reserved") or 0 for x in rows)}
    for key in ("gpu_peak_mb", "reference_gpu_peak_mb"):
        got = {x["label"]: x[key] for x in rows if isinstance(x.get(key), int)}
        if got:
            top = max(got, key=got.__getitem__)
            out[key] = {"median": statistics.median(got.values()), "max": got[top], "at": top}
    return out


TIMING_DIAG = ("flush_ms", "host_ms", "host_late", "attempts", "retried", "stream_median_ms",
               "gap_ms", "attempt_medians_ms", "shadow_ratio", "side_stream", "retries_cut",
               "holdout_ratio", "holdout_raised", "holdout_margin_ms", "side_stream_rechecked")


def _exclusive(rows: list[dict[str, Any]], problems: list[str], wall: float) -> dict[str, Any]:
    """Seconds the exclusive GPU lock was held, every other sandbox on the host paused:
    by the candidates' timed runs and by the bundles' baseline timings (each bundle once,
    the longest named), and their share of the batch's wall time. `pause` / `resume`:
    stopping and resuming the other sandboxes around each of them, also under the lock
    (the lock's own `exclusive_s` less all four is what no lap accounts for); `unsettled`:
    how many of them started with a stopped process still not stopped after the wait
    (`unsettled_d`: how many such processes were in uninterruptible sleep, all phases);
    `settled_threads`: processes counted as settled only by their threads' states (in a
    job-control stop, or exiting), all phases."""
    phases = [x.get("phase_s") or {} for x in rows]
    bundles: dict[str, dict[str, float]] = {}
    for problem, x in zip(problems, rows):
        ph = x.get("reference_phase_s")
        if isinstance(ph, dict) and "exclusive" in ph:
            bundles[problem] = {**ph, "label": x["label"]}
    every = phases + list(bundles.values())
    cand = sum(p.get("exclusive", 0.0) for p in phases)
    held = sum(b["exclusive"] for b in bundles.values())
    longest = max(((b["exclusive"], b["label"]) for b in bundles.values()), default=(0.0, ""))
    out = {"candidates": round(cand, 2), "bundles": round(held, 2), "bundles_n": len(bundles),
           "pause": round(sum(p.get("exclusive_pause", 0.0) for p in every), 2),
           "resume": round(sum(p.get("exclusive_resume", 0.0) for p in every), 2),
           "longest_bundle": [round(longest[0], 2), longest[1]],
           "share_of_wall": round((cand + held) / wall, 3) if wall > 0 else None}
    if any("exclusive_unsettled" in p for p in every):  # runs since the thirty-fourth session
        out["unsettled"] = sum(p.get("exclusive_unsettled", 0) > 0 for p in every)
        out["unsettled_d"] = sum(p.get("exclusive_unsettled_d", 0) for p in every)
    if any("exclusive_settled_threads" in p for p in every):  # since the thirty-seventh
        out["settled_threads"] = sum(p.get("exclusive_settled_threads", 0) for p in every)
    return out


def _mid_rate(ends: list[float]) -> dict[str, Any]:
    """The rate between the 10th and 90th percentile completions: without the first wave
    (which waits for the first bundles and the fork server's start) and the tail."""
    ends = sorted(ends)
    if len(ends) < 10:
        return {"mid_per_minute": None, "first_done_s": ends[0] if ends else None}
    lo, hi = len(ends) // 10, len(ends) - 1 - len(ends) // 10
    span = ends[hi] - ends[lo]
    return {"mid_per_minute": 60 * (hi - lo) / span if span > 0 else None,
            "first_done_s": ends[0]}


def timing_diag(st: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in st.items() if k in TIMING_DIAG and v is not None}
    if "loop" in st:  # 1: the back-to-back median was reported (0: synced or strict)
        out["back_to_back"] = int(st["loop"] == "back_to_back")
    if st.get("b2b_median_ms") and st.get("stream_median_ms"):
        out["b2b_over_synced"] = st["b2b_median_ms"] / st["stream_median_ms"]
    return out


def _holdout_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = sorted(x["timing_diag"]["holdout_ratio"] for x in rows
                    if "holdout_ratio" in x["timing_diag"])
    if not ratios:
        return {}
    return {"n": len(ratios), "median_ratio": statistics.median(ratios),
            "max_ratio": ratios[-1], "raised": sum(bool(x["timing_diag"].get("holdout_raised"))
                                                   for x in rows)}


def _medians(dicts: list[Any]) -> dict[str, float]:
    ds = [{k: v for k, v in d.items() if isinstance(v, (int, float))}
          for d in dicts if isinstance(d, dict)]
    return {k: statistics.median(d[k] for d in ds if k in d)
            for k in sorted({k for d in ds for k in d})}


def _sums(dicts: list[Any]) -> dict[str, float]:
    ds = [d for d in dicts if isinstance(d, dict)]
    return {k: round(sum(d.get(k, 0.0) for d in ds), 2) for k in sorted({k for d in ds for k in d})}


def pass_row(name: str, v: dict[str, Any]) -> dict[str, Any]:
    return {"pass": name, "candidates": v["n"], "wall_s": v["wall_s"], "per_min": v["per_minute"],
            "mid_per_min": v.get("mid_per_minute"), "first_done_s": v.get("first_done_s"),
            "earlier_batches": v.get("earlier_batches_per_minute"),
            "median_cand_s": v.get("median_candidate_wall_s"), "warm_starts": v.get("warm_starts"),
            "phases": " ".join(f"{k}={t:.2f}" for k, t in (v.get("median_phase_s") or {}).items()),
            "steps": " ".join(f"{k}={t:.2f}" for k, t in (v.get("median_steps_s") or {}).items()),
            "harness": " ".join(f"{k}={t:.2f}"
                                for k, t in (v.get("median_harness_steps_s") or {}).items()),
            "reference": " ".join(f"{k}={t:.2f}"
                                  for k, t in (v.get("median_reference_steps_s") or {}).items()),
            "exclusive": " ".join(f"{k}={t}" for k, t in (v.get("exclusive_s") or {}).items()),
            "occupancy": " ".join(f"{k}={t}" for k, t in (v.get("occupancy") or {}).items()),
            "stopped": " ".join(f"{k}={t['stopped_s']}/{t['mean_s']}"
                                for k, t in (v.get("stopped") or {}).items()),
            "slot_clock": " ".join(f"{k}={t}" for k, t in (v.get("slot_clock") or {}).items()),
            "gpu_memory": " ".join(f"{k}={t}" for k, t in (v.get("gpu_memory") or {}).items()
                                   if k != "oom_rerun_labels"),
            "lock": " ".join(f"{k}={t}" for k, t in
                             {"epoch_s": v.get("shared_epoch_s"), **(v.get("lock") or {})}.items()),
            # per kind: n/p50/p90/p99/max/seconds in steps over 0.25 s, of steps and drains
            "lock_steps": " ".join(f"{k}=" + "/".join(str(q.get(x)) for x in (
                "n", "p50", "p90", "p99", "max", "over_250ms_s"))
                for k, q in (v.get("lock_steps") or {}).items()),
            "holdout": " ".join(f"{k}={t:.3g}" for k, t in (v.get("holdout") or {}).items()),
            "cpu_busy": (v.get("host") or {}).get("cpu_busy_mean"),
            "gpu_util": (v.get("host") or {}).get("gpu_util_mean"),
            "gpu_mem_mib": " ".join(f"{k}={(v.get('host') or {}).get(k)}" for k in (
                "gpu_mem_used_max_mib", "gpu_mem_total_mib", "gpu_mem_parent_max_mib",
                "gpu_mem_other_max_mib", "gpu_mem_at_peak")),
            "parent": " ".join(f"{k}={(v.get('host') or {}).get(k)}" for k in (
                "parent_cores_mean", "parent_cores_p90", "gil_late_ms_mean", "gil_late_ms_p90")),
            "cpu_s_per_cand": v.get("cpu_s_per_candidate"),
            "sandbox_cpu": " ".join(f"{k}={t:.2f}"
                                    for k, t in (v.get("median_harness_cpu_s") or {}).items()),
            "spread_med": v.get("median_in_batch_spread"),
            "timing_diag": " ".join(f"{k}={t:.3g}"
                                    for k, t in (v.get("median_timing_diag") or {}).items()),
            "honest_passed": honest_cell(v),
            "cheats_rejected": f"{v['cheats_rejected']}/{v['cheats_total']}"}


PASS_COLS = ["pass", "candidates", "wall_s", "per_min", "mid_per_min", "earlier_batches",
             "first_done_s",
             "median_cand_s", "warm_starts", "occupancy", "stopped", "slot_clock", "gpu_memory",
             "exclusive",
             "lock", "lock_steps",
             "holdout", "cpu_busy", "gpu_util", "gpu_mem_mib", "parent", "cpu_s_per_cand",
             "sandbox_cpu", "spread_med",
             "timing_diag", "honest_passed", "cheats_rejected", "phases", "steps", "harness",
             "reference"]


def table(title: str, rows: list[dict[str, Any]], cols: list[str]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = [title, " | ".join(cols), " | ".join("---" for _ in cols)]
    lines += [" | ".join(fmt(r.get(c)) for c in cols) for r in rows]
    return "\n".join(lines)
