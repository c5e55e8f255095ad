"""Cheat: compute with torch in a helper thread, outside a thread-local dispatch tracer."""
import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": "cpu", "stage": "static", "expect": "threads"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        box = {}
        worker = threading.Thread(target=lambda: box.update(y=torch.softmax(x, dim=-1)))
        worker.start()
        worker.join()
        noop_kernel[(1,)](x)
        return box["y"]
