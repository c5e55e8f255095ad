"""The slot's Triton warm-up (harness_jit_warm, kz_jit_warm.py in a sandbox) and the
pool's stubs, which keep what it built for every later slot."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from services.verifier import harness_jit_warm as J
from services.verifier import pool
from tests.services.verifier.conftest import CPU_OPTIONS


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU case")
def test_nothing_to_warm_without_cuda() -> None:
    assert J.warm_triton() is None


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_c_builds_are_counted_from_install_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton.runtime.build as build

    monkeypatch.setattr(build, "_build", build._build)  # restored after the test
    counter = J.CBuilds()
    counter.install()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kz_probe.c"
        src.write_text("int kz_probe(void) { return 1; }\n")
        so = build._build("kz_probe", str(src), tmp, [], [], [], [])
        assert Path(so).is_file()
    report = counter.report()
    assert report["c_builds"] == 1 and report["c_build"] > 0


def test_stubs_are_kept_per_device_and_harness(tmp_path: Path) -> None:
    """A seed built by another harness (other warm-up kernels) is never reused: every
    slot would then build the missing ones itself."""
    cpu = replace(CPU_OPTIONS, cache_dir=str(tmp_path))
    cuda = replace(cpu, device="cuda")
    a, b = pool.stubs_dir(cpu), pool.stubs_dir(cuda)
    assert a.parent == b.parent == tmp_path / "stubs"
    assert a.name.startswith("cpu-") and b.name.startswith("cuda-")
    assert a.name[4:] == b.name[5:] and len(a.name[4:]) == 12
    pool._harness_digest.cache_clear()
    original = pool.HARNESS_FILES
    try:
        pool.HARNESS_FILES = {**original, "kz_jit_warm.py": "harness_trace.py"}
        assert pool.stubs_dir(cpu) != a
    finally:
        pool.HARNESS_FILES = original
        pool._harness_digest.cache_clear()
    assert pool.stubs_dir(cpu) == a
