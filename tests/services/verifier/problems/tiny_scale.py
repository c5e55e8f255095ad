"""Tiny-magnitude elementwise output: loose absolute tolerances let zeros pass here."""
import torch
import torch.nn as nn

n = 512
KZ_DEVICE = "cpu"
KZ_META = {"op": "scale", "family": "elementwise", "dtype": "float32"}


class Model(nn.Module):
    def forward(self, x):
        return x * 1e-3


def get_inputs():
    return [torch.randn(n, device=KZ_DEVICE)]


def get_init_inputs():
    return []
