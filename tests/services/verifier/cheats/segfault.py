"""Broken: a kernel stores through a wild pointer (segfault under the CPU interpreter,
illegal address on a GPU). The verifier must survive and reject it."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": None, "stage": "runtime", "expect": "segfault"}


@triton.jit
def wild_store(x_ptr):
    offs = tl.arange(0, 16)
    tl.store(x_ptr + offs + (1 << 40), tl.zeros((16,), dtype=tl.float32))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        wild_store[(1,)](out)
        return out
