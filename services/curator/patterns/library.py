"""Library-call rule: torch doing the math in host code instead of a Triton kernel.

Checked in every host function except `__init__` (it may initialise weights with
torch) and the KernelBench entry points. Fires for
- `torch.<f>` / `torch.nn.functional.<f>` / `F.<f>` / `torch.linalg|special|fft.<f>`
  calls, except allocation, metadata and dtype helpers (ALLOWED_TORCH);
- tensor methods that compute (`x.sum()`, `x.softmax(-1)`, `a.matmul(b)`, ...);
- the `@` operator, and arithmetic / augmented assignment on tensor values in
  forward (`x + y`, `out *= 2`); int arithmetic on shapes (`M * N`) is fine;
- calling an `nn.<Module>` submodule (`self.fc(x)`); holding one to pass its
  `.weight` to a kernel is fine.
Views and copies (`view`, `reshape`, `contiguous`, `to`, `copy_`) are allowed.
"""

from __future__ import annotations

import ast

from schemas import RuleHit
from services.curator.patterns.source import ENTRY_POINTS, Source, dotted, tensor_names, uses_values

ALLOWED_TORCH = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "device", "dtype", "finfo", "iinfo", "is_tensor",
    "manual_seed", "no_grad", "inference_mode", "get_default_dtype", "Size", "promote_types",
    "result_type", "set_grad_enabled", "is_floating_point", "broadcast_shapes", "Generator",
})
_MATH_NAMESPACES = ("torch.nn.functional.", "F.", "torch.linalg.", "torch.special.", "torch.fft.")
_SAFE_NAMESPACES = ("torch.cuda.", "torch.backends.", "torch.library.", "torch.nn.Parameter")
COMPUTE_METHODS = frozenset({
    "sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "exp", "exp2", "log", "log2",
    "softmax", "log_softmax", "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "dot", "relu",
    "gelu", "sigmoid", "tanh", "silu", "norm", "var", "std", "cumsum", "cumprod", "prod", "pow",
    "sqrt", "rsqrt", "abs", "clamp", "clip", "layer_norm", "rms_norm", "add", "sub", "mul", "div",
    "neg", "reciprocal", "erf", "sin", "cos", "topk", "sort", "logsumexp", "square", "maximum",
    "minimum", "where", "masked_fill", "lerp", "addcmul", "addcdiv", "sign", "floor", "ceil",
})
_TENSOR_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.MatMult, ast.FloorDiv, ast.Mod)
_CONTAINERS = frozenset({"Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict"})


def library_call(src: Source) -> list[RuleHit]:
    """Math done by torch in host code."""
    modules = _submodules(src)
    hits = []
    for func in src.host_funcs:
        if func.name == "__init__" or func.name in ENTRY_POINTS:
            continue
        tensors = tensor_names(func) if func is src.forward else set()
        for node in ast.walk(func):
            why = _why(node, modules, tensors)
            if why:
                hits.append(RuleHit(rule="library_call", evidence=f"{why}: {src.segment(node, 100)}"))
    return hits


def _why(node: ast.AST, modules: set[str], tensors: set[str]) -> str | None:
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        if name.startswith(_SAFE_NAMESPACES):
            return None
        if name.startswith(_MATH_NAMESPACES):
            return "torch functional call"
        if name.startswith("torch.") and name.count(".") == 1 and name[6:] not in ALLOWED_TORCH:
            return "torch call"
        if name.startswith("self.") and name.count(".") == 1 and name[5:] in modules:
            return "nn module call"
        method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if method.rstrip("_") in COMPUTE_METHODS and not name.startswith(("tl.", "triton.", "math.")):
            return "tensor method"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return "matmul operator"
    if isinstance(node, ast.BinOp) and isinstance(node.op, _TENSOR_OPS) and (
        uses_values(node.left, tensors) or uses_values(node.right, tensors)
    ):
        return "tensor arithmetic"
    if isinstance(node, ast.AugAssign) and isinstance(node.op, _TENSOR_OPS) and uses_values(node.target, tensors):
        return "in-place tensor arithmetic"
    return None


def _submodules(src: Source) -> set[str]:
    """`self.<name>` attributes that `__init__` sets to an nn module (not a parameter holder)."""
    if src.model is None:
        return set()
    out = set()
    for fn in src.model.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
            continue
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            ctor = dotted(node.value.func)
            if ctor.startswith(("nn.", "torch.nn.")) and ctor.split(".")[-1] not in _CONTAINERS:
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and dotted(t.value) == "self":
                        out.add(t.attr)
    return out
