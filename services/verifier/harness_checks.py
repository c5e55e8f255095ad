"""Output and input checks of the sandboxed harness (copied next to it as kz_checks.py),
and the timed runs' inputs: rotating contents, holdouts page-locked where they lie.

Standalone (torch only) and imported by the harness before the solution, so the torch
functions it uses are the real ones. Nothing here decides a pass: the parent repeats
these checks on the tensors it reads back (services/verifier/candidate.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

_equal = torch.equal
_empty_like, _copy_, _to = torch.empty_like, torch.Tensor.copy_, torch.Tensor.to


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).contiguous().view(torch.uint8) if t.numel() else t


def unchanged(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and _equal(_bits(a), _bits(b)))
    return a == b


def flatten(out: object) -> list[object] | None:
    if type(out) is torch.Tensor:
        return [out]
    if type(out) in (tuple, list):  # exact types: a subclass could override iteration
        return list(cast("tuple[object, ...] | list[object]", out))
    return None


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def output_problems(outs: list[object], inputs: list[object], params: list[object]) -> list[str]:
    bad = []
    for i, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            bad.append(f"output {i} is {type(o).__name__}, not a plain torch.Tensor")
            continue
        lo, hi = _storage_span(o)
        for j, x in enumerate(inputs + params):
            if isinstance(x, torch.Tensor) and x.numel() and o.numel():
                xlo, xhi = _storage_span(x)
                if lo < xhi and xlo < hi:
                    what = f"input {j}" if j < len(inputs) else "a model parameter"
                    bad.append(f"output {i} aliases {what} (shared storage)")
    return bad


def rotating(sets: Sequence[Sequence[Any]], empty_like: Callable[..., Any] = _empty_like,
             copy_: Callable[..., Any] = _copy_, to: Callable[..., Any] = _to,
             ) -> tuple[list[list[Any]], list[Callable[[], Any] | None] | None]:
    """One set of input tensors for every timed run, whose CONTENTS become set k's before
    each run of set k (`prepare[k]` of Timer.time, outside the measured interval). A model
    that memoises outputs by input identity (the same objects every run) then returns a
    stale output, and the last output of each set is checked; with one object per set it
    could return each set's first result and time a do-nothing kernel. Returns per-set
    argument lists (the shared tensors start with set 0's contents, on its device) and the
    prepare callables. Sets kept on another device (the holdouts, in host memory until
    their run: a kernel reading past its own inputs must not find them on the GPU during
    the warm-up) are copied over only in their prepare. Where the sets differ in layout
    there is no rotation: each set keeps its own objects, and a set kept elsewhere is moved
    to set 0's device in its prepare. The torch functions default to the ones captured at
    import, before the candidate's."""
    first = sets[0]
    if not any(len(s) != len(first) or any(_layout(a) != _layout(b) for a, b in zip(s, first))
               for s in sets):
        shared = [empty_like(x) if isinstance(x, torch.Tensor) else x for x in first]
        if all(_layout(a) == _layout(b) for a, b in zip(shared, first)):
            loads: list[Callable[[], Any] | None] = [_loader(shared, s, copy_) for s in sets]
            cast("Callable[[], Any]", loads[0])()
            return [[shared[j] if isinstance(x, torch.Tensor) else x for j, x in enumerate(s)]
                    for s in sets], loads
        # else e.g. a strided view: empty_like is contiguous
    home = _device(first)
    args = [list(s) for s in sets]
    loads = [None if _device(s) == home else _mover(a, s, home, to) for a, s in zip(args, sets)]
    return args, loads if any(loads) else None


def _loader(shared: list[Any], s: Sequence[Any], copy_: Callable[..., Any]) -> Callable[[], Any]:
    def load() -> None:
        for dst, src in zip(shared, s):
            if isinstance(src, torch.Tensor):
                copy_(dst, src, non_blocking=True)  # from pinned host memory: queued, in order
    return load


def _mover(args: list[Any], s: Sequence[Any], device: Any,
           to: Callable[..., Any]) -> Callable[[], Any]:
    def load() -> None:
        args[:] = [to(x, device, non_blocking=True) if isinstance(x, torch.Tensor) else x
                   for x in s]
    return load


def _device(s: Sequence[Any]) -> Any:
    return next((x.device for x in s if isinstance(x, torch.Tensor)), None)


def _layout(x: Any) -> Any:
    """What must match for one tensor to stand for another (non-tensors: their value)."""
    if isinstance(x, torch.Tensor):
        return (type(x), x.dtype, tuple(x.shape), x.stride())  # any device: copied over
    return ("value", repr(x))


def driver_api() -> Any:
    """The CUDA driver's cuMemHostRegister/cuMemHostUnregister, or None. The driver API, not
    the runtime's cudaHostRegister: a refused runtime call stays behind as the runtime's
    last error, which torch's next kernel-launch check would raise as the candidate's."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")  # loaded already by torch's CUDA context
        reg, unreg = lib.cuMemHostRegister_v2, lib.cuMemHostUnregister
    except (OSError, AttributeError):
        return None
    reg.argtypes, reg.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint], ctypes.c_int
    unreg.argtypes, unreg.restype = [ctypes.c_void_p], ctypes.c_int
    return reg, unreg


class HostPages:
    """Holdout inputs page-locked in place until their runs: the driver registers each
    tensor's own storage, so its copy to the device (in the exclusive phase) runs at
    pinned speed with no page-locked copy made first. `pin_memory()` allocates a new
    page-locked block and copies into it: 0.5-0.6 s median per candidate in an H100 batch
    of 12 sandboxes, where registering 160 MB took 8 ms alone and 33 ms with 12 processes
    at it (`pin_memory()` 91 and 310 ms: benchmarks/pin_probe.py). A storage the driver
    refuses (no driver API, no context yet, a page registered already) takes `pin`
    (pin_memory), and one that cannot be pinned either stays pageable: its copy is
    slower, never wrong.
    `release()` unregisters, once no copy from them is queued (after a sync)."""

    def __init__(self, pin: Callable[[torch.Tensor], torch.Tensor], driver: Any) -> None:
        self._pin = pin
        self._driver = driver  # driver_api(): (register, unregister), or None
        self._held: dict[int, torch.Tensor] = {}  # registered storages: address -> a tensor
        self.counts = {"registered": 0, "pinned": 0, "pageable": 0}  # tensors (diagnostics)

    def __call__(self, x: object) -> object:
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu" or not x.numel():
            return x
        ptr, end = _storage_span(x)
        if ptr in self._held or (self._driver is not None
                                 and self._driver[0](ptr, end - ptr, 0) == 0):
            self._held[ptr] = x  # alive until release(): registered pages must not be freed
            self.counts["registered"] += 1
            return x
        try:
            pinned = self._pin(x)
        except RuntimeError:
            self.counts["pageable"] += 1
            return x
        self.counts["pinned"] += 1
        return pinned

    def release(self) -> None:
        if self._driver is not None:
            for ptr in self._held:
                self._driver[1](ptr)
        self._held.clear()
