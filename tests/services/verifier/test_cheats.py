"""Every cheat fools the naive check (where it can) and every cheat is rejected by the verifier."""

from __future__ import annotations

import pytest

from services.verifier.core import Session
from services.verifier.report import VerifyReport
from tests.services.verifier.conftest import (ALL_CHEATS, GPU_OPTIONS, PROBLEMS, Cheat,
                                              expect_in, gpu, problem_src)
from tests.services.verifier.naive_check import naive_check_many

CPU_FOOLERS = [c for c in ALL_CHEATS if c.meta.get("fools_naive") == "cpu"]
GPU_FOOLERS = [c for c in ALL_CHEATS if c.meta.get("fools_naive") == "gpu"]
RUNTIME_ONLY = [c for c in ALL_CHEATS if "runtime_only" in c.meta]


@pytest.fixture(scope="module")
def naive_cpu() -> dict[str, bool]:
    jobs = [(PROBLEMS / f"{c.problem}.py", c.source, c.meta.get("naive_variant", "allclose"))
            for c in CPU_FOOLERS]
    return {c.name: r.passed for c, r in zip(CPU_FOOLERS, naive_check_many(jobs))}


def test_every_category_is_present() -> None:
    names = {c.name for c in ALL_CHEATS}
    required = {"library_call", "aten_ops_direct", "getattr_obfuscation", "exec_eval",
                "stale_memory", "side_stream", "cached_output", "zeros_output", "constant_output",
                "identity_output", "monkeypatch_checker", "fake_verdict_stdout", "timer_patch",
                "input_mutation", "output_alias", "wrong_dtype_or_strides", "hardcoded_shape",
                "seed_predicting", "thread_compute", "subprocess_escape", "file_read_escape",
                "network", "hang", "segfault", "oom", "fork_bomb", "no_triton_launch",
                "syntax_error", "missing_modelnew", "nan_output", "timed_memo", "timed_library",
                "timed_content_memo", "deferred_output", "precision_downcast", "host_compute"}
    assert required <= names


@pytest.mark.parametrize("cheat", CPU_FOOLERS, ids=lambda c: c.name)
def test_cheat_fools_the_naive_check(cheat: Cheat, naive_cpu: dict[str, bool]) -> None:
    assert naive_cpu[cheat.name], f"{cheat.name} should fool the naive KernelBench-style check"


@pytest.mark.parametrize("cheat", ALL_CHEATS, ids=lambda c: c.name)
def test_verifier_rejects_cheat(cheat: Cheat, cheat_verdicts: dict) -> None:
    if "gpu_only" in cheat.meta:
        pytest.skip(cheat.meta["gpu_only"])
    report = cheat_verdicts[cheat.name]
    assert not report.passed
    assert report.stage == cheat.meta["stage"], report.reasons
    assert expect_in(cheat.meta["expect"], report), report.reasons


@pytest.mark.parametrize("cheat", RUNTIME_ONLY, ids=lambda c: c.name)
def test_runtime_layer_alone_rejects(cheat: Cheat, cheat_verdicts: dict) -> None:
    """With the static library-compute rules off, the dispatch tracer still catches it."""
    spec = cheat.meta["runtime_only"]
    if "gpu_only" in spec:
        pytest.skip(spec["gpu_only"])
    report = cheat_verdicts[cheat.name + "@runtime_only"]
    assert not report.passed
    assert report.stage == spec["stage"], report.reasons
    assert expect_in(spec["expect"], report), report.reasons


def test_non_discriminating_problem_is_misuse(cheat_verdicts: dict) -> None:
    report = cheat_verdicts["non_discriminating"]
    assert not report.passed and report.stage == "problem" and report.misuse
    assert "non-discriminating" in " ".join(report.reasons)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("cheat", GPU_FOOLERS, ids=lambda c: c.name)
def test_gpu_cheat_fools_the_naive_check(cheat: Cheat) -> None:
    honest = (PROBLEMS.parent / "solutions" / "softmax_ok.py").read_text()
    problem = PROBLEMS / f"{cheat.problem_for('cuda')}.py"
    res, ref = naive_check_many([(problem, cheat.source, "allclose"),
                                 (problem, honest, "allclose")], device="cuda")
    assert res.passed, res.stdout
    if cheat.name in ("side_stream", "timer_patch"):
        # The cheat's naive speedup is inflated well beyond the honest kernel's.
        assert res.speedup and ref.speedup and res.speedup > 2 * ref.speedup, (res, ref)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("cheat", ALL_CHEATS, ids=lambda c: c.name)
def test_verifier_rejects_cheat_on_gpu(cheat: Cheat, gpu_cheat_verdicts: dict) -> None:
    report = gpu_cheat_verdicts[cheat.name]
    assert not report.passed, report.reasons
    if cheat.meta["stage"] == "static":
        assert expect_in(cheat.meta["expect"], report), report.reasons


# Cheats that only the timed runs (CUDA) can show, with the policy each is judged under.
TIMED = [(c, None, c.meta) for c in ALL_CHEATS if "gpu_only" in c.meta] + \
    [(c, "runtime_only", c.meta["runtime_only"]) for c in RUNTIME_ONLY
     if "gpu_only" in c.meta["runtime_only"]]


@pytest.fixture(scope="module")
def timed_verdicts() -> dict[str, VerifyReport]:
    session = Session(GPU_OPTIONS)
    try:
        return {f"{c.name}@{policy}": session.verify(problem_src(c.problem_for("cuda")),
                                                     c.source, policy=policy)
                for c, policy, _ in TIMED}
    finally:
        session.close()


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("cheat, policy, spec", TIMED, ids=lambda x: getattr(x, "name", x))
def test_timed_run_cheats_are_rejected_on_gpu(cheat: Cheat, policy: str | None,
                                              spec: dict, timed_verdicts: dict) -> None:
    report = timed_verdicts[f"{cheat.name}@{policy}"]
    assert not report.passed and report.stage == spec["stage"], report.reasons
    assert expect_in(spec["expect"], report), report.reasons


def test_problem_sources_parse() -> None:
    for c in ALL_CHEATS:
        assert "class Model" in problem_src(c.problem)
