"""Branch rules: constant conditions, value-dependent shortcuts, redundant kernel variants.

- constant_branch: an `if` (statement or expression) whose condition is made of
  literals only, or of module constants assigned once (`DEBUG = False`). Branches
  inside kernels on `tl.constexpr` parameters are compile-time specialisation and
  are *not* constant in this sense (they are parameters).
- value_shortcut: a branch in `ModelNew.forward` whose condition reads tensor
  *values* (`if x.sum() == 0: return torch.zeros_like(x)`). A wrapper never needs
  a device->host sync on values; such branches only exist to special-case the
  test inputs. Conditions on metadata are allowed: `if x.numel() == 0: return out`
  (empty-input handling), `if n == 0` with `n = x.shape[0]`, `if bias is None`,
  `if not x.is_contiguous()`. Only forward is checked because only its
  parameters are known to be tensors.
- redundant_variants: two near-identical `@triton.jit` kernels (normalised-token
  similarity >= threshold, i.e. they differ only in names and constants such as
  the block size) launched from the two arms of one runtime `if`. One kernel with
  a constexpr BLOCK does the same. Not fired: one kernel launched with different
  BLOCK values per arm; genuinely different kernels per arm (single-pass vs
  looped); several kernels launched in sequence (multi-stage reductions).
"""

from __future__ import annotations

import ast
import difflib

from schemas import RuleHit
from services.curator.patterns.source import Source, launches, tensor_names, uses_values
from services.curator.tokens import normalised_tokens


def constant_branch(src: Source) -> list[RuleHit]:
    """Branches whose condition cannot vary at run time."""
    consts = _module_constants(src.tree)
    hits = []
    for node in ast.walk(src.tree):
        if isinstance(node, (ast.If, ast.IfExp)) and _is_constant(node.test, consts):
            hits.append(RuleHit(rule="constant_branch", evidence=src.segment(node.test)))
    return hits


def value_shortcut(src: Source) -> list[RuleHit]:
    """Branches in forward on tensor values."""
    if src.forward is None:
        return []
    tensors = tensor_names(src.forward)
    hits = []
    for node in ast.walk(src.forward):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)) and uses_values(node.test, tensors):
            hits.append(RuleHit(rule="value_shortcut", evidence=src.segment(node.test)))
    return hits


def redundant_variants(src: Source, similarity: float) -> list[RuleHit]:
    """Near-identical kernels selected by a runtime branch."""
    if len(src.kernels) < 2:
        return []
    tokens = {name: _kernel_tokens(src, fn) for name, fn in src.kernels.items()}
    hits, seen = [], set()
    for func in src.host_funcs:
        for node in ast.walk(func):
            if not isinstance(node, ast.If):
                continue
            body = _launched(node.body, src)
            other = _launched(node.orelse, src)
            for a in sorted(body):
                for b in sorted(other - {a}):
                    pair = tuple(sorted((a, b)))
                    if pair in seen:
                        continue
                    ratio = difflib.SequenceMatcher(None, tokens[a], tokens[b], autojunk=False).ratio()
                    if ratio >= similarity:
                        seen.add(pair)
                        hits.append(RuleHit(
                            rule="redundant_variants",
                            evidence=f"kernels {a} and {b} are {ratio:.0%} identical, "
                            f"chosen by {src.segment(node.test, 80)}",
                        ))
    return hits


def _launched(stmts: list[ast.stmt], src: Source) -> set[str]:
    return {name for stmt in stmts for _, name in launches(stmt, src.kernels)}


def _kernel_tokens(src: Source, fn: ast.FunctionDef) -> list[str]:
    body = ast.Module(body=fn.body, type_ignores=[])
    return normalised_tokens(ast.unparse(body))


def _module_constants(tree: ast.Module) -> set[str]:
    """Module names bound exactly once, to a literal."""
    counts: dict[str, int] = {}
    literal: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Name):
                counts[t.id] = counts.get(t.id, 0) + 1
                if node in tree.body and isinstance(getattr(node, "value", None), ast.Constant):
                    literal.add(t.id)
    return {n for n in literal if counts[n] == 1}


def _is_constant(node: ast.AST, consts: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in consts
    if isinstance(node, (ast.UnaryOp, ast.BoolOp, ast.BinOp, ast.Compare)):
        children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
        return bool(children) and all(_is_constant(c, consts) for c in children)
    return False
