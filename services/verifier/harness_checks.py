"""Output and input checks of the sandboxed harness (copied next to it as kz_checks.py).

Standalone (torch only) and imported by the harness before the solution, so the torch
functions it uses are the real ones. Nothing here decides a pass: the parent repeats
these checks on the tensors it reads back (services/verifier/candidate.py).
"""

from __future__ import annotations

from typing import cast

import torch

_equal = torch.equal


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
