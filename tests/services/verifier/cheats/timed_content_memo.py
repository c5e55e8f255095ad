"""Cheat: memoise outputs by input CONTENTS. A tiny kernel fingerprints 256 evenly spaced
elements of the input; a known fingerprint returns the stored output after a read-only
kernel over most of the input (to stay above the speed-of-light bound). Every correctness
call brings new contents, so it computes; the timed runs repeat contents it has seen (the
rotation among input sets changes the objects' contents, not their novelty), so they
time the cache. Only inputs it has never seen make it compute while timed."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "problem_gpu": "softmax_huge", "fools_naive": "gpu",
         "stage": "timing", "expect": "outputs cached by input contents",
         "gpu_only": "timed runs exist on CUDA only: on the CPU this is an honest softmax"}

SAMPLES = 256


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def fingerprint_kernel(x_ptr, fp_ptr, step, SAMPLES: tl.constexpr):
    offs = tl.arange(0, SAMPLES)
    v = tl.load(x_ptr + offs.to(tl.int64) * step).to(tl.float32)
    tl.store(fp_ptr, tl.sum(v * (offs + 1).to(tl.float32), axis=0))


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
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        fp = torch.empty(1, device=x.device, dtype=torch.float32)
        fingerprint_kernel[(1,)](x, fp, max(1, x.numel() // SAMPLES), SAMPLES=SAMPLES)
        key = (rows, cols, fp.item())
        hit = self.memo.get(key)
        if hit is not None:
            touch_kernel[(max(1, rows * 3 // 4),)](x, hit[1], cols, BLOCK=block)
            return hit[0]
        out = torch.empty_like(x)
        softmax_kernel[(rows,)](x, out, cols, BLOCK=block)
        self.memo[key] = (out, torch.empty(rows, device=x.device, dtype=torch.float32))
        return out
