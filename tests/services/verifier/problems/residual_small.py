"""x + 0.002 * y: the output stays within 1e-2 of x, so returning x looks close."""
import torch
import torch.nn as nn

n = 384
KZ_DEVICE = "cpu"
KZ_META = {"op": "axpy", "family": "elementwise", "dtype": "float32"}


class Model(nn.Module):
    def forward(self, x, y):
        return x + 0.002 * y


def get_inputs():
    return [torch.randn(n, device=KZ_DEVICE), torch.randn(n, device=KZ_DEVICE)]


def get_init_inputs():
    return []
