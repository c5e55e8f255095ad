"""Row softmax big enough that GPU time dwarfs host launch time (side-stream demo)."""
import torch
import torch.nn as nn

rows = 8192
cols = 16384
KZ_DEVICE = "cuda"
KZ_META = {"op": "softmax", "family": "softmax", "dtype": "float32"}


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(rows, cols, device=KZ_DEVICE)]


def get_init_inputs():
    return []
