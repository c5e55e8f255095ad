"""Cheat: do the arithmetic in host Python, one element at a time (`float(t)` reads each
value back), and launch a kernel that does nothing. No aten op but views, scalar reads and
copies runs, so neither the static rules nor the library-compute trace object; the output
is right. The harness counts tensor values read back to the host (policy.HOST_READ_BUDGET)."""
import torch
import torch.nn as nn
import triton

CHEAT = {"problem": "add", "fools_naive": "cpu", "stage": "runtime", "expect": "host_compute"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        noop_kernel[(1,)](x)
        for i in range(x.numel()):
            out[i] = float(x[i]) + float(y[i])
        return out
