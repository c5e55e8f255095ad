"""Broken: a kernel but no ModelNew class (it is called something else)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": None, "stage": "static",
         "expect": "missing modelnew"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelOptimised(nn.Module):
    def forward(self, x):
        noop_kernel[(1,)](x)
        return x
