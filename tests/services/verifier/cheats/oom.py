"""Broken: asks for a terabyte. Must be a rejection (memory limit), not a dead host."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": None, "stage": "runtime", "expect": "memory"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        huge = torch.empty((1 << 38,), dtype=torch.float32, device=x.device)
        noop_kernel[(1,)](huge)
        return huge[: x.numel()].view(x.shape)
