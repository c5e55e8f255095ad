"""LayerNorm over the last dim with learnt (randomly initialised) affine parameters."""
import torch
import torch.nn as nn

rows = 6
cols = 40
KZ_DEVICE = "cpu"
KZ_SHAPES = [{"rows": 6, "cols": 40}, {"rows": 3, "cols": 100}, {"rows": 9, "cols": 64}]
KZ_META = {"op": "layernorm", "family": "normalization", "dtype": "float32"}


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.ln = nn.LayerNorm(cols, eps=1e-5)
        nn.init.normal_(self.ln.weight)
        nn.init.normal_(self.ln.bias)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(rows, cols, device=KZ_DEVICE)]


def get_init_inputs():
    return [cols]
