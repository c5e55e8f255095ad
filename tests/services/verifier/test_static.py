"""Static stage: specific reasons for cheats, and no false rejections of normal kernel code."""

from __future__ import annotations

import textwrap
import uuid

import pytest

from services.verifier import static_check
from services.verifier.pool import HARNESS_FILES
from services.verifier.static_check import check_solution

HEADER = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""


def solution(body: str, header: str = HEADER) -> str:
    return textwrap.dedent(header) + textwrap.dedent(body)


def forward(code: str) -> str:
    inner = textwrap.indent(textwrap.dedent(code), " " * 8)
    return solution(f"class ModelNew(nn.Module):\n    def forward(self, x, y=None):\n{inner}\n")


# Idioms a correct kernel uses: none may be rejected.
ALLOWED = {
    "grid_lambda": """
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        k[grid](x, out, n, BLOCK=1024)
        return out""",
    "int_arithmetic": """
        rows, cols = x.shape
        n = rows * cols + 2 * x.shape[0] - x.size(1) // 2
        block = triton.next_power_of_2(cols) if cols > 16 else 16
        out = torch.empty((rows, cols), device=x.device, dtype=x.dtype)
        k[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
        return out""",
    "device_context_and_views": """
        x = x.contiguous().view(-1)
        with torch.cuda.device(x.device):
            out = torch.empty_strided(x.shape, x.stride(), device=x.device, dtype=torch.float32)
            k[(1,)](x, out, x.numel(), BLOCK=128)
        assert out.is_contiguous() and out.dim() == 1
        return out.view(-1).reshape(x.shape)""",
    "scalar_math": """
        scale = 1.0 / math.sqrt(x.shape[-1])
        eps = 1e-5 * scale
        out = torch.empty_like(x, dtype=torch.float32)
        k[(1,)](x, out, x.numel(), BLOCK=128)
        return out.to(x.dtype)""",
    "tensor_type_and_unbound_views": """
        assert isinstance(x, torch.Tensor)
        flat: torch.Tensor = torch.Tensor.contiguous(x).view(-1)
        out = torch.empty_like(flat)
        k[(1,)](flat, out, flat.numel(), BLOCK=128)
        return out""",
    "zeros_for_atomics": """
        acc = torch.zeros((x.shape[0],), device=x.device, dtype=torch.float32)
        k[(1,)](x, acc, x.numel(), BLOCK=128)
        return acc""",
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_idioms_are_allowed(name: str) -> None:
    result = check_solution(forward(ALLOWED[name]))
    assert result.ok, result.reasons


def test_autotune_heuristics_constexpr_globals_and_main_guard_are_allowed() -> None:
    src = """
        import torch
        import torch.nn as nn
        import triton
        import triton.language as tl
        from triton.language.extra import libdevice

        BLOCK_DEFAULT: tl.constexpr = 256
        EPS = 1e-6

        @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])
        @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
        @triton.jit
        def kern(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            y = libdevice.tanh(x) + EPS + helper(x) * BLOCK_DEFAULT
            tl.store(out_ptr + offs, y, mask=offs < n)

        @triton.jit
        def helper(v):
            return v * 0.5

        class ModelNew(nn.Module):
            def __init__(self, dim: int, eps: float = 1e-5):
                super().__init__()
                nn.Module.__init__(self)
                self.weight = nn.Parameter(torch.ones(dim))
                self.eps = eps

            def forward(self, x):
                out = torch.empty_like(x)
                kern[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, x.numel())
                return out

        if __name__ == "__main__":
            x = torch.randn(10)
            print(torch.allclose(ModelNew(10)(x), torch.tanh(x)))
    """
    result = check_solution(textwrap.dedent(src))
    assert result.ok, result.reasons
    assert result.kernels == ("helper", "kern")


REJECTED = {
    "functional": ("return F.gelu(x)", "torch.nn.functional.gelu is library compute"),
    "matmul_operator": ("return x @ y", "tensor operator '@'"),
    "tensor_times_int": ("n = x.numel()\nreturn x * 2", "tensor operator '*'"),
    "inplace_add": ("out = torch.empty_like(x)\nout += x\nreturn out", "tensor operator '+='"),
    "negation": ("return -x.contiguous()", "tensor negation"),
    "comparison": ("return x.contiguous() > 0", "tensor comparison"),
    "tensor_method": ("return x.exp()", "tensor method .exp()"),
    "torch_matmul": ("return torch.matmul(x, y)", "torch.matmul is library compute"),
    "torch_compile": ("f = torch.compile(lambda a: a)\nreturn f(x)", "torch.compile/torchscript"),
    "torchscript": ("return torch.jit.script(lambda a: a)(x)", "torch.compile/torchscript"),
    "dunder_import": ("os = __import__('os')\nreturn x", "dynamic import"),
    "globals": ("return globals()['torch'].softmax(x, -1)", "namespace introspection"),
    "dunder_attr": ("return x.__class__", "dunder attribute __class__"),
    "dunder_string": ("return getattr(x, '__dict__')", "names a dunder"),
    "setattr": ("setattr(torch, 'softmax', None)\nreturn x", "attribute tampering"),
    "reference_reach": ("return Model()(x)", "reaches into the reference"),
    "get_inputs_reach": ("return get_inputs()", "reaches into the reference"),
    "triton_internals": ("triton.runtime.jit.JITFunction.run = None\nreturn x",
                         "monkeypatching a library"),
    "aten_private": ("return torch._C._nn.gelu(x)", "direct aten access"),
    "open_file": ("return open('/etc/shadow').read()", "file i/o"),
    "unbound_tensor_method": ("return torch.Tensor.tolist(x)",
                              "torch.Tensor.tolist is library compute"),
    "unbound_tensor_math": ("return torch.Tensor.exp(x)", "torch.Tensor.exp is library compute"),
    "unbound_parameter_method": ("return nn.Parameter.tolist(x)",
                                 "torch.nn.Parameter.tolist is library compute"),
    "torch_tensor_literal": ("return torch.tensor([1.0, 2.0])", "torch.tensor is library compute"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_cheats_get_specific_reasons(name: str) -> None:
    code, expected = REJECTED[name]
    result = check_solution(forward(code))
    assert not result.ok
    assert expected.lower() in " | ".join(result.reasons).lower(), result.reasons
    assert all(r.startswith("line ") for r in result.reasons)


@pytest.mark.parametrize("module", ["numpy", "os", "sys", "ctypes", "cffi", "subprocess",
                                    "multiprocessing", "threading", "concurrent.futures",
                                    "socket", "importlib", "gc", "inspect", "pickle",
                                    "triton.runtime", "torch.utils.cpp_extension"])
def test_forbidden_imports(module: str) -> None:
    result = check_solution(solution(f"import {module}\nclass ModelNew(nn.Module):\n    pass\n"))
    assert not result.ok
    assert any(f"import of {module}" in r for r in result.reasons), result.reasons


def test_star_and_from_imports_of_library_compute() -> None:
    assert not check_solution(solution("from torch import *\nclass ModelNew: pass\n")).ok
    r = check_solution(solution("from torch.nn.functional import softmax\nclass ModelNew: pass\n"))
    assert "import of torch.nn.functional.softmax is library compute" in " ".join(r.reasons)


def test_jit_bodies_cannot_use_torch_or_host_state() -> None:
    src = """
        import torch
        import torch.nn as nn
        import triton
        import triton.language as tl

        STASH = {}

        def host_helper(t):
            return t

        @triton.jit
        def evil(x_ptr):
            a = STASH
            b = torch.softmax
            c = host_helper(x_ptr)

        class ModelNew(nn.Module):
            def forward(self, x):
                evil[(1,)](x)
                return x
    """
    text = " | ".join(check_solution(textwrap.dedent(src)).reasons)
    assert "non-constant global 'STASH'" in text
    assert "torch referenced inside a @triton.jit kernel" in text
    assert "calls host function 'host_helper'" in text


def test_missing_pieces_and_syntax() -> None:
    assert "no @triton.jit kernel defined" in check_solution(
        "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n").reasons
    assert check_solution("def f(:\n").reasons[0].startswith("line 1: syntax error")
    assert "no ModelNew class defined (missing ModelNew)" in check_solution(HEADER).reasons


def test_runtime_only_policy_defers_library_compute_but_keeps_safety_rules() -> None:
    lib = forward("return torch.softmax(x, -1) * 2")
    assert check_solution(lib, policy="runtime_only").ok
    for code in ("return eval('x')", "return x.__class__", "torch.x = 1\nreturn x",
                 "return torch.ops.aten.add(x, x)", "return torch.cuda.Stream()"):
        assert not check_solution(forward(code), policy="runtime_only").ok, code
    with pytest.raises(ValueError):
        check_solution(lib, policy="anything_goes")


@pytest.mark.parametrize("name", sorted(n.removesuffix(".py") for n in HARNESS_FILES))
def test_every_module_of_the_harness_is_out_of_a_candidates_reach(name: str) -> None:
    """The harness's own modules sit next to the solution in the sandbox: importing one
    (to read its captured functions or state) is rejected like reaching into the harness."""
    from services.verifier.policy import REFERENCE_NAMES

    assert name in REFERENCE_NAMES
    r = check_solution(solution(f"import {name}\nclass ModelNew(nn.Module):\n    pass\n"))
    assert not r.ok and any(name in reason for reason in r.reasons), r.reasons


def _fresh(src: str) -> str:
    return src + f"# {uuid.uuid4().hex}\n"  # a source no other test has had memoised


def test_a_memoised_verdict_is_the_same_and_a_changed_source_is_checked_afresh() -> None:
    """verify_batch checks each candidate twice (its prefetcher, then its worker): the second
    check is a hit; each caller gets a reasons list of its own."""
    src = _fresh(forward("return x"))
    before = static_check._checked.cache_info()
    first, again = check_solution(src), check_solution(src)
    info = static_check._checked.cache_info()
    assert (info.misses - before.misses, info.hits - before.hits) == (1, 1)
    assert first.ok and first == again and first.reasons is not again.reasons
    first.reasons.append("a caller's own note")
    assert check_solution(src) == again
    changed = check_solution(src + "import os\n")
    assert static_check._checked.cache_info().misses - before.misses == 2
    assert not changed.ok and any("import of os" in r for r in changed.reasons), changed.reasons


def test_a_verdict_of_the_moment_is_not_memoised(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of memory once: that check rejects, the next one of the same source runs again."""
    src = _fresh(forward("return x"))

    def no_memory(_: str) -> None:
        raise MemoryError

    monkeypatch.setattr(static_check, "parse", no_memory)
    assert check_solution(src).reasons == ["unparsable source: MemoryError"]
    monkeypatch.undo()
    assert check_solution(src).ok
