"""Roofline, speed-of-light sanity bound, holdout floor, peak cache and environment fingerprint
(the GPU lock is gpu_lock.py)."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from services.verifier.options import VERIFIER_VERSION

# Holdouts (reference_worker._holdouts): new inputs of the timed shape, each run once after
# the timed runs. L2 is flushed before every run, so an honest kernel is no faster on
# contents it has seen; a model that caches outputs by input contents computes only these.
# Single runs in a busy batch are noisy, so the reported time rises to the fastest holdout's
# (less the slack) rather than the verdict failing, except for a clear gap. Under the 2 ms
# holdout shadow (timing.ONCE_SHADOW_MS) 900 honest verdicts on the H200 (ten batches, 12
# workers) read at most 1.11 (before it: up to 2.42, a late host); the content cache
# `timed_content_memo` read 3.6-3.9 in quiet or 136-candidate batches but 2.16-2.97 in a
# 476-candidate one, where the 3x line passed it (its host-synced fingerprint runs slower on
# a busy host). A cache under the line still gains at most HOLDOUT_SLACK.
HOLDOUT_SLACK = 0.05  # the reported time is at least the fastest holdout's / (1 + this)
HOLDOUT_REJECT = 1.5  # the fastest holdout this many times the reported time: a cache


def holdout_floor(median_ms: float, holdout_ms: Sequence[float],
                  ) -> tuple[float, float, str | None]:
    """(time to report, fastest holdout / median, rejection or None). Below HOLDOUT_REJECT
    the floor leaves a cache at most HOLDOUT_SLACK of a gain; an honest kernel's single
    synced runs mostly read at or below the back-to-back median it reports."""
    fastest = min(holdout_ms)
    ratio = fastest / median_ms
    reason = None
    if ratio > HOLDOUT_REJECT:
        reason = (f"new inputs ran {ratio:.2f}x slower than the timed runs on inputs seen "
                  f"before ({fastest:.4g} vs {median_ms:.4g} ms): outputs cached by input "
                  "contents")
    return max(median_ms, fastest / (1 + HOLDOUT_SLACK)), ratio, reason


BASELINE_KEYS = ("median_ms", "attempts", "retried", "retries_cut", "runs", "b2b_runs", "loop",
                 "host_late")


def baseline_summary(meta: dict[str, Any]) -> dict[str, Any] | None:
    """How each baseline was timed (attempts, runs, loop): diagnostics of the exclusive
    phase a bundle held, every other sandbox paused meanwhile."""
    t = meta.get("timing")
    if not isinstance(t, dict):
        return None
    return {name: {k: st.get(k) for k in BASELINE_KEYS} for name in ("naive", "optimized")
            if isinstance(st := t.get(name), dict)}


def peak_path(cache_dir: str, device_name: str) -> Path:
    return Path(cache_dir) / f"peak-{re.sub(r'[^A-Za-z0-9]+', '_', device_name)}.json"


def load_peak(cache_dir: str, device_name: str | None) -> dict[str, Any] | None:
    if not device_name:
        return None
    try:
        return json.loads(peak_path(cache_dir, device_name).read_text())
    except (OSError, ValueError):
        return None


def save_peak(cache_dir: str, peak: dict[str, Any]) -> None:
    p = peak_path(cache_dir, str(peak.get("device_name", "gpu")))
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(peak))
    os.replace(tmp, p)


def op_costs(op: str | None, dims: dict[str, int], dtype: str) -> tuple[float | None,
                                                                         float | None]:
    """(flops, bytes_moved) from the op catalogue when it offers them, else (None, None)."""
    if not op:
        return None, None
    try:
        from kz_common import ops

        spec = ops.get_op(op)  # type: ignore[attr-defined]
        dt = getattr(torch, dtype, dtype)
        return float(spec.flops(dims)), float(spec.bytes_moved(dims, dt))
    except Exception:  # noqa: BLE001 - the catalogue is optional and still being written
        return None, None


def bounds(shape_meta: dict[str, Any], peak: dict[str, Any], flops: float | None,
           bytes_moved: float | None, dtype: str) -> dict[str, float | None]:
    """Speed-of-light time (s) and the rates a time must be judged against."""
    bw = float(peak.get("copy_bytes_per_s") or 0) or None
    fl = float(peak.get("flops", {}).get(dtype) or 0) or None
    # Inputs must be read from HBM after the L2 flush; outputs may still sit in L2.
    min_bytes = float(shape_meta.get("input_bytes") or 0)
    t_bw = min_bytes / bw if bw else 0.0
    t_fl = flops / fl if flops and fl else 0.0
    moved = bytes_moved if bytes_moved else min_bytes + float(shape_meta.get("output_bytes", 0))
    return {"sol_s": max(t_bw, t_fl), "bw": bw, "flops_peak": fl, "bytes": moved,
            "flops": flops}


def roofline_fraction(t_s: float, b: dict[str, float | None]) -> float | None:
    fracs = []
    if b["bw"] and b["bytes"]:
        fracs.append(b["bytes"] / t_s / b["bw"])
    if b["flops_peak"] and b["flops"]:
        fracs.append(b["flops"] / t_s / b["flops_peak"])
    return max(fracs) if fracs else None


def fingerprint(device: str, device_name: str | None, isolation: str) -> dict[str, str]:
    fp = {"torch": torch.__version__, "python": platform.python_version(),
          "platform": platform.platform(), "verifier": VERIFIER_VERSION, "device": device,
          "isolation": isolation, "executable": sys.executable}
    try:
        import triton

        fp["triton"] = triton.__version__
    except ImportError:
        fp["triton"] = "missing"
    if device == "cuda":
        fp["gpu"] = device_name or "unknown"
        fp["cuda_runtime"] = str(torch.version.cuda)
        fp["driver"] = _driver_version()
    fp["torch_bytecode"] = _bytecode()
    for k in sorted(os.environ):
        if k.startswith(("TRITON_", "CUDA_", "KZ_VERIFIER", "NVIDIA_", "TORCH_")):
            fp[f"env.{k}"] = os.environ[k]
    return fp


def gpu_name_hint() -> str | None:
    """GPU model from the driver's procfs (no CUDA context needed), as torch names it."""
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            m = re.search(r"Model:\s+(.+)", info.read_text())
        except OSError:
            continue
        if m:
            return m.group(1).strip()
    return None


@lru_cache(maxsize=1)
def _bytecode() -> str:
    """Whether torch's modules come with .pyc files. Sandboxes run `python -B` (they never
    write any), so without them every sandbox compiles the ~2000 modules `import torch`
    loads: 0.5-1.0 CPU-s per sandbox on the H200 host's image, which has none
    (benchmarks/results/import_probe_NVIDIA_H200_2026-12-03c.json). Fix the image:
    `python -m compileall` over site-packages (and the stdlib, if the image stripped it)."""
    import importlib.util

    src = getattr(torch, "__file__", None)
    if not src:
        return "unknown"
    return "precompiled" if os.path.exists(importlib.util.cache_from_source(src)) else \
        "missing: run python -m compileall over site-packages"


def _driver_version() -> str:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return "unknown"
    return parse_driver_version(text)


def parse_driver_version(text: str) -> str:
    """The version in /proc/driver/nvidia/version's NVRM line: "... x86_64 Kernel Module
    535.129.03  Thu Oct 19 ..." (proprietary) or "... Open Kernel Module for x86_64
    580.159.04  Release Build ..." (open: the word after "Kernel Module", read up to 1.13,
    is "for" there). The first dotted number after "Kernel Module" on that line, else the
    line itself."""
    m = re.search(r"Kernel Module\b[^\n]*?\s(\d+\.\d+(?:\.\d+)?)(?!\S)", text)
    if m:
        return m.group(1)
    first = text.splitlines()[0].strip() if text.strip() else ""
    return first[:80] or "unknown"
