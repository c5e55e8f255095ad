"""How busy the host's CPUs and the GPU were while a benchmark ran (Linux /proc/stat and
nvidia-smi). Tells a CPU-bound batch (cores saturated: cut CPU work per candidate) from a
latency-bound one (cores idle: more parallelism helps).

    with HostLoad() as load:
        run_batch(...)
    load.summary()  # {"cpu_busy_mean": 0.83, "cpu_core_s": 812.0, ...}
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
from typing import Any

from services.verifier.quiet import cpu_times


class HostLoad:
    """Samples CPU busy fraction (all cores) and GPU utilisation every `period_s`."""

    def __init__(self, period_s: float = 0.5) -> None:
        self.period_s = period_s
        self.cpu: list[float] = []  # busy fraction of all cores per sample interval
        self.gpu: list[float] = []  # nvidia-smi utilization.gpu per sample, 0..1
        # GPU memory per sample, MiB: the device's used total, this (the parent) process's
        # share, the largest other process's, and how many processes held a context
        self.gpu_mem: list[tuple[float, float, float, int]] = []
        self.gpu_mem_total = 0.0
        # this (the verifier's parent) process: cores used per sample (all its threads), and
        # how late a 5 ms sleep wakes up: one thread holding the GIL shows as lateness
        self.parent: list[float] = []
        self.gil_late_ms: list[float] = []
        self._probe = threading.Thread(target=self._gil_probe, name="kz-gil-probe", daemon=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kz-host-load", daemon=True)
        self._t0 = self._t1 = 0.0
        self._busy_jiffies = 0.0

    def __enter__(self) -> HostLoad:
        self._t0 = time.monotonic()
        self._thread.start()
        self._probe.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._probe.join()
        self._t1 = time.monotonic()

    def _run(self) -> None:
        smi = shutil.which("nvidia-smi")
        last = cpu_times()
        first = last
        own, at = time.process_time(), time.monotonic()
        while not self._stop.wait(self.period_s):
            now = cpu_times()
            if now and last and now[1] > last[1]:
                self.cpu.append((now[0] - last[0]) / (now[1] - last[1]))
            last = now
            own2, at2 = time.process_time(), time.monotonic()
            self.parent.append((own2 - own) / max(at2 - at, 1e-6))
            own, at = own2, at2
            if smi:
                self._sample_gpu(smi)
        if first and last:
            self._busy_jiffies = last[0] - first[0]

    def _gil_probe(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(0.005)
            self.gil_late_ms.append((time.perf_counter() - t - 0.005) * 1e3)

    def _sample_gpu(self, smi: str) -> None:
        try:
            fmt = "--format=csv,noheader,nounits"
            out = subprocess.run([smi, "--query-gpu=utilization.gpu,memory.used,memory.total",
                                  fmt, "-i", "0"], capture_output=True, text=True, timeout=2,
                                 check=False).stdout.strip()
            util, used, total = (float(v) for v in out.splitlines()[0].split(","))
            self.gpu.append(util / 100)
            self.gpu_mem_total = total
            apps = subprocess.run([smi, "--query-compute-apps=pid,used_memory", fmt, "-i", "0"],
                                  capture_output=True, text=True, timeout=2,
                                  check=False).stdout.strip().splitlines()
            per = [(int(a), float(b)) for a, b in (line.split(",") for line in apps if line)]
            mine = sum(m for pid, m in per if pid == os.getpid())
            others = [m for pid, m in per if pid != os.getpid()]
            self.gpu_mem.append((used, mine, max(others, default=0.0), len(per)))
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            pass

    def summary(self) -> dict[str, Any]:
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        out: dict[str, Any] = {"cores": os.cpu_count(), "samples": len(self.cpu),
                               "wall_s": round(self._t1 - self._t0, 2),
                               # core-seconds of CPU the whole host spent during the run
                               "cpu_core_s": round(self._busy_jiffies / hz, 1)}
        if self.cpu:
            out.update(cpu_busy_mean=round(statistics.fmean(self.cpu), 3),
                       cpu_busy_p90=_p90(self.cpu),
                       cpu_saturated_frac=round(sum(c >= 0.95 for c in self.cpu)
                                                / len(self.cpu), 3))
        if self.gpu:
            out.update(gpu_util_mean=round(statistics.fmean(self.gpu), 3))
        if self.gpu_mem:
            peak = max(self.gpu_mem)  # the sample with the most device memory in use
            out.update(gpu_mem_total_mib=self.gpu_mem_total, gpu_mem_used_max_mib=peak[0],
                       gpu_mem_used_mean_mib=round(statistics.fmean(m[0] for m in self.gpu_mem)),
                       gpu_mem_at_peak={"parent_mib": peak[1], "largest_other_mib": peak[2],
                                        "processes": peak[3]},
                       gpu_mem_parent_max_mib=max(m[1] for m in self.gpu_mem),
                       gpu_mem_other_max_mib=max(m[2] for m in self.gpu_mem))
        for name, xs in (("parent_cores", self.parent), ("gil_late_ms", self.gil_late_ms)):
            if xs:
                out[f"{name}_mean"], out[f"{name}_p90"] = round(statistics.fmean(xs), 3), _p90(xs)
        return out


def _p90(xs: list[float]) -> float:
    return round(sorted(xs)[int(0.9 * (len(xs) - 1))], 3)
