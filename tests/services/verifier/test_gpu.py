"""GPU-only: the timer (side streams, do_bench agreement, spread) and full GPU verification."""

from __future__ import annotations

import re
import statistics

import pytest
import torch

from kz_common.kernels import import_file
from services.verifier.core import verify_many
from tests.services.verifier.conftest import GPU_OPTIONS, SOLUTIONS, gpu, problem_src

pytestmark = [pytest.mark.gpu, gpu]


def test_timer_counts_side_stream_work() -> None:
    from services.verifier.timing import Timer

    x = torch.randn(16384, 8192, device="cuda")
    y = torch.empty_like(x)
    timer = Timer()
    honest = timer.time([lambda: y.copy_(x)], warmup=3, runs=25)
    side = torch.cuda.Stream()

    def escaped() -> None:
        with torch.cuda.stream(side):
            y.copy_(x)

    esc = timer.time([escaped], warmup=3, runs=25)
    assert not honest["side_stream"] and esc["side_stream"]
    assert esc["stream_median_ms"] < 0.5 * honest["median_ms"]  # what a naive timer sees
    assert abs(esc["median_ms"] - honest["median_ms"]) < 0.2 * honest["median_ms"]


def test_timer_agrees_with_do_bench_and_is_stable() -> None:
    import triton.testing

    from services.verifier.timing import Timer

    mod = import_file("kz_test_softmax_ok", SOLUTIONS / "softmax_ok.py")
    model = mod.ModelNew()
    x = torch.randn(8192, 2048, device="cuda")
    ours = Timer().time([lambda: model(x)], warmup=5, runs=100)
    try:
        ref = triton.testing.do_bench(lambda: model(x), warmup=25, rep=200, return_mode="median")
    except TypeError:  # older signature
        ref = triton.testing.do_bench(lambda: model(x), warmup=25, rep=200, quantiles=[0.5])
    assert abs(ours["median_ms"] - ref) / ref < 0.03, (ours["median_ms"], ref)
    runs = [Timer().time([lambda: model(x)], warmup=3, runs=50)["median_ms"] for _ in range(3)]
    assert (max(runs) - min(runs)) / statistics.median(runs) < 0.02, runs


def test_correct_kernels_pass_with_performance_measured() -> None:
    pairs = [(problem_src("softmax_big"), (SOLUTIONS / "softmax_ok.py").read_text()),
             (problem_src("add"), (SOLUTIONS / "add_ok.py").read_text()),
             (problem_src("layernorm"), (SOLUTIONS / "layernorm_ok.py").read_text())]
    reports = verify_many(pairs, GPU_OPTIONS, workers=3)
    for r in reports:
        assert r.passed, r.reasons
        assert r.perf_measured and r.timings and r.timings.candidate_ms > 0
        assert r.timings.naive_ms and r.speedup_vs_naive and r.speedup_vs_optimized
        assert r.fingerprint.get("gpu")
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?", r.fingerprint["driver"]), r.fingerprint["driver"]
    big = reports[0]
    assert big.roofline_fraction is not None and 0.05 < big.roofline_fraction < 1.2
    assert big.timings.spread is not None and big.timings.spread < 0.1


def test_an_autotuned_kernel_is_tuned_under_the_lock_not_in_the_lock_free_warm_up() -> None:
    """The lock-free warm-up compiles every config and launches none (kz_trace's
    compile_only); the autotuner's benchmark (two configs, ~0.25 s of launches) runs after
    the shared lock is granted, before the recorded calls (the harness's `tune` step).
    On the code before, it ran in the warm-up with no lock, and there was no such step."""
    src = (SOLUTIONS / "add_autotuned_ok.py").read_text()
    r = verify_many([(problem_src("add"), src)], GPU_OPTIONS, workers=1)[0]
    assert r.passed, r.reasons
    assert r.perf_measured and r.timings and r.timings.candidate_ms > 0
    steps = r.details["harness_steps_s"]
    assert steps.get("tune", 0) > 0.1 and steps["call_forward"] < steps["tune"], steps
    # the longest shared step is the tuning one, with its parts (the lock's wait outside it)
    parts = {k[len("step_max_"):]: v for k, v in steps.items() if k.startswith("step_max_")}
    assert steps["step_max"] >= parts["tune"] > 0.1 and parts.get("shared_wait", 0) < 0.05, steps
    assert set(parts) <= {"shared_wait", "rebuild", "tune", "call_inputs", "call_poison",
                          "call_forward", "call_checks"}, steps


# add_ok.py, looking for its holdout files in every call. Not a solution the static stage
# would let through (`os`): the test runs it through candidate.run, which has none.
LOOKING_FOR_HOLDOUTS = r"""
import os as _os

_HELD = {names!r}


class ModelNew(ModelNew):
    def forward(self, x, y):
        here = _os.path.join(_os.getcwd(), "..", "inputs")  # the sandbox's inputs dir
        seen = [n for n in _HELD if _os.path.exists(_os.path.join(here, n))]
        if seen:
            raise RuntimeError(f"holdout files visible to the candidate: {{seen}}")
        return super().forward(x, y)
"""


def test_a_candidate_never_sees_its_holdout_files() -> None:
    """The holdouts are in the inputs dir only while the harness reads them, between its
    correctness calls and its timed runs (sandbox_supervise.HOLDOUTS)."""
    from services.verifier import candidate
    from services.verifier.core import Session

    session = Session(GPU_OPTIONS, warm_slots=0)
    try:
        with session.bundle(problem_src("add")) as bundle:
            names = bundle.meta["timing"]["holdout_files"]
            assert names
            src = (SOLUTIONS / "add_ok.py").read_text() + LOOKING_FOR_HOLDOUTS.format(
                names=names)
            out = candidate.run(src, bundle, GPU_OPTIONS, session.base, session.mode,
                                session._gates("harness"))
    finally:
        session.close()
    assert not out.failures, out.failures
    assert out.timing and out.timing.get("holdout_ratio"), out.timing  # the holdouts ran


MEMORY_HOG = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin(x_ptr, n):
    acc = tl.load(x_ptr)
    for _ in range(n):
        acc = acc * 0.9999999 + 1e-7
    tl.store(x_ptr, acc)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        free, _ = torch.cuda.mem_get_info()
        # all of the device but 512 MB, kept by this process's allocator until it exits
        self.hold = torch.empty(((free - (512 << 20)) // 4,), device="cuda")

    def forward(self, x):
        # ~2 s a call on an H100: the memory stays held while its neighbours make their calls
        spin[(1,)](self.hold, 800_000_000)
        return x
'''


def test_honest_kernels_beside_a_memory_hog_are_run_again_and_pass() -> None:
    """A candidate that takes all but 512 MB of the device for its whole run: honest
    candidates beside it run out of memory (the sandboxes have no quota each), are run
    again once the device has room (oom_reruns.py), and pass; the hog is rejected. The
    problem's tensors are 512 MB each, so that a call needs more than the memory a sandbox
    keeps cached (a small one ran out of nothing beside the hog)."""
    from dataclasses import replace

    ok = (SOLUTIONS / "softmax_ok.py").read_text()
    problem = problem_src("softmax_huge")
    pairs = [(problem, MEMORY_HOG)] + [(problem, f"{ok}\n# {k}\n") for k in range(8)]
    reports = verify_many(pairs, replace(GPU_OPTIONS, policy="runtime_only"), workers=6)
    hog, honest = reports[0], reports[1:]
    assert not hog.passed
    total = torch.cuda.mem_get_info()[1] >> 20
    assert (hog.details.get("harness_gpu_peak_mb") or total) > total // 2, hog.details
    for r in honest:
        assert r.passed, (r.reasons, r.details.get("oom_reruns"))
    reruns = [r.details["oom_reruns"] for r in honest if r.details.get("oom_reruns")]
    assert reruns, ("no honest candidate ran beside the hog: the test showed nothing",
                    hog.details.get("sandbox_batch_s"), hog.details.get("harness_steps_s"),
                    [r.details.get("sandbox_batch_s") for r in honest])


HOLDER = """import sys, time, torch
free = torch.cuda.mem_get_info()[0]
x = torch.empty(free - (int(sys.argv[1]) << 20), dtype=torch.uint8, device="cuda")
print("holding", x.numel() >> 20, "MiB", flush=True)
time.sleep(600)
"""


def test_a_device_held_from_outside_gives_no_verdict_without_waiting_it_out() -> None:
    """Another process (a model server, say) holds all but 1.5 GB of the device for longer
    than any of the batch's processes lives: a session starting now would warn; no honest
    candidate is rejected (no verdict, internal, unless a run found room); after one wait
    for room has run out, the reruns that follow wait briefly (gpu_memory.OUTSIDE_WAIT_S),
    not each its whole `room_wait_s` (3 candidates x 3 reruns of it at 1.14.1)."""
    import subprocess
    import sys
    import time
    from dataclasses import replace

    from services.verifier import gpu_memory

    o = replace(GPU_OPTIONS, policy="runtime_only", wall_timeout_s=30, cpu_seconds=25,
                timing_timeout_s=10, reference_timeout_s=45)
    wait_s = gpu_memory.room_wait_s(o)
    ok = (SOLUTIONS / "softmax_ok.py").read_text()
    pairs = [(problem_src("softmax_huge"), f"{ok}\n# {k}\n") for k in range(3)]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "1536"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and "holding" in holder.stdout.readline()
        warned = gpu_memory.held_elsewhere()  # what the session's warm-up thread logs
        t0 = time.monotonic()
        reports = verify_many(pairs, o, workers=3)
        took = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert warned and "are free as the verifier starts" in warned
    for r in reports:
        assert r.stage in ("passed", "internal"), (r.stage, r.reasons)
    said = " ".join(" ".join(r.reasons) for r in reports)
    assert "memory held outside the batch" in said, said
    assert took < 3 * wait_s, (took, wait_s, [r.details.get("oom_reruns") for r in reports])
