"""Does stopping a process stop the GPU work it has queued? The premise of the harness's
compile-only warm-up (verifier_notes.md, thirteenth session).

    python benchmarks/stop_probe.py [--out DIR] [--spin-ms 300]

A child process queues a spin kernel (every SM busy for about --spin-ms) and says so; this
process stops it at once with SIGSTOP, as a timed phase stops every other sandbox, and
times a 64 MB device copy with triton.testing.do_bench (25 ms warm-up, median) while the
child is stopped. The same timing with the child idle is the baseline. Prediction: the
stopped child's kernel keeps running, and the copy reads ~2x slow (the GPU time-slices the
two contexts) for the first spin-ms. A median over thousands of 50 us copies can hide
that (most copies fall inside this process's own time slices), so the probe also times a
burst: back-to-back copies for about a third of spin-ms between one pair of events, right
after the stop, against the same burst with the child idle. Prints a table; writes
DIR/stop_probe.json. Skips without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

CHILD = r'''
import sys, torch, triton, triton.language as tl

@triton.jit
def spin(x_ptr, n):
    pid = tl.program_id(0)
    acc = tl.load(x_ptr + pid)
    for _ in range(n):
        acc = acc * 0.9999999 + 1e-7
    tl.store(x_ptr + pid, acc)

x = torch.zeros(torch.cuda.get_device_properties(0).multi_processor_count * 8, device="cuda")
grid = (x.numel(),)
spin[grid](x, 1000)
spin[grid](x, 1_000_000)  # clocks up first: a calibration at idle clocks ran 3x long
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
spin[grid](x, 1_000_000)
end.record()
torch.cuda.synchronize()
n = int(1_000_000 * float(sys.argv[1]) / start.elapsed_time(end))
print("ready", start.elapsed_time(end), flush=True)
sys.stdin.readline()
start.record()
spin[grid](x, n)
end.record()
print("queued", flush=True)
torch.cuda.synchronize()
print("done", start.elapsed_time(end), flush=True)
'''


def _victim_ms() -> float:
    import triton.testing

    x = torch.randn(16 << 20, device="cuda")
    y = torch.empty_like(x)
    return float(triton.testing.do_bench(lambda: y.copy_(x), return_mode="median"))


def _burst_ms(n: int) -> float:
    """`n` back-to-back 64 MB copies between one pair of events: any GPU time another
    context takes meanwhile is inside the window (a median would step around it)."""
    x = torch.randn(16 << 20, device="cuda")
    y = torch.empty_like(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        y.copy_(x)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--spin-ms", type=float, default=300.0)
    args = ap.parse_args(argv)
    result: dict[str, object] = {"torch": torch.__version__}
    if not torch.cuda.is_available():
        result["skipped"] = "no CUDA device"
        print(result["skipped"])
        return 0
    result["gpu"] = torch.cuda.get_device_name()
    # A file, not `python -c`: Triton reads a kernel's source with inspect, which needs one.
    script = Path(tempfile.mkdtemp(prefix="kz-stop-probe-")) / "spin_child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(args.spin_ms)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdin and child.stdout
        ready = child.stdout.readline().split()
        if len(ready) != 2:
            raise SystemExit(f"the spin child failed before it was ready (rc {child.wait()})")
        result["calibration_ms_per_1m_iters"] = float(ready[1])
        result["quiet_ms"] = _victim_ms()  # the child idle, its context alive
        _burst_ms(20)  # warm
        # a third of the spin's calibrated length (the quiet copy time sizes it)
        n = max(20, int(args.spin_ms / 3 / result["quiet_ms"]))
        result["burst_copies"] = n
        result["quiet_burst_ms"] = _burst_ms(n)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "queued"
        os.kill(child.pid, signal.SIGSTOP)  # as quiet.others_paused does
        result["stopped_burst_ms"] = _burst_ms(n)  # first: while the spin surely runs
        result["stopped_child_ms"] = _victim_ms()
        os.kill(child.pid, signal.SIGCONT)
        result["spin_ms"] = float(child.stdout.readline().split()[1])
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait()
        shutil.rmtree(script.parent, ignore_errors=True)
    result["ratio"] = round(result["stopped_child_ms"] / result["quiet_ms"], 3)  # type: ignore[operator]
    result["burst_ratio"] = round(result["stopped_burst_ms"] / result["quiet_burst_ms"], 3)  # type: ignore[operator]
    for k in ("quiet_ms", "stopped_child_ms", "ratio", "burst_copies", "quiet_burst_ms",
              "stopped_burst_ms", "burst_ratio", "spin_ms"):
        print(f"{k:>18}  {result[k]}")
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"stop_probe_{str(result['gpu']).replace(' ', '_')}.json"
    (args.out / name).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
