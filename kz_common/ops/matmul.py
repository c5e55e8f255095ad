"""Dense matmul: out (M, N) = a (M, K) @ b (K, N).

There is no tractable "naive" formulation worth timing (an explicit broadcast
multiply-sum materialises M*K*N elements), so, as in KernelBench, the reference
is the `@` operator and the baseline torch.matmul. In float32 the baseline is
full-precision (torch leaves TF32 off for matmul by default), so solutions must
not use TF32 either.
"""

from __future__ import annotations

from kz_common.ops.elementwise import ALL_DTYPES
from kz_common.ops.spec import OpSpec

MATMUL = OpSpec(
    name="matmul",
    family="matmul",
    dims=("M", "N", "K"),
    default_range={"M": (128, 8192), "N": (128, 8192), "K": (128, 8192)},
    limits={"M": (1, 32768), "N": (1, 32768), "K": (1, 32768)},
    cpu_range={"M": (1, 64), "N": (1, 64), "K": (1, 96)},
    dtypes=ALL_DTYPES,
    description="out = a @ b with a (M, K), b (K, N), row-major",
    reference_source='''\
class Model(nn.Module):
    """Reference: the @ operator (KernelBench convention for dense matmul)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: torch.matmul (cuBLAS on GPU)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)
''',
    inputs_source='''\
def get_inputs():
    a = torch.randn(M, K, device=KZ_DEVICE, dtype=KZ_DTYPE)
    b = torch.randn(K, N, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [a, b]
''',
    flops_fn=lambda s: 2 * s["M"] * s["N"] * s["K"],
    elements_fn=lambda s: s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"],
    largest_tensor_fn=lambda s: max(s["M"] * s["K"], s["K"] * s["N"], s["M"] * s["N"]),
)

OPS = (MATMUL,)
