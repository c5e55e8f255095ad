"""Runtime instrumentation of the sandboxed harness (copied next to it as kz_trace.py):
the Triton launch counter, the aten tracer (which also poisons fresh allocations), the
CUDA allocator's poisoning, and the slot's start-up warm-up of all three.

Standalone (torch and triton only) and imported by the harness before the solution, so
every function captured here is the real one. `configure` gives it the job's rules.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_sync = torch.cuda.synchronize  # the real one: imported before the solution


class NoDynamoMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo,
        # whose first call imports torch._dynamo: as much CPU as importing torch itself
        # (benchmarks/import_probe.py), in every sandbox. Nothing here runs under Dynamo:
        # the static policy rejects torch.compile.
        return False


class PassThrough(NoDynamoMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


class State:
    """What the current call did: Triton launches (on a side stream), aten ops outside
    the allowed set. `suspended` > 0 inside a launch (the CPU interpreter runs torch ops)."""

    suspended = 0
    compile_only = False  # the lock-free warm-up: kernels are compiled, never launched
    tuning_deferred = False  # an autotuner met under compile_only left its benchmark for later
    held_back = 0  # launches compile_only kept from running
    launches = 0
    side_stream = 0
    violations: list[str] = []
    host_reads = 0  # tensor values read back to the host (policy.HOST_READ_BUDGET)

    @classmethod
    def reset(cls) -> None:
        cls.launches, cls.side_stream, cls.violations, cls.host_reads = 0, 0, [], 0


class _Rules:
    allowed: frozenset[str] = frozenset()
    poisoned: frozenset[str] = frozenset()
    int_poison = 0
    cuda = False
    host_read_budget = 0


def configure(allowed: list[str], poisoned: list[str], int_poison: int, device: str,
              host_read_budget: int) -> None:
    _Rules.allowed, _Rules.poisoned = frozenset(allowed), frozenset(poisoned)
    _Rules.int_poison, _Rules.cuda = int(int_poison), device == "cuda"
    _Rules.host_read_budget = int(host_read_budget)


if torch.cuda.is_available():
    _current_stream, _default_stream = torch.cuda.current_stream, torch.cuda.default_stream


def _on_side_stream() -> bool:
    """Triton launches on torch's current stream; ours is always the default one."""
    return _Rules.cuda and _current_stream().cuda_stream != _default_stream().cuda_stream


def _poison(t: object) -> None:
    if type(t) is not torch.Tensor or t.numel() == 0:
        return
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        info = torch.iinfo(t.dtype)
        t.fill_(max(info.min, min(info.max, _Rules.int_poison)) if info.min < 0 else 0xA5)


class Tracer(NoDynamoMode):
    """Records aten ops run inside forward (outside Triton launches); poisons fresh allocations."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if State.suspended:
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name not in _Rules.allowed:
            State.violations.append(str(func))
        out = func(*args, **kwargs)
        State.host_reads += _values_to_host(name, args, out)
        if State.host_reads > _Rules.host_read_budget:  # at once: a loop over a big input
            raise HostCompute("tensor values read to the host past the budget")
        if name in _Rules.poisoned:
            _poison(out)
        return out


def _values_to_host(name: str, args: tuple, out: object) -> int:
    """How many tensor values this op brought to the host: one for a scalar read (`.item()`,
    `float(t)`, `if t:`), every element of a device-to-host copy."""
    if name == "_local_scalar_dense":
        return 1
    if name == "_to_copy" and args:
        src, dst = args[0], out
    elif name == "copy_" and len(args) > 1:
        dst, src = args[0], args[1]
    else:
        return 0
    to_host = (type(src) is torch.Tensor and type(dst) is torch.Tensor and not src.is_cpu
               and dst.is_cpu)
    return src.numel() if to_host else 0


class HostCompute(RuntimeError):
    """Raised in forward at the first tensor value read to the host past the budget."""


def host_read_errors() -> list[list[str]]:
    """The call's error if forward read more tensor values to the host than the budget."""
    n, budget = State.host_reads, _Rules.host_read_budget
    if n <= budget:
        return []
    return [["runtime", f"forward read tensor values back to the host past the {budget} "
                        "allowed for scalar parameters (.item(), float(), a copy to the CPU; "
                        f"stopped at {n}): output computed in Python, outside the kernels "
                        "(host_compute)"]]


WRAPPED: list[tuple[Any, object]] = []  # (launcher class, our run wrapper): integrity check


def _wrap_launch(cls: Any) -> None:  # a Triton launcher class
    real = cls.run

    def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if State.compile_only:
            State.held_back += not kwargs.get("warmup", False)
            kwargs["warmup"] = True  # Triton's own switch: compile, return, launch nothing
        if not kwargs.get("warmup", False):
            State.launches += 1
            State.side_stream += _on_side_stream()
        State.suspended += 1  # the CPU interpreter itself runs torch ops
        try:
            kernel = real(self, *args, **kwargs)
        finally:
            State.suspended -= 1
        if State.compile_only:
            _load(kernel)
        return kernel

    cls.run = run
    WRAPPED.append((cls, run))


@contextmanager
def compiling_only(on: bool = True) -> Iterator[None]:
    """State.compile_only for the block (kernels compiled, none launched), then off."""
    State.compile_only = on
    try:
        yield
    finally:
        State.compile_only = False


def _load(kernel: Any) -> None:
    """What a compiled kernel's first launch would do before launching: build its launcher
    (gcc, cached on disk) and load its module, here rather than in a locked call."""
    init = getattr(kernel, "_init_handles", None)
    if callable(init):
        init()


def _wrap_autotuner() -> None:
    """Under compile_only an autotuner compiles every config (Autotuner.warmup) instead of
    benchmarking them (a benchmark launches each config for ~0.1 s): the harness runs the
    benchmark later, under the GPU lock (tuning_deferred)."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    real = Autotuner.run

    def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not State.compile_only:
            return real(self, *args, **kwargs)
        State.tuning_deferred = True
        kwargs.pop("warmup", None)  # Autotuner.warmup passes its own
        return self.warmup(*args, **kwargs)

    Autotuner.run = run
    WRAPPED.append((Autotuner, run))


def install_launch_counter() -> None:
    from triton.runtime import jit as _jit

    _wrap_launch(_jit.JITFunction)
    _wrap_autotuner()
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return
    _wrap_launch(InterpretedFunction)


POISON_RESERVE = 256 << 20  # NaN-filled memory: allocations up to half of it always find some
_SMALL_POOL_MAX = 1 << 20  # the caching allocator serves requests up to 1 MiB from its small pool
_snapshot = torch.cuda.memory_snapshot  # the real one, captured before any candidate code


def poison_allocator(reserve: int = POISON_RESERVE) -> bool:
    """Fill every free block of the CUDA caching allocator with NaN, so that no allocation
    served from the cache finds stale values; True if it had to reserve new device memory.
    The tracer fills what the forward allocates through aten; this covers the rest
    (allocations it does not see, buffers its constructor left to reuse).

    Each free block is asked for again at its own size (best fit then hands out that very
    block, or one just like it), filled and freed: no new device memory. The old way, a
    fresh 256 MB block every call, was a cudaMalloc under the shared lock in every call (the
    previous call's outputs, kept until they are written, sit inside the last such block,
    so it never fitted again): 0.44 s of a candidate's correctness calls in a busy H200
    batch. A fresh `reserve` is added only while the largest free block is under half of it."""
    free = _free_blocks()
    fresh = max((size for pool, size in free if pool == "large"), default=0) < reserve // 2
    held = [_nan_block(reserve)] if fresh else []
    for size in sorted((p for pool, size in free for p in _pieces(pool, size)), reverse=True):
        held.append(_nan_block(size))
    del held  # freed blocks stay cached, still holding NaN
    torch.cuda.synchronize()
    return fresh


def _free_blocks() -> list[tuple[str, int]]:
    """(pool, bytes) of each free block cached for the current stream's default pool."""
    stream = torch.cuda.current_stream().cuda_stream
    segments = [seg for seg in _snapshot() if seg.get("stream", 0) == stream
                and tuple(seg.get("segment_pool_id", (0, 0))) == (0, 0)]
    return [(seg["segment_type"], b["size"]) for seg in segments
            for b in seg["blocks"] if b["state"] == "inactive"]


def _pieces(pool: str, size: int) -> list[int]:
    """Requests that get back a free block of `size` bytes in `pool`: a large-pool block is
    reachable only by requests over 1 MiB (smaller ones go to the small pool), a small-pool
    block only by requests up to 1 MiB (a free 2 MiB small segment takes two)."""
    if pool == "large":
        return [size] if size > _SMALL_POOL_MAX else []  # unreachable remnant: no one gets it
    return [size] if size <= _SMALL_POOL_MAX else [_SMALL_POOL_MAX, size - _SMALL_POOL_MAX]


def _nan_block(nbytes: int) -> torch.Tensor:
    return torch.full((nbytes // 4,), float("nan"), dtype=torch.float32, device="cuda")


def prewarm() -> None:
    """Import Triton and load its driver module (a gcc build in a fresh cache) while no
    candidate waits, and run one op under a dispatch mode (torch 2.11 imported
    torch._dynamo at the first mode entry: 6 s in every candidate's first call on the H200)."""
    try:
        with torch.no_grad(), PassThrough():
            torch.zeros(4).add_(1)
        import triton
        import triton.language  # noqa: F401

        if torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET"):
            triton.runtime.driver.active.utils  # noqa: B018 - the load is the point
            torch.empty(1, device="cuda")  # the CUDA context: 0.3-2 s on a busy host
    except Exception:  # noqa: BLE001
        pass


def reserve_poison() -> None:
    """The poisoning's first block, cached while the slot waits for its job: otherwise a
    cudaMalloc in the first correctness call, under the shared lock. After KZ-WARM: a slot
    taken at once waits for it in its start, one that waited for its job pays nothing. (It
    was moved here as the suspect for 1.12's cold starts, 39-48% against 8-10% on 1.11; the
    move did not bring them back: 73 of 159 warm against 70 before, side by side on an
    H100, eighteenth session. The cause is still open.)"""
    if torch.cuda.is_initialized():
        try:
            torch.empty(POISON_RESERVE, dtype=torch.uint8, device="cuda")
        except Exception:  # noqa: BLE001 - the first call reserves it then
            pass


# Dtypes whose kernels the harness's own steps launch in a call: the tracer's poisoning
# fills each output dtype, `clone` keeps each input's pre-call copy.
_WARM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def warm_kernels(device: str = "cuda") -> bool:
    """Each kernel of the harness's own correctness steps, launched once on a few bytes while
    the slot waits for its job. CUDA loads a kernel at its first launch (lazy module
    loading), and a first call paid those loads under the shared GPU lock, which every timed
    phase on the host waits for: in an H100 batch a sandbox's longest shared step was its
    first call, 0.44 s median (its poisoning 0.25 s, its checks 0.14 s), where the median
    step took ~5 ms. Trusted code on a few bytes: nothing a timed run could feel. True
    if every kernel ran (else the first call loads the rest)."""
    if device == "cuda" and not torch.cuda.is_initialized():
        return False
    try:
        for dt in _WARM_DTYPES:
            x = torch.zeros(256, dtype=dt, device=device)
            _poison(x)  # the tracer's fill for outputs of this dtype
            y = x.clone()  # the pre-call copy of an input
            torch.equal(x.view(torch.uint8), y.view(torch.uint8))  # harness_checks.unchanged
        if device == "cuda":
            _snapshot()  # the poisoning's look at the allocator's free blocks
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - the first call loads them then
        return False
    return True


def echo_calls(fns: list[Any], loads: list[Any] | None) -> list[list[str]]:
    """One traced call per input set after the timed runs, on their own input objects.

    The tracer is off while timing (its Python dispatch and poisoning would be timed), and
    the timed runs are the only calls that see an input object again: a forward that
    switches to library compute then (the runtime layer behind the static rules) shows it
    here, as in the correctness calls."""
    errors: list[list[str]] = []
    State.violations = []
    for k, fn in enumerate(fns):
        load = loads[k] if loads is not None else None
        if load is not None:
            load()
        State.host_reads = 0
        try:
            with torch.no_grad(), Tracer():
                fn()
            if _Rules.cuda:
                _sync()  # an asynchronous fault surfaces in its own call
        except BaseException as exc:  # noqa: BLE001 - every failure is a verdict
            errors.append(["timing", f"forward raised {brief(exc)} when called again on the "
                                     "timed runs' inputs"])
        errors.extend(host_read_errors())
        if errors:
            break  # the first failure ends it
    ops = sorted(set(State.violations))[:8]
    if ops:
        errors.append(["runtime", "forward ran library compute at dispatch level when called "
                                  f"again on the same inputs (the timed runs): {', '.join(ops)}"])
    return errors


def brief(exc: BaseException) -> str:
    """An exception in a line of a reason."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"
