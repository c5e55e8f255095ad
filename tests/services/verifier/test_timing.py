"""The timer's choice among attempts (CPU: the CUDA loop itself is tested in test_gpu.py).

Interference only ever adds time, so a disturbed attempt (large spread) is timed again and
the cleanest attempt reported; side-stream work is never retried away."""

from __future__ import annotations

from typing import Any

import pytest

from services.verifier import timing, timing_stats
from services.verifier.timing import STABLE_SPREAD, Timer
from tests.services.verifier.timer_fakes import FakeDevice, fake_timer, shadowed


def _timer(attempts: list[dict[str, Any]]) -> tuple[Timer, list[bool]]:
    t = Timer.__new__(Timer)  # no CUDA buffers: only the attempt policy runs
    calls: list[bool] = []  # per attempt: was it the first

    def attempt(fns: Any, warmup: int, runs: int, first: bool = True) -> dict[str, Any]:
        calls.append(first)
        return dict(attempts[len(calls) - 1])

    t._attempt = attempt  # type: ignore[method-assign]
    return t, calls


def _st(median: float, spread: float | None, side: bool = False) -> dict[str, Any]:
    return {"median_ms": median, "spread": spread, "side_stream": side, "last_outputs": [median]}


def test_a_clean_first_attempt_is_reported_alone() -> None:
    t, calls = _timer([_st(1.0, 0.03)])
    st = t.time([], warmup=3, runs=10)
    assert len(calls) == 1 and st["median_ms"] == 1.0 and st["attempts"] == 1


def test_disturbed_attempts_are_retried_and_the_cleanest_reported() -> None:
    t, calls = _timer([_st(2.3, 0.9), _st(1.1, 0.4), _st(1.6, 0.6)])
    st = t.time([], warmup=3, runs=10)
    assert len(calls) == timing.MAX_ATTEMPTS
    assert st["median_ms"] == 1.1 and st["last_outputs"] == [1.1]  # its own outputs
    assert st["attempt_medians_ms"] == [2.3, 1.1, 1.6]


def test_retrying_stops_at_the_first_stable_attempt() -> None:
    t, calls = _timer([_st(2.0, 0.5), _st(1.0, STABLE_SPREAD / 2), _st(0.1, 0.0)])
    assert t.time([], warmup=3, runs=10)["median_ms"] == 1.0 and len(calls) == 2


@pytest.mark.parametrize("first", [True, False])
def test_side_stream_work_is_reported_not_retried_away(first: bool) -> None:
    seq = [_st(5.0, 0.01, side=True)] if first else [_st(1.0, 0.8), _st(5.0, 0.9, side=True),
                                                      _st(1.0, 0.01)]
    t, calls = _timer(seq)
    st = t.time([], warmup=3, runs=10)
    assert st["side_stream"] and st["median_ms"] == 5.0 and len(calls) == (1 if first else 2)


def test_a_run_whose_host_outlasts_its_flush_counts_as_late() -> None:
    """The device reached `start` before the candidate was queued: the host was timed."""
    shadow = timing_stats.Shadow(flush_ms=[0.08, 0.08, 0.08, 0.08], host_ms=[0.03, 0.09, 0.07, 0.5])
    assert shadow.late_fraction() == 0.5
    assert timing_stats.Shadow([], []).late_fraction() == 0.0


def test_the_shadow_outlasts_the_hosts_launch_by_the_margin() -> None:
    t = shadowed(pass_ms=0.05)
    t._fit_shadow([0.1] * 9 + [0.01])  # p90 0.1 ms -> 0.13 ms of flush: 2 passes + 0.6 of one
    assert t.passes == 2 and t.extra is not None
    assert abs(t.extra.numel() / t.flush.numel() - 0.6) < 0.01
    t._fit_shadow([0.01] * 10)  # a fast host: one pass, as before
    assert t.passes == 1 and t.extra is None
    t._fit_shadow([50.0] * 10)  # a host that takes forever: capped
    assert t.passes * 0.05 <= timing.MAX_SHADOW_MS + 1e-9


def test_a_fixed_shadow_never_changes() -> None:
    t = shadowed(pass_ms=0.05)
    t.adaptive = False
    t._fit_shadow([1.0] * 10)
    assert t.passes == 1 and t.extra is None


def test_an_attempt_outlasted_by_its_host_is_retried_even_if_steady() -> None:
    late = {**_st(2.0, 0.02), "host_late": 0.9}  # steady, but the launch was timed
    t, calls = _timer([late, {**_st(1.0, 0.05), "host_late": 0.0}])
    st = t.time([], warmup=3, runs=10)
    assert len(calls) == 2 and st["median_ms"] == 1.0


def test_retries_are_marked_as_such_and_their_reasons_kept() -> None:
    late = {**_st(2.0, 0.02), "host_late": 0.9}
    t, calls = _timer([late, _st(1.5, 0.5), _st(1.0, 0.05)])
    st = t.time([], warmup=3, runs=10)
    assert calls == [True, False, False] and st["median_ms"] == 1.0
    assert st["retried"] == ["late", "spread"]
    t, calls = _timer([_st(1.0, 0.05)])
    assert t.time([], warmup=3, runs=10)["retried"] == []


def test_a_late_waking_host_is_not_mistaken_for_side_stream_work() -> None:
    """Paired calibration: the 30 us wake-up after a long shadow is the empty runs' too
    (a gap calibrated once, after one flush pass, would read 15 us and flag the kernel)."""
    dev = FakeDevice(kernel=0.02, host=0.1)  # a slow launch: the shadow grows past a pass
    t = fake_timer(dev)
    st = t.time([lambda: "out"], warmup=3, runs=10)
    assert t.passes * 0.067 + (t.extra is not None) * 0.067 > 0.13  # fitted to 1.3 x 0.1 ms
    assert not st["side_stream"] and dev.strict_calls == 0 and st["gap0_ms"] == 0.03
    assert st["median_ms"] == 0.02 and st["last_outputs"] == ["out"]


def test_a_stretched_shadow_counts_as_side_stream_work() -> None:
    """Work hidden inside the shadow, before `start`, slows the shadow: timed strictly."""
    dev = FakeDevice(kernel=0.02, host=0.03, stretch=3.0)
    st = fake_timer(dev).time([lambda: "out"], warmup=3, runs=10)
    assert st["side_stream"] and dev.strict_calls == 1 and st["shadow_ratio"] > 2.5
    assert dev.b2b_calls == 0 and st["loop"] == "strict"  # no back-to-back figure then


@pytest.mark.parametrize("b2b, reported, loop", [
    (1.05, 0.021, "back_to_back"),  # do_bench's reading of a kernel: reported
    (0.5, 0.02, "synced"),  # faster back to back (work hidden from that loop): never below
    (1.5, 0.02, "synced"),  # far slower back to back: that loop was disturbed
])
def test_the_back_to_back_median_is_reported_only_at_or_above_the_synced_one(
        b2b: float, reported: float, loop: str) -> None:
    dev = FakeDevice(kernel=0.02, host=0.03, b2b=b2b)
    st = fake_timer(dev).time([lambda: "out"], warmup=3, runs=10)
    assert dev.b2b_calls == 1 and st["loop"] == loop and not st["side_stream"]
    assert st["median_ms"] == pytest.approx(reported) and st["stream_median_ms"] == 0.02
    assert st["b2b_median_ms"] == pytest.approx(0.02 * b2b) and st["last_outputs"] == ["out"]
    # ~B2B_S of device time at ~0.087 ms a run (kernel + one flush pass), like do_bench's rep
    assert dev.b2b_runs == int(timing.B2B_S * 1e3 / (0.02 + 0.067))


@pytest.mark.parametrize("late_host", [False, True])
def test_a_retry_warms_up_by_count_only_and_refits_only_a_shadow_that_was_outlasted(
        late_host: bool) -> None:
    """The device is warm right after an attempt: no second 50 ms warm-up. A shadow that
    held its host is kept; one the host outlasted is refitted to that attempt's launches."""
    dev = FakeDevice(kernel=0.02, host=0.1)
    t = fake_timer(dev)
    t._attempt([lambda: "out"], 3, 10)
    fitted = (t.passes, None if t.extra is None else t.extra.numel())
    if late_host:
        t.last_loop = timing_stats.Shadow([0.01] * 10, [0.5] * 10)  # every run outlasted
    t._attempt([lambda: "out"], 3, 10, first=False)
    assert dev.warm_s == [timing.WARMUP_S, 0.0]
    refitted = (t.passes, None if t.extra is None else t.extra.numel())
    assert (refitted != fitted) == late_host
    if late_host:  # 1.3 x 0.5 ms, capped at MAX_SHADOW_MS
        assert t._expected_shadow_ms() == pytest.approx(timing.MAX_SHADOW_MS, rel=0.01)


def test_the_first_shadow_is_fitted_to_the_loops_own_launch_time() -> None:
    """The warm-up's launches read faster than the synced loop's (a host waking from a
    sync): fitted to the warm-up alone, the host would outlast every run and force a retry."""
    dev = FakeDevice(kernel=0.02, host=0.05, loop_host=0.2)
    t = fake_timer(dev)
    st = t.time([lambda: "out"], warmup=3, runs=10)
    assert t._expected_shadow_ms() >= 0.99 * timing.SHADOW_MARGIN * 0.2  # slices: 1024 words
    assert st["attempts"] == 1 and st["host_late"] == 0.0 and st["retried"] == []


@pytest.mark.parametrize("kernel_ms, fit", [
    (0.02, 62),  # a short kernel: every run asked for
    (24.0, 11),  # the naive attention baseline: ~LOOP_S of device time, ceil(250 / 24.07)
    (100.0, timing.MIN_RUNS),  # never fewer than MIN_RUNS
])
def test_a_slow_kernel_gets_about_loop_s_of_runs_per_loop(kernel_ms: float, fit: int) -> None:
    """do_bench's rule: a loop's run count is bounded by a device-time budget (a 24 ms
    kernel held the exclusive GPU lock, every other sandbox paused, for 12 s on the H200);
    a cut count gets up to a quarter more at random (which run is last stays unknown)."""
    seen = set()
    for _ in range(40):
        dev = FakeDevice(kernel=kernel_ms, host=0.03)
        st = fake_timer(dev).time([lambda: "out"], warmup=3, runs=62)
        runs = st["runs"]
        assert st["median_ms"] == pytest.approx(kernel_ms)
        assert dev.loop_runs[-1] == 2 * runs  # the timed loop: each run after an empty one
        assert dev.b2b_runs >= runs  # the back-to-back loop never runs fewer
        seen.add(runs)
    if fit == 62:
        assert seen == {62}
    else:
        assert min(seen) >= fit and max(seen) <= fit + fit // 4 and len(seen) > 1


@pytest.mark.parametrize("kernel_ms, attempts", [(24.0, 1), (0.02, timing.MAX_ATTEMPTS)])
def test_a_host_late_by_a_sliver_of_a_long_kernel_is_not_retried(
        kernel_ms: float, attempts: int) -> None:
    """A host launching in 0.7 ms outlasts the longest shadow (0.6 ms): by 0.1 ms, under 1%
    of a 24 ms kernel (no retry), but 5x a 0.02 ms one (every attempt retried)."""
    dev = FakeDevice(kernel=kernel_ms, host=0.7)
    st = fake_timer(dev).time([lambda: "out"], warmup=3, runs=30)
    assert st["flush_ms"] == pytest.approx(timing.MAX_SHADOW_MS, rel=0.01)  # capped
    assert st["attempts"] == attempts and (st["host_late"] == 0.0) == (attempts == 1)


@pytest.mark.parametrize("attempt_s, attempts", [(0.1, 3), (0.3, 2), (0.6, 1)])
def test_no_retry_starts_once_the_timing_has_run_past_its_budget(
        attempt_s: float, attempts: int) -> None:
    """Three disturbed attempts of a short kernel fit RETRY_BUDGET_S; a slow kernel's do
    not: the cleanest attempt so far is reported, and the cut is recorded."""
    now = [0.0]
    t, calls = _timer([_st(3.0, 0.5), _st(2.0, 0.4), _st(1.0, 0.3)])
    inner = t._attempt

    def stepping(*args: Any, **kw: Any) -> dict[str, Any]:
        now[0] += attempt_s
        return inner(*args, **kw)

    t._attempt = stepping  # type: ignore[method-assign]
    t.clock = lambda: now[0]  # type: ignore[method-assign]
    st = t.time([], warmup=3, runs=10)
    assert len(calls) == attempts and st["median_ms"] == 4.0 - attempts
    assert st["retries_cut"] == (attempts < timing.MAX_ATTEMPTS)


def test_holdout_runs_get_a_shadow_no_launch_outlasts_and_the_fitted_one_returns() -> None:
    """`once` times single runs: a host late for one of them would be timed with it (and a
    late honest holdout raises the reported time), so their shadow is ONCE_SHADOW_MS long."""
    dev = FakeDevice(kernel=0.02, host=0.05)
    t = fake_timer(dev)
    t.time([lambda: "out"], warmup=3, runs=10)
    fitted = (t.passes, t.extra)
    seen: list[float] = []
    dev.loop_host = 0.05

    def run() -> str:
        seen.append(t._expected_shadow_ms())
        return "held"

    ms, outs = t.once([run, run])
    assert ms == [0.02, 0.02] and outs == ["held", "held"]
    assert seen and min(seen) >= timing.ONCE_SHADOW_MS
    assert (t.passes, t.extra) == fitted  # the timed runs' shadow is left as it was
    assert t.once_margin_ms is not None and t.once_margin_ms >= timing.ONCE_SHADOW_MS - 0.05


@pytest.mark.parametrize("late_end, strict", [((1,), False), ((1, 2), True)])
def test_a_side_stream_flag_needs_a_second_loop_to_agree(late_end: tuple[int, ...],
                                                         strict: bool) -> None:
    """Loop 0 is the probe, 1 the timed loop, 2 the second opinion. One noisy loop is not
    side-stream work: the clean second loop is reported. Work that ends after e1 in both
    is timed strictly, as before."""
    dev = FakeDevice(kernel=0.05, host=0.03, late_end=late_end)
    st = fake_timer(dev).time([lambda: "out"], warmup=3, runs=10)
    assert st["side_stream_rechecked"] and st["side_stream"] == strict
    assert dev.strict_calls == int(strict)
    assert (st["loop"] == "strict") == strict and st["last_outputs"] == ["out"]




def test_the_longest_step_keeps_its_laps_inside_it_and_only_the_longest() -> None:
    """A lap begun before its step counts only from the step's GO; a lap outside any step
    counts nowhere; a shorter later step leaves the longest one as it was."""
    import time

    clock = timing_stats.LongestStep()
    before = time.monotonic()
    clock.lap("yield", before - 1.0, before)  # no step yet
    clock.begin()
    time.sleep(0.02)
    now = time.monotonic()
    clock.lap("draw", before - 5.0, now)  # begun long before the step
    assert clock.end() is True
    longest = dict(clock.longest)
    assert set(longest) == {"step_max", "step_max_draw"}
    assert 0.02 <= longest["step_max_draw"] <= longest["step_max"] < 1.0
    clock.begin()
    assert clock.end() is False and clock.longest == longest
    assert clock.end() is False  # no step in flight
