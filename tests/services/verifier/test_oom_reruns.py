"""The rerun policy after a run short of device memory (services/verifier/oom_reruns.py),
and DeviceMemory's waits for room it relies on; pure, no sandbox. The session-level tests
(a candidate's rerun, a build's, the baselines') are in test_gpu_memory.py."""

from __future__ import annotations

from typing import Any

import pytest

from services.verifier import candidate, gpu_memory
from services.verifier.exceptions import DeviceShort, ProblemError
from services.verifier.gpu_memory import DeviceMemory
from services.verifier.oom_reruns import Reruns, rerun_need
from tests.services.verifier.test_gpu_memory import GIB, TORCH_OOM


class _Asked(DeviceMemory):
    """Always room; records the room each rerun asked for."""

    def __init__(self) -> None:
        super().__init__(free=lambda: 80 * GIB)
        self._total = 80 * GIB
        self.asked: list[int] = []

    def room(self, need: int, timeout_s: float) -> Any:
        self.asked.append(need)
        return super().room(need, timeout_s)


def _outcome(short: bool) -> candidate.Outcome:
    o = candidate.Outcome(isolation="stand-in")
    if short:
        o.fail("runtime", "harness crashed: " + TORCH_OOM)
    return o


def test_each_rerun_waits_for_twice_the_room_of_the_last() -> None:
    mem = _Asked()
    later = iter([_outcome(True), _outcome(False)])
    out = Reruns(mem, 3, 1.0).candidate(_outcome(True), 4 * GIB, lambda: next(later))
    assert not out.failures and len(out.details["oom_reruns"]) == 2
    assert mem.asked == [4 * GIB, 8 * GIB]
    mem = _Asked()
    out = Reruns(mem, 3, 1.0).candidate(_outcome(True), 30 * GIB, lambda: _outcome(True))
    assert mem.asked == [30 * GIB, 40 * GIB, 40 * GIB]  # at most half the device
    assert [s for s, _ in out.failures] == ["internal"]
    assert rerun_need(GIB, 2, None) == 4 * GIB  # total unknown: no cap
    assert rerun_need(48 * GIB, 1, 80 * GIB) == 48 * GIB  # never below the need


def test_each_new_timing_of_the_baselines_waits_for_twice_the_room() -> None:
    reruns = Reruns(_Asked(), 3, 1.0)
    short = ProblemError(f"problem failed to run: {TORCH_OOM}")
    need = gpu_memory.MIN_NEED
    assert [reruns.baselines(short, k) for k in range(3)] == [need, 2 * need, 4 * need]
    with pytest.raises(DeviceShort, match="all 4 timings"):
        reruns.baselines(short, 3)
    assert reruns.baselines(ProblemError("ZeroDivisionError"), 0) is None
    assert Reruns(None, 3, 1.0).baselines(short, 0) is None  # no device: no rerun


class _Held(DeviceMemory):
    """A device whose free memory another tenant keeps at 1 GiB (`free_now`)."""

    def __init__(self) -> None:
        self.free_now = 1 * GIB
        super().__init__(free=lambda: self.free_now, poll_s=0.01)
        self._total = 80 * GIB


def test_a_wait_that_ran_out_makes_the_next_ones_brief_until_room_is_seen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_memory, "OUTSIDE_WAIT_S", 0.05)
    mem = _Held()
    with mem.room(4 * GIB, timeout_s=0.3) as waited:
        assert waited >= 0.3 and mem.held_outside
    with mem.room(4 * GIB, timeout_s=30) as waited:
        assert waited < 1 and mem.held_outside  # not the whole 30 s again
    mem.free_now = 8 * GIB
    with mem.room(4 * GIB, timeout_s=30) as waited:
        assert waited < 1 and not mem.held_outside


def test_a_rerun_short_again_after_its_wait_ran_out_is_the_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_memory, "OUTSIDE_WAIT_S", 0.05)
    runs: list[int] = []

    def again() -> candidate.Outcome:
        runs.append(1)
        return _outcome(True)

    out = Reruns(_Held(), 3, 0.2).candidate(_outcome(True), 4 * GIB, again)
    assert len(runs) == 1 and len(out.details["oom_reruns"]) == 1  # not 3
    assert [s for s, _ in out.failures] == ["internal"]
    assert "memory held outside the batch" in out.failures[0][1]
    assert "Tried to allocate 256.00 MiB" in out.failures[0][1]  # the run's own words


def test_a_rerun_that_found_room_may_be_followed_by_more() -> None:
    later = iter([_outcome(True), _outcome(True), _outcome(False)])
    out = Reruns(_Asked(), 3, 0.2).candidate(_outcome(True), 4 * GIB, lambda: next(later))
    assert not out.failures and len(out.details["oom_reruns"]) == 3


def test_builds_and_baselines_stop_once_a_wait_ran_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_memory, "OUTSIDE_WAIT_S", 0.05)
    short = ProblemError(f"problem failed to run: {TORCH_OOM}")
    builds: list[int] = []

    def build() -> Any:
        builds.append(1)
        raise short

    with pytest.raises(DeviceShort, match="all 2 builds .*held outside the batch"):
        Reruns(_Held(), 3, 0.2).build(short, build)
    assert len(builds) == 1
    mem = _Held()
    reruns = Reruns(mem, 3, 0.2)
    assert reruns.baselines(short, 0) == gpu_memory.MIN_NEED  # the first: nothing waited yet
    with mem.room(gpu_memory.MIN_NEED, 0.2):
        pass  # the wait before the second timing ran out
    with pytest.raises(DeviceShort, match="all 2 timings .*held outside the batch"):
        reruns.baselines(short, 1)


@pytest.mark.parametrize("free_gb, warned", [(30, True), (50, False)])
def test_a_session_warns_when_others_hold_most_of_the_device(
        monkeypatch: pytest.MonkeyPatch, free_gb: int, warned: bool) -> None:
    monkeypatch.setattr(gpu_memory, "_mem_info", lambda: (free_gb << 30, 80 << 30))
    said = gpu_memory.held_elsewhere()
    assert (said is not None) is warned
    if said:
        assert "only 30.0 of the device's 80.0 GiB are free" in said
    monkeypatch.setattr(gpu_memory, "_mem_info", lambda: None)
    assert gpu_memory.held_elsewhere() is None  # no device to read
