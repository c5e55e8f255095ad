"""What a holdout's trip through host memory costs in a fresh sandbox-like process.

    python benchmarks/pin_probe.py [--out DIR] [--sizes-mb 16,64,160] [--procs 1,12]
                                   [--busy none,kernels,contexts,teardowns] [--sandbox MODE]

A candidate's harness reads its two holdout sets from files and page-locks them
(`tensor.pin_memory()`) in its lock-free idle step, then copies them to the device under
the exclusive GPU lock, after the timed runs (harness.py `_timing`). In the twenty-sixth
session's H100 passes that pin took 0.5-0.6 s median per candidate (0.1-0.3 s for the
softmax's sets, ~0.8 s for the add's), ~6-8% of all sandbox time. This probe measures,
per set size, in N fresh processes started at once (N=1: quiet; N=12: a batch's sandboxes):
- staged: a copy into a page-locked buffer the process allocated at its start-up (no
  driver call on the way);
- pin: `pin_memory()` of a loaded (pageable) tensor, the harness's way today;
- pin_again: the same after the first pinned block was freed (the caching host allocator);
- register: `cudaHostRegister` of the pageable tensor's own pages (no copy, no new memory);
- register_refused: the same pages registered again, which the runtime refuses;
- h2d_pinned / h2d_pageable: a synchronised host-to-device copy from each (what the
  exclusive phase pays per set).
Each round runs beside one kind of other work on the card (`--busy`), as a batch's slots
do: none (a quiet card), kernels (another process's matmuls back to back, as a timed
candidate's runs), contexts (processes starting CUDA contexts four at a time, as new
sandboxes and workers do) or teardowns (the same, each holding 8 GB of device memory and
1 GB page-locked when it exits, as a candidate's process with its poison reservation).
In the twenty-eighth session's H100 pass, registering the holdouts in place left the
harness's pin step where `pin_memory()` had it (0.585 s against 0.625 s median per timed
honest row), though quiet it costs 1/10: the busy rounds ask whether such work on the
card is what it waits for. `--sandbox MODE` (e.g. unshare+uid, as root) runs each probe
process in the verifier's own sandbox (sandbox.Process: its uid, namespaces, mounts, and a
cgroup with the harness's memory.max), which a plain process lacks. None of kernels,
contexts, teardowns or the sandbox made a registration slow (H100, twenty-eighth and
twenty-ninth sessions, verifier_notes.md).
Prints a table of medians over the processes; writes DIR/pin_probe.json. Skips without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.verifier_summary import table  # noqa: E402

CHILD = r'''
import json, sys, time
import torch
sizes = [int(s) for s in sys.argv[1].split(",")]
torch.zeros(1, device="cuda"); torch.cuda.synchronize()  # the context, as a slot has it
rt = torch.cuda.cudart()
import ctypes; cu = ctypes.CDLL("libcuda.so.1")
stage = torch.empty(max(sizes) << 20, dtype=torch.uint8, pin_memory=True)  # at start-up
out = {}
def clock(fn):
    t = time.perf_counter(); r = fn(); torch.cuda.synchronize()
    return r, time.perf_counter() - t
for mb in sizes:
    n = mb << 20
    host = torch.ones(n, dtype=torch.uint8)  # pages faulted in, as torch.load leaves them
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    _, staged = clock(lambda: stage[:n].copy_(host))
    pinned, pin = clock(host.pin_memory)
    _, h2d_pinned = clock(lambda: dev.copy_(pinned))
    del pinned
    pinned, pin_again = clock(host.pin_memory)
    del pinned
    _, h2d_pageable = clock(lambda: dev.copy_(host))
    other = torch.ones(n, dtype=torch.uint8)
    err, register = clock(lambda: rt.cudaHostRegister(other.data_ptr(), n, 0))
    if int(err) == 0:  # cudaSuccess
        _, h2d_registered = clock(lambda: dev.copy_(other))
        # the driver's call: a refused runtime call would leave the runtime's last error
        again, refused = clock(lambda: cu.cuMemHostRegister_v2(
            ctypes.c_void_p(other.data_ptr()), ctypes.c_size_t(n), ctypes.c_uint(0)))
        refused = refused if int(again) else float("nan")  # must be refused: registered
        rt.cudaHostUnregister(other.data_ptr())
    else:
        register = h2d_registered = refused = float("nan")
    out[mb] = {"staged": staged, "pin": pin, "pin_again": pin_again, "register": register,
               "register_refused": refused, "h2d_pinned": h2d_pinned,
               "h2d_registered": h2d_registered, "h2d_pageable": h2d_pageable}
print(json.dumps(out))
'''
SPAWN = r'''
import subprocess, sys
print("ready", flush=True)
while True:  # four at a time, each a fresh process that runs CODE and exits
    for p in [subprocess.Popen([sys.executable, "-c", CODE]) for _ in range(4)]: p.wait()
'''
BUSY = {  # other work on the card during a round; each prints "ready" once it runs
    "none": None,
    "kernels": r'''
import torch
a = torch.randn(8192, 8192, device="cuda"); torch.cuda.synchronize(); print("ready", flush=True)
while True:
    for _ in range(20): a @ a
    torch.cuda.synchronize()
''',
    "contexts": "CODE = %r\n" % (
        "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()") + SPAWN,
    "teardowns": "CODE = %r\n" % (
        "import torch; d = torch.empty(8 << 30, dtype=torch.uint8, device='cuda'); "
        "h = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True); "
        "torch.cuda.synchronize()") + SPAWN,
}
STEPS = ("staged", "pin", "pin_again", "register", "register_refused", "h2d_pinned",
         "h2d_registered", "h2d_pageable")


def _round(sizes: str, procs: int, mode: str | None) -> list[dict]:
    """`procs` fresh processes started together; each one's seconds per size and step."""
    if mode is not None:
        with ThreadPoolExecutor(procs) as pool:
            return list(pool.map(lambda _: _sandboxed(sizes, mode), range(procs)))
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, sizes], stdout=subprocess.PIPE,
                             text=True) for _ in range(procs)]
    outs = []
    for kid in kids:
        stdout, _ = kid.communicate(timeout=600)
        if kid.returncode:
            raise SystemExit(f"probe child failed with exit code {kid.returncode}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


def _sandboxed(sizes: str, mode: str) -> dict:
    """One probe process in the verifier's sandbox, with a slot's memory limit."""
    from services.verifier import sandbox
    from services.verifier.options import VerifyOptions
    from services.verifier.sandbox_mounts import WORK

    limits = sandbox.Limits(600, 600, VerifyOptions().memory_limit_mb << 20)
    res = sandbox.run_scratch(mode, "cuda", [sys.executable, "-I", "-c", CHILD, sizes],
                              {"HOME": WORK, "OMP_NUM_THREADS": "1"}, limits)
    if res.returncode != 0:
        raise SystemExit(f"sandboxed probe ({res.isolation}) failed: {res.describe()}\n"
                         f"{res.stderr_tail[-2000:]}")
    return json.loads(res.stdout_tail.strip().splitlines()[-1])


@contextmanager
def _busy(kind: str) -> Iterator[None]:
    """The card kept busy with `kind` of work (BUSY) while the block runs; then its whole
    process group is killed, so no child of it keeps the card."""
    code = BUSY[kind]
    if code is None:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"busy work {kind!r} did not start")
        yield
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--sizes-mb", default="16,64,160")
    ap.add_argument("--procs", default="1,12")
    ap.add_argument("--busy", default="none", help="comma list of: " + ",".join(BUSY))
    ap.add_argument("--sandbox", metavar="MODE", default=None,
                    help="run each probe process in the verifier's sandbox of this mode")
    args = ap.parse_args()
    busy = args.busy.split(",")
    if unknown := [b for b in busy if b not in BUSY]:
        ap.error(f"unknown --busy {unknown}: choose from {sorted(BUSY)}")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA: skipped")
        return
    rows = []
    for kind, procs in ((b, int(p)) for b in busy for p in args.procs.split(",")):
        with _busy(kind):
            outs = _round(args.sizes_mb, procs, args.sandbox)
        for mb in outs[0]:
            row: dict[str, Any] = {"busy": kind, "procs": procs, "mb": int(mb),
                                   "sandbox": args.sandbox or "none"}
            for s in STEPS:
                row[s + "_ms"] = round(1e3 * statistics.median(o[mb][s] for o in outs), 2)
            rows.append(row)
    print(table("page-locking a set, medians over the processes", rows,
                ["sandbox", "busy", "procs", "mb"] + [s + "_ms" for s in STEPS]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pin_probe.json").write_text(json.dumps(
        {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
        indent=1))


if __name__ == "__main__":
    main()
