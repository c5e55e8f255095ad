"""Lightweight "is this expression a tensor?" inference for host-code operator checks,
and the static checker's other AST helpers (the names a statement binds, the parse).

It is deliberately conservative in the accepting direction: an expression is a
tensor only when we can see it is one (an allocation, a view of a tensor, a
forward argument used like a tensor). Unknowns are left to the runtime tracer,
so `n * 2` on a grid size is never a false rejection.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

Resolver = Callable[[ast.expr], "str | None"]

_ALLOC = ("torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros",
          "torch.zeros_like", "torch.ones", "torch.ones_like", "torch.full", "torch.full_like",
          "torch.arange", "torch.nn.Parameter")
_TENSOR_RETURNING = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "to", "float", "half", "bfloat16",
    "cuda", "cpu", "t", "transpose", "permute", "unsqueeze", "squeeze", "flatten", "unflatten",
    "expand", "expand_as", "narrow", "select", "detach", "clone", "copy_", "new_empty",
    "new_empty_strided", "new_zeros", "new_ones", "new_full", "zero_", "fill_",
})
_TENSOR_ATTRS = frozenset({"shape", "stride", "data_ptr", "contiguous", "dtype", "device",
                           "numel", "is_contiguous", "view", "reshape", "element_size"})
_TENSOR_PROPS = frozenset({"T", "mT", "data"})


@dataclass
class TensorScope:
    """Names known to hold tensors within one function (flow-insensitive)."""

    resolve: Resolver
    self_attrs: set[str]
    names: set[str] = field(default_factory=set)

    def is_tensor(self, e: ast.expr) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.names
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                return e.attr in self.self_attrs
            return e.attr in _TENSOR_PROPS and self.is_tensor(e.value)
        if isinstance(e, ast.Subscript):
            return self.is_tensor(e.value)
        if isinstance(e, ast.Call):
            return self._call_is_tensor(e)
        if isinstance(e, ast.BinOp):
            return self.is_tensor(e.left) or self.is_tensor(e.right)
        if isinstance(e, ast.UnaryOp):
            return self.is_tensor(e.operand)
        if isinstance(e, ast.IfExp):
            return self.is_tensor(e.body) or self.is_tensor(e.orelse)
        return False

    def _call_is_tensor(self, c: ast.Call) -> bool:
        path = self.resolve(c.func)
        if path is not None:
            return path in _ALLOC or path.startswith("torch.nn.functional.")
        if isinstance(c.func, ast.Attribute) and c.func.attr in _TENSOR_RETURNING:
            return self.is_tensor(c.func.value)
        return False

    def _learn(self, body: list[ast.AST]) -> None:
        for _ in range(3):  # a few rounds reach a fixpoint for straight-line kernels code
            for node in (n for stmt in body for n in ast.walk(stmt)):
                if isinstance(node, ast.Assign) and self.is_tensor(node.value):
                    for t in node.targets:
                        self._bind(t)
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    if self.is_tensor(node.value):
                        self._bind(node.target)

    def _bind(self, target: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.names.add(target.id)

    @classmethod
    def for_function(cls, fn: ast.FunctionDef | ast.AsyncFunctionDef, resolve: Resolver,
                     self_attrs: set[str]) -> TensorScope:
        scope = cls(resolve, self_attrs)
        used_as_tensor = _names_used_as_tensors(fn)
        for a in fn.args.args + fn.args.kwonlyargs:
            annotated = a.annotation is not None and resolve(a.annotation) == "torch.Tensor"
            if annotated or a.arg in used_as_tensor:
                scope.names.add(a.arg)
        scope._learn(list(fn.body))
        return scope

    @classmethod
    def for_lambda(cls, lam: ast.Lambda, resolve: Resolver, self_attrs: set[str],
                   outer: TensorScope | None) -> TensorScope:
        scope = cls(resolve, self_attrs, set(outer.names) if outer else set())
        for a in lam.args.args:
            scope.names.discard(a.arg)
        return scope


def _names_used_as_tensors(fn: ast.AST) -> set[str]:
    """Arguments that the function treats like tensors (x.shape, x.stride(), x.data_ptr()...)."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.attr in _TENSOR_ATTRS):
            out.add(node.value.id)
    return out


def collect_self_tensor_attrs(tree: ast.Module, resolve: Resolver) -> set[str]:
    """`self.X` attributes that hold tensors: Parameters, buffers, allocations."""
    out: set[str] = set()
    probe = TensorScope(resolve, set())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and probe.is_tensor(node.value):
            for t in node.targets:
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id == "self"):
                    out.add(t.attr)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_buffer" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.add(node.args[0].value)
    return out


def bound_names(node: ast.AST) -> list[str]:
    """The names `node` binds: a def or class, assignment/for/with targets, imports, an
    argument, a walrus."""
    out: list[str] = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.append(node.name)
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With)):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [i.optional_vars for i in node.items if i.optional_vars]
                   if isinstance(node, ast.With) else [node.target])
        for t in targets:
            out.extend(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        out.extend((a.asname or a.name).split(".")[0] for a in node.names)
    elif isinstance(node, ast.arg):
        out.append(node.arg)
    elif isinstance(node, ast.NamedExpr):
        out.append(node.target.id)
    return out


def is_constant_assign(stmt: ast.stmt, resolve: Resolver) -> bool:
    """Whether `stmt` assigns a constant (literals and arithmetic on them, maybe wrapped in
    constexpr): a global that @triton.jit bodies may read."""
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        return False
    if isinstance(value, ast.Call) and resolve(value.func) in ("triton.language.constexpr",
                                                               "triton.constexpr"):
        value = value.args[0] if value.args else value
    return all(isinstance(n, (ast.Constant, ast.Tuple, ast.UnaryOp, ast.USub, ast.Load,
                              ast.BinOp, ast.operator)) for n in ast.walk(value))


_PARSE = threading.Lock()


def parse(src: str) -> ast.Module:
    """ast.parse, one thread at a time: CPython 3.11 can fail concurrent parses with a
    spurious "SystemError: AST constructor recursion depth mismatch" (cpython gh-106905;
    seen here when the bundle prefetcher and the workers checked sources at once)."""
    with _PARSE:
        return ast.parse(src)
