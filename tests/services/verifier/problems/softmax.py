"""Row softmax over the last dim (tiny shapes for the CPU interpreter)."""
import torch
import torch.nn as nn

rows = 8
cols = 48
KZ_DEVICE = "cpu"
KZ_DTYPE = torch.float32
KZ_SHAPES = [{"rows": 8, "cols": 48}, {"rows": 5, "cols": 33}, {"rows": 16, "cols": 64}]
KZ_META = {"op": "softmax", "family": "softmax", "dtype": "float32"}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


class ModelOpt(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)]


def get_init_inputs():
    return []
