"""What one flywheel round did, computed from the events read back from the log.

Used by benchmarks/flywheel_gpu.py. `summarise` turns the envelopes of every topic
(as JSON dicts) into the report's JSON sections; `render` prints them as tables.
Every number is derived from events: counts from payloads, latencies and phase
times from the envelopes' `produced_at` (one host, one clock).
"""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table

Doc = dict[str, Any]
SOLVER = "solver"  # origin of a sample the solver LLM wrote (the others are injected)


def origin(solution: Doc) -> str:
    """'solver', 'reference' or 'cheat' for a solution.sampled payload."""
    backend = solution.get("backend", "")
    return backend.removesuffix("-injection") if backend.endswith("-injection") else SOLVER


def _t(doc: Doc) -> float:
    return datetime.fromisoformat(doc["produced_at"]).timestamp()


def _stats(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    return {"n": len(xs), "min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def summarise(docs: list[tuple[str, Doc]], round_ids: set[str], t0: float) -> dict[str, Any]:
    """The report of the round whose (train and injected) challenge ids are `round_ids`."""
    by: dict[str, list[Doc]] = {}
    for topic, doc in docs:
        by.setdefault(topic, []).append(doc)

    def mine(topic: str, type_: str) -> list[Doc]:
        return [d for d in by.get(topic, []) if d.get("type") == type_
                and d["payload"].get("challenge_id") in round_ids]

    key = lambda d: (d["payload"]["challenge_id"], d["payload"].get("sample_index"))
    sols = {key(d): d for d in mine("solutions", "solution.sampled")}
    ext = {key(d): d for d in mine("extracted", "solution.extracted")}
    ver = {key(d): d for d in mine("verified", "solution.verified")}
    cur = {key(d): d for d in mine("curated", "sample.curated")}
    dead = by.get("dead-letters", [])
    origin_of = {k: origin(d["payload"]) for k, d in sols.items()}
    stages = _stage_counts(origin_of, ext, ver, cur)
    candidates = _candidates(sols, ext, ver, cur, t0)
    solver_rejections = Counter((ext[k]["payload"].get("reason") or "")[:60] for k, o in origin_of.items()
                                if o == SOLVER and k in ext and not ext[k]["payload"]["accepted"])
    return {
        "stages": stages,
        "dead_letters": len(dead),
        "dead_letter_errors": [f"{d['payload']['consumer']} {d['payload']['error_kind']}: "
                               f"{d['payload']['error'][:160]}" for d in dead[:5]],
        "solver_extraction_rejections": dict(solver_rejections.most_common(5)),
        "candidates": candidates,
        "verify_latency_s": _stats([c["latency_s"] for c in candidates if c.get("latency_s") is not None]),
        "verify_service_s": _stats([c["service_s"] for c in candidates if c.get("service_s") is not None]),
        "curation_reasons": dict(Counter(d["payload"]["reason"].split(":")[0] for d in cur.values())),
        "training": _training(by),
        "evaluation_samples": _evaluation(by),
        "event_times_s": _event_times(by, sols, ver, cur, t0, round_ids),
    }


def _stage_counts(origin_of: dict[Any, str], ext: dict[Any, Doc], ver: dict[Any, Doc],
                  cur: dict[Any, Doc]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for k, o in origin_of.items():
        row = out.setdefault(o, dict.fromkeys(("generated", "extracted", "extract_ok", "verified",
                                               "passed", "rejected", "curated", "kept"), 0))
        row["generated"] += 1
        if k in ext:
            row["extracted"] += 1
            row["extract_ok"] += bool(ext[k]["payload"]["accepted"])
        if k in ver:
            row["verified"] += 1
            row["passed"] += bool(ver[k]["payload"]["passed"])
            row["rejected"] += not ver[k]["payload"]["passed"]
        if k in cur:
            row["curated"] += 1
            row["kept"] += bool(cur[k]["payload"]["kept"])
    return out


def _candidates(sols: dict[Any, Doc], ext: dict[Any, Doc], ver: dict[Any, Doc], cur: dict[Any, Doc],
                t0: float) -> list[dict[str, Any]]:
    """One row per injected (reference or cheat) sample, in verification order."""
    # Verification is serial in one verifier process: a candidate's service time is its verdict
    # time minus the later of its extraction and the previous verdict (any verdict of the log).
    verdict_times = sorted(_t(d) for d in ver.values())
    rows = []
    for k, s in sols.items():
        o = origin(s["payload"])
        if o == SOLVER:
            continue
        p = s["payload"]
        row: dict[str, Any] = {"challenge_id": k[0], "origin": o, "model_id": p["model_id"],
                               "op": p["context"]["op"], "dtype": p["context"]["dtype"],
                               "shape_range": p["context"]["shape_range"]}
        if k in ver:
            v, e = ver[k]["payload"], ext[k]
            tv, te = _t(ver[k]), _t(e)
            before = [t for t in verdict_times if t < tv]
            timing = v.get("timing") or {}
            row.update({
                "passed": v["passed"], "stage": v["stage"], "reasons": v["reasons"][:2],
                "verified_at_s": tv - t0, "latency_s": tv - te,
                "service_s": tv - max(te, before[-1] if before else te),
                "perf_measured": v["perf_measured"], "candidate_ms": timing.get("candidate_ms"),
                "naive_ms": timing.get("naive_ms"), "optimized_ms": timing.get("optimized_ms"),
                "spread": timing.get("spread"), "speedup_vs_naive": v.get("speedup_vs_naive"),
                "speedup_vs_optimized": v.get("speedup_vs_optimized"),
                "roofline_fraction": v.get("roofline_fraction"), "max_rel_error": v.get("max_rel_error"),
                "triton_launches": v.get("triton_launches"), "isolation": v["isolation"],
                "device": v["device"], "verifier_fingerprint": v.get("fingerprint", {}),
            })
        elif k in ext and not ext[k]["payload"]["accepted"]:
            row.update({"passed": False, "stage": "extraction", "reasons": [ext[k]["payload"]["reason"]]})
        if k in cur:
            c = cur[k]["payload"]
            row.update({"kept": c["kept"], "curation_reason": c["reason"], "score": c.get("score")})
        rows.append(row)
    return sorted(rows, key=lambda r: (r.get("verified_at_s") is None, r.get("verified_at_s") or 0.0))


def _training(by: dict[str, list[Doc]]) -> dict[str, Any]:
    reqs = [d for d in by.get("training-requests", []) if d["type"] == "training.requested"]
    rounds = by.get("rounds", [])
    out: dict[str, Any] = {"requested": None, "trained": None, "evaluated": None}
    if not reqs:
        return out
    req = reqs[0]
    r = req["payload"]["round"]
    out["requested"] = {"round": r, "new_samples": len(req["payload"]["new_sample_ids"]),
                        "replayed_samples": len(req["payload"]["replay_sample_ids"]),
                        "dataset_hash": req["payload"]["dataset_hash"]}
    trained = [d for d in rounds if d["type"] == "round.trained" and d["payload"]["round"] == r]
    if trained:
        t = trained[0]["payload"]
        out["trained"] = {"adapter_path": t["adapter_path"], "metrics": t.get("metrics", {}),
                          "eval_challenges": len(t.get("eval_challenge_ids", [])),
                          "seconds": _t(trained[0]) - _t(req)}
    evaluated = [d for d in rounds if d["type"] == "round.evaluated" and d["payload"]["round"] == r]
    if evaluated:
        e = evaluated[0]["payload"]
        out["evaluated"] = {k: e.get(k) for k in ("promoted", "reason", "baseline_round", "eval_counts",
                                                  "eval_pass_rates", "previous_pass_rates")}
        if trained:
            out["evaluated"]["seconds"] = _t(evaluated[0]) - _t(trained[0])
    return out


def _evaluation(by: dict[str, list[Doc]]) -> dict[str, dict[str, int]]:
    """Outcomes of the frozen-point eval samples, by arm ('round-N' candidate, 'round-0' = base)."""
    arm = {d["payload"]["challenge_id"]: f"round-{d['payload']['eval_round']}" for d in by.get("challenges", [])
           if d["type"] == "challenge.created" and d["payload"].get("purpose") == "eval"}
    out: dict[str, dict[str, int]] = {}
    for topic, type_, field in (("solutions", "solution.sampled", "sampled"),
                                ("extracted", "solution.extracted", "extract_ok"),
                                ("verified", "solution.verified", "passed")):
        for d in by.get(topic, []):
            a = arm.get(d["payload"].get("challenge_id"))
            if d["type"] != type_ or a is None:
                continue
            row = out.setdefault(a, {"challenges": sum(v == a for v in arm.values()), "sampled": 0,
                                     "extract_ok": 0, "passed": 0})
            row[field] += 1 if field == "sampled" else bool(d["payload"].get("accepted", d["payload"].get(
                "passed")))
    return out


def _event_times(by: dict[str, list[Doc]], sols: dict[Any, Doc], ver: dict[Any, Doc],
                 cur: dict[Any, Doc], t0: float, round_ids: set[str]) -> dict[str, float | None]:
    """Milestones of the round, seconds since the benchmark started (event times)."""
    def first(docs: list[Doc]) -> float | None:
        return min(_t(d) for d in docs) - t0 if docs else None

    def last(docs: list[Doc]) -> float | None:
        return max(_t(d) for d in docs) - t0 if docs else None

    def of_type(topic: str, type_: str) -> list[Doc]:
        return [d for d in by.get(topic, []) if d["type"] == type_]

    injected = {k for k, d in sols.items() if origin(d["payload"]) != SOLVER}
    solver = [d for k, d in sols.items() if k not in injected]
    reqs = of_type("training-requests", "training.requested")[:1]
    r = reqs[0]["payload"]["round"] if reqs else None
    return {
        "round_started": last(of_type("control", "round.started")),
        "last_challenge": last([d for d in of_type("challenges", "challenge.created")
                                if d["payload"]["challenge_id"] in round_ids]),
        "injected": first([sols[k] for k in injected]),
        "first_solver_sample": first(solver),
        "last_solver_sample": last(solver),
        "last_injected_verdict": last([d for k, d in ver.items() if k in injected]),
        "last_verdict": last(list(ver.values())),
        "last_curated": last(list(cur.values())),
        "training_requested": last(reqs),
        "round_trained": last([d for d in of_type("rounds", "round.trained") if d["payload"]["round"] == r]),
        "round_evaluated": last([d for d in of_type("rounds", "round.evaluated") if d["payload"]["round"] == r]),
    }


PHASES = (  # (name, from milestone, to milestone)
    ("challenge generation", "round_started", "last_challenge"),
    ("solver sampling", "last_challenge", "last_solver_sample"),
    ("verification (injected)", "injected", "last_injected_verdict"),
    ("curation", "last_verdict", "last_curated"),
    ("LoRA training", "training_requested", "round_trained"),
    ("evaluation", "round_trained", "round_evaluated"),
    ("round: start -> decision", "round_started", "round_evaluated"),
)


def phases(wall: dict[str, float], events: dict[str, float | None]) -> dict[str, float | None]:
    """Seconds per phase: wall-clock marks of the benchmark plus event-time milestones."""
    marks: dict[str, float | None] = {**wall, **events}
    out: dict[str, float | None] = {
        "model build": _span(marks, "start", "model_built"),
        "broker + services start": _span(marks, "model_built", "services_started"),
    }
    out.update({name: _span(marks, a, b) for name, a, b in PHASES})
    out["total (wall)"] = _span(marks, "start", "end")
    return out


def _span(marks: dict[str, float | None], a: str, b: str) -> float | None:
    x, y = marks.get(a), marks.get(b)
    return None if x is None or y is None else y - x


# ------------------------------------------------------------------ tables


def _f(x: Any, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt) if isinstance(x, float) else str(x)


def render(report: dict[str, Any], console: Console) -> None:
    env = report.get("environment", {})
    console.print(f"[bold]environment[/] {env.get('gpu', 'no GPU')} | driver {env.get('driver', '-')} | "
                  f"torch {env.get('torch')} (cuda {env.get('cuda_runtime')}) | triton {env.get('triton')} | "
                  f"python {env.get('python')} | verifier device {report.get('config', {}).get('device')}")
    s = report.get("summary")
    if not s:
        console.print("no round summary (the run stopped before the round began)")
        return
    t = Table(title="per-stage counts (events read back from the log)")
    for col in ("origin", "generated", "extract ok", "verified", "passed", "rejected", "curated", "kept"):
        t.add_column(col, justify="right")
    for o, row in sorted(s["stages"].items()):
        t.add_row(o, str(row["generated"]), f"{row['extract_ok']}/{row['extracted']}", str(row["verified"]),
                  str(row["passed"]), str(row["rejected"]), str(row["curated"]), str(row["kept"]))
    console.print(t)
    console.print(f"dead letters: {s['dead_letters']}; solver extraction rejections: "
                  f"{s['solver_extraction_rejections'] or '-'}")
    c = Table(title="injected candidates: verdicts (latency = verdict - extraction event time)")
    for col in ("origin", "op", "dtype", "stage", "latency s", "service s", "cand ms", "x naive",
                "x opt", "roofline", "curated"):
        c.add_column(col, justify="right")
    for r in s["candidates"]:
        name = r["origin"] if r["origin"] == "reference" else r["model_id"].removeprefix("cheat:")
        c.add_row(name, r["op"], r["dtype"], r.get("stage", "?"), _f(r.get("latency_s")), _f(r.get("service_s")),
                  _f(r.get("candidate_ms")), _f(r.get("speedup_vs_naive")), _f(r.get("speedup_vs_optimized")),
                  _f(r.get("roofline_fraction"), ".2f"), r.get("curation_reason", "-")[:28])
    console.print(c)
    tr = s["training"]
    line = "training: no request"
    if tr["requested"]:
        q = tr["requested"]
        line = f"training: round {q['round']} requested ({q['new_samples']} new + {q['replayed_samples']} replayed)"
        if tr["trained"]:
            m = tr["trained"]["metrics"]
            line += f"; trained in {tr['trained']['seconds']:.1f} s ({_f(m.get('steps'))} steps, metrics {m})"
        if tr["evaluated"]:
            e = tr["evaluated"]
            line += f"; {'PROMOTED' if e['promoted'] else 'NOT promoted'}: {e['reason']}"
    console.print(line)
    console.print(f"eval samples by arm: {s.get('evaluation_samples') or '-'}")
    p = Table(title="wall time per phase (s)")
    p.add_column("phase")
    p.add_column("seconds", justify="right")
    for name, secs in report.get("phases", {}).items():
        p.add_row(name, _f(secs, ".1f"))
    console.print(p)
    if report.get("error"):
        console.print(f"[red]incomplete:[/] {report['error']}")
