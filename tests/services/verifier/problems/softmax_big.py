"""GPU-sized row softmax (used by the GPU-only cheat demonstrations and timing tests)."""
import torch
import torch.nn as nn

rows = 8192
cols = 2048
KZ_DEVICE = "cuda"
KZ_META = {"op": "softmax", "family": "softmax", "dtype": "float32"}


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(rows, cols, device=KZ_DEVICE)]


def get_init_inputs():
    return []
