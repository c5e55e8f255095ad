"""Pre-started candidate sandboxes: the interpreter start-up leaves the critical path.

A fresh sandboxed Python spends ~3-4 s importing torch and triton before it can
look at a candidate (measured on the H200 host: benchmarks/verifier_notes.md).
A Slot is such a process started ahead of time in its own private directories:
`work` (the harness, later the solution), `inputs` (read-only inside; the
parent hard-links a bundle's trial inputs into it when a job arrives) and
`cache` (the Triton cache, seeded from the per-source compile cache and copied
back after the run). Every slot still serves exactly ONE candidate and is then
torn down: nothing a candidate leaves behind reaches another candidate, except
compile-cache files of the very same source.

Trusted driver stubs: until its job arrives a slot has run only the harness's
start-up (Triton builds its cuda_utils module with gcc then, and the launchers of
the kernels kz_jit_warm launches). That output is trusted and copied once into
`stubs/`, which seeds every later slot's cache, so gcc runs once per host and
harness instead of once per candidate.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
from services.verifier import workspace as W
from services.verifier.options import VerifyOptions


# The harness and the modules it imports, as named in the sandbox: every name is one the
# static policy keeps candidates from reaching (policy.REFERENCE_NAMES).
HARNESS_FILES = {"harness.py": "harness.py", "kz_build.py": "harness_build.py",
                 "kz_checks.py": "harness_checks.py",
                 "kz_records.py": "records.py", "kz_trace.py": "harness_trace.py",
                 "kz_timing.py": "timing.py", "kz_timing_stats.py": "timing_stats.py",
                 "kz_jit_warm.py": "harness_jit_warm.py"}


@functools.cache
def _harness_digest() -> str:
    h = hashlib.sha256()
    for name, src in sorted(HARNESS_FILES.items()):
        h.update(name.encode() + b"\0" + (W.PKG / src).read_bytes())
    return h.hexdigest()[:12]


def stubs_dir(options: VerifyOptions) -> Path:
    """The trusted seed of every slot's Triton cache, for this device and this harness. A
    harness whose start-up builds other kernels gets a seed of its own: an older seed
    lacks them, and every slot would build them again."""
    return Path(options.cache) / "stubs" / f"{options.device}-{_harness_digest()}"


@dataclass(frozen=True)
class Withheld:
    """Input files a sandbox sees only between `give` and `take` (sandbox.Handover): the
    holdouts, given when the harness asks for them after its correctness calls and taken
    back before its timed runs (sandbox_supervise.HOLDOUTS)."""

    files: tuple[Path, ...]
    into: Path  # the slot's inputs dir (read-only inside the sandbox)

    def give(self) -> None:
        for f in self.files:
            W.link_or_copy(f, self.into / f.name)

    def take(self) -> None:
        for f in self.files:
            (self.into / f.name).unlink(missing_ok=True)


class Slot:
    """One pre-started sandboxed harness and its private directories."""

    def __init__(self, options: VerifyOptions, mode: str, base: Path, stubs: Path) -> None:
        self.root = W.new_dir(base, "slot")
        os.chmod(self.root, 0o711)  # the slot's uid binds its dirs from here: traverse, not list
        self.work, self.inputs, self.cache = (self.root / n for n in ("work", "inputs", "cache"))
        for d in (self.work, self.inputs, self.cache):
            d.mkdir(mode=0o700)
        (self.work / "out").mkdir()
        W.populate(self.work, {name: W.PKG / src for name, src in HARNESS_FILES.items()})
        if stubs.is_dir():
            W.copy_tree(stubs, self.cache)
        W.make_readable(self.inputs)
        view = M.View(str(self.work), str(self.inputs), str(self.cache), options.device)
        self.inside = sandbox.inside_view(mode, view)
        argv = [sys.executable, "-I", "-B", "-u", f"{self.inside.work}/harness.py"]
        env = W.env_for(options.device, self.inside, interpret=options.device == "cpu")
        limits = sandbox.Limits(options.wall_timeout_s, options.cpu_seconds,
                                options.memory_limit_mb << 20, options.nproc,
                                options.fsize_mb << 20, options.timing_timeout_s,
                                options.locked_timeout_s)
        try:
            self.process = sandbox.Process(mode, view, argv, env, limits, base,
                                           options.pause_starting)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def load(self, solution_src: str, inputs_dir: Path, cache_src: Path,
             withhold: Collection[str] = ()) -> Withheld:
        """Give the slot its candidate: solution file, trial inputs, compile cache. The
        inputs named in `withhold` (the holdouts) are left out: the returned handle puts
        them in the inputs dir only while the harness asks for them."""
        (self.work / "solution.py").write_text(solution_src)
        for f in inputs_dir.iterdir():
            if f.name not in withhold:
                W.link_or_copy(f, self.inputs / f.name)
        if cache_src.is_dir():
            W.copy_tree(cache_src, self.cache)
        self.process.own()
        return Withheld(tuple(inputs_dir / n for n in sorted(withhold)), self.inputs)

    def save_cache(self, dest: Path, stubs: Path) -> None:
        """Keep what the candidate compiled for the next run of the same source."""
        W.copy_tree(self.cache, dest, skip=stubs)

    def close(self, keep: bool = False) -> None:
        self.process.discard()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


class SlotPool:
    """Keeps `size` slots started ahead of demand; `take` hands one out and starts another.

    `demand` (when the caller knows how many candidates will come, as verify_many does)
    caps how many slots are ever started: a slot nobody takes still imports torch on the
    CPU while other candidates are being timed.
    """

    def __init__(self, options: VerifyOptions, mode: str, base: Path, size: int,
                 demand: int | None = None, factory: Callable[[], Any] | None = None,
                 may_start: Callable[[], bool] | None = None) -> None:
        self.options, self.mode, self.base, self.size = options, mode, base, max(0, size)
        self.demand = demand
        # asked before each start ahead of demand (gpu_memory.room_to_start: a warm sandbox
        # holds a CUDA context); a `take` finding none idle starts one regardless
        self.may_start = may_start
        # Anything with .process (a sandbox.Process) and .close(): the reference bundles
        # keep their pre-started workers here too (reference.RefSlot); stubs are harvested
        # from candidate Slots only.
        self.factory = factory
        self._started = 0
        self.stubs = stubs_dir(options)
        self._idle: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self._waiting_for_stubs = False  # one taker at a time waits for its slot's start-up

    def take(self) -> Any:
        slot = None
        while slot is None:
            with self._lock:
                self._harvest_stubs()
                slot = self._idle.pop(0) if self._idle else None
            if slot is None:
                with self._lock:
                    self._started += 1
                slot = self._new()
            elif not slot.process.alive:  # died while waiting (e.g. the host's OOM killer)
                slot.close()
                slot = None
        self.fill()
        self._harvest_taken(slot)
        return slot

    def fill(self) -> None:
        """Start slots until `size` are waiting (outside the lock: a start takes ~10 ms)."""
        while True:
            if self.may_start is not None and not self.may_start():
                return
            with self._lock:
                if (self._closed or len(self._idle) >= self.size
                        or (self.demand is not None and self._started >= self.demand)):
                    return
                self._started += 1  # counted before the start, so racing fills stop in time
            slot = self._new()
            with self._lock:
                if self._closed:
                    slot.close()
                    return
                self._idle.append(slot)

    def shed(self) -> int:
        """Close the slots waiting for a job (the device is short of memory: each holds a
        CUDA context); how many. They count against `demand` no more: started again
        once `may_start` allows."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
        for slot in idle:
            slot.close()
        return len(idle)

    def close(self) -> None:
        with self._lock:
            self._harvest_stubs()  # a session's end still leaves the stubs for the next one
            self._closed, idle, self._idle = True, self._idle, []
        for slot in idle:
            slot.close()

    def _new(self) -> Any:
        if self.factory is not None:
            return self.factory()
        return Slot(self.options, self.mode, self.base, self.stubs)

    def _harvest_stubs(self) -> None:
        """Keep the driver build of a warm slot still waiting for its job (trusted: it has
        run only the harness's start-up) as the stubs, once per host and harness. Any
        waiting slot, not only the one handed out: under load a slot is mostly taken
        before it is warm (twenty-fourth session: 40 of 159), so the stubs came late and a
        pass's first slots each built them. Called under the lock, so no `take` can load
        the slot while its cache is copied (a few files)."""
        for slot in self._idle:
            if self.stubs.exists():
                return
            if isinstance(slot, Slot) and slot.process.warm:
                self._copy_stubs(slot)

    def _harvest_taken(self, slot: Any) -> None:
        """While there are no stubs, one taker waits for its slot's start-up and keeps its
        build before the job is loaded. A pool whose every slot is taken cold (a batch no
        bigger than its workers: the benchmark's prime, twenty-fifth session) otherwise
        never leaves stubs, and each first slot of every later session builds them again.
        The wait costs that one candidate nothing it would not wait anyway: the harness
        reads its job only after its start-up; only the load (links and a cache copy)
        moves behind it."""
        with self._lock:
            if self.stubs.exists() or self._waiting_for_stubs or not isinstance(slot, Slot):
                return
            self._waiting_for_stubs = True
        try:
            warm = slot.process.wait_warm(self.options.wall_timeout_s)
            with self._lock:
                if warm and not self.stubs.exists():
                    self._copy_stubs(slot)
        finally:
            with self._lock:
                self._waiting_for_stubs = False

    def _copy_stubs(self, slot: Slot) -> None:
        """Copy a warm slot's cache to the stubs (under the lock), atomically by rename."""
        tmp = self.stubs.with_name(f".{self.stubs.name}-{os.getpid()}-{id(slot)}")
        try:
            W.copy_tree(slot.cache, tmp)
            tmp.rename(self.stubs)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
