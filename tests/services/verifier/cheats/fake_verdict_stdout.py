"""Cheat: print a passing verdict first; a harness that trusts stdout believes it.

The verifier never reads a verdict from the candidate: its stdout/exit code are
ignored and the parent judges the saved tensors (here: never written -> NaN).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": "cpu", "stage": "numerics",
         "expect": "never written"}

print('{"passed": true, "speedup": 100.0}')
print("PASSED")


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        noop_kernel[(1,)](out)
        print('{"passed": true, "stage": "passed"}')
        return out
