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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from services.verifier import policy as P
from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
from services.verifier import workspace as W
from services.verifier.exceptions import ProblemError, SandboxError
from services.verifier.numerics import Tol
from services.verifier.options import VerifyOptions
from services.verifier.pool import SlotPool
from services.verifier.static_scope import parse

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _set_event() -> threading.Event:
    e = threading.Event()
    e.set()
    return e


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
    # Clear while its worker still runs (a published bundle gets its baselines' timing
    # later); _failure: what made the problem unusable after all (raised to every verdict).
    _settled: threading.Event = field(default_factory=_set_event, repr=False)
    _failure: BaseException | None = field(default=None, repr=False)

    def pending(self) -> None:
        self._settled.clear()

    def complete(self, failure: BaseException | None) -> None:
        self._failure = failure
        self._settled.set()

    @property
    def settled(self) -> bool:
        return self._settled.is_set()

    def settle(self, timeout: float | None = None) -> None:
        """Wait until the worker is done (baselines timed); raise what made it unusable."""
        if not self._settled.wait(timeout):
            raise ProblemError(f"reference worker still running after {timeout} s")
        f = self._failure
        if isinstance(f, ProblemError):
            raise ProblemError(str(f))
        if f is not None:
            raise SandboxError(f"reference worker: {type(f).__name__}: {f}")

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

    def drop_device_copies(self) -> bool:
        """Forget the copies refs_on made (the bundle's last candidate is judged: the
        parent's device memory is shared with every sandbox). True if there were any."""
        with self._on_lock:
            had, self._on = bool(self._on), {}
        return had


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


# The reference worker and the modules it imports, as named in its sandbox.
WORKER_FILES = {"reference_worker.py": "reference_worker.py",
                "kz_problem_api.py": "reference_problem.py", "kz_numerics.py": "numerics.py",
                "kz_hi.py": "reference_hi.py", "kz_gpu_memory.py": "gpu_memory.py",
                "kz_timing.py": "timing.py",
                "kz_timing_stats.py": "timing_stats.py"}


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
        W.populate(self.work, {name: W.PKG / src for name, src in WORKER_FILES.items()})
        view = M.View(str(self.work), str(self.empty), str(self.cache), options.device)
        self.inside = sandbox.inside_view(mode, view)
        limits = sandbox.Limits(options.reference_timeout_s, options.cpu_seconds,
                                options.memory_limit_mb << 20, options.nproc,
                                options.fsize_mb << 20, options.timing_timeout_s,
                                options.reference_timeout_s)  # trials run under the shared lock
        argv = [sys.executable, "-I", "-B", "-u", f"{self.inside.work}/reference_worker.py"]
        env = W.env_for(options.device, self.inside, interpret=False)
        try:
            self.process = sandbox.Process(mode, view, argv, env, limits, base,
                                           options.pause_starting)
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
          slots: SlotPool | None = None,
          on_settled: Callable[[ReferenceBundle], None] | None = None) -> ReferenceBundle:
    """Run the reference worker for `problem_src` (a pre-started one from `slots`, else a
    fresh one); raise ProblemError if it is unusable. Returns as soon as the trials are in
    (the worker publishes them before it times the baselines); the rest comes in the
    background: `ReferenceBundle.settle` waits for it, then `on_settled` has run."""
    meta_lit = literal_meta(problem_src)
    family = meta_lit.get("family") if isinstance(meta_lit.get("family"), str) else None
    tols = tolerance_table(family)
    slot = slots.take() if slots else RefSlot(options, mode, base)
    try:
        slot.load(problem_src)
        job = _job(slot, options, timing, measure_peak, gates, tols, meta_lit)
    except BaseException:
        slot.close(keep=options.keep_artifacts)
        raise
    return _Run(slot, base, options, job, (tols, family, meta_lit), on_settled).first(gates)


def _job(slot: RefSlot, options: VerifyOptions, timing: bool, measure_peak: bool,
         gates: sandbox.Gates | None, tols: dict[str, Tol], meta_lit: dict) -> dict:
    return {"device": options.device, "work": slot.inside.work, "nonce": uuid.uuid4().hex,
            "gated": gates is not None, "published": PUBLISHED,
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


class _Run:
    """One reference worker's run, read by the parent in up to two steps: the published
    trials (a bundle candidates can start on), then the final meta (the baselines'
    timing, the peak). The worker runs on its own thread meanwhile."""

    def __init__(self, slot: RefSlot, base: Path, options: VerifyOptions, job: dict,
                 problem: tuple[dict[str, Tol], str | None, dict],
                 on_settled: Callable[[ReferenceBundle], None] | None) -> None:
        self.slot, self.base, self.options, self.job = slot, base, options, job
        self.problem, self.on_settled = problem, on_settled
        self.res: sandbox.RunResult | None = None
        self.error: BaseException | None = None
        self.exited = threading.Event()
        self.bundle: ReferenceBundle | None = None  # published, not yet settled
        self.warm = False
        self._lock = threading.Lock()

    def first(self, gates: sandbox.Gates | None) -> ReferenceBundle:
        """The bundle as soon as its trials are in; raises ProblemError if unusable."""
        self.warm = self.slot.process.warm  # before the job: was it started ahead?
        thread = threading.Thread(target=self._finish, args=(gates,), daemon=True,
                                  name="kz-reference-run")
        thread.start()
        published = self.slot.process.ctrl.published
        while not (published.is_set() or self.exited.wait(0.02)):
            pass
        with self._lock:
            if published.is_set():
                try:
                    self.bundle = self._read(PUBLISHED)
                    self.bundle.pending()
                except ProblemError:
                    self.bundle = None  # the final meta says why (or the same)
            if self.bundle is not None and not self.exited.is_set():
                return self.bundle  # the worker's thread settles it
        thread.join()  # the worker is done: settle here
        try:
            if self.bundle is None:
                if self.error is not None:
                    raise self.error
                self.bundle = self._read("meta.json")
            self._settle(self.bundle)
            return self.bundle
        finally:
            self.slot.close(keep=self.options.keep_artifacts)

    def _finish(self, gates: sandbox.Gates | None) -> None:
        try:
            self.res = self.slot.process.finish((json.dumps(self.job) + "\n").encode(), gates)
            W.copy_tree(self.slot.cache, self.slot.shared)
        except BaseException as exc:  # noqa: BLE001 - reported by first() or settle()
            self.error = exc
        with self._lock:
            self.exited.set()
            bundle = self.bundle
        if bundle is not None:  # published earlier: this completes it
            try:
                self._settle(bundle)
            finally:
                self.slot.close(keep=self.options.keep_artifacts)

    def _settle(self, bundle: ReferenceBundle) -> None:
        try:
            if self.error is not None:
                raise self.error
            meta = self._meta("meta.json")
            bundle.meta.update({k: meta[k] for k in _FINAL_KEYS if k in meta})
            bundle.meta["phase_s"] = self.res.phase_s if self.res else None  # parent's clock
        except BaseException as exc:  # noqa: BLE001 - every waiting verdict gets it
            bundle.complete(exc)
            return
        bundle.complete(None)
        if self.on_settled:
            self.on_settled(bundle)

    def _meta(self, name: str) -> dict[str, Any]:
        meta = W.load_json(self.slot.work / name, 64 << 20)
        if meta is None or meta.get("nonce") != self.job["nonce"]:
            why = self.res.describe() if self.res else "still running"
            tail = self.res.stderr_tail[-800:] if self.res else ""
            raise ProblemError(f"reference worker produced no result: {why}; stderr: {tail}")
        if meta["errors"]:
            raise ProblemError("problem failed to run: " + meta["errors"][0][-800:])
        return meta

    def _read(self, name: str) -> ReferenceBundle:
        meta = self._meta(name)
        b = _collect(self.slot.work, meta, self.problem, self.base, self.options)
        b.meta["warm_start"] = self.warm  # the parent's own observation
        b.isolation = self.slot.process.isolation
        return b


# What the final meta adds to a published bundle's (the worker's timing step and after).
_FINAL_KEYS = ("timing", "peak", "steps_s", "gpu_peak_mb")
PUBLISHED = "published.json"  # META up to the trials: the worker's file (its JOB names it)


def _collect(work: Path, meta: dict[str, Any], problem: tuple[dict[str, Tol], str | None, dict],
             base: Path, options: VerifyOptions) -> ReferenceBundle:
    tols, family, meta_lit = problem
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
    for f in (work / "inputs").iterdir():  # linked: the worker may still read init_*.pt
        W.link_or_copy(f, inputs_dir / f.name)
    W.make_readable(inputs_dir)
    m = meta.get("meta") if isinstance(meta.get("meta"), dict) else meta_lit
    return ReferenceBundle(key="", inputs_dir=inputs_dir, meta=meta, refs=refs,
                           hi_refs=hi_refs, inputs=inputs,
                           tolerances=tols, isolation="", family=family,
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
