"""What the timer keeps of its runs, and the statistics over them (copied next to
timing.py as kz_timing_stats.py, wherever that goes as kz_timing.py).

Standalone on purpose (imports only torch): the harness and the reference worker copy
it into their sandboxes, where the repo is not visible.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch


class Shadow:
    """Per run: the device time of the flush before `start` (the shadow in which the host
    launches the candidate) and the host time from the flush's enqueue to the candidate's
    return. A run whose host time exceeds its shadow let the device reach `start` before
    the candidate was queued: the host's launch (or a descheduled host) was timed too.
    A slow flush means other work shared the device. Diagnostics for a busy host."""

    def __init__(self, flush_ms: list[float], host_ms: list[float]) -> None:
        self.flush_ms, self.host_ms = flush_ms, host_ms

    def late_fraction(self, slack_ms: float = 0.0) -> float:
        late = sum(h > f + slack_ms for f, h in zip(self.flush_ms, self.host_ms))
        return late / max(1, len(self.host_ms))


class LongestStep:
    """The longest shared GPU-lock step a sandboxed process held (from its GO to the word that
    ended it), with the laps inside it. Diagnostics: a timed phase on the host waits for the
    longest shared step in flight (the harness's and the reference worker's steps)."""

    def __init__(self) -> None:
        self._go: float | None = None
        self._parts: dict[str, float] = {}
        self.longest: dict[str, float] = {"step_max": 0.0}  # step_max, step_max_<part>

    def begin(self) -> None:
        self._go, self._parts = time.monotonic(), {}

    def lap(self, part: str, since: float, now: float) -> None:
        """A lap from `since` to `now`: its part inside the current step, if any."""
        if self._go is not None:
            self._parts[part] = self._parts.get(part, 0.0) + now - max(since, self._go)

    def end(self) -> bool:
        """The current step (if any) ended; True if it is the longest so far."""
        go, parts = self._go, self._parts
        self._go, self._parts = None, {}
        held = time.monotonic() - go if go is not None else 0.0
        if held <= self.longest["step_max"]:
            return False
        self.longest = {"step_max": round(held, 4),
                        **{f"step_max_{k}": round(v, 4) for k, v in parts.items()}}
        return True


def snapshot(out: Any, clone: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`out` as it is right after its run: plain tensors copied (in an exact list or tuple
    too). The outputs of a timed run are checked, but only later; without the copy a model
    could return garbage fast while timed and write the right values into the same tensors
    in a later call (one slow run in 25 leaves a median alone; the traced echo calls are
    not timed at all). Anything else stays as it is (non-plain tensors are rejected)."""
    if type(out) is torch.Tensor:
        return clone(out)
    if type(out) in (list, tuple):
        return type(out)(snapshot(o, clone) for o in out)
    return out


def quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: Sequence[float]) -> float:
    return quantile(xs, 0.5)
