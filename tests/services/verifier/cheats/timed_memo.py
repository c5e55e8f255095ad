"""Cheat: memoise outputs by input object. Correctness calls get new input objects, so
they compute; the timed runs call forward on the same objects again and again, so they
get the stored output and a read-only kernel, just above the speed-of-light bound (the
inputs' bytes), while an honest softmax also writes as many bytes back."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "problem_gpu": "softmax_huge", "fools_naive": "gpu",
         "stage": "timing", "expect": "output changed in timed runs",
         "gpu_only": "timed runs exist on CUDA only: on the CPU this is an honest softmax"}


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def touch_kernel(x_ptr, sink_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(sink_ptr + row, tl.sum(x, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        block = triton.next_power_of_2(x.shape[1])
        hit = self.memo.get(x.data_ptr())
        if hit is not None and hit[0] is x:
            touch_kernel[(x.shape[0],)](x, hit[2], x.shape[1], BLOCK=block)
            return hit[1]
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=block)
        sink = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        self.memo[x.data_ptr()] = (x, out, sink)  # keeps x alive: its address is not reused
        return out
