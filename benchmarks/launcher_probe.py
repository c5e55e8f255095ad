"""What a candidate's first launches cost in a fresh sandbox-like process, and how much of
it is Triton building launchers with the C compiler (triton 3.6 builds one per kernel
signature; later versions launch through one generic module).

    python benchmarks/launcher_probe.py [--out DIR] [--rounds 2]

Each round runs three fresh processes, each with its own Triton cache dir:
- cold: an empty cache (a candidate's slot today, seeded with the driver utils only);
- launchers: the cache seeded with the launcher modules the cold process built and
  nothing else (what a host-wide cache of trusted launchers would give);
- warm: the whole cache of the cold process (the same source again).
In each, five kernels are launched once in turn: two share one signature, three bring a
new one each. Prints a table (first launch to synchronised end, and the seconds inside
the C builds); writes DIR/launcher_probe.json. Skips without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

CHILD = r'''
import json, sys, time
import torch, triton, triton.language as tl
import triton.runtime.build as B

builds = []
_orig = getattr(B, "_build", None)  # the C compiler's one entry (absent: not counted)
def _timed(name, *a, **k):
    t = time.perf_counter()
    try:
        return _orig(name, *a, **k)
    finally:
        builds.append((name, time.perf_counter() - t))
if _orig is not None:
    B._build = _timed

@triton.jit
def add(x, y, o, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

@triton.jit
def mul(x, y, o, n, BLOCK: tl.constexpr):  # add's signature, another kernel
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(o + i, tl.load(x + i, mask=m) * tl.load(y + i, mask=m), mask=m)

@triton.jit
def relu(x, o, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(o + i, tl.maximum(tl.load(x + i, mask=m), 0.0), mask=m)

@triton.jit
def rowsum(x, o, stride, cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    j = tl.arange(0, BLOCK)
    v = tl.load(x + r * stride + j, mask=j < cols, other=0.0)
    tl.store(o + r, tl.sum(v, axis=0))

t = time.perf_counter()
torch.cuda.init(); torch.empty(1, device="cuda")
triton.runtime.driver.active.utils  # the driver utils (a C build when not cached)
out = {"init_s": time.perf_counter() - t, "init_builds": list(builds), "kernels": []}
n = 1 << 20
f32 = [torch.randn(n, device="cuda") for _ in range(3)]
f16 = [a.half() for a in f32]
m = torch.randn(256, 1000, device="cuda")
runs = [("add_f32", add, (f32[0], f32[1], f32[2], n), 1024),
        ("mul_f32 (add's signature)", mul, (f32[0], f32[1], f32[2], n), 1024),
        ("relu_f32", relu, (f32[0], f32[1], n), 1024),
        ("rowsum_f32", rowsum, (m, f32[2], m.stride(0), 1000), 1024),
        ("add_f16", add, (f16[0], f16[1], f16[2], n), 1024)]
for name, k, args, block in runs:
    builds.clear()
    t = time.perf_counter()
    grid = (256,) if name.startswith("rowsum") else (triton.cdiv(n, block),)
    k[grid](*args, BLOCK=block)
    torch.cuda.synchronize()
    out["kernels"].append({"kernel": name, "first_launch_s": time.perf_counter() - t,
                           "builds": list(builds)})
print(json.dumps(out))
'''


def _child(cache: Path) -> dict:
    """One fresh process; its script is a file (Triton reads a kernel's source from it)."""
    script = cache.parent / "launcher_probe_child.py"
    script.write_text(CHILD)
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=300)
    if res.returncode != 0:
        raise SystemExit(f"probe child failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _copy_entries(src: Path, dst: Path, keep: Callable[[set[str]], bool]) -> int:
    """Copy the Triton cache entries (one dir each) whose file names `keep` accepts."""
    n = 0
    for d in src.iterdir():
        if keep({p.name for p in d.iterdir()}):
            shutil.copytree(d, dst / d.name)
            n += 1
    return n


def _is_utils(names: set[str]) -> bool:
    return "cuda_utils.so" in names


def _is_launcher(names: set[str]) -> bool:
    """A C-built module but the driver utils' (seeded in every slot today), no kernel."""
    return (any(x.endswith(".so") for x in names) and not _is_utils(names)
            and not any(x.endswith(".cubin") for x in names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("launcher_probe: no CUDA device, skipped")
        return
    import triton
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        seed = base / "seed"  # the driver utils, built once, as the pool's stubs/
        seed.mkdir()
        _child(seed)
        utils = base / "utils"
        utils.mkdir()
        _copy_entries(seed, utils, _is_utils)
        for r in range(args.rounds):
            cold = base / f"cold{r}"
            shutil.copytree(utils, cold)
            res = {"cold": _child(cold)}
            lonly = base / f"launchers{r}"
            shutil.copytree(utils, lonly)
            res["launchers_seeded"] = _copy_entries(cold, lonly, _is_launcher)  # type: ignore[assignment]
            res["launchers"] = _child(lonly)
            warm = base / f"warm{r}"
            shutil.copytree(cold, warm)
            res["warm"] = _child(warm)
            rows.append(res)
    table = []
    for case in ("cold", "launchers", "warm"):
        for k, kern in enumerate(rows[0][case]["kernels"]):
            firsts = [r[case]["kernels"][k]["first_launch_s"] for r in rows]
            built = [sum(s for _, s in r[case]["kernels"][k]["builds"]) for r in rows]
            table.append({"cache": case, "kernel": kern["kernel"],
                          "first_launch_s": round(statistics.median(firsts), 4),
                          "c_build_s": round(statistics.median(built), 4),
                          "c_builds": len(rows[0][case]["kernels"][k]["builds"])})
    print(f"launcher probe: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}, median of {args.rounds} rounds")
    print("cache | kernel | first launch s | in C builds s | C builds")
    print("--- | --- | --- | --- | ---")
    for t in table:
        print(f"{t['cache']} | {t['kernel']} | {t['first_launch_s']} | {t['c_build_s']} | "
              f"{t['c_builds']}")
    totals = {case: round(sum(t["first_launch_s"] for t in table if t["cache"] == case), 3)
              for case in ("cold", "launchers", "warm")}
    print(f"sum of first launches s: {totals}; launcher modules seeded: "
          f"{[r['launchers_seeded'] for r in rows]}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "launcher_probe.json").write_text(json.dumps(
        {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
         "triton": triton.__version__, "table": table, "totals": totals, "rounds": rows},
        indent=1))


if __name__ == "__main__":
    main()
