"""Where the parent compares a candidate's outputs with the references, and how they get there.

On a GPU host, large outputs are compared on the GPU under the shared lock (no comparison
runs while another candidate is timed), after a lock-free copy into page-locked host
memory; small ones on the host's CPU, with no lock at all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from services.verifier import gpu_memory, sandbox
from services.verifier.numerics import Tol, compare
from services.verifier.options import VerifyOptions

# Outputs up to this size are compared on the parent's CPU even on a GPU host, with no lock:
# ~4-10 ms of CPU for 1M elements (2-core dev box), against a median 1.25 s that a judgement
# waited for the shared GPU lock over its ~10 comparisons in an H200 batch. The largest
# shape's outputs (16M fp32 elements: ~0.3 s of CPU) still go to the GPU.
CPU_COMPARE_BYTES = 4 << 20


def output_bytes(data: Any) -> int:
    """Bytes of the plain tensors among a loaded call's outputs (0 for anything else)."""
    return sum(o.numel() * o.element_size() for o in _plain_outputs(data) if o is not None)


@contextmanager
def where(options: VerifyOptions, gates: sandbox.Gates | None, steps: dict[str, float],
          data: Any) -> Iterator[tuple[str, list[Any] | None]]:
    """Where the parent compares the outputs of `data` (a loaded record) with references,
    and their staged copies (`Stager`; None where there are none): on a GPU host the GPU
    itself for large outputs (a 256 MB fp32 output costs ~1 s of the host's CPU to compare,
    ~1 ms of the GPU's), under the shared lock so that no comparison runs while another
    candidate is being timed; small ones on the CPU (CPU_COMPARE_BYTES). Taken per record,
    not for a whole judgement: a timed phase waits for every shared holder to finish, and
    one judgement held it for 1.0-1.8 s in a busy H200 batch (the parent's 12 threads share
    one interpreter)."""
    if options.device != "cuda" or output_bytes(data) <= CPU_COMPARE_BYTES:
        yield "cpu", None
        return
    t0 = time.monotonic()
    with STAGER.stage([data]) as staged:
        t1 = time.monotonic()
        steps["judge_stage"] = steps.get("judge_stage", 0.0) + t1 - t0
        with gates.shared("compare") if gates is not None else nullcontext():
            steps["judge_lock_wait"] = steps.get("judge_lock_wait", 0.0) + time.monotonic() - t1
            yield "cuda", staged[0]


# Outputs compared on the GPU are first copied, with no lock held, into page-locked host
# memory: under the lock their copy to the device is then one DMA at PCIe speed, and the
# mapped record's page faults are paid outside it. On a quiet H200 a compare step of a 1 GB
# fp32 output was ~97% pageable copy (300 ms of 310; results/compare_cost_2026-12-04q*).
STAGE_BUDGET_BYTES = 2 << 30  # page-locked staging held by all judgements at once, at most


class Stager:
    """Hands out page-locked copies of outputs within one process-wide byte budget; over
    it, an output is compared from where it is (pageable), as before."""

    def __init__(self, budget: int) -> None:
        self._left, self._lock = budget, threading.Lock()

    @contextmanager
    def stage(self, datas: list[Any]) -> Iterator[list[list[Any] | None]]:
        """Per record, a page-locked copy of each plain output tensor (None where not
        staged), or None for the record when the budget is spent."""
        need = sum(map(output_bytes, datas))
        with self._lock:
            got = 0 < need <= self._left
            self._left -= need if got else 0
        try:
            yield ([[_pinned_copy(o) for o in _plain_outputs(d)] for d in datas] if got
                   else [None] * len(datas))
        finally:
            if got:
                with self._lock:
                    self._left += need


def _plain_outputs(data: Any) -> list[torch.Tensor | None]:
    """A loaded call's outputs, in order: each plain non-empty tensor, else None."""
    outs = data.get("outputs") if isinstance(data, dict) else None
    return [o if type(o) is torch.Tensor and o.numel() else None
            for o in outs] if isinstance(outs, list) else []


def _pinned_copy(out: torch.Tensor | None) -> torch.Tensor | None:
    if out is None:
        return None
    try:
        return torch.empty(out.shape, dtype=out.dtype, pin_memory=True).copy_(out)
    except RuntimeError:  # no page-locked memory to be had: compared from the record
        return None


STAGER = Stager(STAGE_BUDGET_BYTES)


def warm(gates: sandbox.Gates | None) -> threading.Thread:
    """Make the parent's CUDA context and load the compare's kernels now, on a thread of
    its own, under the shared lock (GPU work, if only a little). Otherwise the first large
    compare of a session does it, under the lock too: in the eleventh session's H200
    batches the first verdicts each spent 2.3-3.6 s more in their compares than later
    ones (the lock wait aside), and all of them came at once, 27-32 s in. Then it warns if
    other processes hold most of the device (gpu_memory.held_elsewhere): asked here, not
    before the sandboxes start, since it needs the CUDA context."""
    def run() -> None:
        try:
            with gates.shared("compare") if gates is not None else nullcontext():
                for dtype in (torch.float32, torch.float16, torch.bfloat16):
                    x = torch.ones(4096, dtype=dtype, device="cuda")
                    compare(x, x, Tol(1e-4, 1e-4, 1e-4))
                torch.cuda.synchronize()
            torch.empty(1, pin_memory=True)  # the page-locked allocator (Stager)
            held = gpu_memory.held_elsewhere()
        except Exception:  # noqa: BLE001 - a GPU failing here fails the first real compare
            return
        if held:
            logging.getLogger(__name__).warning(held)

    thread = threading.Thread(target=run, name="kz-compare-warm", daemon=True)
    thread.start()
    return thread
