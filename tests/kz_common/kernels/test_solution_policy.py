"""A small AST check that reference solutions do no torch math in ModelNew.

Not the project's policy checker: a conservative local rule set. ModelNew may only
allocate (torch.empty / empty_like / empty_strided), take views and metadata
(.contiguous / .view / .reshape / .stride / .size / .numel / .element_size, .shape,
.device, .dtype), call this file's plain helpers, and launch @triton.jit kernels.
All arithmetic (grids, block sizes) lives in module-level helpers, which must not
touch torch at all.
"""

from __future__ import annotations

import ast

import pytest

from kz_common.kernels import available_ops, reference_solution

ALLOWED_IMPORTS = {"torch", "torch.nn", "triton", "triton.language", "math"}
ALLOWED_TORCH_CALLS = {"empty", "empty_like", "empty_strided"}
ALLOWED_METHODS = {"contiguous", "view", "reshape", "stride", "size", "numel", "dim", "element_size"}
ALLOWED_BUILTINS = {"super", "min", "max", "len", "int", "tuple", "dict", "isinstance"}


def _is_jit(fn: ast.FunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute) and target.attr == "jit":
            return True
    return False


def policy_violations(source: str) -> list[str]:
    """Human-readable violations of the solution rules (empty = clean)."""
    tree = ast.parse(source)
    problems: list[str] = []
    jit_names: set[str] = set()
    helper_names: set[str] = set()
    model_new: ast.ClassDef | None = None

    for node in tree.body:
        if isinstance(node, ast.Import):
            problems += [f"import {a.name}" for a in node.names if a.name not in ALLOWED_IMPORTS]
        elif isinstance(node, ast.ImportFrom):
            problems.append(f"from {node.module} import ...")
        elif isinstance(node, ast.FunctionDef):
            (jit_names if _is_jit(node) else helper_names).add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            model_new = node
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
            problems.append("import inside a function or class")

    if not jit_names:
        problems.append("no @triton.jit kernel")
    if model_new is None:
        return problems + ["no class ModelNew"]
    if not any(isinstance(b, ast.Attribute) and b.attr == "Module" for b in model_new.bases):
        problems.append("ModelNew does not subclass nn.Module")
    methods = {f.name: f for f in model_new.body if isinstance(f, ast.FunctionDef)}
    if "forward" not in methods or "__init__" not in methods:
        problems.append("ModelNew lacks __init__ or forward")

    # Helpers: plain Python on ints, no torch.
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in helper_names:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id in ("torch", "nn", "F"):
                    problems.append(f"helper {node.name} uses {sub.id}")

    # ModelNew: no arithmetic, only allowed calls.
    launched = False
    for fn in methods.values():
        for sub in ast.walk(fn):
            where = f"ModelNew.{fn.name} line {getattr(sub, 'lineno', '?')}"
            if isinstance(sub, (ast.BinOp, ast.AugAssign, ast.Compare, ast.BoolOp)):
                problems.append(f"{where}: arithmetic/comparison {type(sub).__name__}")
            elif isinstance(sub, ast.UnaryOp) and not isinstance(sub.operand, ast.Constant):
                problems.append(f"{where}: unary op on a non-constant")
            elif isinstance(sub, ast.Call):
                f = sub.func
                if isinstance(f, ast.Subscript):  # kernel[grid](...)
                    launched = True
                    continue
                if isinstance(f, ast.Name):
                    if f.id not in ALLOWED_BUILTINS and f.id not in helper_names:
                        problems.append(f"{where}: call to {f.id}")
                elif isinstance(f, ast.Attribute):
                    owner = f.value
                    if isinstance(owner, ast.Name) and owner.id == "torch":
                        if f.attr not in ALLOWED_TORCH_CALLS:
                            problems.append(f"{where}: torch.{f.attr}")
                    elif isinstance(owner, ast.Name) and owner.id == "triton":
                        if f.attr not in ("cdiv", "next_power_of_2"):
                            problems.append(f"{where}: triton.{f.attr}")
                    elif isinstance(owner, ast.Name) and owner.id in ("nn", "F", "math", "tl"):
                        problems.append(f"{where}: {owner.id}.{f.attr}")
                    elif isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) \
                            and owner.func.id == "super":
                        continue
                    elif f.attr not in ALLOWED_METHODS:
                        problems.append(f"{where}: method .{f.attr}()")
                else:
                    problems.append(f"{where}: unusual call")
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                    and sub.value.id in ("F", "math"):
                problems.append(f"{where}: {sub.value.id}.{sub.attr}")
    if not launched:
        problems.append("ModelNew never launches a kernel")
    return problems


@pytest.mark.parametrize("op", available_ops())
def test_reference_solution_has_no_torch_math(op: str) -> None:
    assert policy_violations(reference_solution(op)) == []


def test_reference_solution_file_is_short_and_documented() -> None:
    for op in available_ops():
        src = reference_solution(op)
        assert ast.get_docstring(ast.parse(src)), f"{op}: module docstring missing"
        assert len(src.splitlines()) < 300, op


BAD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
import numpy as np

@triton.jit
def k(x_ptr):
    pass

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.exp(x)
        z = x * 2
        w = x.sum(-1)
        q = torch.nn.functional.gelu(x)
        out = torch.empty_like(x)
        k[(1,)](out)
        return out + y
'''


def test_policy_check_catches_torch_math() -> None:
    found = "\n".join(policy_violations(BAD))
    for needle in ("import numpy", "torch.exp", "BinOp", ".sum()", ".gelu()"):
        assert needle in found, (needle, found)
    no_launch = BAD.replace("k[(1,)](out)", "")
    assert "never launches" in "\n".join(policy_violations(no_launch))
