"""A passing candidate's speed, judged by the trusted parent: its median against the
baselines' (speedups), against the device's measured peak (roofline fraction), and against
the speed-of-light bound, below which a time is impossible (timer evasion)."""

from __future__ import annotations

from typing import Any

from services.verifier import candidate, perf, reference
from services.verifier.options import VerifyOptions
from services.verifier.report import Timings, VerifyReport


def judge(rep: VerifyReport, out: candidate.Outcome, bundle: reference.ReferenceBundle,
          options: VerifyOptions) -> None:
    """Fill `rep`'s timings and speedups from the candidate's and the baselines' timing;
    an impossible time (or no peak to judge one by) fails `out`."""
    t = bundle.meta.get("timing") or {}
    cand = out.timing or {}
    naive, opt = t.get("naive") or {}, t.get("optimized") or {}
    rep.perf_measured = bool(cand.get("median_ms"))
    rep.timings = Timings(cand.get("median_ms"), naive.get("median_ms"),
                          (opt or naive).get("median_ms"), cand.get("spread"),
                          cand.get("holdout_ratio"))
    if not rep.perf_measured:
        return
    c = rep.timings.candidate_ms
    assert c is not None
    rep.speedup_vs_naive = naive["median_ms"] / c if naive.get("median_ms") else None
    base_opt = opt or naive  # without ModelOpt, Model is both baselines
    rep.speedup_vs_optimized = base_opt["median_ms"] / c if base_opt.get("median_ms") else None
    rep.details["candidate_timing"] = cand
    _roofline(rep, out, bundle, options, c, t)


def _roofline(rep: VerifyReport, out: candidate.Outcome, bundle: reference.ReferenceBundle,
              options: VerifyOptions, c_ms: float, t: dict[str, Any]) -> None:
    peak = bundle.meta.get("peak") or perf.load_peak(options.cache,
                                                     bundle.meta.get("device_name"))
    if not peak:  # without it no time can be judged impossible: never pass unchecked
        out.fail("internal", "no peak-bandwidth measurement: cannot apply the "
                             "speed-of-light check (verifier infrastructure)")
        return
    shape = bundle.meta["shapes"][t["shape_index"]]
    dtype = shape["outputs"][0]["dtype"] if shape.get("outputs") else "float32"
    flops, moved = perf.op_costs(bundle.op, shape.get("dims", {}), dtype)
    b = perf.bounds(shape, peak, flops, moved, dtype)
    rep.roofline_fraction = perf.roofline_fraction(c_ms * 1e-3, b)
    rep.details["speed_of_light_ms"] = b["sol_s"] * 1e3 if b["sol_s"] else None
    if b["sol_s"] and c_ms * 1e-3 < options.sol_margin * b["sol_s"]:
        out.fail("timing", f"impossible time {c_ms:.4g} ms: below {options.sol_margin} x "
                           f"the speed-of-light bound {b['sol_s'] * 1e3:.4g} ms "
                           "(timer evasion)")
