"""Run one candidate in the sandbox, then judge what it left behind (judgement.py)."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from services.verifier import policy as P
from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
from services.verifier.judgement import Outcome, judge, step
from services.verifier.options import VERIFIER_VERSION, VerifyOptions
from services.verifier.pool import SlotPool, stubs_dir
from services.verifier.reference import ReferenceBundle

__all__ = ["Outcome", "judge", "run", "source_hash"]

_HASH_LOCKS: dict[str, threading.Lock] = {}
_HASH_LOCKS_GUARD = threading.Lock()


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
    with step(steps, "slot"):
        slot = slots.take() if slots else SlotPool(options, mode, base, 0).take()
    try:
        job = _job(bundle, options, slot.inside)
        held = (job.get("timing") or {}).get("holdout_files", [])
        with step(steps, "load"), _hash_lock(key):  # identical sources share one cache in turn
            withheld = slot.load(solution_src, bundle.inputs_dir, cache, withhold=held)
        with step(steps, "sandbox"):
            res = slot.process.finish((json.dumps(job) + "\n").encode(), gates, withheld,
                                      after_timed, options.pause_compiling, gpu_place)
        with step(steps, "save_cache"), _hash_lock(key):
            slot.save_cache(cache, stubs_dir(options))
        return slot, job, res
    except BaseException:
        slot.close(keep=options.keep_artifacts)
        raise


def _job(bundle: ReferenceBundle, options: VerifyOptions, inside: M.View) -> dict[str, Any]:
    meta = bundle.meta
    job: dict[str, Any] = {
        "nonce": uuid.uuid4().hex, "device": options.device, "work": inside.work,
        "gated": options.device == "cuda",
        "inputs": inside.inputs, "allowed_aten": sorted(P.ALLOWED_ATEN_OPS),
        "poisoned_aten": sorted(P.POISONED_ATEN_OPS), "int_poison": P.INT_POISON,
        "host_read_budget": P.HOST_READ_BUDGET,
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
