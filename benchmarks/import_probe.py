"""What a fresh sandbox-like Python spends before it can look at a candidate, in CPU and
wall seconds, step by step: interpreter, `import torch`, the first op under a
TorchDispatchMode (default, which on some torch versions imports torch._dynamo, and with
the `_should_skip_dynamo` opt-out the harness uses), `import triton`, the CUDA context.

    python benchmarks/import_probe.py [--repeat 3] [--out DIR]

Each variant runs in its own `python -I -B` process (as the sandbox starts it); CPU is
the child's user+sys time (getrusage), so it counts every thread the import starts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODE = '''
from torch.utils._python_dispatch import TorchDispatchMode
class M(TorchDispatchMode):
{optout}
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {{}}))
with M():
    torch.zeros(4).add_(1)
'''
OPTOUT = "    @classmethod\n    def _should_skip_dynamo(cls):\n        return False\n"
CUDA = "\nif torch.cuda.is_available():\n    torch.empty(1, device='cuda')\n"
VARIANTS = {
    "python": "pass",
    "import torch": "import torch",
    "torch + mode (default)": "import torch\n" + MODE.format(optout=""),
    "torch + mode (opt-out)": "import torch\n" + MODE.format(optout=OPTOUT),
    "torch + triton": "import torch, triton, triton.language",
    "torch + cuda context": "import torch" + CUDA,
    "harness start-up (opt-out)": "import torch, triton, triton.language\n"
                                  + MODE.format(optout=OPTOUT) + CUDA,
}


# `import torch` again under other conditions: fewer OpenMP threads, and the bytecode of
# every module found already compiled (a pycache prefix filled beforehand), to see whether
# a site-packages without .pyc files (and `-B`, which never writes any) costs the CPU.
# (-I ignores PYTHON* variables: the prefix goes in with -X, as a sandbox would pass it.)
ENV_VARIANTS = {
    "import torch, OMP_NUM_THREADS=1": ({"OMP_NUM_THREADS": "1"}, []),
    "import torch, OMP_NUM_THREADS=2 (the sandbox's)": ({"OMP_NUM_THREADS": "2"}, []),
    "import torch, precompiled pycache prefix": ({}, ["-X", "pycache_prefix={prefix}"]),
}


def run(code: str, env: dict[str, str] | None = None,
        args: list[str] | None = None) -> tuple[float, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-I", "-B", *(args or []), "-c", code], check=True,
                   env={**os.environ, **env} if env else None)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, sys_ = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return wall, user + sys_, sys_


def pyc_coverage(package: str = "torch") -> dict[str, float]:
    """Share of the package's .py files with a .pyc for this interpreter next to them."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    assert spec and spec.submodule_search_locations
    root = Path(list(spec.submodule_search_locations)[0])
    pys = list(root.rglob("*.py"))
    have = sum(Path(importlib.util.cache_from_source(str(p))).exists() for p in pys[:4000])
    return {"py_files": len(pys), "with_pyc": have / max(1, min(len(pys), 4000))}


def fill_prefix(prefix: str) -> None:
    """Compile torch's and triton's modules into a pycache prefix (outside the packages)."""
    code = ("import compileall, importlib.util, sys\n"
            "for p in ('torch', 'triton'):\n"
            "    s = importlib.util.find_spec(p)\n"
            "    compileall.compile_dir(list(s.submodule_search_locations)[0], quiet=2,"
            " workers=8)")
    subprocess.run([sys.executable, "-c", code], check=False,
                   env={**os.environ, "PYTHONPYCACHEPREFIX": prefix})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    prefix = tempfile.mkdtemp(prefix="kz-pycache-")
    fill_prefix(prefix)
    todo = [(name, code, None, None) for name, code in VARIANTS.items()]
    todo += [(name, "import torch", env, [a.format(prefix=prefix) for a in extra])
             for name, (env, extra) in ENV_VARIANTS.items()]
    rows = []
    for name, code, env, extra in todo:
        runs = [run(code, env, extra) for _ in range(args.repeat)]
        rows.append({"variant": name, "wall_s": statistics.median(r[0] for r in runs),
                     "cpu_s": statistics.median(r[1] for r in runs),
                     "sys_s": statistics.median(r[2] for r in runs)})
    print("variant | median wall s | median cpu s | of it sys s\n--- | --- | --- | ---")
    for r in rows:
        print(f"{r['variant']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['sys_s']:.3f}")
    cov = pyc_coverage()
    print(f"torch: {cov['py_files']} .py files, {cov['with_pyc']:.0%} with a .pyc beside them")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "import_probe.json").write_text(json.dumps({"rows": rows, "torch_pyc": cov},
                                                               indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
