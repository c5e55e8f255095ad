"""Out-of-memory failures the device may have caused: which are run again, when, and that
a rerun is judged like any run. The device's memory cannot run out on this CPU host, so the
first, failed run is stood in for where a test needs one (the rerun itself is real)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from services.verifier import candidate, gpu_memory, judgement, reference
from services.verifier.core import Session
from services.verifier.exceptions import ProblemError
from services.verifier.gpu_memory import DeviceMemory, need_bytes, out_of_memory, worth_rerun
from services.verifier.reference import ReferenceBundle
from tests.services.verifier.conftest import CPU_OPTIONS, SOLUTIONS, problem_src

TORCH_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 "
             "has a total capacity of 79.18 GiB of which 226.06 MiB is free.")
GIB = 1 << 30

RAISES = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x, y):
        noop_kernel[(1,)](x)
        raise MemoryError("{message}")
'''


def test_out_of_memory_is_read_from_torch_and_driver_messages() -> None:
    assert out_of_memory([TORCH_OOM])
    assert out_of_memory(["harness crashed: torch.AcceleratorError: CUDA error: out of memory"])
    assert out_of_memory(["no report", "cudaErrorMemoryAllocation"])
    # all that was left of torch's message in a harness crash cut to its last 500 characters
    # (H100, seventeenth session: the honest candidate beside a hog was not run again)
    assert out_of_memory(["runtime: harness crashed: 18 GiB of which 510.62 MiB is free. "
                          "Including non-PyTorch memory, this process has 774.00 MiB"])
    assert not out_of_memory(["numerics: call 0: max abs error 3.2", ""])
    # what a device with no memory left also says (H100, thirtieth session)
    assert out_of_memory(["torch.AcceleratorError: CUDA error: unknown error\nSearch for "
                          "`cudaErrorUnknown' in https://docs.nvidia.com/cuda/"])
    assert not out_of_memory(["torch.AcceleratorError: CUDA error: an illegal memory access "
                              "was encountered"])


def test_a_request_beyond_the_whole_device_is_not_run_again() -> None:
    assert worth_rerun([TORCH_OOM], total=80 * GIB)
    assert not worth_rerun(["CUDA out of memory. Tried to allocate 1024.00 GiB"], 80 * GIB)
    assert worth_rerun(["CUDA error: out of memory"], None)  # no size said, none known
    assert not worth_rerun(["runtime: wrong dtype"], 80 * GIB)


def test_a_rerun_waits_for_the_problems_size_in_free_memory() -> None:
    meta = {"shapes": [{"input_bytes": 1 * GIB, "output_bytes": GIB // 2},
                       {"input_bytes": 1000, "output_bytes": 1000}]}
    assert need_bytes(meta) == 12 * GIB  # NEED_FACTOR x the largest shape
    assert need_bytes({"shapes": []}) == gpu_memory.MIN_NEED


def test_room_waits_until_free_then_lets_a_rerun_in() -> None:
    free = iter([1 * GIB, 2 * GIB] + [8 * GIB] * 100)
    mem = DeviceMemory(free=lambda: next(free), poll_s=0.01)
    with mem.room(4 * GIB, timeout_s=5) as waited:
        assert waited >= 0.02 and not mem.held_outside  # two polls short of room


def _enter(mem: DeviceMemory, need: int, log: list[str], name: str,
           leave: threading.Event) -> threading.Thread:
    """A rerun in another thread: `name` goes into `log` once it is let in; it holds its
    room until `leave` is set."""
    def rerun() -> None:
        with mem.room(need, timeout_s=30):
            log.append(name)
            leave.wait(10)
    t = threading.Thread(target=rerun)
    t.start()
    return t


def test_reruns_go_in_side_by_side_while_the_device_has_room_for_all() -> None:
    """Beside a 64 GB hog on an H100 nineteen reruns queued one at a time behind one wait
    (thirty-sixth session). A rerun goes in as soon as its room is free beside the rooms of
    the reruns running (counted as taken until they end); a smaller one goes ahead of a
    larger one that has to wait."""
    mem = DeviceMemory(free=lambda: 6 * GIB, poll_s=0.01)
    log: list[str] = []
    leave_a, leave_b, leave_c = threading.Event(), threading.Event(), threading.Event()
    a = _enter(mem, 4 * GIB, log, "a", leave_a)
    _wait_for(lambda: log == ["a"])
    b = _enter(mem, 4 * GIB, log, "b", leave_b)  # 4 + 4 > 6: waits for a
    time.sleep(0.1)
    c = _enter(mem, 1 * GIB, log, "c", leave_c)  # 4 + 1 <= 6: in beside a, ahead of b
    _wait_for(lambda: log == ["a", "c"])
    time.sleep(0.1)
    assert log == ["a", "c"] and mem.waiting
    leave_a.set()  # a's room is back: 4 + 1 <= 6
    _wait_for(lambda: log == ["a", "c", "b"])
    leave_b.set()
    leave_c.set()
    for t in (a, b, c):
        t.join(5)
    assert not mem.waiting and not mem.held_outside and mem._taken == 0


def test_a_wait_behind_running_reruns_is_not_memory_held_outside(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The free memory stands still while a rerun runs (its room taken): that is the batch's
    own, so the wait goes on past STILL_S; and one that runs out its time short only of
    what running reruns hold does not make the next waits brief."""
    monkeypatch.setattr(gpu_memory, "STILL_S", 0.1)
    mem = DeviceMemory(free=lambda: 6 * GIB, poll_s=0.01)
    log: list[str] = []
    leave = threading.Event()
    a = _enter(mem, 4 * GIB, log, "a", leave)
    _wait_for(lambda: log == ["a"])
    threading.Timer(0.4, leave.set).start()
    with mem.room(4 * GIB, timeout_s=5) as waited:
        assert waited >= 0.35 and not mem.held_outside  # in once a's room was back
    a.join(5)
    leave.clear()
    a = _enter(mem, 4 * GIB, log, "a2", leave)
    _wait_for(lambda: log[-1] == "a2")
    with mem.room(4 * GIB, timeout_s=0.2) as waited:  # ran out: 6 GiB free is its room
        assert waited >= 0.2 and not mem.held_outside
    leave.set()
    a.join(5)


def _wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.005)


def test_room_gives_up_waiting_after_its_timeout() -> None:
    mem = DeviceMemory(free=lambda: 0, poll_s=0.01)
    with mem.room(GIB, timeout_s=0.1) as waited:
        assert 0.1 <= waited < 2


def test_a_wait_short_of_room_first_closes_the_idle_warm_sandboxes() -> None:
    """Beside a 64 GB hog on an H100 the batch's own idle warm sandboxes held the 16 GB
    left (a CUDA context each) while every rerun waited for room that never came: a wait
    that finds the device short has them closed, then finds their room; again at each
    poll (ones started just before the wait make their contexts later). No sandbox
    starts ahead of demand meanwhile (`waiting`)."""
    shed: list[bool] = []
    mem = DeviceMemory(free=lambda: 8 * GIB if shed else GIB, poll_s=0.01,
                       on_short=lambda: shed.append(mem.waiting))
    with mem.room(4 * GIB, timeout_s=5) as waited:
        assert shed == [True] and waited < 1 and not mem.waiting
    with mem.room(4 * GIB, timeout_s=5):  # room at once: nothing closed
        assert shed == [True]
    stays: list[int] = []
    mem = DeviceMemory(free=lambda: GIB, poll_s=0.01, on_short=lambda: stays.append(1))
    with mem.room(4 * GIB, timeout_s=0.1) as waited:
        assert len(stays) >= 2 and waited >= 0.1  # still short: the wait goes on as before
        assert not mem.waiting  # over: sandboxes may start ahead again


def test_a_wait_ends_once_the_free_memory_stands_still(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside a 64 GB hog on an H100 every worker queued behind one rerun's wait for room
    that never came: the device stood at the same use for four minutes, nothing of the
    batch's coming or going. A wait that sees the free memory stand still for STILL_S ends
    as one that ran out; one that sees it move (the batch's runs) waits on."""
    monkeypatch.setattr(gpu_memory, "STILL_S", 0.15)
    still = DeviceMemory(free=lambda: GIB + (time.monotonic_ns() % 1000), poll_s=0.01)
    with still.room(4 * GIB, timeout_s=30) as waited:  # moving by bytes only: still
        assert 0.15 <= waited < 2 and still.held_outside
    moves = iter([GIB, 2 * GIB] * 1000)
    busy = DeviceMemory(free=lambda: next(moves), poll_s=0.01)
    with busy.room(4 * GIB, timeout_s=0.5) as waited:
        assert waited >= 0.5 and busy.held_outside  # its whole length, as before
    monkeypatch.setattr(gpu_memory, "STILL_S", 5.0)
    freed = iter([GIB] * 5 + [8 * GIB] * 100)  # still for a while, then room: a wait as before
    room = DeviceMemory(free=lambda: next(freed), poll_s=0.01)
    with room.room(4 * GIB, timeout_s=30) as waited:
        assert waited < 5 and not room.held_outside


def test_a_sandbox_is_started_ahead_of_demand_only_with_room_left() -> None:
    assert gpu_memory.room_to_start(lambda: gpu_memory.START_RESERVE)
    assert not gpu_memory.room_to_start(lambda: gpu_memory.START_RESERVE - 1)
    assert gpu_memory.room_to_start(lambda: None)  # no device to ask: as before


def test_a_session_short_of_room_closes_its_idle_warm_sandboxes() -> None:
    """Session._shed (the GPU session's on_short) closes the candidates' and the reference
    workers' idle warm sandboxes, real ones here (CPU)."""
    s = Session(replace(CPU_OPTIONS, warm_slots=2, bundle_builders=1))
    try:
        s.slots.fill()
        s.ref_slots.fill()
        idle = s.slots._idle + s.ref_slots._idle
        assert len(idle) == 3
        s.memory = DeviceMemory(free=lambda: 80 * GIB if not any(
            x.process.alive for x in idle) else GIB, poll_s=0.01, on_short=s._shed)
        with s.memory.room(4 * GIB, timeout_s=30) as waited:
            assert waited < 30 and not s.slots._idle and not s.ref_slots._idle
        assert not any(x.process.alive for x in idle)
        s.slots.may_start = s._may_start  # as a CUDA session's (no device here: room)
        s.memory._waiters = 1  # as during a wait for room
        s.slots.fill()  # a wait for room in progress: none started ahead of demand
        assert not s.slots._idle
        s.memory._waiters = 0
        s.slots.fill()
        assert len(s.slots._idle) == 2
    finally:
        s.close()


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A CPU session with the GPU's rerun policy: 80 GiB device, always room."""
    monkeypatch.setattr(DeviceMemory, "total", lambda self: 80 * GIB)
    s = Session(replace(CPU_OPTIONS, warm_slots=0))
    s.memory = DeviceMemory(free=lambda: 80 * GIB)
    yield s
    s.close()


def _oom_once(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """candidate.run's first call fails as a starved device made it; later calls are real."""
    calls: list[int] = []
    real = candidate.run

    def run(*args: Any, **kwargs: Any) -> candidate.Outcome:
        calls.append(1)
        if len(calls) == 1:
            o = candidate.Outcome(isolation="stand-in")
            o.fail("runtime", "harness crashed: torch.AcceleratorError: CUDA error: out of "
                              "memory")
            return o
        return real(*args, **kwargs)

    monkeypatch.setattr(candidate, "run", run)
    return calls


def test_an_honest_kernel_starved_of_device_memory_passes_on_its_rerun(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _oom_once(monkeypatch)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert r.passed, r.reasons
    assert len(calls) == 2
    assert r.details["oom_reruns"][0]["reasons"] == [
        "runtime: harness crashed: torch.AcceleratorError: CUDA error: out of memory"[9:]]


def test_a_kernel_short_of_memory_in_every_run_gets_no_verdict(session: Any) -> None:
    """Not a rejection at "runtime": the batch's processes share the device, so running
    short says nothing of the kernel (nor lets it pass)."""
    src = RAISES.format(message="CUDA out of memory. Tried to allocate 2.00 GiB")
    r = session.verify(problem_src("add"), src, policy="runtime_only")
    assert not r.passed and r.stage == "internal", r.reasons
    assert len(r.details["oom_reruns"]) == 3  # oom_reruns=3
    assert "device out of memory in all 4 runs" in r.reasons[0]
    assert "Tried to allocate 2.00 GiB" in r.reasons[0]  # the last run's own words


def test_a_kernel_that_fails_otherwise_on_its_rerun_is_judged_on_that(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _oom_once(monkeypatch)
    wrong = RAISES.format(message="not a memory problem")
    r = session.verify(problem_src("add"), wrong, policy="runtime_only")
    assert not r.passed and r.stage == "runtime" and len(calls) == 2
    assert "not a memory problem" in " ".join(r.reasons)


def test_no_rerun_for_more_than_the_device_or_for_other_failures(session: Any) -> None:
    huge = RAISES.format(message="CUDA out of memory. Tried to allocate 1024.00 GiB")
    wrong = RAISES.format(message="not a memory problem")
    for src in (huge, wrong):
        r = session.verify(problem_src("add"), src, policy="runtime_only")
        assert not r.passed and "oom_reruns" not in r.details, r.reasons


def test_no_rerun_without_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _oom_once(monkeypatch)
    s = Session(replace(CPU_OPTIONS, warm_slots=0))
    try:
        assert s.memory is None  # CPU sessions: memory is the host's, under RLIMIT_AS
        r = s.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    finally:
        s.close()
    assert not r.passed and len(calls) == 1


@pytest.mark.parametrize("error", [TORCH_OOM, "torch.AcceleratorError: CUDA error: unknown "
                                              "error"], ids=["oom", "unknown"])
def test_a_reference_build_that_ran_out_is_built_again_by_a_fresh_worker(
        session: Any, monkeypatch: pytest.MonkeyPatch, error: str) -> None:
    builds: list[bool] = []
    real = Session._build_once

    def build_once(self: Session, problem: str, fresh: bool = False) -> ReferenceBundle:
        builds.append(fresh)
        if len(builds) == 1:
            raise ProblemError(f"problem failed to run: {error}")
        return real(self, problem, fresh)

    monkeypatch.setattr(Session, "_build_once", build_once)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert r.passed, r.reasons
    assert builds == [False, True]  # the first from the pool, the rebuild started anew


def test_a_build_short_of_memory_every_time_is_no_verdict_and_is_not_kept(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "problem unusable", which a session keeps for the problem's every candidate:
    the next candidate builds it again."""
    builds: list[bool] = []
    real = Session._build_once

    def build_once(self: Session, problem: str, fresh: bool = False) -> ReferenceBundle:
        builds.append(fresh)
        if len(builds) <= 4:
            raise ProblemError(f"problem failed to run: {TORCH_OOM}")
        return real(self, problem, fresh)

    monkeypatch.setattr(Session, "_build_once", build_once)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert not r.passed and r.stage == "internal", r.reasons
    assert "device out of memory in all 4 builds" in r.reasons[0]
    assert builds == [False, True, True, True]
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert r.passed and builds == [False, True, True, True, False], r.reasons


def test_an_unusable_problem_is_not_built_again(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[int] = []

    def build_once(self: Session, problem: str, fresh: bool = False) -> ReferenceBundle:
        builds.append(1)
        raise ProblemError("problem failed to run: NameError: name 'x' is not defined")

    monkeypatch.setattr(Session, "_build_once", build_once)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert not r.passed and r.stage == "problem" and len(builds) == 1


def test_a_bundle_forgets_its_device_copies_when_its_last_candidate_is_done(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "b"
    d.mkdir()
    b = ReferenceBundle(key="k", inputs_dir=d, meta={}, refs=[[torch.ones(3)]],
                        hi_refs=[[None]], inputs=[[]], tolerances={}, isolation="none")
    refs, _ = b.refs_on("meta", 0)  # "meta" stands in for the GPU on this host
    assert refs[0].device.type == "meta" and b.refs_on("meta", 0)[0] is refs
    s = Session(replace(CPU_OPTIONS, warm_slots=0))
    released: list[int] = []
    monkeypatch.setattr(gpu_memory, "release_cached", lambda: released.append(1))
    monkeypatch.setattr(Session, "_build", lambda self, p: b)
    try:
        s.expect(["P", "P"])
        s.ensure("P")
        s.done_with("P")
        assert b.refs_on("meta", 0)[0] is refs and not released  # one use still to come
        s.done_with("P")
        assert released == [1] and not b.drop_device_copies()  # gone already
    finally:
        s.close()


def _starved(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, error: Exception) -> Any:
    """A bundle whose device copies cannot be made: `error` is what the device says."""
    from services.verifier.numerics import Tol

    ref = torch.arange(6.0)
    b = ReferenceBundle(key="k", inputs_dir=tmp_path, meta={}, refs=[[ref]], hi_refs=[[None]],
                        inputs=[[torch.zeros(6)]], isolation="none",
                        tolerances={"float32": Tol(1e-4, 1e-4, 1e-4)})

    def refs_on(device: str, i: int) -> Any:
        raise error

    monkeypatch.setattr(b, "refs_on", refs_on)
    return b


def test_a_compare_the_device_has_no_memory_for_runs_on_the_host(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _starved(tmp_path, monkeypatch, torch.OutOfMemoryError(TORCH_OOM))
    right, wrong = judgement.Outcome(), judgement.Outcome()
    judgement._check_call(right, {"outputs": [torch.arange(6.0)]}, 0, b, "call 0",
                          place=judgement.on_host("cuda"))
    judgement._check_call(wrong, {"outputs": [torch.arange(6.0) + 1]}, 0, b, "call 0",
                          place=judgement.on_host("cuda"))
    assert right.failures == []
    assert [s for s, _ in wrong.failures] == ["numerics"]


def test_other_device_errors_in_a_compare_are_not_taken_for_memory(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _starved(tmp_path, monkeypatch, RuntimeError("CUDA error: an illegal memory access"))
    with pytest.raises(RuntimeError, match="illegal"):
        judgement._check_call(judgement.Outcome(), {"outputs": [torch.arange(6.0)]}, 0, b,
                              "call 0", place=judgement.on_host("cuda"))


def _baselines_fail(monkeypatch: pytest.MonkeyPatch, error: str, builds: int) -> list[Any]:
    """Real builds, the first `builds` of which then fail as if their baselines' timing
    (after the trials) had raised `error`; returns every bundle built."""
    built: list[Any] = []
    real = Session._build

    def build(self: Session, problem: str) -> Any:
        b = real(self, problem)
        assert isinstance(b, ReferenceBundle), b
        built.append(b)
        if len(built) <= builds:
            b.settle(120)
            b.complete(ProblemError(f"problem failed to run: {error}"))
            b._on["cuda", 0] = ([torch.zeros(1)], [None])  # as a cuda compare leaves it
        return b

    monkeypatch.setattr(Session, "_build", build)
    return built


def test_baselines_that_ran_out_get_a_new_bundle_and_the_candidate_a_new_run(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _baselines_fail(monkeypatch, TORCH_OOM, builds=1)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert r.passed, r.reasons
    assert len(built) == 2
    r2 = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert r2.passed and len(built) == 2  # the new bundle serves the next candidates
    assert built[0]._on == {}  # the forgotten one's references left the parent's device


def test_baselines_that_ran_out_three_times_get_a_fourth_timing(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _baselines_fail(monkeypatch, TORCH_OOM, builds=3)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert r.passed and len(built) == 4, r.reasons  # oom_reruns=3


def test_baselines_that_ran_out_every_time_are_no_verdict(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _baselines_fail(monkeypatch, TORCH_OOM, builds=99)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert not r.passed and r.stage == "internal" and len(built) == 4, r.reasons
    assert "all 4 timings of the problem's baselines" in r.reasons[0]


def test_baselines_that_failed_otherwise_leave_the_problem_unusable(
        session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _baselines_fail(monkeypatch, "ZeroDivisionError", builds=99)
    r = session.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    assert not r.passed and r.stage == "problem" and len(built) == 1


def test_a_rerun_waits_at_most_as_long_as_a_holder_of_the_memory_can_live() -> None:
    assert gpu_memory.room_wait_s(CPU_OPTIONS) == 120 + 60  # correctness + timed limits
    assert gpu_memory.room_wait_s(replace(CPU_OPTIONS, reference_timeout_s=900)) == 900


def test_the_devices_total_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def mem_info() -> tuple[int, int]:
        asked.append(1)
        return GIB, 80 * GIB

    monkeypatch.setattr(gpu_memory, "_mem_info", mem_info)
    mem = DeviceMemory()
    assert mem.total() == mem.total() == 80 * GIB and asked == [1]


@pytest.mark.parametrize("free_gb, released", [(10, True), (30, False)])
def test_the_parent_gives_its_cache_back_only_when_the_device_is_short(
        monkeypatch: pytest.MonkeyPatch, free_gb: int, released: bool) -> None:
    """Blocks given back are a cudaMalloc in a later compare, under the shared lock: only
    when less than a quarter of the device is free."""
    emptied: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    monkeypatch.setattr(gpu_memory, "_mem_info", lambda: (free_gb << 30, 80 << 30))
    assert gpu_memory.release_cached() is released
    assert emptied == ([1] if released else [])


def test_a_fresh_build_takes_no_pre_started_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(reference, "build", lambda *a, **k: seen.append(k["slots"]))
    s = Session(replace(CPU_OPTIONS, warm_slots=1))
    try:
        assert s.ref_slots is not None
        s._build_once(problem_src("add"))
        s._build_once(problem_src("add"), fresh=True)
    finally:
        s.close()
    assert seen == [s.ref_slots, None]
