"""GPU memory the sandboxes share: an out-of-memory failure that may be the device's, not
the candidate's, and a wait for room before the run is made again.

CUDA gives a process no memory quota of its own (short of MPS), so a batch's sandboxes, its
reference workers and the parent draw on one device's memory. On an 80 GB H100 the default
batch (12 sandboxes, 4 reference workers) ran the device out of memory: honest kernels were
rejected with "CUDA out of memory" and whole problems were declared unusable
(benchmarks/verifier_notes.md, sixteenth session). A run that failed that way is made
again once the device has room for it beside the other reruns (oom_reruns.py says how
often).
Whether it failed that way is read from what the candidate's sandbox printed, which is never
trusted for a verdict; here it only decides whether to spend another run, and that run is
judged like the first.
Standalone (stdlib; torch imported where used): also copied next to the reference worker
as kz_gpu_memory.py, whose float64 runs give their cache back as the parent does.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

# (the fourth: the tail of torch's message, all that is left of it where a text was cut
# short; the last two: cudaErrorUnknown, which a device with no memory left also gives: on
# an 80 GB H100 with 80,893 of 81,559 MiB used, two reference workers' compares failed
# with it beside a third worker's "out of memory" (verifier_notes.md, thirtieth session).
# A failure for another reason that gives it costs one more run, judged like the first.)
OOM = re.compile(r"out of memory|OutOfMemoryError|cudaErrorMemoryAllocation"
                 r"|[0-9.]+ [GMK]iB of which [0-9.]+ [GMK]iB is free"
                 r"|CUDA error: unknown error|cudaErrorUnknown", re.IGNORECASE)
# Room asked for before a rerun: at least this, or the problem's own size times NEED_FACTOR
# (inputs, their pre-call copies, outputs, the timed sets and the parent's compare)
MIN_NEED = 4 << 30
NEED_FACTOR = 8


_ASKED = re.compile(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB)")
_UNIT = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}


def out_of_memory(texts: Iterable[str]) -> bool:
    """Does any of `texts` (a verdict's reasons, a worker's error) report CUDA OOM, or the
    unknown error a device out of memory also gives?"""
    return any(OOM.search(t) for t in texts if isinstance(t, str))


def worth_rerun(texts: Iterable[str], total: int | None) -> bool:
    """An out-of-memory failure another run might not have: not one that asked for more
    than the whole device (`total` bytes) holds."""
    texts = [t for t in texts if isinstance(t, str)]
    if not out_of_memory(texts):
        return False
    asked = [float(n) * _UNIT[u] for t in texts for n, u in _ASKED.findall(t)]
    return total is None or not any(a > total for a in asked)


def need_bytes(meta: dict[str, Any]) -> int:
    """Device bytes to wait for before a rerun on a bundle with this meta."""
    sizes = [int(s.get("input_bytes", 0)) + int(s.get("output_bytes", 0))
             for s in meta.get("shapes", []) if isinstance(s, dict)]
    return max([MIN_NEED] + [NEED_FACTOR * n for n in sizes])


def room_wait_s(options: Any) -> float:
    """The longest a rerun waits for room (then it starts anyway, and is judged on what it
    does): about as long as the processes that held the memory when the run failed can
    live, since each is killed at its time limits. A hostile candidate that holds the whole
    device therefore costs its neighbours a wait, not their verdicts."""
    return max(options.wall_timeout_s + options.timing_timeout_s, options.reference_timeout_s)


def cuda_free_bytes() -> int | None:
    """Free device memory as the driver reports it (every process's use counted)."""
    info = _mem_info()
    return info[0] if info else None


def _mem_info() -> tuple[int, int] | None:
    import torch

    try:
        free, total = torch.cuda.mem_get_info()
    except (RuntimeError, AssertionError):
        return None
    return int(free), int(total)


# How long a rerun waits for room while the device is held from outside the batch (long
# enough for a peak of the batch's own processes to pass: on an H100 beside a 44 GB hog,
# reruns found room within 1.5 s; verifier_notes.md, thirty-second session)
OUTSIDE_WAIT_S = 10.0
# A wait for room also ends, as one that ran out, once the device's free memory has stood
# still (within STILL_BYTES) for STILL_S while short: no run of the batch is coming or
# going, and its idle sandboxes are closed, so what holds the memory is not the batch's
# (beside a 64 GB hog on an H100 every worker queued behind one rerun waiting for room
# that never came, the device unchanged at 67,099 MiB for four minutes; a batch's own
# use moves every second: verifier_notes.md, thirty-fifth session)
STILL_S = 20.0
STILL_BYTES = 64 << 20
# The share of the device that must be free when a session starts; with less, other
# processes hold the rest and the batch's runs will be short of memory (the record batch
# peaked at 72.5 of an H100's 80 GB; beside a 44 GB hog, 140 candidates needed 20 reruns:
# verifier_notes.md, thirty-first and thirty-second sessions)
HELD_WARNING_FRACTION = 0.5


def held_elsewhere() -> str | None:
    """A warning if, as a session starts, other processes hold so much of the device that its
    runs will be short of memory (each then rerun, or given no verdict); None if not."""
    info = _mem_info()
    if info is None or info[0] >= HELD_WARNING_FRACTION * info[1]:
        return None
    free, total = (round(x / (1 << 30), 1) for x in info)
    return (f"only {free} of the device's {total} GiB are free as the verifier starts: other "
            "processes hold the rest, so candidates will run short of memory (rerun, or no "
            "verdict: stage internal); give the verifier a device of its own or fewer workers")


# Free device memory below which no sandbox is started ahead of demand (each holds a CUDA
# context, ~0.9 GB on an H100); a candidate that needs one still gets it
START_RESERVE = MIN_NEED


def room_to_start(free: Callable[[], int | None] = cuda_free_bytes) -> bool:
    """May a warm sandbox be started ahead of demand? (SlotPool.may_start)"""
    n = free()
    return n is None or n >= START_RESERVE


SHORT_FRACTION = 0.25  # the device counts as short of memory with less than this share free


def release_cached(short_fraction: float = SHORT_FRACTION) -> bool:
    """Hand this process's unused cached device blocks back to the driver (for the others)
    when the device is short of memory; True if it did. Not otherwise: every block given
    back is a cudaMalloc in a later step under the shared lock (the parent's compares, the
    reference worker's trials)."""
    import torch

    if not torch.cuda.is_initialized():
        return False
    info = _mem_info()
    if info is not None and info[0] >= short_fraction * info[1]:
        return False
    torch.cuda.empty_cache()
    return True


class DeviceMemory:
    """Reruns after an out-of-memory failure, each once the device has room for it beside
    the reruns already running (their rooms are counted as taken until they end, though
    what they hold already shows in the free memory: a second count, on the safe side), or
    after `timeout_s`: it runs anyway, and fails again if there is still none. A rerun
    whose smaller room is free goes ahead of a larger one still waiting (beside a 64 GB
    hog on an H100, nineteen reruns queued one at a time behind one wait, ~12 verdicts a
    minute: verifier_notes.md, thirty-sixth session). A wait that ran its whole length and
    still found less than its room free, the running reruns' rooms not counted, saw memory
    held longer than any run of the batch lasts (by another tenant of the device, or the
    parent's caches), and one that saw the free memory stand still for STILL_S while no
    rerun ran saw nothing of the batch's come or go: either way, until room is seen again,
    waits last at most OUTSIDE_WAIT_S, so the batch's reruns do not each wait it out."""

    def __init__(self, free: Callable[[], int | None] = cuda_free_bytes,
                 poll_s: float = 0.2, on_short: Callable[[], object] | None = None) -> None:
        # on_short: called at each poll that finds the device short (the session closes its
        # idle warm sandboxes: beside a 64 GB hog on an H100, they held the 16 GB left while
        # every rerun waited for room; verifier_notes.md, thirty-fourth session)
        self._free, self._poll_s, self._on_short = free, poll_s, on_short
        self._lock = threading.Lock()  # a look at the free memory and a room taken: one step
        self._taken = 0  # bytes: the rooms of the reruns running now
        self._waiters = 0
        self._total: int | None = None
        self.held_outside = False  # the last wait ran out: memory held outside the runs

    @property
    def waiting(self) -> bool:
        """Is a wait for room on? (No sandbox starts ahead of demand meanwhile.)"""
        return self._waiters > 0

    def total(self) -> int | None:
        """The device's memory in bytes (None where it cannot be read); asked of the driver
        once, since it never changes, not again for every rejected candidate."""
        if self._total is None:
            info = _mem_info()
            self._total = info[1] if info else None
        return self._total

    @contextmanager
    def room(self, need: int, timeout_s: float) -> Iterator[float]:
        """Held for one rerun; yields the seconds waited for `need` free bytes."""
        limit = min(timeout_s, OUTSIDE_WAIT_S) if self.held_outside else timeout_s
        t0 = time.monotonic()
        with self._lock:
            self._waiters += 1
        try:
            self._poll(need, t0, limit)
        finally:
            with self._lock:
                self._waiters -= 1
        try:
            yield round(time.monotonic() - t0, 3)
        finally:
            with self._lock:
                self._taken -= need

    def _take(self, need: int) -> tuple[bool, int]:
        """Take `need` bytes if they are free beside the running reruns' rooms (or if the
        free memory cannot be read); whether taken, and (if not) the free bytes seen."""
        with self._lock:
            free = self._free()
            if free is None or free >= need + self._taken:
                self._taken += need
                return True, 0
            return False, free

    def _poll(self, need: int, t0: float, limit: float) -> None:
        """Until `need` bytes are free beside the running reruns' rooms (then taken), or
        `limit` s have passed since `t0`, or the free memory has stood still for STILL_S
        with no rerun running (then taken anyway). Sandboxes started just before the wait
        (their CUDA contexts come seconds later) are closed at a later poll if still idle."""
        seen, since = -1, t0  # the free bytes last seen to move, and when
        while True:
            taken, free = self._take(need)
            if taken:
                self.held_outside = False
                return
            now = time.monotonic()
            if abs(free - seen) > STILL_BYTES or self._taken:  # moving, or a rerun runs
                seen, since = free, now
            if self._on_short is not None:
                self._on_short()
                if (self._free() or 0) >= need + self._taken:  # their memory is back already
                    continue
            if now - t0 >= limit or now - since >= STILL_S:
                with self._lock:
                    self._taken += need
                    # short even of what the reruns hold: memory held outside them
                    self.held_outside = (self._free() or 0) < need
                return
            time.sleep(self._poll_s)
