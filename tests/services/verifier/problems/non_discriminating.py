"""A broken problem: its output equals its input, so identity would pass (misuse)."""
import torch
import torch.nn as nn

n = 256
KZ_DEVICE = "cpu"
KZ_META = {"op": "copy", "family": "elementwise", "dtype": "float32"}


class Model(nn.Module):
    def forward(self, x):
        return x * 1.0


def get_inputs():
    return [torch.randn(n, device=KZ_DEVICE)]


def get_init_inputs():
    return []
