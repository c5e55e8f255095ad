"""Dead-code rule: unreachable statements, kernels never launched, functions never called.

- Statements after `return` / `raise` / `continue` / `break` in the same block.
- A `@triton.jit` kernel whose name is referenced nowhere but in its own body.
- A module-level function or a ModelNew method never referenced (by name, as an
  attribute, or as a string for getattr/dispatch tables). Not fired for the
  KernelBench entry points `get_inputs` / `get_init_inputs`, dunder methods,
  `forward`, or names listed in `__all__`.
Dead code teaches the model to emit padding; a sample with any is removed.
"""

from __future__ import annotations

import ast

from schemas import RuleHit
from services.curator.patterns.source import ENTRY_POINTS, Source, referenced_names

_TERMINATORS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def dead_code(src: Source) -> list[RuleHit]:
    """All dead-code findings in one solution."""
    return _unreachable(src) + _unused_functions(src)


def _unreachable(src: Source) -> list[RuleHit]:
    hits = []
    for node in ast.walk(src.tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block[:-1]):
                if isinstance(stmt, _TERMINATORS):
                    nxt = block[i + 1]
                    hits.append(RuleHit(rule="dead_code", evidence=f"unreachable {src.segment(nxt, 100)}"))
                    break
    return hits


def _unused_functions(src: Source) -> list[RuleHit]:
    exported = _all_names(src.tree)
    candidates: list[tuple[ast.FunctionDef, str]] = [
        (n, "kernel" if n.name in src.kernels else "function")
        for n in src.tree.body if isinstance(n, ast.FunctionDef)
    ]
    if src.model is not None:
        candidates += [(n, "method") for n in src.model.body if isinstance(n, ast.FunctionDef)]
    hits = []
    for fn, kind in candidates:
        if fn.name in ENTRY_POINTS or fn.name in exported or fn.name == "forward":
            continue
        if fn.name.startswith("__") and fn.name.endswith("__"):
            continue
        if fn.name not in referenced_names(src.tree, exclude=fn):
            hits.append(RuleHit(rule="dead_code", evidence=f"{kind} {fn.name} (line {fn.lineno}) is never used"))
    return hits


def _all_names(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ) and isinstance(node.value, (ast.List, ast.Tuple)):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()
