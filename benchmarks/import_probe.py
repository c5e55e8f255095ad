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
import resource
import statistics
import subprocess
import sys
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


def run(code: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-I", "-B", "-c", code], check=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for name, code in VARIANTS.items():
        runs = [run(code) for _ in range(args.repeat)]
        rows.append({"variant": name, "wall_s": statistics.median(w for w, _ in runs),
                     "cpu_s": statistics.median(c for _, c in runs)})
    print("variant | median wall s | median cpu s\n--- | --- | ---")
    for r in rows:
        print(f"{r['variant']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "import_probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
