"""Output and input checks of the sandboxed harness (copied next to it as kz_checks.py),
and the timed runs' rotating inputs.

Standalone (torch only) and imported by the harness before the solution, so the torch
functions it uses are the real ones. Nothing here decides a pass: the parent repeats
these checks on the tensors it reads back (services/verifier/candidate.py).
"""

from __future__ import annotations

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
