"""Cheat: a wide softmax is ~1/cols everywhere, so a constant passes atol=1e-2."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax_wide", "fools_naive": "cpu", "stage": "numerics",
         "expect": "constant output"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.full_like(x, 1.0 / x.shape[-1])
        noop_kernel[(1,)](out)
        return out
