"""verify / verify_many / verify_batch: the verifier's entry points.

Pipeline per candidate: static AST policy -> reference bundle (once per problem,
its own sandboxed process) -> candidate in its own sandbox (correctness calls
in parallel with other candidates; timing serialised by one GPU lock) -> the
parent's own checks -> verdict. Every failure, including the verifier's own,
becomes a rejected verdict with a reason; nothing here raises on bad candidates.
"""

from __future__ import annotations

import shutil
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from services.verifier import (
    candidate,
    compare_device,
    gpu_memory,
    perf,
    reference,
    sandbox,
    speedups,
)
from services.verifier import workspace as W
from services.verifier.exceptions import DeviceShort, ProblemError, SandboxError
from services.verifier.gpu_lock import GpuLock, KindOfHolder
from services.verifier.oom_reruns import Reruns
from services.verifier.options import VerifyOptions
from services.verifier.permits import Permit, gpu_places_for, judges_for, warm_slots_for
from services.verifier.pool import SlotPool
from services.verifier.prefetch import Plan, Progress, prefetch
from services.verifier.report import VerifyReport, first_stage, rejected
from services.verifier.static_check import check_solution


class Session:
    """Shared state of one verify/verify_many call: temp base, bundles, GPU lock."""

    def __init__(self, options: VerifyOptions, max_bundles: int = 8,
                 warm_slots: int | None = None, demand: int | None = None,
                 problems: int | None = None) -> None:
        self.options = options
        self.mode = sandbox.choose_mode(options.isolation, options.device)
        self.base = W.make_base(options.tmp_dir)
        n = options.warm_slots if warm_slots is None else warm_slots
        room = self._may_start if options.device == "cuda" else None
        self.slots = SlotPool(options, self.mode, self.base, n, demand, may_start=room)
        # One reference worker per bundle builder kept warm too (unless warm slots are off);
        # `problems` caps how many are ever started when the caller knows the number of
        # distinct problems.
        self.ref_slots = SlotPool(options, self.mode, self.base,
                                  options.bundle_builders if options.warm_slots else 0,
                                  problems, factory=self._new_ref_slot, may_start=room)
        self.max_bundles = max_bundles
        self._bundles: dict[str, reference.ReferenceBundle | ProblemError] = {}
        self._bundle_locks: dict[str, threading.Lock] = {}
        self._in_use: dict[str, int] = {}
        self._expected: dict[str, int] = {}  # uses announced by verify_many, not yet done
        self._built: list[reference.ReferenceBundle] = []  # settled at close
        self._guard = threading.Lock()
        self.gpu = GpuLock(options.cache, options.shared_epoch_s) \
            if options.device == "cuda" else None
        # reruns after a CUDA out-of-memory failure wait here for room on the device
        self.memory = gpu_memory.DeviceMemory(on_short=self._shed) if self.gpu else None
        self._room_wait_s = gpu_memory.room_wait_s(options)
        if self.gpu is not None:  # while the first bundles build: off the first verdicts' path
            compare_device.warm(self._gates("compare"))

    def _gates(self, kind: str) -> KindOfHolder | None:
        """The GPU lock for one kind of holder (its shared steps counted apart), if any."""
        return self.gpu.of_kind(kind) if self.gpu else None

    def _shed(self) -> None:
        """A wait for room found the device short: the idle warm sandboxes give theirs back."""
        self.slots.shed()
        self.ref_slots.shed()

    def _may_start(self) -> bool:
        """A sandbox started ahead of demand takes a CUDA context: not during a wait for
        room (whose shed it would undo), nor with little left."""
        return not (self.memory and self.memory.waiting) and gpu_memory.room_to_start()

    def _new_ref_slot(self) -> reference.RefSlot:
        return reference.RefSlot(self.options, self.mode, self.base)

    def close(self) -> None:
        for b in list(self._built):  # a worker still timing its baselines writes under base
            try:
                b.settle(self.options.reference_timeout_s)
            except (ProblemError, SandboxError):
                pass
        self.slots.close()
        self.ref_slots.close()
        if not self.options.keep_artifacts:
            shutil.rmtree(self.base, ignore_errors=True)

    @contextmanager
    def bundle(self, problem_src: str) -> Iterator[reference.ReferenceBundle]:
        """The problem's bundle (built once, shared), pinned while the caller uses it."""
        key = reference.problem_key(problem_src, self.options)
        with self._guard:
            self._in_use[key] = self._in_use.get(key, 0) + 1
        try:
            got = self.ensure(problem_src)
            if isinstance(got, ProblemError):
                raise got
            yield got
        finally:
            with self._guard:
                self._in_use[key] -= 1
                self._evict()

    def ensure(self, problem_src: str) -> reference.ReferenceBundle | ProblemError:
        """Build the problem's bundle unless it exists (one build per problem at a time)."""
        key = reference.problem_key(problem_src, self.options)
        with self._guard:
            lock = self._bundle_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._bundles:
                self._bundles[key] = self._build(problem_src)
            return self._bundles[key]

    def expect(self, problems: Iterable[str]) -> None:
        """Announce future uses: their bundles are not evicted until `done_with`."""
        with self._guard:
            for p in problems:
                key = reference.problem_key(p, self.options)
                self._expected[key] = self._expected.get(key, 0) + 1

    def done_with(self, problem_src: str) -> None:
        key = reference.problem_key(problem_src, self.options)
        with self._guard:
            self._expected[key] = max(0, self._expected.get(key, 0) - 1)
            idle = self._expected[key] == 0 and self._in_use.get(key, 0) == 0
            b = self._bundles.get(key) if idle else None
            self._evict()
        if isinstance(b, reference.ReferenceBundle):
            _drop_copies(b)  # now, not at eviction

    def _evict(self) -> None:
        """Keep at most max_bundles; drop the oldest unpinned ones (and their inputs)."""
        for key in list(self._bundles):
            if len(self._bundles) <= self.max_bundles:
                return
            if self._in_use.get(key, 0) == 0 and self._expected.get(key, 0) == 0:
                old = self._bundles.pop(key)
                if isinstance(old, reference.ReferenceBundle):
                    shutil.rmtree(old.inputs_dir, ignore_errors=True)

    def _build(self, problem_src: str) -> reference.ReferenceBundle | ProblemError:
        """The problem's bundle, or why it is unusable. A build that ran the device out of
        memory is made again when there is room, by a worker started then, not a
        pre-started one that may still be making its CUDA context (on an H100 one taken so
        died at `torch.empty(1, device="cuda")`; the pool drops only workers already dead)."""
        try:
            b = self._build_once(problem_src)
        except ProblemError as exc:
            got = self._reruns().build(exc, lambda: self._build_once(problem_src, fresh=True))
            if isinstance(got, ProblemError):
                return got
            b = got
        with self._guard:  # the unsettled ones only: a service's session lives long
            self._built = [x for x in self._built if not x.settled] + [b]
        return b

    def _build_once(self, problem_src: str, fresh: bool = False) -> reference.ReferenceBundle:
        o = self.options
        name = perf.gpu_name_hint()
        # Every bundle built before a peak is cached measures one (~1 s of GPU): no verdict
        # may miss its speed-of-light check because another bundle's measurement failed.
        need_peak = o.device == "cuda" and perf.load_peak(o.cache, name) is None
        return reference.build(problem_src, o, self.base, self.mode, timing=o.device == "cuda",
                               measure_peak=need_peak, gates=self._gates("reference"),
                               slots=None if fresh else self.ref_slots,
                               on_settled=self._settled)

    def _settled(self, bundle: reference.ReferenceBundle) -> None:
        if bundle.meta.get("peak"):
            perf.save_peak(self.options.cache, bundle.meta["peak"])

    # ------------------------------------------------------------------ one candidate

    def verify(self, problem_src: str, solution_src: str, policy: str | None = None,
               running: AbstractContextManager[Any] | None = None) -> VerifyReport:
        """One verdict; `policy` overrides the options' policy (e.g. runtime_only in tests);
        `running` is held while the candidate's sandbox runs (candidate.run)."""
        o = self.options
        try:
            return self._verify(problem_src, solution_src, policy or o.policy, running)
        except ProblemError as exc:
            return rejected("problem", [f"problem unusable (misuse): {exc}"], o.device,
                            isolation=self.mode)
        except SandboxError as exc:
            return rejected("internal", [f"sandbox failure: {exc}"], o.device, isolation=self.mode)
        except DeviceShort as exc:  # the batch's, not the candidate's nor the problem's
            return rejected("internal", [str(exc)], o.device, isolation=self.mode)
        except Exception as exc:  # noqa: BLE001 - never crash on a candidate
            tb = traceback.format_exc(limit=3)[-600:]
            return rejected("internal", [f"verifier internal error: {type(exc).__name__}: {exc}",
                                         tb], o.device, isolation=self.mode)

    def _verify(self, problem_src: str, solution_src: str, policy: str,
                running: AbstractContextManager[Any] | None) -> VerifyReport:
        o = self.options
        static = check_solution(solution_src, policy)
        if not static.ok:
            return rejected("static", static.reasons, o.device, isolation="none (not run)",
                            fingerprint=perf.fingerprint(o.device, None, "none"),
                            details={"kernels": list(static.kernels)})
        k = 0  # the baselines' timings that ran the device short so far
        while True:
            t0 = time.monotonic()
            with self.bundle(problem_src) as bundle:
                waited = time.monotonic() - t0  # the build itself, or the wait for another's
                try:
                    rep = self._judge(solution_src, bundle, static.kernels, running)
                except ProblemError as exc:  # its baselines' timing failed after all
                    room = self._reruns().baselines(exc, k)
                    if room is None:
                        raise
                    self._forget(problem_src, bundle, room)
                    k += 1
                    continue
            rep.details.setdefault("steps_s", {})["bundle"] = round(waited, 3)
            return rep

    def _forget(self, problem_src: str, bundle: reference.ReferenceBundle, room: int) -> None:
        """A bundle whose baselines ran the device out of memory: the next use builds the
        problem anew (the first of its candidates to see it forgets it), after the device
        has `room` bytes free; the candidate is then verified against the new bundle.
        Its references leave the parent's device memory first: gone from `_bundles`,
        done_with would never drop them, and the wait would count them against the room."""
        key = reference.problem_key(problem_src, self.options)
        with self._guard:
            if self._bundles.get(key) is bundle:
                del self._bundles[key]  # its files go with the session's base
        _drop_copies(bundle)
        assert self.memory is not None
        with self.memory.room(room, self._room_wait_s):
            pass

    def _judge(self, solution_src: str, bundle: reference.ReferenceBundle,
               kernels: tuple[str, ...],
               running: AbstractContextManager[Any] | None) -> VerifyReport:
        o = self.options
        out = self._run(solution_src, bundle, running)
        # The bundle came as soon as its trials were in; its baselines' timing (and a
        # failure there: the problem is unusable, as before) must be in for the verdict.
        bundle.settle(o.reference_timeout_s + 60)
        device_name = bundle.meta.get("device_name")
        rep = VerifyReport(passed=False, stage="passed", reasons=[], device=o.device,
                           isolation=out.isolation, triton_launches=out.launches,
                           max_rel_error=out.max_rel_error,
                           fingerprint=perf.fingerprint(o.device, device_name, out.isolation),
                           details={"kernels": list(kernels), **out.details,
                                    "shapes": [s["overrides"] for s in bundle.meta["shapes"]],
                                    "trials": sum(not t.get("holdout")
                                                  for t in bundle.meta["trials"]),
                                    "reference_isolation": bundle.isolation,
                                    # the reference worker's own clock: diagnostics only
                                    "reference_steps_s": bundle.meta.get("steps_s"),
                                    "reference_phase_s": bundle.meta.get("phase_s"),
                                    "reference_timing": perf.baseline_summary(bundle.meta),
                                    "reference_warm_start": bundle.meta.get("warm_start"),
                                    "reference_gpu_peak_mb": bundle.meta.get("gpu_peak_mb")})
        if o.device == "cuda" and not out.failures:
            speedups.judge(rep, out, bundle, o)
        if out.failures:
            rep.stage = first_stage(out.failures)
            rep.reasons = [f"{s}: {r}" for s, r in out.failures]
        rep.passed = not out.failures
        return rep

    def _run(self, solution_src: str, bundle: reference.ReferenceBundle,
             running: AbstractContextManager[Any] | None) -> candidate.Outcome:
        """The candidate's sandbox run and judgement, made again after a CUDA out-of-memory
        failure, once the device has room (oom_reruns.py)."""
        def run() -> candidate.Outcome:
            return candidate.run(solution_src, bundle, self.options, self.base, self.mode,
                                 self._gates("harness"), self.slots, running)
        return self._reruns().candidate(run(), gpu_memory.need_bytes(bundle.meta), run)

    def _reruns(self) -> Reruns:
        return Reruns(self.memory, self.options.oom_reruns, self._room_wait_s)


def verify(problem_src: str, solution_src: str, options: VerifyOptions) -> VerifyReport:
    """Verify one solution against one problem. Never raises for a bad candidate."""
    session = Session(options, demand=1, problems=1)  # no slot started that nobody takes
    try:
        return session.verify(problem_src, solution_src)
    finally:
        session.close()


def batch_session(items: list[tuple[str, str]], options: VerifyOptions,
                  workers: int) -> Session:
    """A session sized for `items` verified `workers` at a time: a warm sandbox per worker,
    no more started than there are candidates, one reference worker per problem at most."""
    problems = len({reference.problem_key(p, options) for p, _ in items})
    return Session(options, warm_slots=warm_slots_for(options, workers), demand=len(items),
                   problems=problems)


def _drop_copies(bundle: reference.ReferenceBundle) -> None:
    """The bundle's references leave the parent's device memory (on an 80 GB H100 the
    parent held 19.5 GB of the device at a batch's peak), and the cache goes back to the
    driver if the device is short."""
    if bundle.drop_device_copies():
        gpu_memory.release_cached()


def verify_many(pairs: Iterable[tuple[str, str]], options: VerifyOptions,
                workers: int = 4) -> list[VerifyReport]:
    """Verify (problem, solution) pairs in a session of their own (see verify_batch)."""
    items = list(pairs)
    session = batch_session(items, options, workers)
    try:
        return verify_batch(session, items, workers)
    finally:
        session.close()


def verify_batch(session: Session, items: list[tuple[str, str]], workers: int,
                 on_report: Callable[[int, VerifyReport], None] | None = None
                 ) -> list[VerifyReport]:
    """Verdicts for `items` in order: candidates run in parallel sandboxed processes,
    `workers` at a time, references are built once per problem (ahead of the workers), and
    timed runs hold one GPU lock. A candidate's judgement (and any wait for its bundle)
    does not keep a sandbox from starting: `judges` more threads than `workers` take items,
    and only the sandboxes' runs count against `workers`. `session` stays open: the
    service keeps one across its batches. `on_report(i, report)` is told each verdict as
    it comes (a benchmark's log line: a run cut off by its time limit keeps them)."""
    options = session.options
    running = threading.BoundedSemaphore(max(1, workers))
    gpu = gpu_places_for(options, workers)
    session.slots.fill()  # they warm up while the first reference bundle is built
    session.ref_slots.fill()
    session.expect(p for p, _ in items)
    progress = Progress()
    plan = Plan(items, options, ahead=2 * max(1, workers))
    builders = [threading.Thread(target=prefetch, name=f"kz-bundle-prefetch-{k}", daemon=True,
                                 args=(session, progress, plan))
                for k in range(options.bundle_builders)]
    for b in builders:
        b.start()

    t0 = time.monotonic()

    def one(job: tuple[int, tuple[str, str]]) -> VerifyReport:
        i, (problem, solution) = job
        progress.started(i)
        start = time.monotonic() - t0
        held: list[float] = []
        try:
            report = session.verify(problem, solution, running=Permit(running, t0, held, gpu))
        finally:
            session.done_with(problem)
        # when this candidate started and ended, seconds into the batch (diagnostics: the
        # first wave waits for bundles and sandboxes that later candidates find ready),
        # and when its sandbox began and finished its run
        report.details["batch_s"] = [round(start, 3), round(time.monotonic() - t0, 3)]
        report.details["sandbox_batch_s"] = held
        if on_report is not None:
            on_report(i, report)
        return report

    try:
        threads = max(1, workers) + judges_for(options, workers)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(pool.map(one, enumerate(items)))
    finally:
        progress.stop()
        for b in builders:
            b.join()  # a build in flight writes under session.base
