"""How many candidates of a batch run at once (core.verify_batch): a sandbox's place is a
Permit of `workers`, and `judges` more threads judge the candidates whose sandboxes ran.
With `gpu_places`, at most that many of the places are past their first GPU request: the
others may only start (import, build, compile-only warm-up)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from services.verifier.options import VerifyOptions


def warm_slots_for(options: VerifyOptions, workers: int) -> int:
    """As many pre-started sandboxes as workers (unless turned off): each worker's next
    candidate finds its sandbox warm."""
    return max(options.warm_slots, workers) if options.warm_slots else 0


def gpu_places_for(options: VerifyOptions, workers: int) -> threading.BoundedSemaphore | None:
    """The batch's GPU places, or None where they would not bind (as many as the workers)."""
    n = options.gpu_places
    return threading.BoundedSemaphore(n) if 0 < n < max(1, workers) else None


class Permit:
    """One of `permits`, held for a candidate's sandbox run; when it was got and given back
    (seconds since t0) go `into`. `give_back` may come early (candidate.run, with
    `permit_at_done`); leaving the block gives it back if that has not. `gpu`: the batch's
    GPU places, one of which `gpu_place` holds for the sandbox's GPU phases."""

    def __init__(self, permits: threading.BoundedSemaphore, t0: float,
                 into: list[float], gpu: threading.BoundedSemaphore | None = None) -> None:
        self._permits, self._t0, self._into, self._gpu = permits, t0, into, gpu
        self._held = self._gpu_held = False
        self._lock = threading.Lock()

    def __enter__(self) -> Permit:
        self._permits.acquire()
        self._held = True
        self._into.append(round(time.monotonic() - self._t0, 3))
        return self

    @contextmanager
    def gpu_place(self) -> Iterator[None]:
        """A GPU place, from the sandbox's first GPU request to the end of its GPU phases
        (sandbox_supervise.phases); at once without a cap."""
        if self._gpu is None:
            yield
            return
        self._gpu.acquire()
        with self._lock:
            self._gpu_held = True
        try:
            yield
        finally:
            self._give_gpu()

    def _give_gpu(self) -> None:
        with self._lock:
            if self._gpu_held and self._gpu is not None:
                self._gpu_held = False
                self._gpu.release()

    def give_back(self) -> None:
        self._give_gpu()  # a place on the GPU is part of the place: never kept past it
        with self._lock:
            if not self._held:
                return
            self._held = False
            self._into.append(round(time.monotonic() - self._t0, 3))
            self._permits.release()

    def __exit__(self, *exc: object) -> None:
        self.give_back()


def judges_for(options: VerifyOptions, workers: int) -> int:
    """Threads of a batch beyond its `workers`: each judges a candidate whose sandbox has
    run (on the H200 a judgement took 1.4 s median against 7.8 s in the sandbox, and a
    worker that judged its own left its sandbox's share of the host idle meanwhile)."""
    return (max(1, workers) + 1) // 2 if options.judges < 0 else options.judges
