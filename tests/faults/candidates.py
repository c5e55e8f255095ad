"""Solutions for the fault tests, all for the `add` problem (ModelNew.forward(a, b)).

Each passes the extractor and the verifier's static policy (only torch/triton, a
@triton.jit kernel that is launched), so the fault happens where it would in a
real sample: at runtime, inside the sandbox.
"""

from __future__ import annotations

from kz_common.kernels import reference_solution

HEADER = '''import torch
import torch.nn as nn
import triton
import triton.language as tl
'''

HONEST = reference_solution("add")

# An infinite loop after a real launch: only the wall clock (or RLIMIT_CPU) ends it.
HANG = HEADER + '''

@triton.jit
def touch_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        touch_kernel[(1,)](a)
        n = 0
        while True:
            n += 1
'''

# A load through a wild pointer: the Triton interpreter dereferences it on the host (SIGSEGV).
SEGFAULT = HEADER + '''

@triton.jit
def wild_load_kernel(a_ptr, out_ptr, n):
    offs = tl.arange(0, 16)
    x = tl.load(a_ptr + offs + (1 << 44))
    tl.store(out_ptr + offs, x, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        wild_load_kernel[(1,)](a, out, a.numel())
        return out
'''

# Keeps allocating (and touching) 512 MB blocks until the sandbox's memory limit stops it.
OOM = HEADER + '''

@triton.jit
def fill_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, a, b):
        hoard = []
        while True:
            hoard.append(torch.ones((1 << 27,), dtype=torch.float32))
            fill_kernel[(1,)](hoard[-1], 16, BLOCK=16)
'''

# Extracts fine, never runs: `import os` is outside the static policy (cheap to verify).
STATIC_CHEAT = "import os\n" + HONEST


def padded(code: str, n_chars: int, fill: str = "x") -> str:
    """`code` followed by comment lines of exactly `n_chars` more characters (still valid Python)."""
    line = "# " + fill * 97 + "\n"
    full, rest = divmod(max(0, n_chars - 1), len(line))
    tail = "# " + fill * (rest - 3) + "\n" if rest >= 3 else "\n" * rest
    return code + "\n" + line * full + tail
