"""The reference worker's float64 reference (copied next to it as kz_hi.py).

Per output: Model's result computed in float64 and rounded to the output dtype, kept
where it refines the same-dtype reference (kz_numerics.accurate_reference), so a kernel
more accurate than the same-dtype Model may match it. An extra, never a requirement: it
is skipped where its run would be big (GPU memory is shared with candidates' trials) or
slow (the whole worker runs under reference_timeout_s). Standalone (torch, kz_numerics,
kz_gpu_memory).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch
from kz_gpu_memory import release_cached
from kz_numerics import Tol, accurate_reference

MAX_BYTES = 1 << 30


class HiReference:
    """The float64 runs of one worker: a time budget, and notes on what was skipped."""

    def __init__(self, budget_s: float, device: str, tol: Callable[[torch.Tensor], Tol],
                 flatten: Callable[[Any], list[torch.Tensor]]) -> None:
        self.budget_s, self.device, self.tol, self.flatten = budget_s, device, tol, flatten
        self.spent_s = 0.0
        self.peak = 0  # the last same-dtype run's GPU memory: the float64 run is ~8/size x
        self.notes: set[str] = set()

    def model(self, model: torch.nn.Module) -> torch.nn.Module | None:
        """A float64 copy of Model (the same-dtype one stays as it is), or None."""
        if self.budget_s <= 0:
            return None
        state = sum(v.numel() * 8 for v in model.state_dict().values())
        if state > MAX_BYTES:
            self.notes.add("skipped: float64 Model too big")
            return None
        try:
            return copy.deepcopy(model).to(torch.float64)
        except Exception as exc:  # noqa: BLE001 - no float64 reference for this problem, fine
            self.notes.add(f"float64 Model copy failed: {type(exc).__name__}")
            return None

    def refs(self, hi: torch.nn.Module | None, inputs: list, refs: list) -> list:
        """Per output: the float64 result rounded to the output dtype (on the run's device:
        the caller copies it to the host without the GPU lock), or None. Float inputs are
        upcast exactly."""
        none: list = [None] * len(refs)
        lowp = [r for r in refs if r.is_floating_point() and r.dtype != torch.float64]
        floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
        if hi is None or not lowp or self.spent_s > self.budget_s:
            return none
        size = self.peak if self.device == "cuda" else sum(t.numel() * t.element_size()
                                                           for t in floats + refs)
        if size * 8 / min(t.element_size() for t in floats + lowp) > MAX_BYTES:
            self.notes.add("skipped: float64 run too big")
            return none
        start = time.perf_counter()
        try:
            return self._run(hi, inputs, refs)
        except Exception as exc:  # noqa: BLE001 - e.g. an op without a float64 kernel, or OOM
            self.notes.add(f"float64 run failed: {type(exc).__name__}")
            return none
        finally:
            if self.device == "cuda":
                # not after every run, as before 1.12: each block given back is a cudaMalloc
                # in the next trial's draw, gate or float64 run, under the shared lock
                try:
                    release_cached()
                except RuntimeError:  # a broken context: the trial's own error says so
                    pass
            self.spent_s += time.perf_counter() - start

    def _run(self, hi: torch.nn.Module, inputs: list, refs: list) -> list:
        # Upcast, round and compare where the run is (the GPU on a GPU host): on the host's
        # CPU a 64M-element output took seconds of a trial that holds the shared GPU lock.
        dev = self.device
        up = [x.to(dev).to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point()
              else x.to(dev) if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad():
            outs = self.flatten(hi(*up))
        if len(outs) != len(refs):
            return [None] * len(refs)
        kept = [accurate_reference(r.to(dev), o.detach(), self.tol(r))
                for r, o in zip(refs, outs)]
        return kept
