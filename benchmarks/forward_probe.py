"""Why is a correctness call slow? (GPU diagnostic for services/verifier/harness.py)

    python benchmarks/forward_probe.py

On the H200 the harness's recorded correctness calls took ~0.6 s of CPU each for a 16M
fp32 add (its timed runs of the same forward: microseconds). This times the same forward
plainly, under a pass-through TorchDispatchMode, and under the harness's own Tracer +
launch counter, prints the per-call times, how many compiled variants Triton holds, and
a cProfile of the slow case. Prints only; nothing decides a verdict.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def _solution() -> Any:
    from kz_common.kernels import import_source, reference_solution

    return import_source("kz_probe_sol", reference_solution("add"))


def _variants(mod: Any) -> int:
    n = 0
    for v in vars(mod).values():
        caches = getattr(v, "device_caches", None)
        if caches:
            n += sum(len(c[0]) for c in caches.values())
    return n


def _time(label: str, mod: Any, model: Any, inputs: list[Any], mode: Any, k: int = 4) -> None:
    for i in range(k):
        x = [t.clone() for t in inputs]
        t0 = time.perf_counter()
        with torch.no_grad():
            if mode is None:
                model(*x)
            else:
                with mode():
                    model(*x)
        torch.cuda.synchronize()
        print(f"{label:24s} call {i}: {(time.perf_counter() - t0) * 1e3:8.2f} ms  "
              f"triton variants {_variants(mod)}", flush=True)


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 0
    mod = _solution()
    model = mod.ModelNew()
    inputs = [torch.randn(1 << 24, device="cuda") for _ in range(2)]
    _time("plain", mod, model, inputs, None)
    _time("pass-through mode", mod, model, inputs, PassThrough)
    from triton.runtime import jit as _jit

    real = _jit.JITFunction.run

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return real(self, *args, **kwargs)  # the harness's launch counter wraps it the same way

    _jit.JITFunction.run = counted
    _time("wrapped launch", mod, model, inputs, None)
    _time("wrapped + pass-through", mod, model, inputs, PassThrough)
    _jit.JITFunction.run = real
    prof = cProfile.Profile()
    prof.enable()
    _time("pass-through (profiled)", mod, model, inputs, PassThrough, k=2)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
    print(s.getvalue()[-6000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
