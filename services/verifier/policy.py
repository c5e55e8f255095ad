"""Allow-lists shared by the static checker (AST) and the runtime tracer (aten ops).

Everything here is an allow-list on purpose: a name nobody thought about is
rejected, never waved through. Inside `@triton.jit` bodies different rules
apply (see static_check), because that code is compiled by Triton.
"""

from __future__ import annotations

import re

POLICIES = ("no_library_compute", "runtime_only")
DEFAULT_POLICY = "no_library_compute"

# Modules a solution may import (exact names; submodules must be listed too).
ALLOWED_IMPORTS = frozenset({
    "torch", "torch.nn", "torch.nn.functional",  # F may be imported, its math may not be called
    "triton", "triton.language", "triton.language.extra", "triton.language.extra.cuda",
    "triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
    "math", "typing", "__future__",
})

# Dotted paths (after alias resolution) a solution's host code may reference.
# A path is allowed when it equals an entry or starts with an entry + ".".
ALLOWED_TORCH_PATHS = frozenset({
    # dtypes and metadata types
    "torch.float16", "torch.half", "torch.float32", "torch.float", "torch.bfloat16",
    "torch.float64", "torch.double", "torch.int8", "torch.int16", "torch.int32", "torch.int64",
    "torch.long", "torch.int", "torch.uint8", "torch.bool", "torch.dtype", "torch.device",
    "torch.Size", "torch.Tensor", "torch.finfo", "torch.iinfo", "torch.is_tensor",
    "torch.get_default_dtype",
    # allocation: outputs start poisoned (empty*) or as constants the trivial gate rejects
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like",
    "torch.ones", "torch.ones_like", "torch.full", "torch.full_like", "torch.arange",
    # grad / device context
    "torch.no_grad", "torch.inference_mode",
    "torch.cuda.is_available", "torch.cuda.current_device", "torch.cuda.device_count",
    "torch.cuda.get_device_properties", "torch.cuda.get_device_capability",
    "torch.cuda.get_device_name", "torch.cuda.device", "torch.cuda.current_stream",
    # module containers (calling a layer in forward is caught at runtime)
    "torch.nn.Module", "torch.nn.Parameter", "torch.nn.ModuleList", "torch.nn.ModuleDict",
    "torch.nn.ParameterList", "torch.nn.ParameterDict", "torch.nn.init",
    "torch.nn.functional",  # the bare module name only; see _exact_only
})
# Paths allowed only exactly (not their children): F itself, not F.softmax.
EXACT_ONLY = frozenset({"torch.nn.functional"})

ALLOWED_TRITON_PATHS = frozenset({
    "triton.jit", "triton.autotune", "triton.Config", "triton.heuristics", "triton.cdiv",
    "triton.next_power_of_2", "triton.language", "triton.constexpr",
})

# Tensor methods host code may call: allocation, views, metadata, casts, copies.
ALLOWED_TENSOR_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "stride", "size", "numel", "dim",
    "is_contiguous", "data_ptr", "element_size", "nelement", "storage_offset", "to", "float",
    "half", "bfloat16", "cuda", "cpu", "t", "transpose", "permute", "unsqueeze", "squeeze",
    "flatten", "unflatten", "expand", "expand_as", "split", "chunk", "unbind", "narrow",
    "select", "detach", "clone", "copy_", "new_empty", "new_empty_strided", "new_zeros",
    "new_ones", "new_full", "zero_", "fill_", "item", "requires_grad_", "is_floating_point",
    "get_device", "type", "values", "index", "register_buffer", "register_parameter",
})

# Builtins no solution code (host or jit) may call or name.
FORBIDDEN_BUILTINS = frozenset({
    "exec", "eval", "compile", "__import__", "open", "globals", "locals", "vars", "setattr",
    "delattr", "breakpoint", "input", "memoryview", "exit", "quit", "help", "__builtins__",
    "__loader__", "__spec__", "__file__",
})

# Free names that reach into the reference or the harness (unless the solution defines them).
REFERENCE_NAMES = frozenset({
    "Model", "ModelOpt", "get_inputs", "get_init_inputs", "reference", "harness", "KZ_SHAPES",
    "KZ_META", "KZ_DEVICE", "KZ_DTYPE", "kz_harness", "kz_timing", "kz_checks", "kz_records",
    "kz_trace", "kz_timing_stats", "kz_build", "kz_jit_warm",
})

# Module roots whose import gets a named reason (everything not allowed is rejected anyway).
NAMED_IMPORT_REASONS = {
    "os": "os access (processes, files, environment)", "sys": "interpreter internals",
    "subprocess": "process spawning", "multiprocessing": "process spawning",
    "threading": "threads (compute outside the traced thread)", "_thread": "threads",
    "concurrent": "threads/processes", "socket": "network", "urllib": "network",
    "http": "network", "requests": "network", "ctypes": "native code (ctypes)",
    "cffi": "native code (cffi)", "numpy": "numpy math", "gc": "interpreter internals (gc)",
    "inspect": "interpreter internals (inspect)", "importlib": "dynamic import",
    "builtins": "builtins tampering", "pickle": "deserialisation", "io": "file I/O",
    "pathlib": "file I/O", "shutil": "file I/O", "signal": "signals", "atexit": "exit hooks",
    "functools": "memoisation helpers", "torch.utils": "torch internals",
}

DUNDER_RE = re.compile(r"^__\w+__$")
# Dunder attributes that legitimate module code uses.
ALLOWED_DUNDER_ATTRS = frozenset({"__init__"})

# Builtins a @triton.jit body may call (everything else must be tl.*, libdevice or a jit fn).
JIT_ALLOWED_BUILTINS = frozenset({
    "range", "min", "max", "int", "float", "bool", "len", "print", "abs", "isinstance",
    "tuple", "zip", "enumerate",
})

# ------------------------------------------------------------------ runtime (aten) policy

# aten overload packet names allowed inside ModelNew.forward (outside Triton launches).
ALLOWED_ATEN_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
    "new_full", "fill_", "zero_", "arange", "view", "_unsafe_view", "reshape", "as_strided",
    "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "select", "slice", "split",
    "split_with_sizes", "chunk", "unbind", "narrow", "detach", "alias", "clone", "copy_",
    "_to_copy", "to", "lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "contiguous", "flatten",
    "unflatten", "view_as", "expand_as", "_reshape_alias", "resolve_conj", "resolve_neg",
})
# Tensor values forward may read back to the host (`.item()`, `float(t)`, a device-to-host
# copy counts its elements): a few scalar parameters, never the data. A forward that reads
# its inputs element by element and does the arithmetic in Python makes no aten op the
# rules above flag, yet computes the output outside any kernel (host_compute)
HOST_READ_BUDGET = 8
# Fresh allocations the tracer poisons (NaN / sentinel) so stale memory cannot match.
POISONED_ATEN_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
})
INT_POISON = -0x5A5A5A5A  # sentinel for integer allocations (fits int32)


# Tensor classes host code may name: their attributes are unbound tensor methods
TENSOR_CLASSES = ("torch.Tensor", "torch.nn.Parameter")


def torch_path_allowed(path: str) -> bool:
    """Whether host code may reference the dotted torch path `path`."""
    if path == "torch":
        return True
    for cls in TENSOR_CLASSES:  # unbound methods: the same list as bound ones
        if path.startswith(cls + "."):
            return path[len(cls) + 1:] in ALLOWED_TENSOR_METHODS
    if path in ALLOWED_TORCH_PATHS:
        return True
    for entry in ALLOWED_TORCH_PATHS - EXACT_ONLY:
        if path.startswith(entry + "."):
            return True
    parts = path.split(".")
    # Layer classes (nn.Linear as a parameter container); calling them in forward is traced.
    return len(parts) == 3 and parts[:2] == ["torch", "nn"] and parts[2][:1].isupper()


def triton_path_allowed(path: str) -> bool:
    """Whether host code may reference the dotted triton path `path`."""
    if path == "triton":
        return True
    if path.startswith("triton.language"):
        return True  # tl.* cannot touch tensors outside a kernel
    return any(path == e or path.startswith(e + ".") for e in ALLOWED_TRITON_PATHS)
