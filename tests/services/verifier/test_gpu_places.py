"""VerifyOptions.gpu_places: at most that many of a batch's sandboxes past their first GPU
request, the rest of its `workers` only starting (import, build, compile-only warm-up)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from services.verifier import sandbox
from services.verifier.gpu_lock import GpuLock
from services.verifier.permits import Permit, gpu_places_for
from tests.services.verifier.conftest import CPU_OPTIONS
from tests.services.verifier.gated_child import GATED_CHILD, gated_process

# A candidate's harness: its correctness calls under the shared lock (0.8 s), DONE (no
# timed phase), then its outputs written and its exit (0.8 s, no GPU phase any more)
CALLS_CHILD = GATED_CHILD + r"""
gate("KZ-SHARED")
time.sleep(0.8)
ctrl.write("KZ-DONE\n")
time.sleep(0.8)
"""

# An import that failed: the harness ends without asking for the GPU
EXITING_CHILD = GATED_CHILD + "time.sleep(0.2)\n"


def _dirs(base: Path, name: str) -> Path:
    for d in ("work", "inputs", "cache"):
        (base / name / d).mkdir(parents=True)
    return base / name


def test_the_places_bind_only_below_the_workers() -> None:
    assert gpu_places_for(CPU_OPTIONS, 12) is None  # 0: no cap
    assert gpu_places_for(replace(CPU_OPTIONS, gpu_places=12), 12) is None
    sem = gpu_places_for(replace(CPU_OPTIONS, gpu_places=12), 16)
    assert sem is not None and sem._value == 12  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="gpu_places"):
        replace(CPU_OPTIONS, gpu_places=-1)


def test_a_gpu_place_goes_back_with_its_permit_once() -> None:
    """Given back with the place (an early give_back, an error), and never twice."""
    places, gpu = threading.BoundedSemaphore(2), threading.BoundedSemaphore(1)
    with Permit(places, 0.0, [], gpu) as permit:
        with permit.gpu_place():
            assert not gpu.acquire(blocking=False)
            permit.give_back()  # permit_at_done, inside the GPU phases
            assert gpu.acquire(blocking=False)  # free for the next sandbox
        gpu.release()  # leaving the block must not release it a second time
    assert gpu.acquire(blocking=False) and not gpu.acquire(blocking=False)
    gpu.release()
    with Permit(places, 0.0, []) as uncapped, uncapped.gpu_place():
        pass  # no cap: at once


def test_a_second_sandbox_waits_for_the_gpu_place_not_for_the_first_ones_exit(
        base: Path) -> None:
    """One GPU place, two sandboxes: the second is granted its shared phase when the
    first's GPU phases end (at DONE), not while they run, and not only at its exit."""
    gates = GpuLock(str(base / "cache"))  # the lock both sandboxes' phases go through
    procs = [gated_process(_dirs(base, n), CALLS_CHILD)[0] for n in ("a", "b")]
    gpu = threading.BoundedSemaphore(1)
    permits = [Permit(threading.BoundedSemaphore(1), 0.0, [], gpu) for _ in procs]
    results: list[sandbox.RunResult | None] = [None, None]

    def run(k: int) -> None:
        with permits[k] as permit:
            results[k] = procs[k].finish(b"{}\n", gates, gpu_place=permit.gpu_place)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r is not None and not r.timed_out for r in results), results
    waits = sorted(r.phase_s["gpu_place_wait"] for r in results if r)
    assert waits[0] < 0.3, waits  # the first got the place at once
    assert 0.6 < waits[1] < 1.4, waits  # the other: the first's 0.8 s calls, not its exit
    assert all(r.phase_s["shared"] >= 0.7 for r in results if r)


def test_a_sandbox_that_never_asks_for_the_gpu_takes_no_place(base: Path) -> None:
    proc, gates = gated_process(base, EXITING_CHILD)
    gpu = threading.BoundedSemaphore(1)
    gpu.acquire()  # every place taken: asking for one would wait past the test
    t0 = time.monotonic()
    with Permit(threading.BoundedSemaphore(1), 0.0, [], gpu) as permit:
        res = proc.finish(b"{}\n", gates, gpu_place=permit.gpu_place)
    assert not res.timed_out and res.returncode == 0, res.describe()
    assert "gpu_place_wait" not in res.phase_s and time.monotonic() - t0 < 10
