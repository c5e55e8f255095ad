"""Runs made again after they failed for want of device memory (gpu_memory.py says why a
batch's processes can starve one another): a candidate's sandbox run, a problem's
reference build and its baselines' timing, each up to `oom_reruns` times, each after the
device has room, the room asked for doubling from one rerun to the next. One short in
every run is no verdict on the kernel or the problem: an "internal" failure, or
DeviceShort for a build or a timing. A rerun short again after its wait for room ran out
is the last: memory held outside the batch's runs is not freed by waiting
(gpu_memory.DeviceMemory then waits briefly). A request larger than the whole device is
never rerun (the `oom` cheat), and a candidate that runs short on purpose costs the batch
at most `times` more runs of itself, one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.verifier import gpu_memory
from services.verifier.candidate import Outcome
from services.verifier.exceptions import DeviceShort, ProblemError
from services.verifier.reference import ReferenceBundle


def rerun_need(need: int, k: int, total: int | None) -> int:
    """Room the k-th rerun (from 0) waits for: `need`, doubled for each rerun before it, at
    most half the device (or `need` itself, if more). A rerun that ran short again found
    its room taken while it ran (on an H100 with a 16 GB hog beside a batch, one waited
    0.04 s for 4 GB and failed again: verifier_notes.md, thirty-first session), so the next
    waits for a calmer device."""
    want = need << k
    return min(want, max(need, total // 2)) if total else want


def starved(failures: list[tuple[str, str]], runs: int,
            outside: bool = False) -> list[tuple[str, str]]:
    """The failures of a run made `runs` times, each short of device memory, as one
    "internal" failure: the batch's processes share the device, so they say nothing of the
    kernel (a rejection at "runtime" would count an honest kernel as wrong). `outside`: the
    device stayed short through a wait for room that ran out (gpu_memory.DeviceMemory)."""
    last = "; ".join(f"{s}: {r}" for s, r in failures)
    why = (OUTSIDE if outside else "its memory is shared by the batch's processes")
    return [("internal", f"device out of memory in all {runs} runs ({why}): no verdict on "
                         f"the kernel; last: {last}"[:900])]


OUTSIDE = ("it stayed short through a wait for room, as long as any run of the batch lasts "
           "or with the device's free memory standing still: memory held outside the "
           "batch's runs, by another process on the device or the verifier's own caches")


@dataclass(frozen=True)
class Reruns:
    memory: gpu_memory.DeviceMemory | None  # None: no device (CPU), never a rerun
    times: int  # the most reruns of one run (VerifyOptions.oom_reruns)
    wait_s: float  # the longest a rerun waits for room (gpu_memory.room_wait_s)

    def held_outside(self) -> bool:
        """Did the last wait for room run out? Then the next run is short too, most likely,
        and no rerun follows a failed one (gpu_memory.DeviceMemory)."""
        return self.memory is not None and self.memory.held_outside

    def last(self, made: int) -> bool:
        """After `made` reruns, is a run that ran short again left so, with no verdict? Yes
        after `times` reruns, or once a wait for room ran out: one rule for a candidate's
        runs, a problem's builds and its baselines' timings."""
        return made == self.times or (made > 0 and self.held_outside())

    def _why(self) -> str:
        return f" ({OUTSIDE})" if self.held_outside() else ""

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
            if self.last(len(reruns)):  # short every time: no verdict on the kernel
                out.failures[:] = starved(out.failures, len(reruns) + 1, self.held_outside())
                break
            room = rerun_need(need, len(reruns), self.memory.total())
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
        if self.memory is None or not gpu_memory.out_of_memory([str(exc)]):
            return exc
        made = 0
        while not self.last(made):
            room = rerun_need(gpu_memory.MIN_NEED, made, self.memory.total())
            with self.memory.room(room, self.wait_s):
                try:
                    return again()
                except ProblemError as failed:
                    exc = failed
            made += 1
            if not gpu_memory.out_of_memory([str(exc)]):
                return exc
        raise DeviceShort(f"device out of memory in all {made + 1} builds of the "
                          f"problem's reference{self._why()}: {exc}")

    def baselines(self, exc: ProblemError, k: int) -> int | None:
        """After the k-th (from 0) timing of a problem's baselines failed with `exc`: the
        room the device must have before the problem is built anew for the next timing;
        None if `exc` was not for want of memory (the problem is unusable); DeviceShort if
        every timing ran short."""
        if self.memory is None or not gpu_memory.out_of_memory([str(exc)]):
            return None
        if self.last(k):
            raise DeviceShort(f"device out of memory in all {k + 1} timings of the "
                              f"problem's baselines{self._why()}: {exc}") from exc
        return rerun_need(gpu_memory.MIN_NEED, k, self.memory.total())
