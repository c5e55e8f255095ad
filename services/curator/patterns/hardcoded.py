"""Hard-coded-shape rule: challenge dims written as literals where the code should read shapes.

The challenge's dim values are every entry of the concrete test shapes the
problem renders (`choose_shapes`: min corner, awkward middle, max corner) plus
each shape's element count; values <= 1 are ignored. A literal counts only when
it is *used as a dim* in host code:
- a non-constexpr argument of a kernel launch (`kernel[grid](x, out, 4096)`),
- in the launch grid (`(4096,)`, `triton.cdiv(4096, BLOCK)`, `(4096 + B - 1) // B`),
  except a `cdiv` divisor or the right side of `//` (that is the block size),
- a size argument of an allocation or view (`torch.empty(4096, ...)`, `x.view(64, 300)`),
- `range(4096)`,
directly or through a name bound to the literal (`N = 4096`). Not fired: a block
size equal to a dim passed as a constexpr (`BLOCK_SIZE=1024`), `-1`/`1` in views,
sizes read from tensors (`x.shape[1]`, `x.numel()`).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator, Mapping, Sequence

from kz_common.ops import choose_shapes
from schemas import RuleHit
from services.curator.patterns.source import Source, constexpr_params, dotted, launches

_ALLOCATORS = frozenset({"empty", "zeros", "ones", "full", "randn", "rand", "empty_strided"})
_VIEW_METHODS = frozenset({"view", "reshape", "expand", "new_empty", "new_zeros", "new_ones", "new_full",
                           "resize_", "repeat", "unflatten"})
_LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})


def challenge_dims(shape_range: Mapping[str, tuple[int, int]]) -> set[int]:
    """Dim values (and element counts) of the shapes a challenge is tested on."""
    values: set[int] = set()
    for shape in choose_shapes(dict(shape_range)):
        values |= set(shape.values())
        values.add(math.prod(shape.values()))
    return {v for v in values if v > 1}


def hardcoded_shape(src: Source, dims: set[int]) -> list[RuleHit]:
    """Literals equal to a challenge dim in dim positions of host code."""
    if not dims:
        return []
    bound = _literal_names(src)
    hits, seen = [], set()
    for func in src.host_funcs:
        local = bound | _literal_names_in(func)
        for where, node in _dim_positions(func, src):
            value = _int_value(node, local)
            if value in dims and (node.lineno, node.col_offset) not in seen:
                seen.add((node.lineno, node.col_offset))
                hits.append(RuleHit(rule="hardcoded_shape", evidence=f"{value} as {where}: {src.segment(node, 80)}"))
    return hits


def _dim_positions(func: ast.FunctionDef, src: Source) -> Iterator[tuple[str, ast.expr]]:
    grids = _grid_assignments(func)
    for call, name in launches(func, src.kernels):
        yield from _launch_args(call, src.kernels[name])
        grid = call.func.slice  # type: ignore[attr-defined]
        if isinstance(grid, ast.Name) and grid.id in grids:
            grid = grids[grid.id]
        yield from (("grid", n) for n in _grid_literals(grid))
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else name
        is_alloc = name.startswith("torch.") and method in _ALLOCATORS
        if is_alloc or (isinstance(node.func, ast.Attribute) and method in _VIEW_METHODS) or name == "range":
            for arg in node.args:
                elts = arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]
                yield from ((f"{method} size", e) for e in elts)


def _launch_args(call: ast.Call, kernel: ast.FunctionDef) -> Iterator[tuple[str, ast.expr]]:
    params = [a.arg for a in kernel.args.args]
    constexpr = constexpr_params(kernel)
    for i, arg in enumerate(call.args):
        if i >= len(params) or params[i] not in constexpr:
            yield "kernel argument", arg
    for kw in call.keywords:
        if kw.arg and kw.arg not in constexpr and kw.arg not in _LAUNCH_OPTIONS:
            yield "kernel argument", kw.value


def _grid_literals(node: ast.AST) -> Iterator[ast.expr]:
    """Expressions in a grid that stand for problem sizes (not block sizes)."""
    if isinstance(node, ast.Lambda):
        yield from _grid_literals(node.body)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for e in node.elts:
            yield from _grid_literals(e)
    elif isinstance(node, ast.Call) and dotted(node.func).endswith("cdiv") and node.args:
        yield from _grid_literals(node.args[0])
    elif isinstance(node, ast.BinOp):
        yield from _grid_literals(node.left)
        if not isinstance(node.op, (ast.FloorDiv, ast.Div)):
            yield from _grid_literals(node.right)
    elif isinstance(node, (ast.Constant, ast.Name)):
        yield node


def _grid_assignments(func: ast.FunctionDef) -> dict[str, ast.expr]:
    return {
        t.id: node.value
        for node in ast.walk(func) if isinstance(node, ast.Assign)
        for t in node.targets if isinstance(t, ast.Name)
    }


def _literal_names(src: Source) -> dict[str, int]:
    """Module-level names bound to an int literal."""
    return _bindings(src.tree.body)


def _literal_names_in(func: ast.FunctionDef) -> dict[str, int]:
    return _bindings([n for n in ast.walk(func) if isinstance(n, ast.Assign)])


def _bindings(stmts: Sequence[ast.AST]) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in stmts:
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:
            pairs = zip(t.elts, node.value.elts) if isinstance(t, ast.Tuple) and isinstance(
                node.value, ast.Tuple) else [(t, node.value)]
            for name, value in pairs:
                if isinstance(name, ast.Name) and isinstance(value, ast.Constant) and _is_int(value):
                    out[name.id] = int(value.value)  # type: ignore[arg-type]  # _is_int checked it
    return out


def _int_value(node: ast.AST, names: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and _is_int(node):
        return int(node.value)  # type: ignore[arg-type]  # _is_int checked it
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int
