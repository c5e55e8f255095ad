"""The host's GPU lock: shared for correctness work, exclusive for timed runs.

A timed phase must have the GPU to itself, so it first waits for every shared holder to
finish its step (the drain), and no new shared step may start meanwhile. On the H200 a
timed phase arrived about once a second in a busy batch, and each drain lasted about as
long as the longest step in flight (0.3-0.5 s): the lock was closed to new shared steps
most of the time, and correctness work waited at every step boundary (a candidate's calls
1.6 s of their 2 s, a bundle's trials most of theirs).

So the lock runs in epochs. A shared epoch stays open for at least `min_shared_s`; a
timed phase that arrives sooner waits for that, then closes the epoch, and every timed
phase that arrives before the drain ends runs in the same batch, back to back, with one
drain for all of them. Later arrivals wait for the next epoch, so neither side starves.
`min_shared_s=0` is the plain writer-preferring lock (each arrival closes at once).
"""

from __future__ import annotations

import fcntl
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path


class GpuLock:
    """Epoch-batched readers/writer lock across this process's threads, plus
    flock(LOCK_SH/LOCK_EX) on a file so several verifier processes share it too.
    No other candidate's kernels run while one is being timed."""

    def __init__(self, cache_dir: str, min_shared_s: float = 0.0) -> None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(cache_dir) / "gpu.lock"
        self.min_shared_s = min_shared_s
        self._cv = threading.Condition()
        self._readers = 0
        self._writer = False
        self._closing = False  # a batch of timed phases is due or running: readers wait
        self._admitting = False  # the batch's drain is under way: arrivals may still join
        self._batch = 0  # timed phases of the current batch not yet done
        self._opened = time.monotonic()  # when the current shared epoch began
        self._closed_at = 0.0
        self._totals: dict[str, float] = {"closed_s": 0.0, "drain_s": 0.0, "exclusive_s": 0.0,
                                           "batches": 0, "exclusive": 0}
        self._local = threading.local()  # per thread: what its last exclusive() waited for
        # per kind of holder: each shared step's length, and each drain it ended (diagnostics:
        # whether a few long steps or many short ones keep the timed phases waiting)
        self._lengths: dict[str, list[float]] = {}
        self._drains: dict[str, list[float]] = {}

    def last_exclusive_wait(self) -> dict[str, float]:
        """Seconds the calling thread's last `exclusive` waited for the shared epoch's
        minimum (epoch), for shared holders to finish (readers), for other timed phases
        (writers) and for other processes (flock): where a candidate's wait goes."""
        return dict(getattr(self._local, "wait", {}))

    def stats(self) -> dict[str, float]:
        """Totals since this lock was made: seconds closed to new shared steps, of them
        draining and exclusive; batches and timed phases (a benchmark's diagnostics)."""
        with self._cv:
            out = dict(self._totals)
            if self._closing:
                out["closed_s"] += time.monotonic() - self._closed_at
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}

    def step_profile(self, since: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
        """Per kind of holder: quantiles of its shared steps' lengths (`steps`) and of the
        drains it ended (`drains`), over those after `since` (an earlier `stats()`: its
        step and drain counts). Diagnostics: a drain lasts as long as the longest step in
        flight, so the steps' tail, not their mean, keeps timed phases waiting."""
        since = since or {}
        with self._cv:
            lengths = {k: v[int(since.get(f"steps_{k}", 0)):] for k, v in self._lengths.items()}
            drains = {k: v[int(since.get(f"drain_last_{k}", 0)):]
                      for k, v in self._drains.items()}
        return {f"{what}_{k}": _quantiles(v) for what, d in (("steps", lengths),
                                                              ("drains", drains))
                for k, v in sorted(d.items()) if v}

    def of_kind(self, kind: str) -> KindOfHolder:
        """This lock as one kind of holder uses it: its shared steps are counted under
        `kind` (diagnostics: which steps the drains wait for)."""
        return KindOfHolder(self, kind)

    @contextmanager
    def shared(self, kind: str | None = None) -> Iterator[None]:
        with self._cv:
            while self._writer or self._closing:
                self._cv.wait()
            self._readers += 1
            start = time.monotonic()
        try:
            with self._flock(fcntl.LOCK_SH):
                yield
        finally:
            with self._cv:
                self._readers -= 1
                self._count(kind or "other", start)
                self._cv.notify_all()

    def _count(self, kind: str, start: float) -> None:
        """A shared step of `kind` ended: its length, and whether it was the one a drain
        waited for last (the drain's length is then put down to it)."""
        now, t = time.monotonic(), self._totals
        t[f"steps_{kind}"] = t.get(f"steps_{kind}", 0) + 1
        t[f"held_{kind}_s"] = t.get(f"held_{kind}_s", 0.0) + now - start
        _capped(self._lengths.setdefault(kind, []), now - start)
        if self._admitting and not self._readers:
            t[f"drain_last_{kind}"] = t.get(f"drain_last_{kind}", 0) + 1
            t[f"drain_last_{kind}_s"] = t.get(f"drain_last_{kind}_s", 0.0) + now - self._closed_at
            _capped(self._drains.setdefault(kind, []), now - self._closed_at)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        wait = {"epoch": 0.0, "writers": 0.0, "readers": 0.0, "flock": 0.0}
        with self._cv:
            self._join_batch(wait)
            while self._writer or self._readers:
                kind, t = ("writers" if self._writer else "readers"), time.monotonic()
                self._cv.wait()
                wait[kind] += time.monotonic() - t
            if self._admitting:  # the first of its batch: the drain is over
                self._admitting = False
                self._totals["drain_s"] += time.monotonic() - self._closed_at
            self._writer = True
        start = time.monotonic()
        try:
            t = time.monotonic()
            with self._flock(fcntl.LOCK_EX):
                wait["flock"] = time.monotonic() - t
                self._local.wait = {k: round(v, 3) for k, v in wait.items()}
                yield
        finally:
            with self._cv:
                self._writer = False
                self._batch -= 1
                self._totals["exclusive_s"] += time.monotonic() - start
                self._totals["exclusive"] += 1
                if self._batch == 0:  # the batch is done: a new shared epoch opens
                    self._closing = False
                    self._opened = time.monotonic()
                    self._totals["closed_s"] += self._opened - self._closed_at
                self._cv.notify_all()

    def _join_batch(self, wait: dict[str, float]) -> None:
        """Wait (holding the condition) until this timed phase belongs to a batch: the
        current one while its drain is under way, else the next, which closes once the
        shared epoch has run `min_shared_s`."""
        while True:
            t = time.monotonic()
            if self._closing and self._admitting:
                self._batch += 1
                return
            if self._closing:  # a batch already running: wait for the next epoch
                self._cv.wait()
                wait["writers"] += time.monotonic() - t
                continue
            left = self._opened + self.min_shared_s - t
            if left > 0:
                self._cv.wait(left)
                wait["epoch"] += time.monotonic() - t
                continue
            self._closing = self._admitting = True
            self._closed_at = t
            self._totals["batches"] += 1
            self._cv.notify_all()

    @contextmanager
    def _flock(self, mode: int) -> Iterator[None]:
        with open(self.path, "a") as f:
            fcntl.flock(f, mode)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


# lengths kept per kind (a 483-candidate batch has ~5000 shared steps); the counts in stats()
# go on, so past it a profile since a later mark is empty
_KEEP = 100_000


def _capped(xs: list[float], x: float) -> None:
    if len(xs) < _KEEP:
        xs.append(x)


def _quantiles(xs: list[float]) -> dict[str, float]:
    """n, p50, p90, p99, max and the total (s) of the steps over 0.25 s."""
    v = sorted(xs)

    def q(p: float) -> float:
        return round(v[min(len(v) - 1, int(p * len(v)))], 4)

    return {"n": len(v), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(v[-1], 4),
            "over_250ms_s": round(sum(x for x in v if x > 0.25), 3)}


class KindOfHolder:
    """A GpuLock whose shared steps count under one kind (the reference workers' trials,
    the candidates' harness calls, the parent's comparisons)."""

    def __init__(self, lock: GpuLock, kind: str) -> None:
        self.lock, self.kind = lock, kind

    def shared(self, kind: str | None = None) -> AbstractContextManager[None]:
        return self.lock.shared(kind or self.kind)

    def exclusive(self) -> AbstractContextManager[None]:
        return self.lock.exclusive()

    def last_exclusive_wait(self) -> dict[str, float]:
        return self.lock.last_exclusive_wait()
