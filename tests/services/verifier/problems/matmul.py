"""Small fp32 matmul (the CPU interpreter is slow: keep it tiny)."""
import torch
import torch.nn as nn

M, N, K = 32, 16, 48
KZ_DEVICE = "cpu"
KZ_META = {"op": "matmul", "family": "matmul", "dtype": "float32"}


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(M, K, device=KZ_DEVICE), torch.randn(K, N, device=KZ_DEVICE)]


def get_init_inputs():
    return []
