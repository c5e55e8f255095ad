"""CPU stand-ins for the timer's CUDA parts: a fixed-size flush buffer, a fake device
loop, host-clock events."""


from __future__ import annotations

from typing import Any

from services.verifier import timing, timing_stats
from services.verifier.timing import Timer


def shadowed(pass_ms: float) -> Timer:
    import torch

    t = Timer.__new__(Timer)
    t.flush = torch.empty(1 << 20, dtype=torch.int32)  # a CPU stand-in: only sizes matter
    t.adaptive, t._pass_ms, t.passes, t.extra = True, pass_ms, 1, None
    return t


class FakeDevice:
    """Stands in for `Timer._loop`: a kernel of `kernel` ms launched in `host` ms, whose
    host wakes 15 us after a sync that followed one flush pass and 30 us after a longer
    shadow (as measured on the H200: the gap depends on the wait, empty runs alike), and a
    shadow that takes `stretch` x its expected time (side work running inside it)."""

    def __init__(self, kernel: float, host: float, stretch: float = 1.0,
                 b2b: float = 1.0, loop_host: float | None = None,
                 late_end: tuple[int, ...] = ()) -> None:
        self.kernel, self.host, self.stretch, self.strict_calls = kernel, host, stretch, 0
        # synced loops (by number) whose candidate runs end late after e1: side work, or
        # a noisy wake-up
        self.late_end = late_end
        self.loop_host = host if loop_host is None else loop_host  # launch time in the loop
        self.b2b, self.b2b_calls = b2b, 0  # back to back: `b2b` x the synced kernel time

    def install(self, t: Timer) -> None:
        self.loop_runs: list[int] = []  # runs of each synced loop (paired: half are empty)

        def loop(seq: Any, runs: int, strict: bool = False, prepare: Any = None) -> Any:
            self.strict_calls += strict
            self.loop_runs.append(runs)
            last: list[Any] = [None] * len(seq)
            t1 = []
            for i in range(runs):  # as Timer._loop: each run after its load, if any
                load = prepare[i % len(seq)] if prepare else None
                if load is not None:
                    load()
                self.next_ms = self.kernel  # a run may set its own time (a cache hit)
                last[i % len(seq)] = seq[i % len(seq)]()
                t1.append(self.next_ms if seq[i % len(seq)] is not timing._noop else 0.0)
            gap = 0.015 if t.passes == 1 and t.extra is None else 0.03
            late = 0.05 if len(self.loop_runs) - 1 in self.late_end else 0.0
            t2 = [a + gap + (late if seq[i % len(seq)] is not timing._noop else 0.0)
                  for i, a in enumerate(t1)]
            shadow = t._expected_shadow_ms() * self.stretch
            t.last_loop = timing_stats.Shadow([shadow] * runs, [self.loop_host] * runs)
            return t1, t2, last

        def back_to_back(fns: Any, runs: int) -> list[float]:
            self.b2b_calls, self.b2b_runs = self.b2b_calls + 1, runs
            return [self.kernel * self.b2b] * runs

        t._loop = loop  # type: ignore[method-assign]
        t._back_to_back = back_to_back  # type: ignore[method-assign]
        self.warm_s: list[float] = []  # the time-based warm-up asked of each attempt

        def warm(fns: Any, warmup: int, min_s: float = timing.WARMUP_S) -> list[float]:
            self.warm_s.append(min_s)
            return [self.host] * 8

        t._warm = warm  # type: ignore[method-assign]


def fake_timer(dev: FakeDevice) -> Timer:
    t = shadowed(pass_ms=0.067)
    t._empty_host_ms = 0.01
    dev.install(t)
    return t


class CpuEvent:
    """A CUDA event stand-in for Timer._loop on the CPU: records the host clock."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    @staticmethod
    def record(ev: CpuEvent) -> None:
        import time

        ev.t = time.perf_counter()

    @staticmethod
    def elapsed(a: CpuEvent, b: CpuEvent) -> float:
        return (b.t - a.t) * 1e3


def cpu_loop_timer() -> Timer:
    import torch

    t = shadowed(pass_ms=0.05)
    t.Event, t.record, t.elapsed = CpuEvent, CpuEvent.record, CpuEvent.elapsed
    t.sync, t.zero_, t.clone = (lambda: None), torch.Tensor.zero_, torch.Tensor.clone
    return t
