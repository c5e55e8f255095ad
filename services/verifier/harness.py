"""Sandboxed candidate harness: copied into the candidate's private dir and run there.

It reads its job (one JSON line) from stdin, captures the real torch/triton
functions, installs the launch counter and the aten tracer, and only THEN
imports the solution. It writes outputs (raw records: records.py) and a report for
the trusted parent. Nothing it writes decides a pass on its own: the parent
recomputes the verdict from the tensors; the report can only add rejections.
Standalone: the repo is not visible here, so it imports only torch/triton.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import select
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

# Control pipe to the parent (READY/DONE): the candidate's prints cannot forge it.
_CTRL = os.fdopen(int(sys.stdin.readline()), "w", buffering=1)

# Trusted start-up first, so the parent can start this process before it has a
# candidate: the job (and with it the solution file) arrives only after KZ-WARM.
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # kz_checks, kz_timing, ...
# Before the candidate: these modules bind the real torch functions at import.
from kz_build import build_all  # noqa: E402
from kz_checks import flatten, output_problems, rotating, unchanged  # noqa: E402
from kz_jit_warm import CBuilds, warm_triton  # noqa: E402
from kz_records import Pending  # noqa: E402
from kz_timing_stats import LongestStep  # noqa: E402
from kz_trace import (WRAPPED, State, Tracer, brief, compiling_only,  # noqa: E402
                      configure, echo_calls, host_read_errors, install_launch_counter,
                      poison_allocator, prewarm, reserve_poison, warm_kernels)

prewarm()  # Triton, its driver and the CUDA context while no candidate waits
_JIT_WARM_S = warm_triton()  # before WARM: the pool's stubs keep what it built
C_BUILDS = CBuilds()
C_BUILDS.install()  # from here on, the candidate's own C builds (diagnostics)
_CPU_WARM = round(time.process_time(), 3)  # CPU seconds of the start-up (diagnostics)
_CTRL.write("KZ-WARM\n")
reserve_poison()
_WARM_S = time.monotonic()
warm_kernels()  # the first call's kernel loads, off the shared lock
_WARM_S = round(time.monotonic() - _WARM_S, 4)  # its seconds (diagnostics)
JOB = json.loads(sys.stdin.readline())  # before anything the candidate could touch

_load, _save, _equal, _pin = torch.load, torch.save, torch.equal, torch.Tensor.pin_memory
_cuda_sync = torch.cuda.synchronize
_threads = threading.active_count
configure(JOB["allowed_aten"], JOB["poisoned_aten"], JOB["int_poison"], JOB["device"],
          JOB["host_read_budget"])
DEVICE = JOB["device"]
REPORT: dict = {"nonce": JOB["nonce"], "calls": [], "errors": [], "integrity": [],
                "steps_s": {"warm_kernels": _WARM_S, "warm_triton": _JIT_WARM_S or 0.0}}
_T0 = [time.monotonic()]


_STEP = LongestStep()  # the longest shared step (GO to the next word) and its laps


def _mark(step: str, since: list[float] = _T0) -> None:
    """Seconds since the last mark, per step: diagnostics only (the parent never trusts them).
    Steps inside a call pass their own `since` and add up over the calls."""
    now = time.monotonic()
    steps = REPORT.setdefault("steps_s", {})
    steps[step] = round(steps.get(step, 0.0) + now - since[0], 4)
    if step != "calls":  # a part of the current shared step (not the calls' total)
        _STEP.lap(step, since[0], now)
    since[0] = now


def _import_solution() -> object:
    path = os.path.join(JOB["work"], "solution.py")
    spec = importlib.util.spec_from_file_location("kz_solution", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kz_solution"] = mod
    spec.loader.exec_module(mod)
    return mod


def _to_device(x: object) -> object:
    return x.to(DEVICE) if isinstance(x, torch.Tensor) else x


def _pinned(x: object) -> object:
    """A holdout input, page-locked while it waits (its copy in the run is then fast)."""
    if isinstance(x, torch.Tensor) and DEVICE == "cuda":
        try:
            return _pin(x)
        except RuntimeError:
            return x
    return x


def _read(name: str, loaded: dict[str, list]) -> list:
    return loaded.get(name) or _load(os.path.join(JOB["inputs"], name), weights_only=True)


def _run_call(model: torch.nn.Module, call: dict, index: int, cpu_inputs: list) -> None:
    t = [time.monotonic()]
    inputs = [_to_device(x) for x in cpu_inputs]
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    _mark("call_inputs", t)
    if DEVICE == "cuda" and poison_allocator():
        REPORT["poison_reserved"] = REPORT.get("poison_reserved", 0) + 1  # cudaMallocs, diagnostics
    _mark("call_poison", t)
    threads0 = _threads()
    State.reset()
    rec: dict = {"index": index, "errors": []}
    tracer = Tracer()
    try:
        with torch.no_grad(), tracer:
            out = model(*inputs)
        if DEVICE == "cuda":
            _cuda_sync()  # surfaces asynchronous kernel faults inside this call
    except BaseException as exc:  # noqa: BLE001 - every failure is a verdict
        rec["errors"].append(["runtime", f"forward raised {type(exc).__name__}: {str(exc)[:300]}"])
        out = None
    _mark("call_forward", t)
    rec["launches"], rec["aten_violations"] = State.launches, sorted(set(State.violations))[:20]
    if State.side_stream:
        rec["errors"].append(["runtime", f"{State.side_stream} Triton launches on a non-default "
                                         "stream (side stream escapes the timer)"])
    rec["errors"].extend(host_read_errors())
    if _threads() != threads0:
        rec["errors"].append(["runtime", "forward started threads (thread compute outside the "
                                          "traced thread)"])
    changed = [i for i, (a, b) in enumerate(zip(inputs, before)) if not unchanged(a, b)]
    if changed:
        rec["errors"].append(["runtime", f"forward modified its inputs {changed} (input mutation)"])
    outs = flatten(out) if out is not None else None
    if out is not None and outs is None:
        rec["errors"].append(["output", f"forward returned {type(out).__name__}, "
                                        "expected tensor(s)"])
    if outs is not None:
        rec["errors"].extend(["output", p] for p in output_problems(outs, inputs,
                                                                     list(model.parameters())))
        tensors = [o if type(o) is torch.Tensor else None for o in outs]
        # Inputs travel back (for the parent's own mutation/alias checks) on the first call
        # of each shape only: every call gets the harness-side checks above anyway.
        PENDING.add(f"call_{index}", {"outputs": tensors,
                                      "inputs_after": inputs if call.get("save_inputs") else None})
    REPORT["calls"].append(rec)
    _mark("call_checks", t)


def _integrity() -> list[str]:
    problems = []
    for cls, wrapper in WRAPPED:
        if cls.run is not wrapper:
            problems.append(f"{cls.__name__}.run was replaced (launch counter tampering)")
    if torch.load is not _load or torch.save is not _save or torch.equal is not _equal:
        problems.append("torch.load/save/equal were replaced (harness tampering)")
    if DEVICE == "cuda" and (torch.cuda.Event.elapsed_time is not TIMER.elapsed
                             or torch.cuda.Event.record is not TIMER.record
                             or torch.cuda.synchronize is not TIMER.sync):
        problems.append("torch.cuda.Event/synchronize were replaced (timer tampering)")
    return problems


def _timing(models: dict[int, torch.nn.Module], loaded: dict[str, list]) -> None:
    spec = JOB["timing"]
    model = models[spec["shape_index"]]
    if JOB.get("gated"):
        # The shared lock goes now, not at READY: the inputs are read and copied to the
        # device without it (0.3-0.4 s per candidate on the H200; every timed phase
        # on the host waited for such steps to end). Only this harness runs meanwhile.
        _CTRL.write("KZ-IDLE\n")
        _STEP.end()
    # The timed sets are correctness trials, already read for the calls (`loaded`: a
    # candidate that altered those host copies gets outputs the parent finds wrong).
    part = [time.monotonic()]  # the parts of `timing_inputs` (0.87 s median, H100 batch)
    sets = [[_to_device(x) for x in _read(f, loaded)] for f in spec["files"]]
    _mark("timing_inputs_sets", part)
    held = spec.get("holdout_files", [])
    # The holdout files are in the inputs dir only from this request to READY (the parent
    # links them in now and takes them away before the timed runs); their contents stay
    # in (pinned) host memory until their own runs, after the timed ones.
    if held and not _gate("KZ-HOLDOUTS"):
        return
    _mark("timing_inputs_ask", part)
    raw = [_read(f, loaded) for f in held]
    _mark("timing_inputs_holdouts_load", part)
    sets += [[_pinned(x) for x in s] for s in raw]
    _mark("timing_inputs_holdouts_pin", part)
    args, loads = rotating(sets)  # one set of input objects, each set's contents in turn
    fns = [lambda a=a: model(*a) for a in args]
    n = len(spec["files"])  # the rest are holdouts: new contents, each run once, last
    _mark("timing_inputs")
    # The parent takes the exclusive GPU lock, then says go; the calls' outputs are written
    # meanwhile, a chunk per step (H200: ~1 s waited here, ~0.8 s of writes after timing).
    if not _gate("KZ-READY", meanwhile=PENDING.step):
        return
    _mark("exclusive_wait")
    State.launches, State.side_stream = 0, 0
    with torch.no_grad():
        stats = TIMER.time(fns[:n], warmup=spec["warmup"], runs=spec["runs"],
                           prepare=loads[:n] if loads else None)
        held_ms, held = TIMER.once(fns[n:], loads[n:] if loads else None) if fns[n:] \
            else ([], [])
    launches, side_stream = State.launches, State.side_stream
    echo = echo_calls(fns[:n], loads)  # still under the exclusive lock: it runs kernels
    _CTRL.write("KZ-DONE\n")  # the parent releases the GPU lock; saving happens after
    _mark("timed")
    last = stats.pop("last_outputs")
    if side_stream:  # a kernel that behaves only while timed is caught here too
        REPORT["errors"].append(["timing", f"{side_stream} Triton launches on a "
                                 "non-default stream during the timed runs (side stream "
                                 "escapes the timer)"])
    if not launches:
        REPORT["errors"].append(["timing", "no Triton launch during the timed runs"])
    REPORT["errors"].extend(echo)
    REPORT["timing"] = {**stats, "holdout_ms": held_ms,
                        "holdout_margin_ms": TIMER.once_margin_ms}
    for name, outputs in (("timed", last), ("holdout", held)):
        for k, out in enumerate(outputs):
            outs = flatten(out)
            tensors = [o if type(o) is torch.Tensor else None for o in outs] if outs else []
            PENDING.add(f"{name}_{k}", {"outputs": tensors, "inputs_after": None})


def _write_report() -> None:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # gcc builds of Triton launchers
    REPORT["cpu_s"] = {"warm": _CPU_WARM, "total": round(time.process_time() + kids.ru_utime
                                                         + kids.ru_stime, 3)}
    REPORT["steps_s"].update(C_BUILDS.report())
    if _STEP.longest["step_max"] > 0:  # a shared step ended: the longest, with its laps
        REPORT["steps_s"].update(_STEP.longest)
    if torch.cuda.is_initialized():  # diagnostics: what this sandbox took of the shared device
        REPORT["gpu_peak_mb"] = torch.cuda.max_memory_reserved() >> 20
    path = os.path.join(JOB["work"], "out", "report.json")
    with open(path, "w") as f:
        json.dump(REPORT, f)


# Outputs to write, each {"outputs": [...], "inputs_after": [...] or None} as a record:
# written with no GPU lock held, while the timed phase waits for GO and after it.
PENDING = Pending(os.path.join(JOB["work"], "out"))


def _gate(word: str, meanwhile: Callable[[], bool] | None = None) -> bool:
    """Ask the parent for a GPU phase (KZ-SHARED / KZ-YIELD / KZ-READY) or the holdout files
    (KZ-HOLDOUTS), wait for GO (CUDA only), calling `meanwhile()` until GO or False."""
    if not JOB.get("gated"):
        return True
    _STEP.end()
    _CTRL.write(word + "\n")
    if meanwhile is not None:
        t = time.monotonic()
        while not select.select([sys.stdin], [], [], 0)[0] and meanwhile():
            pass
        steps = REPORT.setdefault("steps_s", {})
        steps[f"{word}_meanwhile"] = round(time.monotonic() - t, 4)
    go = sys.stdin.readline().strip() == "GO"
    if word in ("KZ-SHARED", "KZ-YIELD"):
        _STEP.begin()
    return go


def _warmup(models: dict[int, torch.nn.Module], inputs: list[list],
            compile_only: bool = True) -> None:
    """One unrecorded call per shape, so that no recorded call compiles. Lock-free, its
    kernels compile but never launch (kz_trace's compile_only: stopping this sandbox while
    another is timed would not stop GPU work it had queued); autotuners, which must launch
    their configs to choose one, run again with `compile_only=False` under the lock."""
    seen = set()
    with compiling_only(compile_only):
        for call, cpu_inputs in zip(JOB["calls"], inputs):
            if call["shape_index"] in seen:
                continue
            seen.add(call["shape_index"])
            try:
                with torch.no_grad():
                    models[call["shape_index"]](*[_to_device(x) for x in cpu_inputs])
                _cuda_sync()
            except BaseException:  # noqa: BLE001 - the recorded call will report it
                pass


def _failed(stage: str, reason: str) -> None:
    REPORT["errors"].append([stage, reason])
    _write_report()


def main() -> None:
    global TIMER
    sys.path.insert(0, JOB["work"])
    os.makedirs(os.path.join(JOB["work"], "out"), exist_ok=True)
    if DEVICE == "cuda":
        from kz_timing import Timer

        spec = JOB.get("timing")
        TIMER = Timer(spec["flush_bytes"], spec.get("adaptive_shadow", True)) if spec \
            else Timer(1 << 20)
    install_launch_counter()
    _mark("setup")
    try:
        mod = _import_solution()
    except BaseException as exc:  # noqa: BLE001
        REPORT["stage"] = "import"
        _failed("import", f"import failed: {brief(exc)}")
        return
    _mark("import")
    with compiling_only():  # no lock yet: the constructor's kernels compile, do not run
        built = build_all(mod, JOB, _load)
    rebuild = bool(State.held_back or State.tuning_deferred)
    if isinstance(built, str) and not rebuild:
        _failed("import", built)
        return
    models = built if isinstance(built, dict) else {}
    inputs = [_load(os.path.join(JOB["inputs"], c["file"]), weights_only=True)
              for c in JOB["calls"]]
    _mark("build_and_load")
    if DEVICE == "cuda" and models:
        _warmup(models, inputs)
    _mark("compile")
    if not _gate("KZ-SHARED"):
        return
    _mark("shared_wait")
    if rebuild:  # with the lock now, and its kernels launched: as the recorded calls need
        built = build_all(mod, JOB, _load)
        if isinstance(built, str):
            _failed("import", built)
            return
        models = built
        _mark("rebuild")
    tune = DEVICE == "cuda" and (rebuild or State.tuning_deferred)
    if tune:  # untraced, as the warm-up: the recorded calls are checked
        _warmup(models, inputs, compile_only=False)
        _mark("tune")
    for call_index, call in enumerate(JOB["calls"]):
        # Between calls the shared lock may go to a waiting timed phase (which waits for
        # every shared holder): a call is ~0.07 s, all of them ~0.6 s on the H200.
        if (call_index or tune) and not _gate("KZ-YIELD"):
            return
        _run_call(models[call["shape_index"]], call, call_index, inputs[call_index])
        _write_report()  # incremental: a later crash keeps what was learnt
    _mark("calls")
    REPORT["integrity"] = _integrity()
    clean = not REPORT["errors"] and not REPORT["integrity"] and all(
        not c["errors"] and not c["aten_violations"] and c["launches"] for c in REPORT["calls"])
    if JOB.get("timing") and clean and JOB["timing"]["shape_index"] in models:
        try:
            _timing(models, {c["file"]: x for c, x in zip(JOB["calls"], inputs)})
        except BaseException as exc:  # noqa: BLE001
            REPORT["errors"].append(["timing", f"timing failed: {brief(exc)}"])
        REPORT["integrity"] = _integrity()
    elif JOB.get("gated"):
        _CTRL.write("KZ-DONE\n")  # not timed: the shared lock is free while outputs are saved
        _STEP.end()
    PENDING.flush()
    _mark("save_outputs")
    _write_report()


TIMER: Any = None  # kz_timing.Timer, made before the solution is imported
if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:  # noqa: BLE001
        # the error's own first words too: a long message (CUDA's out-of-memory one is ~600
        # characters) would lose them in the traceback's tail, and the parent reads them
        REPORT["errors"].append(["runtime", f"harness crashed: {brief(exc)} | "
                                            + traceback.format_exc()[-400:]])
        _write_report()
    sys.stdout.flush()
    _CTRL.write("KZ-SAVED\n")  # the parent clocks the process's end from here (diagnostics)
    os._exit(0)  # skip interpreter teardown: candidate atexit hooks / __del__ cannot run
