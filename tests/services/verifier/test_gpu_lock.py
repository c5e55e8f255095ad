"""The GPU lock's epochs: exclusivity, one drain per batch of timed phases, no starvation."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from services.verifier.gpu_lock import GpuLock


def _lock(tmp_path: Path, epoch: float) -> GpuLock:
    return GpuLock(str(tmp_path / "cache"), min_shared_s=epoch)


def _start(fn) -> threading.Thread:  # type: ignore[no-untyped-def]
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_no_shared_step_or_other_timed_phase_runs_inside_an_exclusive_one(tmp_path: Path) -> None:
    lock = _lock(tmp_path, 0.02)
    state = {"readers": 0, "writers": 0}
    bad: list[str] = []
    guard = threading.Lock()

    def reader() -> None:
        for _ in range(30):
            with lock.shared():
                with guard:
                    state["readers"] += 1
                    if state["writers"]:
                        bad.append("reader inside a timed phase")
                time.sleep(0.002)
                with guard:
                    state["readers"] -= 1

    def writer() -> None:
        for _ in range(8):
            with lock.exclusive():
                with guard:
                    state["writers"] += 1
                    if state["readers"] or state["writers"] > 1:
                        bad.append(f"timed phase shared the GPU: {dict(state)}")
                time.sleep(0.003)
                with guard:
                    state["writers"] -= 1
            time.sleep(0.004)

    threads = [_start(reader) for _ in range(4)] + [_start(writer) for _ in range(3)]
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "lock deadlocked"
    assert bad == []
    assert lock.stats()["exclusive"] == 24


def test_a_timed_phase_waits_out_the_shared_epochs_minimum_while_readers_go_on(
        tmp_path: Path) -> None:
    lock = _lock(tmp_path, 0.4)
    got: dict[str, float] = {}
    t0 = time.monotonic()
    w = _start(lambda: _timed(lock, got, "writer"))
    time.sleep(0.1)
    with lock.shared():  # the epoch is open: a shared step starts at once
        got["reader"] = time.monotonic() - t0
    w.join(timeout=10)
    assert got["reader"] < 0.3
    assert got["writer"] >= 0.35  # the epoch opened with the lock, at t0
    assert lock.last_exclusive_wait() == {}  # per thread: this one never held it
    assert lock.stats()["batches"] == 1


def test_timed_phases_arriving_during_a_drain_share_it_and_run_back_to_back(
        tmp_path: Path) -> None:
    lock = _lock(tmp_path, 0.0)
    order: list[str] = []
    reader_in, release = threading.Event(), threading.Event()

    def long_reader() -> None:
        with lock.shared():
            reader_in.set()
            release.wait(10)
        order.append("long reader done")

    def writer(name: str) -> None:
        with lock.exclusive():
            order.append(name)
            time.sleep(0.05)

    def late_reader() -> None:
        with lock.shared():
            order.append("late reader")

    threads = [_start(long_reader)]
    reader_in.wait(10)
    threads.append(_start(lambda: writer("w1")))  # closes the epoch: the drain begins
    time.sleep(0.1)
    threads.append(_start(late_reader))  # must wait for the batch
    time.sleep(0.05)
    threads.append(_start(lambda: writer("w2")))  # joins the same batch
    time.sleep(0.1)
    release.set()
    for t in threads:
        t.join(timeout=10)
    assert order[0] == "long reader done"
    assert sorted(order[1:3]) == ["w1", "w2"]
    assert order[3] == "late reader"
    s = lock.stats()
    assert s["batches"] == 1 and s["exclusive"] == 2
    assert s["drain_s"] >= 0.2 and s["closed_s"] >= s["drain_s"] + 0.09


def test_a_timed_phase_arriving_after_its_batch_started_waits_for_the_next_epoch(
        tmp_path: Path) -> None:
    lock = _lock(tmp_path, 0.2)
    lock._opened -= 1.0  # the shared epoch has run its minimum already
    order: list[str] = []
    w1_in = threading.Event()

    def writer(name: str, hold: float) -> None:
        with lock.exclusive():
            if name == "w1":
                w1_in.set()
            order.append(name)
            time.sleep(hold)

    def reader() -> None:
        with lock.shared():
            order.append("reader")

    threads = [_start(lambda: writer("w1", 0.2))]
    w1_in.wait(10)
    threads.append(_start(reader))
    time.sleep(0.02)
    threads.append(_start(lambda: writer("w2", 0.0)))  # w1's batch is running: not joined
    for t in threads:
        t.join(timeout=10)
    assert order == ["w1", "reader", "w2"]
    assert lock.stats()["batches"] == 2


@pytest.mark.parametrize("epoch", [0.0, 0.05])
def test_the_wait_is_split_by_cause(tmp_path: Path, epoch: float) -> None:
    lock = _lock(tmp_path, epoch)
    with lock.exclusive():
        pass
    wait = lock.last_exclusive_wait()
    assert set(wait) == {"epoch", "writers", "readers", "flock"}
    assert (wait["epoch"] > 0.03) == (epoch > 0)


def _timed(lock: GpuLock, got: dict[str, float], name: str) -> None:
    t0 = time.monotonic()
    with lock.exclusive():
        got[name] = time.monotonic() - t0


def test_each_kind_of_holder_counts_its_steps_and_the_drains_it_ended(tmp_path: Path) -> None:
    """A drain is put down to the shared step that ended it: here a long trial step, in
    flight with a short harness call when a timed phase arrives."""
    lock = _lock(tmp_path, 0.0)
    trials, harness = lock.of_kind("reference"), lock.of_kind("harness")
    entered = threading.Barrier(3)

    def hold(gates, seconds: float) -> None:  # type: ignore[no-untyped-def]
        with gates.shared():
            entered.wait()
            time.sleep(seconds)

    steps = [_start(lambda: hold(trials, 0.3)), _start(lambda: hold(harness, 0.02))]
    entered.wait()
    with harness.exclusive():
        pass
    for t in steps:
        t.join(timeout=10)
    with harness.shared("compare"):  # a step's own kind wins over its holder's
        pass
    st = lock.stats()
    assert st["steps_reference"] == st["steps_harness"] == st["steps_compare"] == 1
    assert st["held_reference_s"] >= 0.3 > st["held_harness_s"]
    assert st["drain_last_reference"] == 1 and "drain_last_harness" not in st
    assert 0.2 < st["drain_last_reference_s"] <= st["drain_s"] + 1e-3
    prof = lock.step_profile()
    assert prof["steps_reference"]["n"] == 1 and prof["steps_reference"]["max"] >= 0.3
    assert prof["steps_reference"]["over_250ms_s"] >= 0.3
    assert prof["steps_harness"]["over_250ms_s"] == 0
    assert prof["drains_reference"]["n"] == 1 and "drains_harness" not in prof
    assert abs(prof["drains_reference"]["max"] - st["drain_last_reference_s"]) < 1e-3


def test_the_step_profile_counts_only_what_came_after_a_mark(tmp_path: Path) -> None:
    lock = _lock(tmp_path, 0.0)
    for seconds in (0.01, 0.01):
        with lock.shared("harness"):
            time.sleep(seconds)
    mark = lock.stats()
    assert mark["steps_harness"] == 2
    with lock.shared("harness"):
        time.sleep(0.05)
    prof = lock.step_profile(since=mark)["steps_harness"]
    assert prof["n"] == 1 and prof["p50"] >= 0.05
    assert lock.step_profile()["steps_harness"]["n"] == 3
