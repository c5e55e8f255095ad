"""Cheat: x + 0.002*y stays within 1e-2 of x, so copying x (with a real kernel) passes."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "residual_small", "fools_naive": "cpu", "stage": "numerics",
         "expect": "identity output"}


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
