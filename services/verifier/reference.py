"""Reference bundles: inputs (for candidates) and reference outputs (parent memory only)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from services.verifier import policy as P
from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
from services.verifier import workspace as W
from services.verifier.exceptions import ProblemError
from services.verifier.numerics import Tol
from services.verifier.options import VerifyOptions
from services.verifier.pool import SlotPool
from services.verifier.static_scope import parse

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class ReferenceBundle:
    """One problem's trial data, shared by every candidate verified against it."""

    key: str
    inputs_dir: Path
    meta: dict[str, Any]
    refs: list[list[torch.Tensor]]  # per trial index (meta["trials"] order)
    # Per trial and output: Model's float64 result rounded to the output dtype, where it
    # refines refs (numerics.accurate_reference); an output may match either.
    hi_refs: list[list[torch.Tensor | None]]
    inputs: list[list[Any]]  # the parent's own copy of every trial's inputs
    tolerances: dict[str, Tol]
    isolation: str
    family: str | None = None
    op: str | None = None
    notes: list[str] = field(default_factory=list)

    # Copies of a trial's refs/hi_refs on another device (the GPU the parent compares on),
    # made once, on first use: small outputs are compared on the CPU and never copied.
    _on: dict[tuple[str, int], tuple[list[torch.Tensor], list[torch.Tensor | None]]] = \
        field(default_factory=dict, repr=False)
    _on_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def tol_for(self, dtype: torch.dtype) -> Tol | None:
        return self.tolerances.get(str(dtype).replace("torch.", ""))

    def refs_on(self, device: str, i: int) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Trial `i`'s references (same-dtype, float64-derived) on `device`."""
        if device == "cpu":
            return self.refs[i], self.hi_refs[i]
        with self._on_lock:
            if (device, i) not in self._on:
                self._on[device, i] = ([r.to(device) for r in self.refs[i]],
                                       [h.to(device) if h is not None else None
                                        for h in self.hi_refs[i]])
            return self._on[device, i]


def problem_key(problem_src: str, options: VerifyOptions) -> str:
    h = hashlib.sha256(problem_src.encode())
    h.update(f"{options.device}|{options.trials}|{options.max_shapes}|{options.holdouts}"
             .encode())
    return h.hexdigest()[:24]


def literal_meta(problem_src: str) -> dict[str, Any]:
    """KZ_META read statically (problems are trusted but must parse); {} when absent."""
    try:
        tree = parse(problem_src)
    except SyntaxError as exc:
        raise ProblemError(f"problem source does not parse: line {exc.lineno}: {exc.msg}") from exc
    names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name)} | {n.name for n in tree.body
                                            if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = {"Model", "get_inputs"} - names
    if missing:
        raise ProblemError(f"problem source lacks {sorted(missing)}")
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "KZ_META"
                                             for t in n.targets):
            try:
                value = ast.literal_eval(n.value)
                return value if isinstance(value, dict) else {}
            except ValueError:
                return {}
    return {}


def tolerance_table(family: str | None) -> dict[str, Tol]:
    from kz_common.ops.tolerances import tolerance_for

    out = {}
    for name, dt in _DTYPES.items():
        t = tolerance_for(dt, family)
        out[name] = Tol(t.atol, t.rtol, t.rel_norm)
    return out


def _seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 2  # fresh and unpredictable per trial


class RefSlot:
    """A reference worker started ahead of its problem (torch imported, CUDA context made:
    3-5 s on the H200 host), in its own private dirs; it serves ONE problem."""

    def __init__(self, options: VerifyOptions, mode: str, base: Path) -> None:
        # A private copy of the shared cache: the sandbox uid never needs a path into
        # options.cache (which may sit in a dir it cannot traverse), and concurrent builds
        # never re-own one shared dir under each other.
        self.work, self.cache = W.new_dir(base, "ref"), W.new_dir(base, "refcache")
        self.shared = Path(options.cache) / "reference"
        if self.shared.is_dir():
            W.copy_tree(self.shared, self.cache)
        self.empty = W.new_dir(base, "noinputs")
        W.populate(self.work, {"reference_worker.py": W.PKG / "reference_worker.py",
                               "kz_numerics.py": W.PKG / "numerics.py",
                               "kz_timing.py": W.PKG / "timing.py"})
        view = M.View(str(self.work), str(self.empty), str(self.cache), options.device)
        self.inside = sandbox.inside_view(mode, view)
        limits = sandbox.Limits(options.reference_timeout_s, options.cpu_seconds,
                                options.memory_limit_mb << 20, options.nproc,
                                options.fsize_mb << 20, options.timing_timeout_s,
                                options.reference_timeout_s)  # trials run under the shared lock
        argv = [sys.executable, "-I", "-B", "-u", f"{self.inside.work}/reference_worker.py"]
        env = W.env_for(options.device, self.inside, interpret=False)
        try:
            self.process = sandbox.Process(mode, view, argv, env, limits, base)
        except BaseException:
            self.close()
            raise

    def load(self, problem_src: str) -> None:
        (self.work / "problem.py").write_text(problem_src)
        self.process.own()

    def close(self, keep: bool = False) -> None:
        if hasattr(self, "process"):
            self.process.discard()
        shutil.rmtree(self.cache, ignore_errors=True)
        if not keep:
            shutil.rmtree(self.work, ignore_errors=True)
            shutil.rmtree(self.empty, ignore_errors=True)


def build(problem_src: str, options: VerifyOptions, base: Path, mode: str,
          timing: bool, measure_peak: bool, gates: sandbox.Gates | None,
          slots: SlotPool | None = None) -> ReferenceBundle:
    """Run the reference worker for `problem_src` (a pre-started one from `slots`, else a
    fresh one); raise ProblemError if it is unusable."""
    meta_lit = literal_meta(problem_src)
    family = meta_lit.get("family") if isinstance(meta_lit.get("family"), str) else None
    tols = tolerance_table(family)
    slot = slots.take() if slots else RefSlot(options, mode, base)
    try:
        slot.load(problem_src)
        return _run(slot, options, base, timing, measure_peak, gates, tols, family, meta_lit)
    finally:
        slot.close(keep=options.keep_artifacts)


def _run(slot: RefSlot, options: VerifyOptions, base: Path, timing: bool,
         measure_peak: bool, gates: sandbox.Gates | None, tols: dict[str, Tol],
         family: str | None, meta_lit: dict) -> ReferenceBundle:
    job = {"device": options.device, "work": slot.inside.work, "nonce": uuid.uuid4().hex,
           "gated": gates is not None,
           "trials": options.trials, "max_shapes": options.max_shapes,
           "seeds": [_seed() for _ in range(64 + 8 * options.trials * options.max_shapes)],
           "tolerances": {k: [t.atol, t.rtol, t.rel_norm] for k, t in tols.items()},
           "max_redraws": options.max_redraws, "measure_peak": measure_peak,
           # float64 references are optional: they may cost at most a quarter of the
           # reference time limit, so a problem that fits the limit without them still fits
           "hi_budget_s": options.reference_timeout_s / 4,
           "scale_inputs": bool(meta_lit.get("scale_inputs", True)),
           "timing": {"warmup": options.warmup, "runs": options.n_timing_runs,
                      "flush_bytes": options.flush_mb << 20, "holdouts": options.holdouts,
                      "adaptive_shadow": options.adaptive_shadow} if timing else None}
    res = slot.process.finish((json.dumps(job) + "\n").encode(), gates)
    W.copy_tree(slot.cache, slot.shared)
    return _collect(slot.work, job, res, tols, family, meta_lit, base, options)


def _collect(work: Path, job: dict, res: sandbox.RunResult, tols: dict[str, Tol],
             family: str | None, meta_lit: dict, base: Path,
             options: VerifyOptions) -> ReferenceBundle:
    meta = W.load_json(work / "meta.json", 64 << 20)
    if meta is None or meta.get("nonce") != job["nonce"]:
        raise ProblemError(f"reference worker produced no result: {res.describe()}; "
                           f"stderr: {res.stderr_tail[-800:]}")
    if meta["errors"]:
        raise ProblemError("problem failed to run: " + meta["errors"][0][-800:])
    _require_discriminating(meta)
    cap = options.fsize_mb << 20
    refs, hi_refs, inputs = [], [], []
    for t in meta["trials"]:
        r = W.load_tensors(work / "ref" / f"ref_{t['shape_index']}_{t['trial']}.pt", cap)
        x = W.load_tensors(work / "inputs" / t["file"], cap)
        if not isinstance(r, list) or not isinstance(x, list):
            raise ProblemError(f"reference outputs for trial {t} could not be read back")
        refs.append(r)
        hi_refs.append(_hi_refs(work, t.get("hi_file"), r, cap))
        inputs.append(x)
    for r in refs:
        for o in r:
            if str(o.dtype).replace("torch.", "") not in tols and o.is_floating_point():
                raise ProblemError(f"no tolerance for output dtype {o.dtype}")
    inputs_dir = W.new_dir(base, "inputs")
    for f in (work / "inputs").iterdir():
        shutil.move(str(f), inputs_dir / f.name)
    W.make_readable(inputs_dir)
    m = meta.get("meta") if isinstance(meta.get("meta"), dict) else meta_lit
    meta["warm_start"] = res.warm_start  # the parent's own observation, not the worker's
    meta["phase_s"] = res.phase_s  # the parent's clock: lock waits, the exclusive timing hold
    return ReferenceBundle(key="", inputs_dir=inputs_dir, meta=meta, refs=refs,
                           hi_refs=hi_refs, inputs=inputs,
                           tolerances=tols, isolation=res.isolation, family=family,
                           op=m.get("op") if isinstance(m, dict) else None)


def _hi_refs(work: Path, name: Any, refs: list[torch.Tensor],
             cap: int) -> list[torch.Tensor | None]:
    """The trial's float64-derived references; None for an output without one. Anything
    that is not a tensor of the reference's dtype and shape is dropped (never trusted
    further than the same-dtype reference it refines)."""
    hi = W.load_tensors(work / "ref" / name, cap) if isinstance(name, str) else None
    if not isinstance(hi, list) or len(hi) != len(refs):
        return [None] * len(refs)
    return [h if isinstance(h, torch.Tensor) and h.dtype == r.dtype and h.shape == r.shape
            else None for h, r in zip(hi, refs)]


def _require_discriminating(meta: dict[str, Any]) -> None:
    """Misuse unless some shape discriminates in every trial.

    A shape whose every trial a trivial output (zeros/constant/identity) passes even
    after redraws gives no evidence, e.g. an edge shape like softmax over one column.
    Its trials are still run (a candidate must pass them too), but a verdict can
    never rest on such shapes alone.
    """
    bad = {t["shape_index"] for t in meta["trials"] if t["trivial"] and
           len(t["trivial"]) == len(meta["shapes"][t["shape_index"]].get("outputs", [0]))}
    if len(bad) == len(meta["shapes"]):
        raise ProblemError("non-discriminating problem: " + "; ".join(meta["non_discriminating"]))
    meta["non_discriminating_shapes"] = sorted(bad)


ALLOWED_ATEN = sorted(P.ALLOWED_ATEN_OPS)
POISONED_ATEN = sorted(P.POISONED_ATEN_OPS)
