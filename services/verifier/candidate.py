"""Run one candidate in the sandbox and judge what it left behind, from the parent's side.

The harness's report may only ADD rejections (launch counts, traced aten ops,
tampering); a pass needs the parent's own checks on the saved tensors: count,
plain tensors, dtype/shape/strides, no aliasing of inputs, inputs unmodified
against the parent's copy, numerics against references that never left the
parent, for every correctness call and for the timed runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from services.verifier import compare_device as C
from services.verifier import perf
from services.verifier import policy as P
from services.verifier import records
from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
from services.verifier import workspace as W
from services.verifier.gpu_memory import out_of_memory
from services.verifier.numerics import Comparison, Tol, compare_refs, is_contiguous_or_same
from services.verifier.options import VERIFIER_VERSION, VerifyOptions
from services.verifier.pool import SlotPool
from services.verifier.reference import ReferenceBundle

_HASH_LOCKS: dict[str, threading.Lock] = {}
_HASH_LOCKS_GUARD = threading.Lock()


@dataclass
class Outcome:
    failures: list[tuple[str, str]] = field(default_factory=list)
    isolation: str = "none"
    launches: int | None = None
    max_rel_error: float | None = None
    timing: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # Every output checked so far, by call index: only read to NAME a memoised output once
    # its numerics failed, so an honest candidate costs nothing (no hash of every output).
    seen: list[tuple[int, torch.Tensor]] = field(default_factory=list)

    def fail(self, stage: str, reason: str) -> None:
        if (stage, reason) not in self.failures:
            self.failures.append((stage, reason))


def source_hash(src: str, device: str) -> str:
    h = hashlib.sha256(src.encode())
    h.update(f"|{device}|{torch.__version__}|{VERIFIER_VERSION}".encode())
    try:
        import triton

        h.update(triton.__version__.encode())
    except ImportError:
        pass
    return h.hexdigest()[:32]


def _hash_lock(key: str) -> threading.Lock:
    with _HASH_LOCKS_GUARD:
        return _HASH_LOCKS.setdefault(key, threading.Lock())


def run(solution_src: str, bundle: ReferenceBundle, options: VerifyOptions, base: Path,
        mode: str, gates: sandbox.Gates | None, slots: SlotPool | None = None,
        running: AbstractContextManager[Any] | None = None) -> Outcome:
    """Sandbox-run `solution_src` against `bundle` and judge it. With `slots`, the candidate
    gets a pre-started sandbox; without, one is started for it now. `running` is held for
    the sandbox's run only (verify_batch's cap on sandboxes at once): the judgement after it
    reads the files the sandbox left, so the next candidate's sandbox may start meanwhile."""
    steps: dict[str, float] = {}  # parent-side seconds per step (where a candidate's time goes)
    t0 = time.monotonic()
    with running or nullcontext() as permit:
        steps["run_wait"] = time.monotonic() - t0
        # with permit_at_done the place goes when the timed runs end (outputs still to write)
        early = getattr(permit, "give_back", None) if options.permit_at_done else None
        slot, job, res = _sandboxed(solution_src, bundle, options, base, mode, gates, slots,
                                    steps, early, getattr(permit, "gpu_place", None))
    try:
        out = judge(slot.work, job, res, bundle, options, gates, steps)
        out.details["steps_s"] = {k: round(v, 3) for k, v in steps.items()}
        return out
    finally:
        slot.close(keep=options.keep_artifacts)


def _sandboxed(solution_src: str, bundle: ReferenceBundle, options: VerifyOptions, base: Path,
               mode: str, gates: sandbox.Gates | None, slots: SlotPool | None,
               steps: dict[str, float], after_timed: Callable[[], None] | None = None,
               gpu_place: Callable[[], AbstractContextManager[Any]] | None = None,
               ) -> tuple[Any, dict[str, Any], sandbox.RunResult]:
    """The candidate's run in its sandbox, torn down when it returns; its slot's files
    stay for the judgement (the caller closes the slot; this does if it raises).
    `gpu_place`: held for its GPU phases (VerifyOptions.gpu_places)."""
    key = source_hash(solution_src, options.device)
    cache = Path(options.cache) / "candidates" / key
    with _step(steps, "slot"):
        slot = slots.take() if slots else SlotPool(options, mode, base, 0).take()
    try:
        job = _job(bundle, options, slot.inside)
        held = (job.get("timing") or {}).get("holdout_files", [])
        with _step(steps, "load"), _hash_lock(key):  # identical sources share one cache in turn
            withheld = slot.load(solution_src, bundle.inputs_dir, cache, withhold=held)
        with _step(steps, "sandbox"):
            res = slot.process.finish((json.dumps(job) + "\n").encode(), gates, withheld,
                                      after_timed, options.pause_compiling, gpu_place)
        with _step(steps, "save_cache"), _hash_lock(key):
            slot.save_cache(cache, Path(options.cache) / "stubs" / options.device)
        return slot, job, res
    except BaseException:
        slot.close(keep=options.keep_artifacts)
        raise


@contextmanager
def _step(steps: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.monotonic()
    try:
        yield
    finally:
        steps[name] = steps.get(name, 0.0) + time.monotonic() - t0


def _job(bundle: ReferenceBundle, options: VerifyOptions, inside: M.View) -> dict[str, Any]:
    meta = bundle.meta
    job: dict[str, Any] = {
        "nonce": uuid.uuid4().hex, "device": options.device, "work": inside.work,
        "gated": options.device == "cuda",
        "inputs": inside.inputs, "allowed_aten": sorted(P.ALLOWED_ATEN_OPS),
        "poisoned_aten": sorted(P.POISONED_ATEN_OPS), "int_poison": P.INT_POISON,
        "calls": [{"shape_index": t["shape_index"], "file": t["file"],
                   "save_inputs": t["trial"] == 0} for t in meta["trials"]
                  if not t.get("holdout")],  # holdouts: only in the timed phase (reference.py)
        "shapes": [{"init_file": s["init_file"], "init_seed": s["init_seed"],
                    "state_file": s["state_file"]} for s in meta["shapes"]],
    }
    timing = meta.get("timing")
    if options.device == "cuda" and timing:
        n = options.n_timing_runs
        job["timing"] = {"shape_index": timing["shape_index"], "files": timing["files"],
                         "holdout_files": timing.get("holdout_files", []),
                         "warmup": options.warmup, "runs": n + secrets.randbelow(n // 4 + 1),
                         "flush_bytes": options.flush_mb << 20,
                         "adaptive_shadow": options.adaptive_shadow}
    return job


def judge(work: Path, job: dict[str, Any], res: sandbox.RunResult, bundle: ReferenceBundle,
          options: VerifyOptions, gates: sandbox.Gates | None = None,
          steps: dict[str, float] | None = None) -> Outcome:
    o = Outcome(isolation=res.isolation)
    o.details["wall_s"] = round(res.wall_s, 3)
    o.details["phase_s"], o.details["warm_start"] = res.phase_s, res.warm_start
    if res.timed_out:
        o.fail("runtime", f"candidate {res.describe()}")
    report = W.load_json(work / "out" / "report.json")
    if report is None or report.get("nonce") != job["nonce"]:
        o.fail("runtime", f"no valid harness report: {res.describe()}")
        o.details["stderr_tail"] = res.stderr_tail[-1500:]  # diagnostics only, never trusted
        return o
    _report_failures(o, report, job, res)
    hs = report.get("steps_s")  # the harness's own clock: diagnostics, decides nothing
    if isinstance(hs, dict):
        o.details["harness_steps_s"] = {str(k)[:32]: v for k, v in list(hs.items())[:40]
                                        if isinstance(v, (int, float))}
    cpu = report.get("cpu_s")  # the harness's own CPU clock: diagnostics too
    if isinstance(cpu, dict):
        o.details["harness_cpu_s"] = {str(k)[:16]: v for k, v in list(cpu.items())[:4]
                                      if isinstance(v, (int, float))}
    if isinstance(peak := report.get("gpu_peak_mb"), int):  # the harness's word: diagnostics
        o.details["harness_gpu_peak_mb"] = peak
    if isinstance(fresh := report.get("poison_reserved"), int):  # calls that had to cudaMalloc
        o.details["harness_poison_reserved"] = fresh
    cap = options.fsize_mb << 20
    steps = {} if steps is None else steps
    with _step(steps, "judge_load"):  # every file first: the device section below is short
        out = work / "out"  # raw records (records.py): mapped, nothing unpickled
        calls = [records.read(out, f"call_{i}", cap) for i in range(len(job["calls"]))]
        timing = bundle.meta["timing"] if job.get("timing") else {}
        timed = [records.read(out, f"timed_{k}", cap)
                 for k in range(len(timing.get("trial_indices", [])))]
        held = [records.read(out, f"holdout_{k}", cap)
                for k in range(len(timing.get("holdout_indices", [])))]
    with _step(steps, "judge_compare"):
        for i, (call, data) in enumerate(zip(job["calls"], calls)):
            if data is None and not o.failures:
                o.fail("output", f"call {i}: no readable outputs")
            if data is not None:
                with C.where(options, gates, steps, [data]) as (dev, staged):
                    _check_call(o, data, i, bundle, f"call {i} ({_where(bundle, i)})",
                                expect_inputs=bool(call.get("save_inputs")), device=dev,
                                staged=staged[0])
        if not o.failures and job.get("timing"):
            with C.where(options, gates, steps, timed + held) as (dev, staged):
                _check_timing(o, timed, report, bundle, dev, staged[:len(timed)])
                _check_holdouts(o, held, report, bundle, dev, staged[len(timed):])
    return o


def _where(bundle: ReferenceBundle, i: int) -> str:
    t = bundle.meta["trials"][i]
    dims = bundle.meta["shapes"][t["shape_index"]]["overrides"] or "default shape"
    return f"shape {dims}, trial {t['trial']}, scale 2^{t['scale_exp']}"


def _report_failures(o: Outcome, report: dict[str, Any], job: dict[str, Any],
                     res: sandbox.RunResult) -> None:
    for err in report.get("errors", []):
        o.fail(*_stage_msg(err))
    calls = report.get("calls", [])
    total = 0
    for rec in calls:
        for err in rec.get("errors", []):
            o.fail(*_stage_msg(err))
        launches = int(rec.get("launches", 0) or 0)
        total += launches
        if launches == 0 and not rec.get("errors"):
            o.fail("runtime", "no Triton kernel launched in forward (no_triton_launch): "
                              "output computed some other way")
        ops = rec.get("aten_violations") or []
        if ops:
            names = ", ".join(ops[:8])
            o.fail("runtime", f"forward ran library compute at dispatch level: {names}")
    o.launches = total
    if len(calls) < len(job["calls"]) and not report.get("errors"):
        o.fail("runtime", f"harness stopped after {len(calls)} of {len(job['calls'])} calls: "
                          f"candidate {res.describe()}")
    for msg in report.get("integrity", []):
        o.fail("runtime", str(msg))


def _stage_msg(err: Any) -> tuple[str, str]:
    if isinstance(err, list) and len(err) == 2 and err[0] in ("import", "runtime", "output",
                                                              "timing"):
        return str(err[0]), str(err[1])[:500]
    return "runtime", str(err)[:500]


def _check_call(o: Outcome, data: Any, i: int, bundle: ReferenceBundle, where: str,
                expect_inputs: bool = False, device: str = "cpu",
                staged: list[Any] | None = None) -> None:
    """Call `i`'s record against its references; `staged`: page-locked copies of its
    outputs (compare_device.Stager), compared in their place once their checks pass."""
    refs = bundle.refs[i]  # the host copies: shapes, dtypes (the compare may use the GPU's)
    inputs = bundle.inputs[i]
    after = data.get("inputs_after") if isinstance(data, dict) else None
    if not (isinstance(data, dict) and isinstance(data.get("outputs"), list)
            and (after is None or isinstance(after, list))):
        o.fail("output", f"{where}: malformed output file")
        return
    outs = data["outputs"]
    if len(outs) != len(refs):
        o.fail("output", f"{where}: {len(outs)} outputs, expected {len(refs)}")
        return
    if expect_inputs and after is None:
        o.fail("output", f"{where}: inputs were not returned for checking")
        return
    after = after or []
    if expect_inputs and (len(after) != len(inputs)
                          or not all(_same_bits(a, b) for a, b in zip(after, inputs))):
        o.fail("runtime", f"{where}: inputs were modified (input mutation)")
    in_ptrs = {x.untyped_storage().data_ptr() for x in after
               if type(x) is torch.Tensor and x.numel()}
    for j, (out, ref) in enumerate(zip(outs, refs)):
        bad = _structure(out, ref, in_ptrs)  # on the loaded tensor: its own strides, storage
        if bad:
            o.fail("output", f"{where}: output {j} {bad}")
            continue
        same = staged[j] if staged and j < len(staged) and staged[j] is not None else out
        cmp = _compare(same, bundle, i, j, device)
        o.max_rel_error = max(o.max_rel_error or 0.0, cmp.max_rel_error)
        if not cmp.ok:
            named = _name_it(o, out, inputs, i)
            o.fail("numerics", f"{where}: output {j}: {cmp.reason}{named}")
        o.seen.append((i, out))


def _compare(same: torch.Tensor, bundle: ReferenceBundle, i: int, j: int,
             device: str) -> Comparison:
    """Output `j` of trial `i` (`same`: its values, the record's or their staged copy in
    host memory) against its same-dtype or float64-derived reference (a more accurate
    kernel must pass too), on `device`, or on the host when the device has no memory left
    for it: the sandboxes share the device's memory, and a verdict must not depend on what
    they hold at the moment."""
    tol = bundle.tol_for(bundle.refs[i][j].dtype) or _EXACT
    if device != "cpu":
        try:
            refs, his = bundle.refs_on(device, i)
            return compare_refs(same.to(device, non_blocking=True), refs[j], his[j], tol)
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            if not isinstance(exc, torch.OutOfMemoryError) and not out_of_memory([str(exc)]):
                raise
    return compare_refs(same, bundle.refs[i][j], bundle.hi_refs[i][j], tol)


def _name_it(o: Outcome, out: torch.Tensor, inputs: list[Any], i: int) -> str:
    """Name the trivial/cheating pattern behind a numerics failure, when there is one."""
    if out.numel() and not bool(out.any()):
        return " (zeros output)"
    flat = out.reshape(-1)
    if out.numel() > 1 and bool((flat == flat[0]).all()):
        return " (constant output)"
    for k, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and _same_bits(out, x):
            return f" (identity output: equals input {k})"
    for prev, earlier in o.seen:
        if prev != i and _same_bits(out, earlier):
            return f" (cached/memoised output: identical to call {prev} for different inputs)"
    return ""


_EXACT = Tol(0.0, 0.0, 0.0)  # integer/bool outputs (no tolerance) are compared exactly anyway


def _structure(out: Any, ref: torch.Tensor, in_ptrs: set[int]) -> str | None:
    if type(out) is not torch.Tensor:
        return f"is {type(out).__name__}, not a plain torch.Tensor"
    if out.dtype != ref.dtype:
        return f"has dtype {out.dtype}, expected {ref.dtype} (wrong dtype)"
    if tuple(out.shape) != tuple(ref.shape):
        return f"has shape {tuple(out.shape)}, expected {tuple(ref.shape)} (wrong shape)"
    if not is_contiguous_or_same(out, ref):
        return f"has strides {tuple(out.stride())}: neither contiguous nor the reference's " \
               f"{tuple(ref.stride())} (wrong strides)"
    if out.numel() and out.untyped_storage().data_ptr() in in_ptrs:
        return "aliases an input (shared storage: output alias)"
    return None


def _same_bits(a: Any, b: Any) -> bool:
    if isinstance(b, torch.Tensor):
        if type(a) is not torch.Tensor or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not b.numel():
            return True
        return torch.equal(a.reshape(-1).contiguous().view(torch.uint8),
                           b.reshape(-1).contiguous().view(torch.uint8))
    return bool(records.plain(a) == records.plain(b))  # a record holds tuples as lists


def _check_timing(o: Outcome, timed: list[Any], report: dict[str, Any],
                  bundle: ReferenceBundle, device: str, staged: list[Any]) -> None:
    stats = report.get("timing")
    med = stats.get("median_ms") if isinstance(stats, dict) else None
    if (not isinstance(stats, dict) or not isinstance(med, (int, float))
            or not math.isfinite(med) or med <= 0):
        o.fail("timing", "no valid timing result from the timed runs")
        return
    o.timing = {k: v for k, v in stats.items() if isinstance(v, (int, float, bool))}
    why = stats.get("retried")  # the timer's reasons for retrying: diagnostics only
    if isinstance(why, list):
        o.timing["retried"] = [str(w)[:8] for w in why[:4]]
    _check_runs(o, bundle.meta["timing"]["trial_indices"], timed, staged, bundle, device,
                "timed run", " (output changed in timed runs)")


def _check_runs(o: Outcome, indices: list[int], outputs: list[Any], staged: list[Any],
                bundle: ReferenceBundle, device: str, name: str, note: str = "") -> None:
    """The saved outputs of runs in the timed phase, against trials `indices`; every failure
    is a timing one (with `note` added)."""
    for k, (ti, data) in enumerate(zip(indices, outputs)):
        before = len(o.failures)
        if data is None:
            o.fail("timing", f"{name} {k}: no readable outputs")
            continue
        _check_call(o, data, ti, bundle, f"{name} {k}", device=device, staged=staged[k])
        for n in range(before, len(o.failures)):
            o.failures[n] = ("timing", o.failures[n][1] + note)


def _check_holdouts(o: Outcome, held: list[Any], report: dict[str, Any],
                    bundle: ReferenceBundle, device: str, staged: list[Any]) -> None:
    """Holdout runs (new inputs of the timed shape, each timed once: reference_worker
    ._holdouts): outputs checked as the timed runs' are, and their time bounds the
    reported one from below (perf.holdout_floor)."""
    indices = bundle.meta["timing"].get("holdout_indices") or []
    if not indices or o.timing is None or o.failures:
        return
    ms = (report.get("timing") or {}).get("holdout_ms")
    if not (isinstance(ms, list) and len(ms) == len(indices) and all(
            isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in ms)):
        o.fail("timing", "no valid time for the holdout runs (new inputs, timed once)")
        return
    _check_runs(o, indices, held, staged, bundle, device, "holdout run",
                " (new inputs, timed once)")
    median, ratio, reason = perf.holdout_floor(o.timing["median_ms"], ms)
    o.timing["holdout_ratio"] = round(ratio, 4)
    if reason:
        o.fail("timing", reason)
    elif median > o.timing["median_ms"]:
        o.timing["median_ms"], o.timing["holdout_raised"] = median, True
