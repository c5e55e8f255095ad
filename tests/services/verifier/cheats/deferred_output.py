"""Cheat: return the output unfinished and finish it in a later call. A new input object
(every correctness call) gets an honest softmax. An object seen before (the timed runs,
the holdouts, the echo calls) gets a fresh tensor half-filled by a kernel that reads the
whole input (to stay above the speed-of-light bound); the contents it needs are kept in
private copies (one per fingerprint, the first time a content is seen), and the pending
outputs are finished in bulk every FILL_EVERY calls (one slow run does not move a
median) and in the first call after new contents (the holdouts: the echo calls after
them finish theirs). A verifier that reads the timed outputs only after the timed phase
finds them right; one that copies each as it returns finds half the input in it."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "problem_gpu": "softmax_huge", "fools_naive": "gpu",
         "stage": "timing", "expect": "output changed in timed runs",
         "gpu_only": "timed runs exist on CUDA only: on the CPU this is an honest softmax"}

SAMPLES = 256
FILL_EVERY = 8


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
def copy_kernel(src_ptr, dst_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    tl.store(dst_ptr + row * n_cols + offs, tl.load(src_ptr + row * n_cols + offs, mask=mask),
             mask=mask)


@triton.jit
def half_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    # Reads the row, writes half of it: 3/4 of an honest softmax's bytes.
    row = tl.program_id(0)
    half = n_cols // 2
    offs = tl.arange(0, BLOCK // 2)
    a = tl.load(x_ptr + row * n_cols + offs, mask=offs < half, other=0.0)
    b = tl.load(x_ptr + row * n_cols + half + offs, mask=offs < n_cols - half, other=0.0)
    tl.store(out_ptr + row * n_cols + offs, tl.maximum(a, b), mask=offs < half)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = {}  # data_ptr -> the input object (kept alive: its address is not reused)
        self.copies = {}  # fingerprint -> a private copy of those contents
        self.pending = []  # (fingerprint, output returned unfinished)
        self.after_new = False  # the last call met contents not seen before

    def forward(self, x):
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        if self.seen.get(x.data_ptr()) is not x:
            self.seen[x.data_ptr()] = x
            out = torch.empty_like(x)
            softmax_kernel[(rows,)](x, out, cols, BLOCK=block)
            return out
        fp = torch.empty(1, device=x.device, dtype=torch.float32)
        fingerprint_kernel[(1,)](x, fp, max(1, x.numel() // SAMPLES), SAMPLES=SAMPLES)
        key = (rows, cols, fp.item())
        new = key not in self.copies
        if new:
            self.copies[key] = torch.empty_like(x)
            copy_kernel[(rows,)](x, self.copies[key], cols, BLOCK=block)
        if self.pending and (len(self.pending) >= FILL_EVERY or (self.after_new and not new)):
            for k, out in self.pending:
                softmax_kernel[(rows,)](self.copies[k], out, cols, BLOCK=block)
            self.pending = []
        self.after_new = new
        out = torch.empty_like(x)
        half_kernel[(rows,)](x, out, cols, BLOCK=block)
        self.pending.append((key, out))
        return out
