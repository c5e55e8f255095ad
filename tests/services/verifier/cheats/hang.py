"""Broken: forward never returns. Must end as a timeout rejection, not a stuck verifier."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": None, "stage": "runtime",
         "expect": "timed out|cpu limit"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        noop_kernel[(1,)](x)
        n = 0
        while True:
            n += 1
