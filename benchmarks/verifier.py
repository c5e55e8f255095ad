"""Verifier benchmark (GPU): throughput with full checks, timer agreement, run-to-run spread.

    python benchmarks/verifier.py --out DIR [--workers N] [--quick]

Skips gracefully (exit 0, JSON says why) where CUDA is unavailable. KZ_STACKS_S=N: every
N seconds, every thread's stack to stderr (a stalled pass, cut off by its time limit). Writes
DIR/verifier_bench.json and prints a table. Measures:
  * candidates verified per minute (full checks: static, sandbox, trials, timing) for a
    batch of honest kernels (BLOCK variants + the catalogue's reference solutions) and
    cheats, cold (fresh compile caches) and warm (same sources again: compile cache hits);
  * our timer's median vs triton.testing.do_bench's median on the same kernels (target 3%);
  * run-to-run spread of our median over repeated timings (target 2%).

The batch it verifies is built in verifier_batch.py; what a pass's rows add up to, and the
table it prints, in verifier_summary.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.verifier_batch import (  # noqa: E402
    ADD_SOLUTION,
    SOFTMAX_SOLUTION,
    autotuned_batch,
    cheat_batch,
    honest_batch,
    repeated,
)
from benchmarks.verifier_summary import (  # noqa: E402
    PASS_COLS,
    pass_row,
    summarize,
    table,
    timing_diag,
    unjudged,
)


def bench_options(cache: str, warm_slots: int = 1, builders: int | None = None,
                  adaptive_shadow: bool = True, zygote: int = -1, workers: int = 1,
                  holdouts: int = 2, epoch_ms: int | None = None, judges: int = -1,
                  permit_at_done: bool = False, pause_compiling: bool = True,
                  gpu_places: int = 0, pause_starting: bool = True) -> Any:
    """The benchmark's VerifyOptions (fresh `cache`): full checks, 30 timed runs."""
    from services.verifier.options import VerifyOptions
    from services.verifier.sandbox import ZYGOTE_MODE

    # Private dirs on tmpfs when there is one: candidates' tensors never touch the disk.
    tmp = "/dev/shm" if os.access("/dev/shm", os.W_OK) else ""
    options = VerifyOptions(device="cuda", cache_dir=cache, n_timing_runs=30, warmup=3,
                            wall_timeout_s=240, tmp_dir=tmp, warm_slots=warm_slots,
                            adaptive_shadow=adaptive_shadow, workers=workers,
                            holdouts=holdouts, judges=judges, permit_at_done=permit_at_done,
                            pause_compiling=pause_compiling, gpu_places=gpu_places,
                            pause_starting=pause_starting,
                            isolation={-1: "auto", 0: "unshare+uid", 1: ZYGOTE_MODE}[zygote])
    if epoch_ms is not None:
        options = replace(options, shared_epoch_s=epoch_ms / 1000)
    return replace(options, bundle_builders=builders) if builders else options


def run_batch(batch: list[tuple[str, str, str]], workers: int, cache: str,
              warm_slots: int = 1, builders: int | None = None,
              adaptive_shadow: bool = True, zygote: int = -1,
              holdouts: int = 2, epoch_ms: int | None = None,
              batches: int = 1, judges: int = -1, early: bool = False,
              pause_compiling: bool = True, gpu_places: int = 0,
              pause_starting: bool = True) -> dict[str, Any]:
    """One pass. `batches` > 1: the verifier service's way, one session across its batches
    (each a new copy: new problems, cold compiles); the last one is reported, its clock
    from its own start (the session, its fork server and warm sandboxes already up)."""
    from benchmarks.host_load import HostLoad
    from services.verifier import core

    options = bench_options(cache, warm_slots, builders, adaptive_shadow, zygote,
                            holdouts=holdouts, epoch_ms=epoch_ms, judges=judges,
                            permit_at_done=early, pause_compiling=pause_compiling,
                            gpu_places=gpu_places, pause_starting=pause_starting)
    items = [(p, s) for _, p, s in batch]
    earlier, lock0 = [], {}
    if batches > 1:  # as VerifierCore._get_session makes it
        session = core.Session(options, warm_slots=core.warm_slots_for(options, workers))
        try:
            for k in range(batches - 1):
                t = time.monotonic()
                core.verify_batch(session, [(f"{p}\n# session batch {k}\n",
                                             f"{s}\n# session batch {k}\n") for p, s in items],
                                  workers)
                earlier.append(round(60 * len(items) / (time.monotonic() - t), 1))
        except BaseException:
            session.close()  # its fork server, sandboxes and reference workers
            raise
        lock0 = session.gpu.stats() if session.gpu else {}
    t0 = time.monotonic()
    with HostLoad() as load:  # what core.verify_many does, keeping the session's GPU lock
        if batches == 1:
            session = core.batch_session(items, options, workers)
        try:
            reports = core.verify_batch(session, items, workers,
                                        on_report=lambda i, r: _tell(batch[i][0], r, t0))
            lock = session.gpu.stats() if session.gpu else {}
            lock = {k: round(v - lock0.get(k, 0), 3) for k, v in lock.items()}
            lock_steps = session.gpu.step_profile(since=lock0) if session.gpu else {}
            wall = time.monotonic() - t0  # a service's session stays open: no close
        finally:
            session.close()
    if batches == 1:
        wall = time.monotonic() - t0
    rows: list[dict[str, Any]] = []
    for (label, _, _), r in zip(batch, reports):
        tm = r.timings
        rows.append({"label": label, "passed": r.passed, "stage": r.stage,
                     "reasons": r.reasons[:3], "isolation": r.isolation,
                     "candidate_ms": tm.candidate_ms if tm else None,
                     "naive_ms": tm.naive_ms if tm else None, "spread": tm.spread if tm else None,
                     "speedup_vs_naive": r.speedup_vs_naive,
                     "roofline": r.roofline_fraction, "wall_s": r.details.get("wall_s"),
                     "phase_s": r.details.get("phase_s"), "warm_start": r.details.get("warm_start"),
                     "steps_s": r.details.get("steps_s"),
                     "batch_s": r.details.get("batch_s"),  # [start, end] into the batch
                     "sandbox_batch_s": r.details.get("sandbox_batch_s"),  # its sandbox's run
                     "harness_steps_s": r.details.get("harness_steps_s"),
                     "harness_cpu_s": r.details.get("harness_cpu_s"),
                     "reference_steps_s": r.details.get("reference_steps_s"),
                     "reference_phase_s": r.details.get("reference_phase_s"),
                     "reference_timing": r.details.get("reference_timing"),
                     # device memory each sandbox / reference worker reserved at its peak (MiB)
                     "gpu_peak_mb": r.details.get("harness_gpu_peak_mb"),
                     "reference_gpu_peak_mb": r.details.get("reference_gpu_peak_mb"),
                     "poison_reserved": r.details.get("harness_poison_reserved"),
                     "oom_reruns": r.details.get("oom_reruns"),
                     # the timer's own view of each timed run: flush shadow vs host launch
                     "timing_diag": timing_diag(r.details.get("candidate_timing") or {})})
    host = load.summary()
    return {"wall_s": wall, "n": len(rows), "per_minute": 60 * len(rows) / wall,
            # batches > 1: the rates of the same session's earlier batches (reported: last)
            "session_batches": batches, "earlier_batches_per_minute": earlier,
            "workers": workers, "judges": core.judges_for(options, workers),
            "bundle_builders": options.bundle_builders,
            "adaptive_shadow": adaptive_shadow, "pause_compiling": pause_compiling,
            "pause_starting": pause_starting,
            "gpu_places": options.gpu_places,
            "problems": len({p for _, p, _ in batch}), "warm_slots": warm_slots,
            # host CPU/GPU busy fractions over the batch; CPU core-seconds per candidate
            "host": host, "cpu_s_per_candidate": round(host["cpu_core_s"] / max(1, len(rows)), 2),
            **summarize(rows, [p for _, p, _ in batch], wall, workers),
            "shared_epoch_s": options.shared_epoch_s,
            # the GPU lock: seconds closed to new shared steps (draining, exclusive), batches
            # of timed phases, share of the wall closed
            "lock": {**lock, "closed_share": round(lock["closed_s"] / wall, 3)} if lock else {},
            # per kind of shared holder: its steps' lengths and the drains it ended (s)
            "lock_steps": lock_steps,
            "rows": rows, "fingerprint": reports[0].fingerprint if reports else {}}


# The batch candidate that runs the same kernel at the same timed shape as a timer case:
# its in-batch median against the quiet one shows what a busy host does to a verdict.
BATCH_TWIN = {"add_16M_fp32": "add_b1024_w4", "softmax_8192x2048_fp16": "softmax_m16_w8",
              "softmax_65536x1024_fp16": ""}


def in_batch_vs_quiet(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = {r["label"]: r for r in (result.get("cold") or {}).get("rows", [])}
    out = []
    for t in result.get("timer", []):
        if t.get("shadow", "adaptive") != "adaptive":
            continue
        twin = rows.get(t["batch_label"]) or rows.get(f"{t['batch_label']}_c0")  # --repeat
        if twin and twin.get("candidate_ms"):
            out.append({"kernel": t["kernel"], "batch_label": t["batch_label"],
                        "in_batch_ms": twin["candidate_ms"], "quiet_ms": t["ours_ms"],
                        "ratio": twin["candidate_ms"] / t["ours_ms"],
                        "in_batch_spread": twin["spread"],
                        "in_batch_host_late": (twin.get("timing_diag") or {}).get("host_late"),
                        "quiet_within_run_spread": t["within_run_spread"]})
    return out


def timer_cases() -> list[tuple[str, str, Callable[[], list[torch.Tensor]]]]:
    """The honest kernels timed against do_bench: (name, solution source, input maker)."""
    return [("add_16M_fp32", ADD_SOLUTION.format(block=1024, warps=4),
             lambda: [torch.randn(1 << 24, device="cuda"), torch.randn(1 << 24, device="cuda")]),
            ("softmax_8192x2048_fp16", SOFTMAX_SOLUTION.format(min_block=16, warps=8),
             lambda: [torch.randn(8192, 2048, device="cuda", dtype=torch.float16)]),
            ("softmax_65536x1024_fp16", SOFTMAX_SOLUTION.format(min_block=16, warps=4),
             lambda: [torch.randn(65536, 1024, device="cuda", dtype=torch.float16)])]


def timer_agreement() -> list[dict[str, Any]]:
    """Our Timer vs triton.testing.do_bench (median) on honest kernels, plus spread."""
    import triton.testing

    from kz_common.kernels import import_source
    from services.verifier.timing import Timer

    out = []
    for name, src, make in timer_cases():
        model = import_source(name, src).ModelNew()
        x = make()
        fn = lambda: model(*x)  # noqa: E731
        # interleaved, side by side: the adaptive shadow and one fixed flush pass
        both = [(shadow, Timer(adaptive=shadow).time([fn], warmup=5, runs=100))
                for _ in range(5) for shadow in (True, False)]
        try:
            ref = triton.testing.do_bench(fn, warmup=25, rep=300, return_mode="median")
        except TypeError:
            ref = triton.testing.do_bench(fn, warmup=25, rep=300, quantiles=[0.5])
        for shadow in (True, False):
            stats = [st for s, st in both if s == shadow]
            out.append(_agreement_row(name, "adaptive" if shadow else "fixed", stats, ref))
    return out


def _agreement_row(name: str, shadow: str, stats: list[dict[str, Any]],
                   ref: float) -> dict[str, Any]:
    medians = [st["median_ms"] for st in stats]
    ours = statistics.median(medians)
    return {"kernel": name, "shadow": shadow, "ours_ms": ours, "do_bench_ms": float(ref),
            "rel_diff": abs(ours - ref) / ref,
            "run_to_run_spread": (max(medians) - min(medians)) / ours,
            # (p90-p10)/median inside each run, on this quiet device
            "within_run_spread": statistics.median(st["spread"] for st in stats),
            "host_late": statistics.median(st["host_late"] for st in stats),
            "flush_ms": statistics.median(st["flush_ms"] for st in stats),
            "host_ms": statistics.median(st["host_ms"] for st in stats),
            "back_to_back": sum(st.get("loop") == "back_to_back" for st in stats),
            "medians_ms": medians, "batch_label": BATCH_TWIN[name]}


def _tell(label: str, r: Any, t0: float) -> None:
    """One line per verdict as it comes, to stderr (the pass's log): a pass cut off by its
    time limit writes no JSON, and a hog run's reruns are otherwise seen only at its end."""
    print(f"verdict +{time.monotonic() - t0:.1f}s {label} {r.stage} "
          f"reruns {len(r.details.get('oom_reruns') or [])}", file=sys.stderr, flush=True)


def _save(out: Path, result: dict[str, Any]) -> None:
    """Written after every pass: a run cut off by the device's time limit keeps what it did."""
    (out / "verifier_bench.json").write_text(json.dumps(result, indent=1, default=str))


def _parse_config(spec: str) -> tuple[str, dict[str, int]]:
    name, _, body = spec.partition(":")
    kv = dict(item.split("=", 1) for item in body.split(",") if item)
    unknown = set(kv) - {"workers", "slots", "builders", "shadow", "zygote", "holdouts", "epoch",
                         "batches", "judges", "early", "pausecompile", "gpuplaces",
                         "pausestart"}
    if not name or unknown:
        raise SystemExit(f"bad --config {spec!r}: want NAME:workers=N,slots=N,builders=N,"
                         "shadow=0|1,zygote=0|1,holdouts=N,epoch=MS,batches=N,judges=N,"
                         "early=0|1,pausecompile=0|1,gpuplaces=N,pausestart=0|1")
    return name, {k: int(v) for k, v in kv.items()}


def seed_stubs(src_cache: Path, dst_cache: Path) -> list[str]:
    """Copy the trusted stubs (the `stubs/` subtree: Triton's driver module and the
    launchers of the harness's warm-up kernels, built by slots before any job) from one
    verifier cache into another; the names of the stub sets copied.

    A host's verifier cache persists (`VerifyOptions.cache`), so a service builds its
    stubs once per host and harness. A pass with a fresh cache would instead have every
    slot of its first wave build them at once (twenty-fourth session: 12 slots, 2.85 s of
    warm-up each), which is a host's first run, not its steady state. Only `stubs/` is
    copied: the candidates' compiles and the reference bundles stay cold."""
    from services.verifier import workspace as W

    src = src_cache / "stubs"
    if not src.is_dir():
        return []
    W.copy_tree(src, dst_cache / "stubs")  # as the pool copies them: no symlinks
    return sorted(p.name for p in src.iterdir() if p.is_dir())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 4))
    ap.add_argument("--quick", action="store_true", help="smaller batch, no warm pass")
    ap.add_argument("--compare-unpooled", action="store_true",
                    help="first a cold pass without pre-started sandboxes (the old path)")
    ap.add_argument("--no-timer", action="store_true", help="skip the timer-vs-do_bench check")
    ap.add_argument("--cold-only", action="store_true", help="no warm pass")
    ap.add_argument("--autotuned", type=int, default=0, metavar="N",
                    help="N more honest candidates whose kernel is autotuned (none by default: "
                         "the batch stays comparable with earlier sessions)")
    ap.add_argument("--only", default="", help="only candidates whose label starts with this")
    ap.add_argument("--limit", type=int, default=0, help="at most this many candidates")
    ap.add_argument("--repeat", type=int, default=1,
                    help="the batch this many times over, each copy a new problem and new "
                         "sources (fresh bundles, cold compiles): a longer run at the same mix")
    ap.add_argument("--batches", type=int, default=1, metavar="N",
                    help="the default pass the verifier service's way: one session across N "
                         "batches, each a new copy; the last one reported")
    ap.add_argument("--prime", type=int, default=0, metavar="N",
                    help="first an unreported pass over N candidates (own cache): the passes "
                         "compared then all find the host's page cache and GPU warm, and "
                         "the trusted stubs it built in their caches (see seed_stubs)")
    ap.add_argument("--config", action="append", default=[], metavar="NAME:K=V,...",
                    help="an extra cold pass (own fresh cache) with other settings, side by "
                         "side with the default one; keys: workers, slots, builders, shadow "
                         "(0|1), zygote (1: sandboxes forked by the fork server, 0: the "
                         "classic unshare+uid chain; default: auto), holdouts (unseen input "
                         "sets timed once; 0: none, as before verifier 1.5), epoch (the GPU "
                         "lock's shared-epoch minimum in ms; 0: a timed phase closes it at "
                         "once, as before verifier 1.6), batches (N > 1: the service's way, "
                         "one session across N batches, each a new copy; the last reported), "
                         "judges (threads beyond the workers that judge finished candidates; "
                         "0: each worker judges its own, as before verifier 1.10; default: "
                         "half the workers), early (1: a sandbox's place goes back at its "
                         "DONE), pausecompile (0: a sandbox still compiling is left running "
                         "while another is timed), gpuplaces (N < workers: at most N "
                         "sandboxes past their first GPU request, the rest only start; 0: "
                         "no cap), pausestart (0: a sandbox started ahead is left running "
                         "while another is timed, until its job)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if os.environ.get("KZ_STACKS_S"):  # a pass that may stall: where every thread waits
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["KZ_STACKS_S"]), repeat=True)
    result: dict[str, Any] = {"torch": torch.__version__}
    if not torch.cuda.is_available():
        result["skipped"] = "no CUDA device: nothing to benchmark"
        print(result["skipped"])
        _save(args.out, result)
        return 0
    from services.verifier.sandbox import available_modes

    result["isolation_modes"] = list(available_modes("cuda"))
    result["gpu"] = torch.cuda.get_device_name()
    batch = honest_batch() + autotuned_batch(args.autotuned) + cheat_batch()
    if args.quick:
        batch = batch[::3]
    batch = [b for b in batch if b[0].startswith(args.only)][:args.limit or None]
    batch = repeated(batch, args.repeat)
    cache = tempfile.mkdtemp(prefix="kzbench-cache-")
    default = {"workers": args.workers, "slots": 1, "builders": 0, "shadow": 1, "zygote": -1,
               "holdouts": 2, "epoch": -1, "batches": args.batches, "judges": -1,
               "early": 0, "pausecompile": 1, "gpuplaces": 0, "pausestart": 1}
    passes = [("cold", cache, default)] + ([] if args.quick or args.cold_only
                                           else [("warm", cache, default)])
    if args.compare_unpooled:  # side by side: same batch, own fresh cache, no warm slots
        passes.insert(0, ("cold_unpooled", tempfile.mkdtemp(prefix="kzbench-cache-"),
                          {**default, "slots": 0}))
    passes += [(name, tempfile.mkdtemp(prefix="kzbench-cache-"), {**default, **kv})
               for name, kv in map(_parse_config, args.config)]
    if args.prime:
        prime = [(label, f"{p}\n# prime\n", f"{s}\n# prime\n")  # sources no pass shares
                 for label, p, s in batch[:args.prime]]
        prime_cache = Path(tempfile.mkdtemp(prefix="kzbench-cache-"))
        run_batch(prime, default["workers"], str(prime_cache))
        for pass_cache in dict.fromkeys(c for _, c, _ in passes):  # "warm" shares "cold"'s
            result["prime_stubs"] = seed_stubs(prime_cache, Path(pass_cache))
    for name, pass_cache, cfg in passes:
        result[name] = run_batch(batch, cfg["workers"], pass_cache, cfg["slots"],
                                 cfg["builders"] or None, bool(cfg["shadow"]),
                                 cfg["zygote"], cfg["holdouts"],
                                 cfg["epoch"] if cfg["epoch"] >= 0 else None, cfg["batches"],
                                 cfg["judges"], bool(cfg["early"]),
                                 bool(cfg["pausecompile"]), cfg["gpuplaces"],
                                 bool(cfg["pausestart"]))
        _save(args.out, result)
        print(table(f"pass {name}", [pass_row(name, result[name])], PASS_COLS), flush=True)
    if not args.no_timer:
        result["timer"] = timer_agreement()
        result["in_batch_vs_quiet"] = in_batch_vs_quiet(result)
        _save(args.out, result)
    print(table("\nverification throughput",
                 [pass_row(k, result[k]) for k, _, _ in passes], PASS_COLS))
    if "timer" in result:
        print(table("\ntimer vs do_bench", result["timer"],
                     ["kernel", "shadow", "ours_ms", "do_bench_ms", "rel_diff", "run_to_run_spread",
                      "within_run_spread", "host_late", "flush_ms", "host_ms", "back_to_back"]))
        print(table("\nsame kernel: in the batch vs on the quiet device afterwards",
                     result["in_batch_vs_quiet"], ["kernel", "batch_label", "in_batch_ms",
                                                   "quiet_ms", "ratio", "in_batch_spread",
                                                   "in_batch_host_late",
                                                   "quiet_within_run_spread"]))
    rows, unsure = result["cold"]["rows"], unjudged(result["cold"]["rows"])
    bad = [r for r in rows if r["passed"] == r["label"].startswith("cheat_") and r not in unsure]
    print(table("\nunexpected verdicts (honest rejected / cheat passed)", bad,
                 ["label", "passed", "stage", "reasons"]))
    if unsure:  # neither passed nor rejected: the verdict is not on the kernel
        print(table("\nno verdict (stage internal / problem)", unsure,
                     ["label", "stage", "reasons"]))
    print(f"\nisolation: {result['isolation_modes']}; wrote {args.out / 'verifier_bench.json'}")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
