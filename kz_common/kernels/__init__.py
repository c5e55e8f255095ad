"""Hand-written reference Triton solutions, one self-contained file per catalogue op.

Each file is in the SOLUTION format: imports only torch, triton, triton.language and
math; defines @triton.jit kernels and `class ModelNew(nn.Module)` (same constructor
as the problem's Model) whose forward only allocates, reshapes and launches kernels.

This package never imports the kernel modules itself (triton.jit reads
TRITON_INTERPRET when a module is imported); consumers get source text and exec it.
"""

from __future__ import annotations

import importlib.util
import tempfile
import types
from importlib import resources
from pathlib import Path

_PACKAGE = __name__


def available_ops() -> list[str]:
    """Ops that have a reference solution, sorted."""
    return sorted(
        entry.name.removesuffix(".py")
        for entry in resources.files(_PACKAGE).iterdir()
        if entry.name.endswith(".py") and not entry.name.startswith("_")
    )


def import_file(name: str, path: Path) -> types.ModuleType:
    """Import a TRUSTED Python file as module `name` (not added to sys.modules).
    Never for candidates: those run only in the verifier's sandbox."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def import_source(name: str, source: str) -> types.ModuleType:
    """Import TRUSTED source (a reference solution, a rendered problem, a benchmark's kernel)
    from a real file: @triton.jit reads its kernel's source from the file it was defined in."""
    path = Path(tempfile.mkdtemp(prefix="kz-src-")) / f"{name}.py"
    path.write_text(source)
    return import_file(name, path)


def reference_solution(op: str) -> str:
    """Source text of the reference solution for `op`."""
    from kz_common.ops.exceptions import UnknownOpError

    if op not in available_ops():
        raise UnknownOpError(f"no reference solution for op {op!r}; available: {available_ops()}")
    return resources.files(_PACKAGE).joinpath(f"{op}.py").read_text(encoding="utf-8")
