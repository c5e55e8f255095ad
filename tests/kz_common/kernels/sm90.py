"""Ahead-of-time compile of the reference kernels for an H100/H200 (sm_90) target, no GPU needed.

ModelNew.forward runs on meta tensors with every @triton.jit kernel replaced by a
recorder, so each launch it would make is captured with its real arguments. Each
launch is then specialised exactly as Triton's runtime would (ints equal to 1 become
constants, 16-divisible ints and pointers get divisibility hints) and compiled
through TTIR -> TTGIR -> LLVM -> PTX -> cubin with the ptxas bundled in the wheel.
Runs in a worker process without TRITON_INTERPRET (see worker.py).
"""

from __future__ import annotations

import os
import subprocess
import types
from dataclasses import dataclass, field
from pathlib import Path

import triton
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

import kz_common.kernels

SM90 = GPUTarget("cuda", 90, 32)
SM90_MAX_SHARED = 232448  # bytes of shared memory one block may opt into on H100/H200
_CACHE: dict[tuple, object] = {}


def load_for_compile(op: str) -> types.ModuleType:
    """Import the reference solution file as real (not interpreted) @triton.jit kernels."""
    assert os.environ.get("TRITON_INTERPRET", "0") != "1", "sm_90 compile needs TRITON_INTERPRET unset"
    path = Path(kz_common.kernels.__file__).with_name(f"{op}.py")
    return kz_common.kernels.import_file(f"kz_sm90_{op}", path)


@dataclass
class Launch:
    fn: JITFunction
    grid: tuple
    args: tuple
    kwargs: dict = field(default_factory=dict)


class _Recorder:
    def __init__(self, fn: JITFunction, log: list[Launch]) -> None:
        self.fn, self.log = fn, log

    def __getitem__(self, grid):  # type: ignore[no-untyped-def]
        def launch(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.log.append(Launch(self.fn, tuple(grid), args, kwargs))

        return launch


def record_launches(module: types.ModuleType, inputs: list, init: list) -> list[Launch]:
    """Launches ModelNew(*init)(*inputs) would make (inputs may live on the meta device)."""
    log: list[Launch] = []
    originals = {k: v for k, v in vars(module).items() if isinstance(v, JITFunction)}
    try:
        for name, fn in originals.items():
            setattr(module, name, _Recorder(fn, log))
        module.ModelNew(*init)(*inputs)
    finally:
        for name, fn in originals.items():
            setattr(module, name, fn)
    return log


def compile_sm90(launch: Launch):  # type: ignore[no-untyped-def]
    """Compile one recorded launch for sm_90; cached per specialisation."""
    fn = launch.fn
    kwargs = dict(launch.kwargs)
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
    bound = dict(zip(fn.arg_names, launch.args))
    bound.update(kwargs)
    assert set(bound) == set(fn.arg_names), f"{fn.__name__}: args {sorted(bound)}"
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, param) in enumerate(zip(fn.arg_names, fn.params)):
        value = bound[name]
        if param.is_constexpr:
            signature[name], constexprs[name] = "constexpr", value
            continue
        ty, attr = native_specialize_impl(BaseBackend, value, False, True, True)
        signature[name] = ty
        if ty == "constexpr":
            constexprs[name] = attr
        elif isinstance(attr, str) and "D" in attr:
            attrs[(i,)] = [["tt.divisibility", 16]]
    key = (fn.__name__, tuple(signature.items()), tuple(sorted(constexprs.items())),
           tuple(sorted(attrs)), tuple(sorted(options.items())))
    if key not in _CACHE:
        src = ASTSource(fn, signature, {k: v for k, v in constexprs.items()}, attrs)
        _CACHE[key] = triton.compile(src, target=SM90, options=options)
    return _CACHE[key]


def resource_usage(kernel) -> str:  # type: ignore[no-untyped-def]
    """cuobjdump's register / spill line for a compiled kernel ('' if unavailable)."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return ""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(kernel.asm["cubin"])
    try:
        res = subprocess.run([str(tool), "--dump-resource-usage", f.name],
                             capture_output=True, text=True, timeout=60, check=False)
        return " ".join(line.strip() for line in res.stdout.splitlines() if "REG" in line)
    finally:
        os.unlink(f.name)
