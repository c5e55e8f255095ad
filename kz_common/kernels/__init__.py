"""Hand-written reference Triton solutions, one self-contained file per catalogue op.

Each file is in the SOLUTION format: imports only torch, triton, triton.language and
math; defines @triton.jit kernels and `class ModelNew(nn.Module)` (same constructor
as the problem's Model) whose forward only allocates, reshapes and launches kernels.

This package never imports the kernel modules itself (triton.jit reads
TRITON_INTERPRET when a module is imported); consumers get source text and exec it.
"""

from __future__ import annotations

from importlib import resources

_PACKAGE = __name__


def available_ops() -> list[str]:
    """Ops that have a reference solution, sorted."""
    return sorted(
        entry.name.removesuffix(".py")
        for entry in resources.files(_PACKAGE).iterdir()
        if entry.name.endswith(".py") and not entry.name.startswith("_")
    )


def reference_solution(op: str) -> str:
    """Source text of the reference solution for `op`."""
    from kz_common.ops.exceptions import UnknownOpError

    if op not in available_ops():
        raise UnknownOpError(f"no reference solution for op {op!r}; available: {available_ops()}")
    return resources.files(_PACKAGE).joinpath(f"{op}.py").read_text(encoding="utf-8")
