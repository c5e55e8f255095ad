"""Elementwise add of two vectors (non-power-of-two sizes)."""
import torch
import torch.nn as nn

n = 1000
KZ_DEVICE = "cpu"
KZ_SHAPES = [{"n": 1000}, {"n": 77}, {"n": 4099}]
KZ_META = {"op": "add", "family": "elementwise", "dtype": "float32"}


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(n, device=KZ_DEVICE), torch.randn(n, device=KZ_DEVICE)]


def get_init_inputs():
    return []
