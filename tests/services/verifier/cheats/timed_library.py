"""Cheat: a Triton softmax whenever forward sees a new input object (every correctness
call), torch.softmax when it sees one again (only the timed runs do): the timed runs' time
is the library's. The static rules catch torch.softmax; the runtime layer behind them
must catch it too, though the dispatch tracer is off while timing."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "problem_gpu": "softmax_huge", "fools_naive": "gpu",
         "stage": "static", "expect": "torch.softmax is library compute",
         "runtime_only": {"stage": "runtime", "expect": "again on the same inputs",
                          "gpu_only": "timed runs exist on CUDA only"}}


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        out = torch.empty_like(x)
        if any(s is x for s in self.seen):
            softmax_kernel[(1,)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
            return torch.softmax(x, dim=-1)  # one Triton launch above: a kernel "ran"
        self.seen.append(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
