"""Where a sandboxed candidate's seconds go (GPU): one fresh process per measurement.

    python benchmarks/verifier_phases.py --out DIR

Times, in a fresh interpreter (as each sandboxed candidate is): interpreter start, `import
torch`, `import triton`, CUDA context creation, Triton's driver utils (a gcc build of
cuda_utils.so in a fresh cache dir), the first compile + launch of a kernel, a second kernel
of the same signature (launcher stub reuse), the allocator poisoning, and the same run again
with a warm cache dir. Writes DIR/verifier_phases.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r'''
import time, json, sys, os
t = {"t0": float(sys.argv[1])}
m = lambda k: t.__setitem__(k, time.time())
m("interpreter")
import torch; m("import_torch")
import triton, triton.language as tl; m("import_triton")
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize(); m("cuda_context")
triton.runtime.driver.active.utils; m("driver_utils")

@triton.jit
def k1(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)

@triton.jit
def k2(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)

x = torch.randn(1 << 20, device="cuda"); y = torch.empty_like(x)
k1[(1024,)](x, y, x.numel(), BLOCK=1024); torch.cuda.synchronize(); m("first_kernel")
k2[(1024,)](x, y, x.numel(), BLOCK=1024); torch.cuda.synchronize(); m("second_kernel")
k1[(512,)](x, y, x.numel(), BLOCK=2048); torch.cuda.synchronize(); m("recompile_constexpr")
big = torch.full(((256 << 20) // 4,), float("nan"), device="cuda"); del big
torch.cuda.synchronize(); m("poison_256MB")
print(json.dumps(t))
'''


def one(cache: str) -> dict[str, float]:
    env = {**os.environ, "TRITON_CACHE_DIR": cache}
    script = Path(cache) / "child.py"  # @triton.jit needs its source in a real file
    script.write_text(CHILD)
    out = subprocess.run([sys.executable, str(script), repr(time.time())], env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    stamps = json.loads(out.stdout.strip().splitlines()[-1])
    keys = list(stamps)
    return {k: round(stamps[k] - stamps[p], 3) for p, k in zip(keys, keys[1:])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="kz-phases-")
    rows = {"cold cache": one(cache), "warm cache": one(cache),
            "cold cache (2)": one(tempfile.mkdtemp(prefix="kz-phases-"))}
    (args.out / "verifier_phases.json").write_text(json.dumps(rows, indent=1))
    keys = list(next(iter(rows.values())))
    print("phase | " + " | ".join(rows))
    print(" | ".join("---" for _ in range(len(rows) + 1)))
    for k in keys:
        print(f"{k} | " + " | ".join(f"{r[k]:.3f} s" for r in rows.values()))
    print("total | " + " | ".join(f"{sum(r.values()):.3f} s" for r in rows.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
