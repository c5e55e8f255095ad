"""Cheat: return zeros; the outputs are so small that atol=1e-2 accepts them."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "tiny_scale", "fools_naive": "cpu", "stage": "numerics",
         "expect": "zeros output"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        noop_kernel[(1,)](out)
        return out
