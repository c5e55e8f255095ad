"""Cheat: return torch.empty_like(x) untouched, hoping it holds the freed reference output.

On CUDA the caching allocator hands back the block the reference just freed, so a
harness that computes the reference first and moves it off the device is fooled.
On CPU the allocator rarely cooperates (GPU-demonstrated). The verifier poisons
fresh allocations with NaN and never has the reference in the candidate's process.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "problem_gpu": "softmax_big", "fools_naive": "gpu",
         "stage": "numerics", "expect": "never written"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        noop_kernel[(1,)](out)
        return out
