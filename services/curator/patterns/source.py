"""Parsed view of one solution: kernels, host functions, launches, tensor taint.

Rules share this analysis so each rule stays a short walk over the tree. "Host
code" is every non-`@triton.jit` function; kernels are the jit functions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from services.curator.exceptions import CodeParseError

# Attribute reads that give tensor metadata, not tensor values.
META_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "layout", "requires_grad", "T"})
META_METHODS = frozenset({
    "size", "numel", "dim", "stride", "is_contiguous", "element_size", "nelement",
    "data_ptr", "get_device", "storage_offset",
})
META_CALLS = frozenset({"len", "isinstance", "type", "id", "hasattr", "getattr"})
# Entry points of the KernelBench format: the harness calls them, so they are never dead.
ENTRY_POINTS = frozenset({"get_inputs", "get_init_inputs"})


@dataclass
class Source:
    """One parsed solution and the facts the rules need about it."""

    code: str
    tree: ast.Module
    kernels: dict[str, ast.FunctionDef]
    host_funcs: list[ast.FunctionDef]
    model: ast.ClassDef | None
    forward: ast.FunctionDef | None
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)

    def segment(self, node: ast.AST, limit: int = 160) -> str:
        """Source text of `node` with its line, for evidence."""
        text = ast.get_source_segment(self.code, node) or ast.dump(node)[:limit]
        line = getattr(node, "lineno", "?")
        text = " ".join(text.split())
        return f"line {line}: {text[:limit]}"


def parse_source(code: str) -> Source:
    """Parse `code`; raises CodeParseError when it is not Python."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise CodeParseError(f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    kernels = {f.name: f for f in funcs if is_jit(f)}
    host = [f for f in funcs if f.name not in kernels]
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    forward = None
    if model is not None:
        forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return Source(code, tree, kernels, host, model, forward, parents)


def dotted(node: ast.AST) -> str:
    """'a.b.c' for a Name/Attribute chain, '' otherwise."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def is_jit(func: ast.FunctionDef) -> bool:
    """Whether a decorator is triton.jit / jit (bare or called), possibly under autotune."""
    for dec in func.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if dotted(target).split(".")[-1] == "jit":
            return True
    return False


def launches(func: ast.AST, kernels: dict[str, ast.FunctionDef]) -> Iterator[tuple[ast.Call, str]]:
    """`kernel[grid](...)` calls under `func`, with the kernel's name."""
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            name = dotted(node.func.value)
            if name in kernels:
                yield node, name


def constexpr_params(kernel: ast.FunctionDef) -> set[str]:
    """Kernel parameters that are compile-time constants (block sizes, flags)."""
    out = set()
    for arg in kernel.args.args:
        note = dotted(arg.annotation) if arg.annotation is not None else ""
        if note.endswith("constexpr") or arg.arg.upper().startswith(("BLOCK", "GROUP", "NUM_")):
            out.add(arg.arg)
    return out


def tensor_names(func: ast.FunctionDef) -> set[str]:
    """Names in `func` that hold tensor values: its parameters (not self) and what derives from them.

    A name assigned from metadata only (`n = x.numel()`, `M, N = x.shape`) is not a tensor.
    Iterated to a fixpoint, so the order of assignments does not matter.
    """
    names = {a.arg for a in func.args.args if a.arg != "self"}
    names |= {a.arg for a in func.args.kwonlyargs}
    assigns = [n for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    while True:
        before = len(names)
        for node in assigns:
            if node.value is not None and uses_values(node.value, names):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names |= bound_names(target)
        if len(names) == before:
            return names


def bound_names(target: ast.AST) -> set[str]:
    """Plain names an assignment target binds (`a`, `a, b`, `*a`), not `self.x` or `x[i]`."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(bound_names(e) for e in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    return set()


def uses_values(node: ast.AST, tensors: set[str]) -> bool:
    """Whether `node` reads tensor *values* (not only shapes, dtypes, devices) of `tensors`."""
    if isinstance(node, ast.Attribute) and node.attr in META_ATTRS:
        return False
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in META_METHODS:
            return False
        if isinstance(func, ast.Name) and func.id in META_CALLS:
            return False
    if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
        return False  # `x is None`: optional-argument handling
    if isinstance(node, ast.Name):
        return node.id in tensors
    return any(uses_values(child, tensors) for child in ast.iter_child_nodes(node))


def referenced_names(tree: ast.AST, exclude: ast.AST | None = None) -> set[str]:
    """Every Name load and attribute name in `tree`, outside the subtree `exclude`."""
    skip = set(ast.walk(exclude)) if exclude is not None else set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)  # getattr(self, "name") / dispatch tables keyed by name
    return out
