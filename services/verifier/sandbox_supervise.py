"""Supervising one sandboxed child: control pipe, output drain, phase waits, kills.

Split from sandbox.py (which builds the isolation command line) so each reads alone.
Nothing here interprets the child's output beyond the control words used to
sequence the GPU locks; a forged word can only make the child wait or be killed.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from services.verifier.quiet import QUIET, TIMING_NICE, CpuMeter, others_paused, renice
from services.verifier.sandbox_uids import UID_BASE, UID_RANGE, live_uid_processes

if TYPE_CHECKING:  # sandbox imports this module at run time
    from services.verifier.sandbox import Limits

SHARED, READY, DONE, WARM = "KZ-SHARED", "KZ-READY", "KZ-DONE", "KZ-WARM"
YIELD = "KZ-YIELD"  # between steps of a shared phase: the lock may go to a timed phase
# IDLE ends a shared phase before the timed one is asked for: the child works without the
# lock meanwhile (the reference worker writes its files, the harness reads its timed
# inputs), then says READY or DONE. It can only cost the child its place: every sandbox
# is paused while another one is timed.
IDLE = "KZ-IDLE"
PUBLISH = "KZ-PUBLISH"  # the reference worker's trial files are complete (reference.py)
# PAUSE, inside a shared phase: the lock goes now, and the child works without it (the
# reference worker copies a trial's tensors to the host and writes files) until it asks
# again with YIELD. Like IDLE it costs the child only its place.
PAUSE = "KZ-PAUSE"
# HOLDOUTS, between IDLE and READY: the harness asks for its holdout inputs. They appear in
# its inputs dir only now, after its correctness calls, and go again at READY, before its
# timed runs: a candidate cannot read them early and precompute their outputs.
HOLDOUTS = "KZ-HOLDOUTS"
SAVED = "KZ-SAVED"  # the harness's last word before its exit (diagnostics: the exit's clock)
Others = Callable[[], list[int]]  # lists the processes to pause while a child is timed


class Handover(Protocol):
    """Input files a child may see only while it asks for them (pool.Withheld)."""

    def give(self) -> None: ...

    def take(self) -> None: ...


class Gates(Protocol):
    """GPU phases: shared while correctness calls run, exclusive for the timed runs."""

    def shared(self, kind: str | None = None) -> AbstractContextManager[None]: ...

    def exclusive(self) -> AbstractContextManager[None]: ...


def phases(proc: subprocess.Popen, ctrl: Control, gates: Gates | None,  # type: ignore[type-arg]
           limits: Limits, clock: dict[str, float] | None = None,
           others: Others | None = None, handover: Handover | None = None,
           after_timed: Callable[[], None] | None = None,
           first_request: Callable[[], None] | None = None,
           gpu_place: Callable[[], AbstractContextManager[Any]] | None = None) -> bool:
    """Answer the child's lock requests; False if a phase ran out of time. `clock` gets
    the seconds spent in each phase (to see where a candidate's wall time goes). `others`:
    lists every other sandbox's processes, paused while this child is timed.
    `handover`: files the child gets between IDLE and READY if it asks (HOLDOUTS).
    `after_timed`: called once the timed phase ended with DONE (the child's exit to come).
    `first_request`: called when the child first asks for a GPU phase (or ends).
    `gpu_place`: entered once the child has asked for a GPU phase, left when its phases
    end (a batch's cap on sandboxes past their start: VerifyOptions.gpu_places)."""
    t = clock if clock is not None else {}
    mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        t[name] = round(now - mark, 3)
        mark = now

    if gates is None:
        return wait(proc, None, limits.wall_s)
    if not wait(proc, ctrl.any_request, limits.wall_s):
        return False
    if first_request is not None:
        first_request()
    lap("start")  # job read, solution imported, first request
    asked = (ctrl.shared.is_set() or ctrl.ready.is_set()) and proc.poll() is None
    with gpu_place() if gpu_place is not None and asked else nullcontext():
        if gpu_place is not None and asked:
            lap("gpu_place_wait")  # the batch's GPU places were all taken
        return _gpu_phases(proc, ctrl, gates, limits, t, lap, others, handover, after_timed)


def _gpu_phases(proc: subprocess.Popen, ctrl: Control, gates: Gates,  # type: ignore[type-arg]
                limits: Limits, t: dict[str, float], lap: Callable[[str], None],
                others: Others | None, handover: Handover | None,
                after_timed: Callable[[], None] | None) -> bool:
    """The child's GPU phases once it has asked for one: shared, idle, timed (phases)."""
    if ctrl.shared.is_set() and not ctrl.ready.is_set() and proc.poll() is None:
        if not _shared_phase(proc, ctrl, gates, limits.locked_wall_s, limits.wall_s, lap):
            return False
        if ctrl.idle.is_set() and not ctrl.ready.is_set():
            try:
                if not _idle(proc, ctrl, handover, limits.wall_s):
                    return False
            finally:
                if handover is not None:
                    handover.take()  # before GO: the timed runs never see them
            lap("idle")  # lock-free work between the phases
    if ctrl.ready.is_set() and proc.poll() is None:
        done = _timed_phase(proc, ctrl, gates, limits.timing_wall_s, t, lap, others)
        if done and after_timed is not None:
            after_timed()
        return done
    return True


def _timed_phase(proc: subprocess.Popen, ctrl: Control, gates: Gates,  # type: ignore[type-arg]
                 timeout: float, t: dict[str, float], lap: Callable[[str], None],
                 others: Others | None) -> bool:
    """The timed runs: the exclusive lock, every other sandbox stopped, GO, then DONE;
    False past `timeout`. Stopping and resuming the others are clocked apart: they hold
    the lock closed too (a scan of /proc each way)."""
    with gates.exclusive():
        lap("exclusive_wait")
        waits: dict[str, float] = getattr(gates, "last_exclusive_wait", dict)()  # for whom
        t.update({f"exclusive_wait_{k}": v for k, v in waits.items()})
        with others_paused(others) as paused:
            lap("exclusive_pause")
            renice(proc, TIMING_NICE)
            cpu = CpuMeter()
            send(proc, b"GO\n")
            try:
                done = wait(proc, ctrl.done, timeout)
            finally:
                renice(proc, 0)
                lap("exclusive")  # timed runs
                # what else ran meanwhile: host CPU busy, sandboxes paused / gone (diagnostics)
                t["exclusive_cpu_busy"] = cpu.busy() or 0.0
                t["exclusive_paused"], t["exclusive_gone"] = paused["stopped"], paused["gone"]
                for k in ("unsettled", "unsettled_d", "groups", "settled_threads"):
                    t[f"exclusive_{k}"] = paused[k]
        lap("exclusive_resume")  # the others continued; the lock goes as this block ends
    return done


def _shared_phase(proc: subprocess.Popen, ctrl: Control, gates: Gates,  # type: ignore[type-arg]
                  budget: float, free_s: float, lap: Callable[[str], None]) -> bool:
    """Correctness work under the shared lock; False if it held the lock past `budget`
    (bounded: a hang here would stall every timing on the host) or paused past `free_s`.
    A child that says YIELD between steps (the reference worker after each trial, the
    harness after each call) hands the lock back for a moment: a waiting timed phase goes
    first (the lock prefers writers) instead of waiting for every trial of a reference
    build or every call of a candidate, and every candidate behind it too. PAUSE hands it
    back until the child's next YIELD. DONE here: no timed phase follows."""
    first = True
    while True:
        with gates.shared():
            if first:
                lap("shared_wait")
                first = False
            send(proc, b"GO\n")
            t0 = time.monotonic()
            if not wait(proc, ctrl.step, budget):
                return False
            budget -= time.monotonic() - t0
            if _phase_over(proc, ctrl):
                lap("shared")  # compile + correctness trials (and any yielded waits)
                return True
            paused = not ctrl.yielded.is_set()  # PAUSE: the child goes on without the lock
            ctrl.step.clear()
            ctrl.paused.clear()
        if paused:  # a child that paused keeps talking: poll its words, never miss one
            t0 = time.monotonic()
            if not _until(lambda: _phase_over(proc, ctrl) or ctrl.yielded.is_set(), free_s):
                return False
            free_s -= time.monotonic() - t0
            if _phase_over(proc, ctrl):
                lap("shared")
                return True
        # YIELD: the child waits for GO now, so it says nothing more until then
        ctrl.yielded.clear()
        ctrl.paused.clear()
        ctrl.step.clear()


def _idle(proc: subprocess.Popen, ctrl: Control,  # type: ignore[type-arg]
          handover: Handover | None, timeout: float) -> bool:
    """Lock-free work between the phases until READY (or exit); False past `timeout`. A
    child that asks for its holdouts meanwhile gets them (`phases` takes them back)."""
    deadline = time.monotonic() + timeout
    if not _until(lambda: (ctrl.ready.is_set() or ctrl.holdouts.is_set()
                           or proc.poll() is not None), timeout):
        return False
    if ctrl.holdouts.is_set() and not ctrl.ready.is_set():
        if handover is not None:
            handover.give()
        send(proc, b"GO\n")
    return wait(proc, ctrl.ready, deadline - time.monotonic())


def _phase_over(proc: subprocess.Popen, ctrl: Control) -> bool:  # type: ignore[type-arg]
    """The child ended its shared phase (READY, IDLE or DONE) or exited."""
    return (ctrl.ready.is_set() or ctrl.idle.is_set() or ctrl.done.is_set()
            or proc.poll() is not None)


def _until(ok: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def others_by_uid(own_uid: int, skip: Callable[[], Collection[Any]] = frozenset) -> Others:
    """Every other sandbox process on the host, by its uid, but those `skip()` names: a
    scan of /proc (one status file per process). Where sandboxes have cgroups,
    `cgroups.other_procs` reads one file per sandbox instead."""
    ranges = ((UID_BASE, own_uid), (own_uid + 1, UID_BASE + UID_RANGE))
    return lambda: [pid for lo, hi in ranges for pid in live_uid_processes(lo, hi, skip())]


def send(proc: subprocess.Popen, data: bytes) -> None:  # type: ignore[type-arg]
    try:
        assert proc.stdin is not None
        if data:
            proc.stdin.write(data)
            proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass


def wait(proc: subprocess.Popen, flag: threading.Event | None,  # type: ignore[type-arg]
          timeout: float) -> bool:
    """True once `flag` is set or the process exited; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None or (flag is not None and flag.wait(0.02)):
            return True
        if flag is None:
            time.sleep(0.02)
    return False


class Drain(threading.Thread):
    """Drains stdout so a chatty child never blocks; keeps a tail for diagnostics."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.stream, self._tail = stream, b""

    def run(self) -> None:
        for line in iter(self.stream.readline, b""):
            self._tail = (self._tail + line)[-4096:]

    def tail(self) -> str:
        return self._tail.decode("utf-8", "replace")


class Control(threading.Thread):
    """Reads READY / DONE from the control pipe."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.shared, self.ready, self.done = threading.Event(), threading.Event(), threading.Event()
        self.any_request, self.warm = threading.Event(), threading.Event()
        # YIELD is re-armed by the parent after each one; `step`: READY, YIELD, IDLE or
        # DONE arrived (DONE in a shared phase: no timed phase follows, the lock is let go)
        self.yielded, self.step = threading.Event(), threading.Event()
        self.idle, self.published = threading.Event(), threading.Event()
        self.paused = threading.Event()  # re-armed by the parent, as YIELD
        self.holdouts = threading.Event()  # answered once, between IDLE and READY
        self.saved = threading.Event()  # the harness's last word: its exit comes next
        self.heard_at: dict[str, float] = {}  # monotonic time each news word first came

    def run(self) -> None:
        flags = {SHARED: self.shared, READY: self.ready, DONE: self.done, YIELD: self.yielded,
                 IDLE: self.idle, PAUSE: self.paused}
        # news and the holdouts request: not lock requests
        signals = {WARM: self.warm, PUBLISH: self.published, HOLDOUTS: self.holdouts,
                   SAVED: self.saved}
        with os.fdopen(self.fd, "rb") as f:
            for line in iter(f.readline, b""):
                word = line.strip().decode("ascii", "replace")
                if word in signals:
                    self.heard_at.setdefault(word, time.monotonic())  # diagnostics
                    signals[word].set()
                    continue
                flag = flags.get(word)
                if flag is not None:
                    flag.set()
                    self.any_request.set()
                    if word in (READY, YIELD, DONE, IDLE, PAUSE):
                        self.step.set()


def tail_file(path: Path, n: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def killpg(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------------- dying with the verifier

@lru_cache(maxsize=1)
def pdeathsig_args() -> tuple[str, ...]:
    """setpriv options that SIGKILL a process when its parent dies (util-linux >= 2.33).

    Set on the sandbox's outermost process (its parent is the verifier) and again after
    the uid drop (a credential change clears the parent-death signal): a verifier that is
    SIGKILLed takes its candidates with it, instead of leaving a hanging one that holds
    GPU memory until the next verifier reuses its uid."""
    try:
        out = subprocess.run(["setpriv", "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--pdeathsig", "KILL") if "--pdeathsig" in out.stdout else ()


class _Spawner:
    """Forks every sandbox process from one thread that lives as long as the verifier.

    The kernel sends the parent-death signal when the THREAD that forked a child exits,
    not the process: a slot started by a short-lived thread (a pool worker, a fill) would
    be killed when that thread ends. This thread never ends before the process does."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[list[str], dict[str, Any], Future[subprocess.Popen]]] = \
            queue.Queue()  # type: ignore[type-arg]
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen:  # type: ignore[type-arg]
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="kz-sandbox-spawner",
                                                daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen] = Future()  # type: ignore[type-arg]
        self._jobs.put((cmd, kwargs, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            cmd, kwargs, done = self._jobs.get()
            QUIET.wait()  # a start (torch import, CUDA context) disturbs timing
            try:
                done.set_result(subprocess.Popen(cmd, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)


spawn = _Spawner().popen
