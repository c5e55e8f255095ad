"""The harness's launch instrumentation (harness_trace.py, kz_trace in the sandbox), run in
an interpreter of its own: it patches Triton's classes for the whole process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import services.verifier.harness_trace as trace
from tests.services.verifier.conftest import gpu

SCRIPT = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch, triton, triton.language as tl
import harness_trace as T
T.install_launch_counter()

@triton.jit
def add(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                 key=["n"])
@triton.jit
def add_tuned(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

x, y = torch.randn(1000), torch.randn(1000)
plain, tuned = torch.zeros(1000), torch.zeros(1000)
T.State.compile_only = True
add[(8,)](x, y, plain, 1000, BLOCK=128)
add_tuned[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](x, y, tuned, 1000)
out = {"launches": T.State.launches, "plain_ran": bool(plain.any()),
       "tuned_ran": bool(tuned.any()), "tuned_configs": len(add_tuned.cache),
       "deferred": T.State.tuning_deferred}
T.State.compile_only = False
add[(8,)](x, y, plain, 1000, BLOCK=128)
out.update(after_launches=T.State.launches, after_right=torch.equal(plain, x + y))
print(json.dumps(out))
'''


def test_the_warm_up_compiles_kernels_but_launches_none() -> None:
    """Under compile_only neither a plain kernel nor an autotuned one runs (the autotuner
    picks no config: its benchmark would launch every config with no GPU lock held; the
    harness runs it later, under the lock, as `tuning_deferred` says), and nothing is
    counted; afterwards launches run and count as before."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(Path(trace.__file__).parent)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"launches": 0, "plain_ran": False, "tuned_ran": False, "tuned_configs": 0,
                   "deferred": True, "after_launches": 1, "after_right": True}


def test_poison_pieces_reach_each_free_block_from_its_own_pool() -> None:
    """Requests up to 1 MiB go to the allocator's small pool, larger ones to the large pool:
    a large-pool block is asked back at its size, a large-pool remnant of 1 MiB or less is
    left (no request can get it), and a free 2 MiB small segment takes two requests."""
    mib = 1 << 20
    assert trace._pieces("large", 300 * mib) == [300 * mib]
    assert trace._pieces("large", mib) == []
    assert trace._pieces("small", 4096) == [4096]
    assert trace._pieces("small", mib) == [mib]
    assert trace._pieces("small", 2 * mib) == [mib, mib]


@pytest.mark.gpu
@gpu
def test_poisoning_fills_every_free_block_and_reserves_memory_once() -> None:
    """Blocks freed with data in them (large and small pool) read NaN when handed out again,
    and once the first reserve exists a later call takes no new device memory, though an
    output kept from the last call now sits in a block it filled (the old way cudaMalloc'ed
    a fresh 256 MB block every call, since such outputs sat in the last one)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    sizes = (5 << 20, 300, 200_000, 1 << 18, 3_000_000)  # float32 elements
    junk = [torch.full((n,), 7.0, device="cuda") for n in sizes]
    del junk
    trace.poison_allocator()
    kept = torch.ones(1 << 20, device="cuda")  # a call's output, kept until it is written
    reserved = torch.cuda.memory_reserved()
    assert not trace.poison_allocator()
    assert torch.cuda.memory_reserved() == reserved
    # all at once: a check in between would free its own results into the cache
    got = [torch.empty(n, device="cuda") for n in sizes + (trace.POISON_RESERVE // 8,)]
    for n, g in zip(sizes + (trace.POISON_RESERVE // 8,), got):
        assert bool(torch.isnan(g).all()), f"{n} elements handed out unpoisoned"
    assert bool((kept == 1).all())


def test_the_start_up_warm_up_runs_every_kernel_of_a_call_for_every_dtype() -> None:
    """warm_kernels launches, once per dtype, what the harness's own steps launch in a
    call (on the GPU: in the slot's start-up, so that the first call under the shared
    lock loads no kernel). Here on the CPU: every op is valid for every dtype."""
    assert trace.warm_kernels("cpu") is True


def test_the_echo_of_the_timed_runs_names_library_compute_and_failures() -> None:
    """echo_calls: one traced call per timed input set, after the timed runs (whose
    tracer is off). A forward that switches to library compute there, or fails, is named;
    one that stays within the allowed ops (allocations, views) passes."""
    trace.configure(["empty", "view", "zeros_like"], [], 0, "cpu", 8)
    x = torch.randn(8)
    loaded: list[int] = []
    honest = [lambda: torch.zeros_like(x).view(2, 4)]
    assert trace.echo_calls(honest, [lambda: loaded.append(0)]) == []
    assert loaded == [0]  # each set's contents are loaded before its call
    library = [lambda: torch.zeros_like(x), lambda: torch.add(x, x)]
    errors = trace.echo_calls(library, None)
    assert [e[0] for e in errors] == ["runtime"] and "aten.add" in errors[0][1]

    def broken() -> None:
        raise ValueError("gone")

    errors = trace.echo_calls([broken, broken], None)
    assert errors == [["timing", "forward raised ValueError: gone when called again on the "
                                 "timed runs' inputs"]]  # once: the first failure ends it


def test_tensor_values_read_to_the_host_are_counted_and_stopped_past_the_budget() -> None:
    """A scalar read (`.item()`, `float(t)`) counts one value, a copy to the host every
    element; within the budget a call goes on (scalar parameters), past it the read raises
    at once and the call's error names host_compute. The echo of the timed runs counts
    each call afresh."""
    trace.configure(["empty", "select", "_local_scalar_dense"], [], 0, "cpu", 3)
    x = torch.arange(8.0)
    assert trace.echo_calls([lambda: [float(x[i]) for i in range(3)]] * 2, None) == []
    trace.State.reset()
    with torch.no_grad(), trace.Tracer(), pytest.raises(trace.HostCompute):
        [x[i].item() for i in range(8)]
    assert trace.State.host_reads == 4  # stopped at the first read past the budget
    (err,) = trace.host_read_errors()
    assert err[0] == "runtime" and "host_compute" in err[1] and "stopped at 4" in err[1]
    errors = trace.echo_calls([lambda: [float(x[i]) for i in range(8)]] * 2, None)
    assert [e[0] for e in errors] == ["timing", "runtime"]  # once: HostCompute, then why
    assert "HostCompute" in errors[0][1] and "host_compute" in errors[1][1]
    if torch.cuda.is_available():
        trace.configure(["_to_copy"], [], 0, "cuda", 8)
        trace.State.reset()
        with torch.no_grad(), trace.Tracer(), pytest.raises(trace.HostCompute):
            torch.ones(16, device="cuda").cpu()  # sixteen values in one copy
        assert trace.State.host_reads == 16
