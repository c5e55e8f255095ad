"""The verifier benchmark's batch: honest kernels (BLOCK and warp variants of an add and a
softmax, plus the catalogue's reference solutions) and the test suite's cheats, as
(label, problem source, solution source) triples."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ADD_PROBLEM = '''
import torch
import torch.nn as nn
n = 1 << 24
KZ_DEVICE = "cuda"
KZ_SHAPES = [{"n": 1 << 24}, {"n": 1000003}, {"n": 4097}]
KZ_META = {"op": "vector_add", "family": "elementwise", "dtype": "float32"}
class Model(nn.Module):
    def forward(self, x, y):
        return x + y
def get_inputs():
    return [torch.randn(n, device=KZ_DEVICE), torch.randn(n, device=KZ_DEVICE)]
def get_init_inputs():
    return []
'''

SOFTMAX_PROBLEM = '''
import torch
import torch.nn as nn
rows, cols = 8192, 2048
KZ_DEVICE = "cuda"
KZ_SHAPES = [{"rows": 8192, "cols": 2048}, {"rows": 1000, "cols": 1000}, {"rows": 33, "cols": 77}]
KZ_META = {"op": "row_softmax", "family": "softmax", "dtype": "float16"}
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
class ModelOpt(nn.Module):
    def forward(self, x):
        return torch.nn.functional.softmax(x, dim=-1)
def get_inputs():
    return [torch.randn(rows, cols, device=KZ_DEVICE, dtype=torch.float16)]
def get_init_inputs():
    return []
'''

# The honest adds' imports and kernel, shared by their two launch styles below.
_ADD_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

{decorators}@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)

class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        {launch}
        return out
'''

ADD_SOLUTION = _ADD_KERNEL.format(
    decorators="",
    launch="add_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block}, num_warps={warps})")

# An honest add whose block size an autotuner picks (its benchmark runs under the GPU lock
# since verifier 1.10): `--autotuned N` adds N of them, each with its own config list.
ADD_AUTOTUNED_SOLUTION = _ADD_KERNEL.format(
    decorators=('@triton.autotune(configs=[triton.Config({{"BLOCK": b}}, num_warps={warps}) '
                'for b in {blocks}],\n                 key=["n"])\n'),
    launch='add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)')


def autotuned_batch(n: int) -> list[tuple[str, str, str]]:
    """`n` autotuned honest adds, distinct sources (2-4 configs each)."""
    lists = [(256, 1024), (512, 2048), (256, 1024, 4096), (512, 1024, 2048, 4096)]
    return [(f"autotuned_add_{k}", ADD_PROBLEM,
             ADD_AUTOTUNED_SOLUTION.format(blocks=lists[k % 4], warps=(4, 8)[k // 4 % 2])
             + f"# variant {k}\n") for k in range(n)]


SOFTMAX_SOLUTION = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * n_cols + offs, y.to(tl.float16), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        block = max(triton.next_power_of_2(cols), {min_block})
        softmax_kernel[(rows,)](x, out, cols, BLOCK=block, num_warps={warps})
        return out
'''


def honest_batch() -> list[tuple[str, str, str]]:
    """(label, problem, solution): distinct sources, so each one compiles cold once."""
    out = []
    for block in (256, 512, 1024, 2048, 4096):
        for warps in (2, 4, 8):
            out.append((f"add_b{block}_w{warps}", ADD_PROBLEM,
                        ADD_SOLUTION.format(block=block, warps=warps)))
    for min_block in (16, 32, 64, 128, 256):
        for warps in (4, 8):
            out.append((f"softmax_m{min_block}_w{warps}", SOFTMAX_PROBLEM,
                        SOFTMAX_SOLUTION.format(min_block=min_block, warps=warps)))
    try:
        from kz_common.kernels import available_ops, reference_solution
        from kz_common.ops import get_op, render_problem

        for op in available_ops():
            spec = get_op(op)
            dtype = "float16" if "float16" in spec.dtypes else spec.dtypes[0]
            problem = render_problem(op, dtype, dict(spec.default_range), device="cuda")
            out.append((f"catalogue_{op}", problem, reference_solution(op)))
    except Exception as exc:  # noqa: BLE001 - the catalogue is optional for this benchmark
        print(f"(catalogue unavailable: {exc})")
    return out


def cheat_batch() -> list[tuple[str, str, str]]:
    sys.path.insert(0, str(REPO))
    from tests.services.verifier.conftest import ALL_CHEATS, problem_src

    return [(f"cheat_{c.name}", problem_src(c.problem_for("cuda")), c.source)
            for c in ALL_CHEATS if c.name not in ("hang",)]  # hang only costs its timeout


def repeated(batch: list[tuple[str, str, str]], n: int) -> list[tuple[str, str, str]]:
    """`batch` n times in a row; copy k's problems and solutions end in a `# copy k` line, so
    every copy builds its own bundles and compiles its own kernels."""
    if n <= 1:
        return batch
    return [(f"{label}_c{k}", f"{problem}\n# copy {k}\n", f"{solution}\n# copy {k}\n")
            for k in range(n) for label, problem, solution in batch]
