"""A sandboxed child that walks the GPU lock's phases by the same words as the harness and
the reference worker (shared by the sandbox, pool and GPU-places tests)."""

from __future__ import annotations

import sys
from pathlib import Path

from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
from services.verifier.gpu_lock import GpuLock

# A child that asks for the GPU lock as the harness and the reference worker do.
GATED_CHILD = r"""
import os, sys, time
ctrl = os.fdopen(int(sys.stdin.readline()), "w", buffering=1)
sys.stdin.readline()  # the job
def gate(word):
    ctrl.write(word + "\n")
    assert sys.stdin.readline().strip() == "GO"
"""


def gated_process(base: Path, src: str) -> tuple[sandbox.Process, GpuLock]:
    """`src` as a started sandboxed process, and the GPU lock its phases go through."""
    view = M.View(str(base / "work"), str(base / "inputs"), str(base / "cache"), "cpu")
    lim = sandbox.Limits(wall_s=30, cpu_s=30, memory_bytes=4 << 30, nproc=64,
                         fsize_bytes=1 << 20, timing_wall_s=10, locked_wall_s=10)
    return (sandbox.Process("rlimits", view, [sys.executable, "-I", "-c", src], {}, lim, base),
            GpuLock(str(base / "cache")))
