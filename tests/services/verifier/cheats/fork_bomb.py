"""Broken/hostile: fork until the host falls over."""
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": None, "stage": "static", "expect": "os access"}


@triton.jit
def noop_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            os.fork()
