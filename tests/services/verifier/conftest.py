"""Shared fixtures: problem/solution/cheat files and verdicts computed once per session.

Verifying means spawning sandboxed Python processes (torch import costs seconds on
this 2-core box), so every verdict the suites assert on is computed in a few
parallel batches here and shared.
"""

from __future__ import annotations

import ast
import os
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from services.verifier.core import Session, verify_many
from services.verifier.options import VerifyOptions
from services.verifier.report import VerifyReport
from services.verifier.sandbox import ZYGOTE_MODE, available_modes

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "problems"
SOLUTIONS = HERE / "solutions"
CHEATS = HERE / "cheats"

CORRECT = [("softmax", "softmax_ok"), ("add", "add_ok"), ("layernorm", "layernorm_ok"),
           ("matmul", "matmul_ok"), ("softmax_fp16", "softmax_fp16_fp32acc_ok")]

# Small but honest limits: enough for a sandboxed torch import on a loaded 2-core box.
CPU_OPTIONS = VerifyOptions(device="cpu", wall_timeout_s=120, cpu_seconds=60,
                            memory_limit_mb=8192, reference_timeout_s=120)


@dataclass(frozen=True)
class Cheat:
    name: str
    meta: dict[str, Any]
    source: str

    @property
    def problem(self) -> str:
        return str(self.meta["problem"])

    def problem_for(self, device: str) -> str:
        return str(self.meta.get("problem_gpu", self.problem)) if device == "cuda" else self.problem


def problem_src(name: str) -> str:
    return (PROBLEMS / f"{name}.py").read_text()


def load_cheats() -> list[Cheat]:
    out = []
    for path in sorted(CHEATS.glob("*.py")):
        if path.name == "__init__.py":
            continue
        text = path.read_text()
        meta = next(ast.literal_eval(n.value) for n in ast.parse(text).body
                    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CHEAT")
        out.append(Cheat(path.stem, meta, str(meta.get("solution", text))))
    return out


ALL_CHEATS = load_cheats()


def reasons_text(report: VerifyReport) -> str:
    return " | ".join(report.reasons).lower()


def expect_in(expect: str, report: VerifyReport) -> bool:
    text = reasons_text(report)
    return any(alt.lower() in text for alt in expect.split("|"))


# Contract: the verdict suites run against each sandbox backend this host offers: the
# default one ("auto": bwrap+uid here) and the fork server (same isolation as unshare+uid,
# torch imported once). A cheat must be rejected, and an honest kernel pass, on both.
BACKENDS = ["auto"] + ([ZYGOTE_MODE] if ZYGOTE_MODE in available_modes("cpu") else [])


@pytest.fixture()
def base() -> Iterator[Path]:
    """A sandbox's dirs (work, inputs, cache) under /tmp, which sandboxes may reach."""
    b = Path("/tmp") / f"kzv-test-{uuid.uuid4().hex[:8]}"
    for d in ("work", "inputs", "cache"):
        (b / d).mkdir(parents=True)
    os.chmod(b, 0o711)
    yield b
    shutil.rmtree(b, ignore_errors=True)


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def correct_verdicts(backend: str) -> dict[str, VerifyReport]:
    pairs = [(problem_src(p), (SOLUTIONS / f"{s}.py").read_text()) for p, s in CORRECT]
    reports = verify_many(pairs, replace(CPU_OPTIONS, isolation=backend), workers=2)
    return {s: r for (_, s), r in zip(CORRECT, reports)}


@pytest.fixture(scope="session")
def cheat_verdicts(backend: str) -> dict[str, VerifyReport]:
    """Every cheat (all are judged on CPU too), plus the runtime_only variants, one session."""
    session = Session(replace(CPU_OPTIONS, isolation=backend))
    jobs: list[tuple[str, str, str, str | None]] = []
    for c in ALL_CHEATS:
        jobs.append((c.name, problem_src(c.problem), c.source, None))
        if "runtime_only" in c.meta:
            jobs.append((c.name + "@runtime_only", problem_src(c.problem), c.source,
                         "runtime_only"))
    jobs.append(("non_discriminating", problem_src("non_discriminating"),
                 (SOLUTIONS / "add_ok.py").read_text(), None))
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            reports = list(pool.map(lambda j: session.verify(j[1], j[2], policy=j[3]), jobs))
    finally:
        session.close()
    return {j[0]: r for j, r in zip(jobs, reports)}


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# KZ_TEST_ISOLATION picks the sandbox backend of the GPU suites (e.g. the fork server), so
# one device call can run the whole GPU contract against a backend other than the default.
GPU_OPTIONS = VerifyOptions(device="cuda", wall_timeout_s=120, cpu_seconds=90,
                            reference_timeout_s=180, n_timing_runs=30,
                            isolation=os.environ.get("KZ_TEST_ISOLATION", "auto"))


@pytest.fixture(scope="session")
def gpu_cheat_verdicts() -> dict[str, VerifyReport]:
    pairs = [(problem_src(c.problem_for("cuda")), c.source) for c in ALL_CHEATS]
    reports = verify_many(pairs, GPU_OPTIONS, workers=8)
    return {c.name: r for c, r in zip(ALL_CHEATS, reports)}
