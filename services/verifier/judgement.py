"""Judge what a candidate's sandbox left behind, from the parent's side.

The harness's report may only ADD rejections (launch counts, traced aten ops,
tampering); a pass needs the parent's own checks on the saved tensors: count,
plain tensors, dtype/shape/strides, no aliasing of inputs, inputs unmodified
against the parent's copy, numerics against references that never left the
parent, for every correctness call and for the timed runs.

The checks on the host (structure, inputs unmodified, naming a failure's pattern) hold no
GPU lock; only each record's compare does (`Place`: compare_device.where), one record at a
time, so that a timed phase on the host waits for one record's compare at most.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from services.verifier import compare_device as C
from services.verifier import perf, records, sandbox
from services.verifier import workspace as W
from services.verifier.gpu_memory import out_of_memory
from services.verifier.numerics import Comparison, Tol, compare_refs, is_contiguous_or_same
from services.verifier.options import VerifyOptions
from services.verifier.reference import ReferenceBundle

# Where one record's outputs are compared: given the record, a context that yields the
# device and the staged (page-locked) copies of its outputs, or None (compare_device.where
# takes the shared GPU lock for it; `on_host` takes none).
Place = Callable[[Any], AbstractContextManager[tuple[str, "list[Any] | None"]]]


def on_host(device: str = "cpu", staged: list[Any] | None = None) -> Place:
    """Every record compared on `device` (with `staged` copies of its outputs), no lock."""
    @contextmanager
    def place(_: Any) -> Iterator[tuple[str, list[Any] | None]]:
        yield device, staged

    return place


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


@contextmanager
def step(steps: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.monotonic()
    try:
        yield
    finally:
        steps[name] = steps.get(name, 0.0) + time.monotonic() - t0



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
    with step(steps, "judge_load"):  # every file first: the device section below is short
        out = work / "out"  # raw records (records.py): mapped, nothing unpickled
        calls = [records.read(out, f"call_{i}", cap) for i in range(len(job["calls"]))]
        timing = bundle.meta["timing"] if job.get("timing") else {}
        timed = [records.read(out, f"timed_{k}", cap)
                 for k in range(len(timing.get("trial_indices", [])))]
        held = [records.read(out, f"holdout_{k}", cap)
                for k in range(len(timing.get("holdout_indices", [])))]
    with step(steps, "judge_compare"):
        place = _gpu_place(options, gates, steps)
        for i, (call, data) in enumerate(zip(job["calls"], calls)):
            if data is None and not o.failures:
                o.fail("output", f"call {i}: no readable outputs")
            if data is not None:
                _check_call(o, data, i, bundle, f"call {i} ({_where(bundle, i)})",
                            expect_inputs=bool(call.get("save_inputs")), place=place)
        if not o.failures and job.get("timing"):
            _check_timing(o, timed, report, bundle, place)
            _check_holdouts(o, held, report, bundle, place)
    return o


def _gpu_place(options: VerifyOptions, gates: sandbox.Gates | None,
               steps: dict[str, float]) -> Place:
    """compare_device.where for each record (its lock waits and staging clocked)."""
    return lambda data: C.where(options, gates, steps, data)


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
                expect_inputs: bool = False, place: Place | None = None) -> None:
    """Call `i`'s record against its references. The host-side checks come first, with no
    lock; then `place` (default: the host's CPU) compares the outputs that passed them, on
    its device and from their staged copies where it has them (compare_device.Stager)."""
    todo = _host_checks(o, data, i, bundle, where, expect_inputs)
    if todo is None:
        return
    cmps: list[Comparison] = []
    if any(out is not None for _, out in todo):
        with (place or on_host())(data) as (device, staged):
            for j, out in todo:
                if out is not None:
                    same = staged[j] if staged and j < len(staged) and staged[j] is not None \
                        else out
                    cmps.append(_compare(same, bundle, i, j, device))
    results = iter(cmps)
    # The compares' verdicts, in output order, after any structure failure _host_checks
    # recorded (the verdict's stage is the earliest pipeline stage whatever the order).
    for j, out in todo:
        if out is None:
            continue
        cmp = next(results)
        o.max_rel_error = max(o.max_rel_error or 0.0, cmp.max_rel_error)
        if not cmp.ok:
            named = _name_it(o, out, bundle.inputs[i], i)
            o.fail("numerics", f"{where}: output {j}: {cmp.reason}{named}")
        o.seen.append((i, out))


def _host_checks(o: Outcome, data: Any, i: int, bundle: ReferenceBundle, where: str,
                 expect_inputs: bool) -> list[tuple[int, torch.Tensor | None]] | None:
    """The record's form, its inputs unmodified, each output's structure: the checks that
    need no device. Per output, the tensor to compare, or None where its structure failed
    (the failure recorded); None for the whole record when it cannot be compared at all."""
    refs = bundle.refs[i]  # the host copies: shapes, dtypes (the compare may use the GPU's)
    inputs = bundle.inputs[i]
    after = data.get("inputs_after") if isinstance(data, dict) else None
    if not (isinstance(data, dict) and isinstance(data.get("outputs"), list)
            and (after is None or isinstance(after, list))):
        o.fail("output", f"{where}: malformed output file")
        return None
    outs = data["outputs"]
    if len(outs) != len(refs):
        o.fail("output", f"{where}: {len(outs)} outputs, expected {len(refs)}")
        return None
    if expect_inputs and after is None:
        o.fail("output", f"{where}: inputs were not returned for checking")
        return None
    after = after or []
    if expect_inputs and (len(after) != len(inputs)
                          or not all(_same_bits(a, b) for a, b in zip(after, inputs))):
        o.fail("runtime", f"{where}: inputs were modified (input mutation)")
    in_ptrs = {x.untyped_storage().data_ptr() for x in after
               if type(x) is torch.Tensor and x.numel()}
    todo: list[tuple[int, torch.Tensor | None]] = []
    for j, (out, ref) in enumerate(zip(outs, refs)):
        bad = _structure(out, ref, in_ptrs)  # on the loaded tensor: its own strides, storage
        if bad:
            o.fail("output", f"{where}: output {j} {bad}")
        todo.append((j, None if bad else out))
    return todo


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
                  bundle: ReferenceBundle, place: Place | None = None) -> None:
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
    _check_runs(o, bundle.meta["timing"]["trial_indices"], timed, bundle, place,
                "timed run", " (output changed in timed runs)")


def _check_runs(o: Outcome, indices: list[int], outputs: list[Any], bundle: ReferenceBundle,
                place: Place | None, name: str, note: str = "") -> None:
    """The saved outputs of runs in the timed phase, against trials `indices`; every failure
    is a timing one (with `note` added)."""
    for k, (ti, data) in enumerate(zip(indices, outputs)):
        before = len(o.failures)
        if data is None:
            o.fail("timing", f"{name} {k}: no readable outputs")
            continue
        _check_call(o, data, ti, bundle, f"{name} {k}", place=place)
        for n in range(before, len(o.failures)):
            o.failures[n] = ("timing", o.failures[n][1] + note)


def _check_holdouts(o: Outcome, held: list[Any], report: dict[str, Any],
                    bundle: ReferenceBundle, place: Place | None = None) -> None:
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
    _check_runs(o, indices, held, bundle, place, "holdout run", " (new inputs, timed once)")
    median, ratio, reason = perf.holdout_floor(o.timing["median_ms"], ms)
    o.timing["holdout_ratio"] = round(ratio, 4)
    if reason:
        o.fail("timing", reason)
    elif median > o.timing["median_ms"]:
        o.timing["median_ms"], o.timing["holdout_raised"] = median, True
