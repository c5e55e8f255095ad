"""Triton's one-time costs, paid in the slot's start-up (copied next to the harness as
kz_jit_warm.py) instead of in a candidate's compile.

Measured on an H100 with triton 3.6 (`benchmarks/launcher_probe.py`, twenty-third
session), in a fresh process whose driver module was already built:
- The first launch of any @triton.jit kernel took 0.45 s even when its binary and launcher
  were cached: most of it is Triton's key, a hash of its own files and its ~0.5 GB
  libtriton (0.48 s on the dev box), which the fork server now computes before it forks
  (zygote.py); the rest is one-time set-up of the JIT and its compiler back end.
- Each new kernel *signature* then cost 0.24-0.27 s of C compiler: triton 3.6 builds a
  launcher module per signature. The launcher depends on the argument kinds (pointer, int
  width, float, constexpr), not on the pointers' dtypes: an fp16 add reused the fp32 add's.
- Compiling a small kernel itself took about 0.05 s.

So the slot launches, before KZ-WARM, a few trusted kernels of the shapes most candidate
kernels have: pointers first, then int sizes and strides, a float, and one constexpr
block size. Their binaries and launchers land in the slot's Triton cache. The first warm
slot's cache becomes the pool's stubs (pool.py), so later slots find them built, and a
candidate's kernel with one of these signatures needs no C build at all. Standalone:
torch and triton only.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a host without Triton: nothing to warm
    triton = None


if triton is not None:
    @triton.jit
    def _unary(x, o, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(o + i, tl.load(x + i, mask=i < n), mask=i < n)

    @triton.jit
    def _binary(x, y, o, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

    @triton.jit
    def _rows(x, o, stride, cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        j = tl.arange(0, BLOCK)
        p = tl.program_id(0) * stride + j
        tl.store(o + p, tl.load(x + p, mask=j < cols), mask=j < cols)

    @triton.jit
    def _norm(x, w, o, stride, cols, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        j = tl.arange(0, BLOCK)
        p = tl.program_id(0) * stride + j
        v = tl.load(x + p, mask=j < cols) * tl.load(w + j, mask=j < cols) + eps
        tl.store(o + p, v, mask=j < cols)


def warm_triton() -> float | None:
    """Launch each trusted kernel once on a few elements; its seconds, or None where there
    is nothing to warm (no Triton, no CUDA, the CPU interpreter) or a launch failed (the
    candidate's first launch pays then, as before)."""
    if (triton is None or os.environ.get("TRITON_INTERPRET")
            or not torch.cuda.is_initialized()):
        return None
    t0 = time.monotonic()
    try:
        x, y, o = (torch.zeros(16, device="cuda") for _ in range(3))
        # Ints other than 1 (Triton turns a 1 into a constant) and below 2**31 (i32).
        _unary[(1,)](x, o, 7, BLOCK=16)
        _binary[(1,)](x, y, o, 7, BLOCK=16)
        _rows[(1,)](x, o, 8, 7, BLOCK=16)
        _norm[(1,)](x, y, o, 8, 7, 1e-5, BLOCK=16)
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a diagnostic warm-up, never a verdict
        return None
    return round(time.monotonic() - t0, 4)


class CBuilds:
    """Counts Triton's C compiler builds from `install` on (diagnostics: which candidates'
    launchers the warm-up did not cover). Not trusted: a candidate may undo it."""

    def __init__(self) -> None:
        self.n, self.seconds = 0, 0.0

    def install(self) -> None:
        try:
            import triton.runtime.build as build
        except ImportError:
            return
        real = getattr(build, "_build", None)
        if real is None:
            return

        def counted(*args: Any, **kwargs: Any) -> Any:
            t = time.monotonic()
            try:
                return real(*args, **kwargs)
            finally:
                self.n += 1
                self.seconds += time.monotonic() - t

        build._build = counted

    def report(self) -> dict[str, float]:
        return {"c_builds": self.n, "c_build": round(self.seconds, 4)}
