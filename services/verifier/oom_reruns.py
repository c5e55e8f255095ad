"""Runs made again after they failed for want of device memory (gpu_memory.py says why a
batch's processes can starve one another): a candidate's sandbox run and a problem's
reference build, each up to `oom_reruns` times, each after the device has room, the room
asked for doubling from one rerun to the next. One short in every run is no verdict on
the kernel or the problem: an "internal" failure, or DeviceShort for a build. A request
larger than the whole device is never rerun (the `oom` cheat), and a candidate that runs
short on purpose costs the batch at most `times` more runs of itself, one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.verifier import gpu_memory
from services.verifier.candidate import Outcome
from services.verifier.exceptions import DeviceShort, ProblemError
from services.verifier.reference import ReferenceBundle


@dataclass(frozen=True)
class Reruns:
    memory: gpu_memory.DeviceMemory | None  # None: no device (CPU), never a rerun
    times: int  # the most reruns of one run (VerifyOptions.oom_reruns)
    wait_s: float  # the longest a rerun waits for room (gpu_memory.room_wait_s)

    def short(self, out: Outcome) -> bool:
        """Did the run fail for want of device memory another run might find?"""
        said = [r for _, r in out.failures] + [str(out.details.get("stderr_tail", ""))]
        return (self.memory is not None and bool(out.failures)
                and gpu_memory.worth_rerun(said, self.memory.total()))

    def candidate(self, out: Outcome, need: int, again: Callable[[], Outcome]) -> Outcome:
        """`out`, or the run `again` made after it ran short (`need`: the bundle's bytes);
        the reruns and their waits go into the outcome's details."""
        reruns: list[dict[str, Any]] = []
        while self.short(out):
            assert self.memory is not None
            if len(reruns) == self.times:  # short every time: no verdict on the kernel
                out.failures[:] = gpu_memory.starved(out.failures, len(reruns) + 1)
                break
            room = gpu_memory.rerun_need(need, len(reruns), self.memory.total())
            with self.memory.room(room, self.wait_s) as waited:
                reruns.append({"reasons": [r[:300] for _, r in out.failures[:2]],
                               "waited_s": waited})
                out = again()
        if reruns:
            out.details["oom_reruns"] = reruns
        return out

    def build(self, exc: ProblemError,
              again: Callable[[], ReferenceBundle]) -> ReferenceBundle | ProblemError:
        """After a build failed with `exc`: the bundle `again` builds once there is room if
        it ran short, else `exc` (the problem is unusable); DeviceShort if every build ran
        short."""
        for k in range(self.times if self.memory is not None else 0):
            if not gpu_memory.out_of_memory([str(exc)]):
                return exc
            assert self.memory is not None
            room = gpu_memory.rerun_need(gpu_memory.MIN_NEED, k, self.memory.total())
            with self.memory.room(room, self.wait_s):
                try:
                    return again()
                except ProblemError as failed:
                    exc = failed
        if self.memory is not None and gpu_memory.out_of_memory([str(exc)]):
            raise DeviceShort(f"device out of memory in all {self.times + 1} builds of the "
                              f"problem's reference: {exc}")
        return exc
