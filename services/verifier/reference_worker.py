"""Reference worker: runs the PROBLEM (never a candidate) in its own sandboxed process.

It draws inputs from the parent's fresh seeds, computes the same-dtype reference
outputs with Model, applies the trivial-solution gate, computes a float64
reference where it can (kz_hi), times Model/ModelOpt on CUDA, and writes
everything to its private work dir. The parent moves the inputs
to a read-only dir candidates see and keeps the references in its own memory.
Standalone (torch only): kz_problem_api, kz_numerics, kz_hi, kz_timing (and its
kz_timing_stats) are copied next to it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from typing import Any

# Control pipe to the parent (READY/DONE): the candidate's prints cannot forge it.
_CTRL = os.fdopen(int(sys.stdin.readline()), "w", buffering=1)
_T0 = time.monotonic()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # kz_problem_api, kz_hi, ...

# Start-up before the job, so the parent can start this process before it has a problem
# (services/verifier/reference.py keeps one warm): torch, and on a GPU host the CUDA context.
import torch  # noqa: E402

# No zip CRC32 over the saved inputs/references (half of torch.save's CPU): the files
# live in this bundle's private dir and the parent reads them straight back.
getattr(torch.serialization, "set_crc32_options", lambda _: None)(False)
from kz_hi import HiReference  # noqa: E402
from kz_numerics import Tol, trivial_matches, warm_kernels  # noqa: E402
from kz_problem_api import build, dims, flatten, load, select_shapes, set_dims  # noqa: E402
from kz_timing_stats import LongestStep  # noqa: E402

if torch.cuda.is_available():
    torch.empty(1, device="cuda")
_CTRL.write("KZ-WARM\n")
_WARM_S = time.monotonic()
try:  # while no job waits: a first trial would load these kernels under the shared lock
    if torch.cuda.is_available():
        warm_kernels("cuda")
except Exception:  # noqa: BLE001 - the first trial loads them then
    pass
_WARM_S = time.monotonic() - _WARM_S
_STARTUP_S = time.monotonic() - _T0
JOB = json.loads(sys.stdin.readline())
_T0 = time.monotonic()

DEVICE = JOB["device"]
META: dict = {"nonce": JOB["nonce"], "shapes": [], "trials": [], "errors": [],
              "non_discriminating": []}
_SEEDS = iter(JOB["seeds"])
# Trial files are written after the trials, without the GPU lock (_publish), not inside
# them: a trial holds the shared GPU lock, and every timed phase on the host waits for all
# shared holders (on the H200, 0.94 s of a candidate's median 1.26 s wait for the exclusive
# lock was for them). Kept in memory meanwhile, up to _PENDING_MAX bytes (past that they
# are written at once, in the trial's lock-free tail: _pause).
_PENDING: list[tuple[object, str]] = []
_PENDING_MAX = 2 << 30
_KEPT_INPUTS: dict[str, list] = {}  # trial file name -> its inputs (the timed runs use them)
# Seconds per step of the trials, summed over them (diagnostics: where a bundle's time goes;
# `host`: the lock-free host copies and saves, `yield`: the wait for the GPU lock)
_STEPS: dict[str, float] = {"draw": 0.0, "gate": 0.0, "hi": 0.0, "host": 0.0, "yield": 0.0}


_STEP = LongestStep()  # the longest shared step (GO to PAUSE) and its laps: diagnostics


def _lap(step: str, since: float) -> float:
    now = time.monotonic()
    _STEPS[step] = _STEPS.get(step, 0.0) + now - since
    _STEP.lap(step, since, now)
    return now


def _nbytes(obj: object) -> int:
    items = obj if isinstance(obj, (list, tuple)) else [obj]
    return sum(x.numel() * x.element_size() for x in items if isinstance(x, torch.Tensor))


def _save_later(obj: object, path: str) -> None:
    _PENDING.append((obj, path))
    if sum(_nbytes(o) for o, _ in _PENDING) > _PENDING_MAX:
        _flush()


def _flush() -> None:
    for obj, path in _PENDING:
        torch.save(obj, path)
    _PENDING.clear()


def _scaled(inputs: list[object], exp: int) -> list[object]:
    # Powers of two keep every float exactly representable (barring overflow).
    return [x * (2.0 ** exp) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in inputs]


def _tol(t: torch.Tensor) -> Tol:
    a, r, n = JOB["tolerances"].get(str(t.dtype).replace("torch.", ""), (0, 0, 0))
    return Tol(a, r, n)


# Model's float64 result where it refines the same-dtype one (kz_hi: what, and its limits)
HI = HiReference(float(JOB.get("hi_budget_s", 0.0)), DEVICE, _tol, flatten)


def _draw(mod: Any, model: torch.nn.Module, exp: int) -> tuple[int, list, list]:
    """A fresh draw: (seed, inputs, references), scaled and run where the model runs. The
    host copies for the files are made later, without the GPU lock (_to_host)."""
    seed = next(_SEEDS)
    torch.manual_seed(seed)
    random.seed(seed)
    dev = [_dev(x) for x in mod.get_inputs()]
    dev = _scaled(dev, exp) if JOB["scale_inputs"] else dev
    if DEVICE == "cuda":  # this run's memory, inputs included, to size the float64 one
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    # Model runs on copies: one that writes its inputs leaves the drawn ones (files, gate,
    # float64 run) as they were.
    run = [x.clone() if isinstance(x, torch.Tensor) else x for x in dev]
    with torch.no_grad():
        refs = [r.detach() for r in flatten(model(*run))]
    if DEVICE == "cuda":
        HI.peak = torch.cuda.max_memory_allocated() - base
    del run
    return seed, dev, refs


def _to_host(dev_inputs: list, dev_refs: list, dev_his: list) -> tuple[list, list, list]:
    """Host copies of a trial's inputs and references (same-dtype and float64-derived),
    for its files. Called paused (no GPU lock held): on the H200 a trial's shared step was
    mostly these PCIe copies, and every timed phase waited for such steps. A paused
    sandbox is stopped while another is timed, so the copies do not overlap a timed run.
    On the CPU .cpu() is the tensor itself: the references are cloned (the model's
    outputs may be views of its state)."""
    inputs = [x.cpu() if isinstance(x, torch.Tensor) else x for x in dev_inputs]
    refs = [r.cpu() if DEVICE == "cuda" else r.clone() for r in dev_refs]
    return inputs, refs, [h.cpu() if h is not None else None for h in dev_his]


def _dev(x: object) -> object:
    return x.to(DEVICE) if isinstance(x, torch.Tensor) else x


def _trial(mod: object, model: torch.nn.Module, hi: torch.nn.Module | None, s: int,
           t: int) -> None:
    rng = random.Random(JOB["seeds"][0] + 31 * s + t)
    exp = [0, rng.choice([1, 2]), -rng.choice([1, 2])][t] if t < 3 else rng.randint(-2, 2)
    hits: list[str] = []
    clock = time.monotonic()
    for attempt in range(JOB["max_redraws"] + 1):
        seed, dev_inputs, dev_refs = _draw(mod, model, exp)
        if not all(bool(torch.isfinite(r).all()) for r in dev_refs if r.is_floating_point()):
            # our scaling overflowed: redraw unscaled
            seed, dev_inputs, dev_refs = _draw(mod, model, 0)
        clock = _lap("draw", clock)
        # the gate runs where the data is (fast on GPU)
        hits = [", ".join(h) for r in dev_refs
                if (h := trivial_matches(r, dev_inputs, _tol(r)))]
        clock = _lap("gate", clock)
        if len(hits) < len(dev_refs):
            break
        exp += 2  # non-discriminating: redraw with larger magnitudes
    dev_his = HI.refs(hi, dev_inputs, dev_refs)
    clock = _lap("hi", clock)
    _pause()  # the rest needs no lock; the next _resume asks for it again
    inputs, refs, his = _to_host(dev_inputs, dev_refs, dev_his)
    del dev_inputs, dev_refs, dev_his
    name = f"in_{s}_{t}.pt"
    _KEPT_INPUTS[name] = inputs
    _save_later(inputs, os.path.join(JOB["work"], "inputs", name))
    _save_later(refs, os.path.join(JOB["work"], "ref", f"ref_{s}_{t}.pt"))
    hi_file = f"hi_{s}_{t}.pt" if any(h is not None for h in his) else None
    if hi_file:  # only outputs the float64 run refines: most trials store nothing extra
        _save_later(his, os.path.join(JOB["work"], "ref", hi_file))
    _lap("host", clock)
    if len(hits) == len(refs):
        META["non_discriminating"].append(f"shape {s} trial {t}: trivial outputs pass ({hits})")
    META["trials"].append({"shape_index": s, "trial": t, "seed": seed, "scale_exp": exp,
                           "file": name, "redraws": attempt, "trivial": hits,
                           "hi_file": hi_file})
    if t == 0:
        META["shapes"][s]["outputs"] = [{"dtype": str(r.dtype).replace("torch.", ""),
                                         "shape": list(r.shape), "stride": list(r.stride())}
                                        for r in refs]
        META["shapes"][s]["input_bytes"] = sum(x.numel() * x.element_size() for x in inputs
                                               if isinstance(x, torch.Tensor))
        META["shapes"][s]["output_bytes"] = sum(r.numel() * r.element_size() for r in refs)


def _shape(mod: object, s: int, overrides: dict) -> torch.nn.Module:
    clock = time.monotonic()
    set_dims(mod, overrides)
    init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
    init_seed = next(_SEEDS)
    model = build(mod, "Model", init, init_seed, DEVICE).eval()
    torch.save(init, os.path.join(JOB["work"], "inputs", f"init_{s}.pt"))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    state_file = f"state_{s}.pt" if state else None
    if state_file:
        torch.save(state, os.path.join(JOB["work"], "inputs", state_file))
    META["shapes"].append({"overrides": overrides, "dims": dims(mod), "init_file": f"init_{s}.pt",
                           "init_seed": init_seed, "state_file": state_file})
    _lap("shape", clock)
    return model


def _baselines(mod: object, s: int, model: torch.nn.Module) -> dict:
    opt = None
    if hasattr(mod, "ModelOpt"):
        init = torch.load(os.path.join(JOB["work"], "inputs", f"init_{s}.pt"), weights_only=True)
        opt = build(mod, "ModelOpt", init, META["shapes"][s]["init_seed"], DEVICE).eval()
        if model.state_dict():
            opt.load_state_dict(model.state_dict(), strict=False)
    return {"naive": model, "optimized": opt}


def _timing_shape() -> int:
    """The shape the candidates and the baselines are timed on: the most input bytes."""
    return max(range(len(META["shapes"])), key=lambda i: META["shapes"][i].get("input_bytes", 0))


def _holdouts(mod: object, models: dict[int, torch.nn.Module]) -> bool:
    """Trials of the timed shape that no correctness call shows a candidate (appended after
    every other trial, flagged `holdout`): the timed runs repeat inputs the candidate has
    seen, so a model that caches outputs by input CONTENTS (a fingerprint of a few
    elements costs next to nothing) could time its cache. Each holdout is timed once,
    after the timed runs, and checked; new contents cannot come from a cache. False when
    the parent said stop."""
    if not _resume():
        return False
    s = _timing_shape()
    set_dims(mod, META["shapes"][s]["overrides"])
    hi = HI.model(models[s])
    for h in range(int(JOB["timing"].get("holdouts", 0))):
        if not _resume():
            return False
        _trial(mod, models[s], hi, s, JOB["trials"] + h)
        META["trials"][-1]["holdout"] = True
    return True


def _plan() -> dict:
    """What candidates are timed on: the timed shape's trials, then its holdouts."""
    s = _timing_shape()
    trials = [i for i, t in enumerate(META["trials"])
              if t["shape_index"] == s and not t.get("holdout")]
    holdouts = [i for i, t in enumerate(META["trials"]) if t.get("holdout")]
    return {"shape_index": s, "files": [META["trials"][i]["file"] for i in trials],
            "trial_indices": trials, "holdout_indices": holdouts,
            "holdout_files": [META["trials"][i]["file"] for i in holdouts]}


def _publish() -> None:
    """Hand the parent the bundle's correctness part before the baselines are timed: the
    trial files and JOB["published"] (this META so far). Candidates need only these, and the
    baseline timing waits for the exclusive GPU lock (a whole bundle's 1-4 s on the H200,
    the first verdicts of a batch waiting behind it). The files are written lock-free."""
    if JOB.get("gated"):
        _CTRL.write("KZ-IDLE\n")
    _STEP.end()
    _flush()
    tmp = os.path.join(JOB["work"], JOB["published"] + ".tmp")
    with open(tmp, "w") as f:
        json.dump(META, f, default=str)
    os.rename(tmp, os.path.join(JOB["work"], JOB["published"]))
    _CTRL.write("KZ-PUBLISH\n")


def _timing(mod: object, models: dict[int, torch.nn.Module]) -> None:
    from kz_timing import Timer

    spec = JOB["timing"]
    out = META["timing"]
    s = out["shape_index"]
    sets = [[_dev(x) for x in _KEPT_INPUTS[META["trials"][i]["file"]]]
            for i in out["trial_indices"]]
    set_dims(mod, META["shapes"][s]["overrides"])
    baselines = _baselines(mod, s, models[s])
    timer = Timer(spec["flush_bytes"], spec.get("adaptive_shadow", True))
    if not _gate("KZ-READY"):
        return
    with torch.no_grad():
        for name, m in baselines.items():
            if m is not None:
                fns = [lambda m=m, x=x: m(*x) for x in sets]
                stats = timer.time(fns, warmup=spec["warmup"], runs=spec["runs"])
                stats.pop("last_outputs")
                out[name] = stats
        if JOB.get("measure_peak"):
            META["peak"] = _peak(timer)
    _CTRL.write("KZ-DONE\n")


def _peak(timer: object) -> dict:
    """Measured copy bandwidth (bytes/s, read+write) and matmul FLOP/s per float dtype."""
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    st = timer.time([lambda: b.copy_(a)], warmup=3, runs=20)  # type: ignore[attr-defined]
    peak = {"copy_bytes_per_s": 2 * a.numel() * 4 / (st["median_ms"] * 1e-3), "flops": {}}
    n = 4096
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(n, n, device="cuda", dtype=dt)
        y = torch.randn(n, n, device="cuda", dtype=dt)
        st = timer.time([lambda x=x, y=y: x @ y], warmup=3, runs=10)  # type: ignore[attr-defined]
        peak["flops"][str(dt).replace("torch.", "")] = 2 * n ** 3 / (st["median_ms"] * 1e-3)
    peak["device_name"] = torch.cuda.get_device_name()
    return peak


_PAUSED = [False]  # the shared lock was let go (_pause) and not asked for again yet


def _pause() -> None:
    """Let the shared GPU lock go for lock-free work (_resume asks for it again)."""
    if JOB.get("gated"):
        _CTRL.write("KZ-PAUSE\n")
    _STEP.end()
    _PAUSED[0] = True


def _resume() -> bool:
    """Before GPU work: the shared lock again, if paused (a waiting timed phase goes
    first). False when the parent said stop."""
    if not _PAUSED[0]:
        return True
    _PAUSED[0] = False
    return _gate("KZ-YIELD")


def _gate(word: str) -> bool:
    """Ask the parent for a GPU phase (shared: trials; exclusive: timing), wait for GO."""
    if not JOB.get("gated"):
        return True
    t = time.monotonic()
    _CTRL.write(word + "\n")
    go = sys.stdin.readline().strip() == "GO"
    if word == "KZ-YIELD":
        _lap("yield", t)
    if word != "KZ-READY":  # a shared step begins
        _STEP.begin()
    return go


def main() -> None:
    os.makedirs(os.path.join(JOB["work"], "inputs"), exist_ok=True)
    os.makedirs(os.path.join(JOB["work"], "ref"), exist_ok=True)
    mod = load(JOB["work"], DEVICE)
    META["meta"] = getattr(mod, "KZ_META", None)
    META["has_opt"] = hasattr(mod, "ModelOpt")
    if DEVICE == "cuda":
        META["device_name"] = torch.cuda.get_device_name()
    models = {}
    if not _gate("KZ-SHARED"):
        return
    for s, overrides in enumerate(select_shapes(mod, JOB["max_shapes"])):
        if not _resume():
            return
        models[s] = _shape(mod, s, dict(overrides))
        hi = HI.model(models[s])
        for t in range(JOB["trials"]):
            if not _resume():  # each trial ends paused: a waiting timed phase goes first
                return
            _trial(mod, models[s], hi, s, t)
        del hi
    if JOB.get("timing") and not _holdouts(mod, models):
        return
    META["hi_ref_notes"] = sorted(HI.notes)
    META["hi_ref_s"] = round(HI.spent_s, 4)
    META["steps_s"] = {"startup": round(_STARTUP_S, 3),  # diagnostics only
                       "warm_kernels": round(_WARM_S, 3),
                       "trials": round(time.monotonic() - _T0, 3),
                       **{f"trials_{k}": round(v, 3) for k, v in _STEPS.items()},
                       **_STEP.longest}
    t_save = time.monotonic()
    if JOB.get("timing"):
        META["timing"] = _plan()
    _publish()
    META["steps_s"]["save"] = round(time.monotonic() - t_save, 3)
    if JOB.get("timing"):
        t_timing = time.monotonic()
        _timing(mod, models)
        META["steps_s"]["timing"] = round(time.monotonic() - t_timing, 3)
    META["steps_s"]["cpu"] = round(time.process_time(), 3)  # the worker's CPU seconds
    if DEVICE == "cuda":  # diagnostics: what this worker took of the shared device
        META["gpu_peak_mb"] = torch.cuda.max_memory_reserved() >> 20


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001
        META["errors"].append(traceback.format_exc()[-1500:])
    with open(os.path.join(JOB["work"], "meta.json"), "w") as f:
        json.dump(META, f, default=str)
    sys.stdout.flush()
    os._exit(0)
