"""Static (AST) stage: reject what we can see is a cheat or an escape before anything runs.

Host code (everything outside `@triton.jit` bodies) may only allocate, view and
launch. Kernel bodies may use Triton freely but not torch, host globals or
builtins that only work in the CPU interpreter. The runtime tracer in the
harness is the complete layer for compute; this stage gives early, specific
reasons and closes the escapes (imports, dynamic code, dunders, monkeypatching)
that would let a candidate tamper with the harness.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field, replace

import torch

from services.verifier import policy as P
from services.verifier.static_scope import (TensorScope, bound_names, collect_self_tensor_attrs,
                                             is_constant_assign, parse)

TENSOR_METHOD_NAMES = frozenset(n for n in dir(torch.Tensor) if not n.startswith("_"))
COMPUTE_METHODS = TENSOR_METHOD_NAMES - P.ALLOWED_TENSOR_METHODS
_OP_SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>",
}
_TENSOR_COMPARE = (ast.Lt, ast.Gt, ast.LtE, ast.GtE, ast.Eq, ast.NotEq)
_BUILTIN_WHY = {
    "exec": "dynamic code execution", "eval": "dynamic code execution",
    "compile": "dynamic code execution", "__import__": "dynamic import", "open": "file I/O",
    "globals": "namespace introspection", "locals": "namespace introspection",
    "vars": "namespace introspection", "setattr": "attribute tampering (setattr)",
    "delattr": "attribute tampering (delattr)",
}


@dataclass(frozen=True)
class StaticResult:
    """Outcome of the static stage."""

    ok: bool
    reasons: list[str] = field(default_factory=list)
    kernels: tuple[str, ...] = ()


def check_solution(src: str, policy: str = P.DEFAULT_POLICY) -> StaticResult:
    """Check a solution's source against `policy`; never raises on bad input. Memoised:
    verify_batch checks each candidate twice (its bundle prefetcher, then its worker)."""
    if policy not in P.POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {P.POLICIES}")
    try:
        result = _checked(src, policy)
    except _Momentary as exc:
        return exc.result
    return replace(result, reasons=list(result.reasons))  # the memo's own list stays as it is


class _Momentary(Exception):
    """A verdict that depends on the moment, not on the source alone (the host's free
    memory, the caller's stack depth): raised through the memo, which keeps no exceptions."""

    def __init__(self, result: StaticResult) -> None:
        self.result = result


# Bounded: the memo keeps up to 1024 sources alive (the extractor caps one at 100k chars).
@functools.lru_cache(maxsize=1024)
def _checked(src: str, policy: str) -> StaticResult:
    try:
        tree = parse(src)
    except SyntaxError as exc:
        return StaticResult(False, [f"line {exc.lineno}: syntax error: {exc.msg}"])
    except ValueError as exc:
        return StaticResult(False, [f"unparsable source: {type(exc).__name__}"])
    except (RecursionError, MemoryError) as exc:
        why = f"unparsable source: {type(exc).__name__}"
        raise _Momentary(StaticResult(False, [why])) from None
    checker = _Checker(tree, library_rules=policy == "no_library_compute")
    try:
        checker.run()
    except RecursionError:
        raise _Momentary(StaticResult(False, ["source nests too deeply to analyse"])) from None
    return StaticResult(not checker.reasons, checker.reasons, tuple(sorted(checker.jit_names)))


def _strip_main_guard(body: list[ast.stmt]) -> list[ast.stmt]:
    """Drop `if __name__ == "__main__":` blocks: the harness never runs the module as main."""
    def is_guard(s: ast.stmt) -> bool:
        if not isinstance(s, ast.If) or s.orelse:
            return False
        t = s.test
        return (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
                and t.left.id == "__name__" and len(t.comparators) == 1
                and isinstance(t.comparators[0], ast.Constant)
                and t.comparators[0].value == "__main__")
    return [s for s in body if not is_guard(s)]


class _Checker:
    def __init__(self, tree: ast.Module, library_rules: bool) -> None:
        tree.body = _strip_main_guard(tree.body)
        self.tree = tree
        self.library_rules = library_rules
        self.reasons: list[str] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted module/member path
        self.jit_names: set[str] = set()
        self.module_names: set[str] = set()
        self.const_globals: set[str] = set()
        self.bound_anywhere: set[str] = set()
        self.self_tensor_attrs: set[str] = set()
        self.scope: TensorScope | None = None

    # ------------------------------------------------------------------ passes

    def run(self) -> None:
        self._collect_imports()
        self._collect_module_level()
        self.self_tensor_attrs = collect_self_tensor_attrs(self.tree, self._resolve)
        self._visit_block(self.tree.body, jit=False)
        if "ModelNew" not in self.module_names:
            self._flag(None, "no ModelNew class defined (missing ModelNew)")
        if not self.jit_names:
            self._flag(None, "no @triton.jit kernel defined")

    def _flag(self, node: ast.AST | None, msg: str) -> None:
        line = getattr(node, "lineno", None)
        reason = f"line {line}: {msg}" if line else msg
        if reason not in self.reasons:
            self.reasons.append(reason)

    def _collect_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if self._import_ok(node, a.name):
                        local = a.asname or a.name.split(".")[0]
                        self.aliases[local] = a.name if a.asname else local
            elif isinstance(node, ast.ImportFrom):
                self._collect_from(node)

    def _collect_from(self, node: ast.ImportFrom) -> None:
        if node.level:
            self._flag(node, "relative import is not allowed")
            return
        mod = node.module or ""
        if not self._import_ok(node, mod):
            return
        for a in node.names:
            if a.name == "*":
                self._flag(node, f"star import from {mod} is not allowed")
                continue
            full = f"{mod}.{a.name}"
            if full in P.ALLOWED_IMPORTS or self._path_ok(full) or mod in ("__future__", "typing"):
                self.aliases[a.asname or a.name] = full
            else:
                self._flag(node, f"import of {full} is {self._why(full)}")

    def _import_ok(self, node: ast.AST, mod: str) -> bool:
        if mod in P.ALLOWED_IMPORTS:
            return True
        named = [k for k in P.NAMED_IMPORT_REASONS if mod == k or mod.startswith(k + ".")]
        why = P.NAMED_IMPORT_REASONS[max(named, key=len)] if named else "not in the allow-list"
        self._flag(node, f"import of {mod} is forbidden: {why}")
        return False

    def _collect_module_level(self) -> None:
        for node in ast.walk(self.tree):
            for name in bound_names(node):
                self.bound_anywhere.add(name)
        for stmt in self.tree.body:
            self.module_names.update(bound_names(stmt))
            self._note_jit(stmt)
            if is_constant_assign(stmt, self._resolve):
                self.const_globals.update(bound_names(stmt))
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef) and any(
                self._is_jit_decorator(d) for d in node.decorator_list
            ):
                self.jit_names.add(node.name)

    def _note_jit(self, stmt: ast.stmt) -> None:
        # `kernel = triton.jit(fn)` makes fn's body a kernel body.
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            if self._is_jit_decorator(stmt.value.func):
                for arg in stmt.value.args:
                    if isinstance(arg, ast.Name):
                        self.jit_names.add(arg.id)
                self.jit_names.update(bound_names(stmt))

    def _is_jit_decorator(self, d: ast.expr) -> bool:
        target = d.func if isinstance(d, ast.Call) else d
        return self._resolve(target) == "triton.jit"

    # ------------------------------------------------------------------ resolution

    def _resolve(self, node: ast.expr) -> str | None:
        """Dotted path of a Name/Attribute chain rooted at an imported alias, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _path_ok(self, path: str) -> bool:
        root = path.split(".")[0]
        if root == "torch":
            return P.torch_path_allowed(path) or not self.library_rules and _safe_torch(path)
        if root == "triton":
            return P.triton_path_allowed(path)
        return root in ("math", "typing", "__future__")

    @staticmethod
    def _why(path: str) -> str:
        if path.startswith(("torch.compile", "torch.jit", "torch._dynamo", "torch.fx")):
            return "not allowed: torch.compile/TorchScript"
        if path.startswith(("torch.ops", "torch._C", "torch._ops", "torch._prims", "torch._refs")):
            return "direct aten access: library compute"
        if path.startswith(("torch.cuda.Event", "torch.cuda.Stream", "torch.cuda.stream",
                            "torch.cuda.set_stream", "torch.cuda.synchronize")):
            return "not allowed: streams/events/timers belong to the verifier"
        if path.startswith("triton"):
            return "not in the triton allow-list (runtime/compiler internals)"
        return "library compute (not in the allow-list)"

    # ------------------------------------------------------------------ visiting

    def _visit_block(self, stmts: list[ast.stmt], jit: bool) -> None:
        for s in stmts:
            self._visit(s, jit)

    def _visit(self, node: ast.AST, jit: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._visit_function(node, jit)
            return
        if isinstance(node, ast.Lambda):
            self._visit_lambda(node, jit)
            return
        if isinstance(node, ast.ClassDef) and node.keywords:
            self._flag(node, f"class {node.name} uses keywords (metaclass tricks)")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return  # checked in _collect_imports
        if not self._check_node(node, jit):
            return  # node fully handled (e.g. a resolved attribute chain)
        for child in ast.iter_child_nodes(node):
            self._visit(child, jit)

    def _visit_function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, jit: bool) -> None:
        for d in fn.decorator_list:
            self._visit(d, jit)
        for default in fn.args.defaults + [d for d in fn.args.kw_defaults if d]:
            self._visit(default, jit)
        body_jit = jit or fn.name in self.jit_names
        outer = self.scope
        if not body_jit:
            self.scope = TensorScope.for_function(fn, self._resolve, self.self_tensor_attrs)
        self._visit_block(fn.body, body_jit)
        self.scope = outer

    def _visit_lambda(self, lam: ast.Lambda, jit: bool) -> None:
        outer = self.scope
        if not jit:
            self.scope = TensorScope.for_lambda(lam, self._resolve, self.self_tensor_attrs, outer)
        self._visit(lam.body, jit)
        self.scope = outer

    def _check_node(self, node: ast.AST, jit: bool) -> bool:
        """Apply rules to one node; False stops descent into its children."""
        self._check_generic(node)
        if jit:
            return self._check_jit(node)
        return self._check_host(node)

    def _check_generic(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in P.FORBIDDEN_BUILTINS and node.id not in self.aliases:
                why = _BUILTIN_WHY.get(node.id, "forbidden builtin")
                self._flag(node, f"use of builtin {node.id!r}: {why}")
            if node.id in P.REFERENCE_NAMES and node.id not in self.bound_anywhere:
                self._flag(node, f"name {node.id!r} reaches into the reference/harness")
        elif isinstance(node, ast.Attribute):
            for sub in ast.walk(node):  # whole chain: resolved chains are not descended into
                attr = sub.attr if isinstance(sub, ast.Attribute) else ""
                if P.DUNDER_RE.match(attr) and attr not in P.ALLOWED_DUNDER_ATTRS:
                    self._flag(sub, f"access to dunder attribute {attr} is forbidden")
            if node.attr == "modules" and self._resolve(node.value) == "sys":
                self._flag(node, "sys.modules reaches into the harness")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if P.DUNDER_RE.match(node.value) and node.value != "__main__":
                self._flag(node, f"string literal {node.value!r} names a dunder "
                                 "(obfuscated access)")
        elif isinstance(node, ast.Call):
            self._check_attr_builtins(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            self._check_monkeypatch(node)

    def _check_attr_builtins(self, call: ast.Call) -> None:
        if not (isinstance(call.func, ast.Name) and call.func.id in ("getattr", "hasattr")):
            return
        name = call.args[1] if len(call.args) >= 2 else None
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            self._flag(call, f"{call.func.id} with a non-literal attribute name "
                             "(obfuscated attribute access)")
            return
        base = self._resolve(call.args[0])
        if base and not self._path_ok(f"{base}.{name.value}"):
            path = f"{base}.{name.value}"
            self._flag(call, f"getattr reference to {path} is {self._why(path)}")

    def _check_monkeypatch(self, node: ast.stmt) -> None:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in ast.walk(t):
                root = sub.value if isinstance(sub, (ast.Attribute, ast.Subscript)) else None
                path = self._resolve(root) if root is not None else None
                if path is not None and isinstance(sub, (ast.Attribute, ast.Subscript)):
                    what = f"{path}.{sub.attr}" if isinstance(sub, ast.Attribute) else path
                    self._flag(node, f"assignment to {what}: monkeypatching a library")

    def _check_jit(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            path = self.aliases.get(node.id)
            if path and path.split(".")[0] == "torch":
                self._flag(node, f"torch referenced inside a @triton.jit kernel ({node.id})")
            elif (node.id in self.module_names and not path and node.id not in self.jit_names
                  and node.id not in self.const_globals):
                self._flag(node, f"@triton.jit kernel reads non-constant global {node.id!r}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fid = node.func.id
            if (fid in self.module_names and fid not in self.jit_names
                    and not self.aliases.get(fid, "").startswith("triton")):
                self._flag(node, f"@triton.jit kernel calls host function {fid!r}")
        return True

    def _check_host(self, node: ast.AST) -> bool:
        if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
            path = self._resolve(node)
            if path is not None:
                if not self._path_ok(path):
                    self._flag(node, f"{path} is {self._why(path)}")
                return False
        if not self.library_rules:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            self._check_method(node)
        elif isinstance(node, (ast.BinOp, ast.AugAssign, ast.UnaryOp, ast.Compare)):
            self._check_operator(node)
        return True

    def _check_method(self, call: ast.Call) -> None:
        func = call.func
        assert isinstance(func, ast.Attribute)
        if self._resolve(func.value) is not None:
            return  # module function: checked as a path
        if func.attr in COMPUTE_METHODS:
            self._flag(call, f"call to tensor method .{func.attr}() is library compute")

    def _check_operator(self, node: ast.AST) -> None:
        scope = self.scope
        is_t = scope.is_tensor if scope else (lambda e: False)
        if isinstance(node, ast.BinOp):
            sym = _OP_SYMBOL.get(type(node.op), "?")
            if isinstance(node.op, ast.MatMult) or is_t(node.left) or is_t(node.right):
                self._flag(node, f"tensor operator {sym!r} in host code is library compute")
        elif isinstance(node, ast.AugAssign):
            sym = _OP_SYMBOL.get(type(node.op), "?") + "="
            if isinstance(node.op, ast.MatMult) or is_t(node.target) or is_t(node.value):
                self._flag(node, f"tensor operator {sym!r} in host code is library compute")
        elif isinstance(node, ast.UnaryOp):
            if isinstance(node.op, (ast.USub, ast.Invert)) and is_t(node.operand):
                self._flag(node, "tensor negation in host code is library compute")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(o, _TENSOR_COMPARE) for o in node.ops) and any(map(is_t, sides)):
                self._flag(node, "tensor comparison in host code is library compute")


def _safe_torch(path: str) -> bool:
    """Under runtime_only, torch math is allowed (the tracer judges it) but not internals."""
    bad = ("torch._", "torch.ops", "torch.compile", "torch.jit", "torch.utils", "torch.cuda.Event",
           "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.set_stream", "torch.fx",
           "torch.library", "torch.overrides", "torch.testing")
    return not path.startswith(bad)
