"""Scaled dot-product attention, non-causal, scale 1/sqrt(head_dim).

The naive reference computes in float32 for 16-bit inputs (see Model).

q, k, v and the output are (batch_heads, seq, head_dim): batch and heads are
folded into one leading dim.
"""

from __future__ import annotations

from kz_common.ops.elementwise import ALL_DTYPES
from kz_common.ops.spec import OpSpec

ATTENTION = OpSpec(
    name="attention",
    family="attention",
    dims=("batch_heads", "seq", "head_dim"),
    default_range={"batch_heads": (1, 64), "seq": (64, 4096), "head_dim": (32, 128)},
    limits={"batch_heads": (1, 4096), "seq": (1, 32768), "head_dim": (8, 256)},
    cpu_range={"batch_heads": (1, 3), "seq": (1, 80), "head_dim": (8, 48)},
    dtypes=ALL_DTYPES,
    description="softmax(q @ k^T / sqrt(d)) @ v, non-causal, q/k/v (batch_heads, seq, head_dim)",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: materialised scores, explicit safe softmax, then @ v.

    Computed in (at least) float32, like every flash-attention kernel and
    F.scaled_dot_product_attention: fp16/bf16 scores lose absolute precision as
    they grow (fp16 ulp 2^-5 at |s| in [32, 64)), and exp turns that absolute
    error into a relative error of the softmax weights.
    """

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        acc = torch.promote_types(q.dtype, torch.float32)  # float64 stays float64
        scale = 1.0 / math.sqrt(q.shape[-1])
        # scale after the dot: its operands stay the exact input values (so even a TF32
        # matmul would only round the fp32 accumulation)
        scores = torch.matmul(q.to(acc), k.to(acc).transpose(-2, -1)).mul_(scale)
        scores_max = torch.max(scores, dim=-1, keepdim=True).values
        p = scores.sub_(scores_max).exp_()  # in place: one (seq, seq) buffer
        p = p.div_(torch.sum(p, dim=-1, keepdim=True))
        return torch.matmul(p, v.to(acc)).to(q.dtype)
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: F.scaled_dot_product_attention (flash / memory-efficient kernels)."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)
''',
    inputs_source='''\
def get_inputs():
    q = torch.randn(batch_heads, seq, head_dim, device=KZ_DEVICE, dtype=KZ_DTYPE)
    k = torch.randn(batch_heads, seq, head_dim, device=KZ_DEVICE, dtype=KZ_DTYPE)
    v = torch.randn(batch_heads, seq, head_dim, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [q, k, v]
''',
    # two (seq x seq x head_dim) matmuls per batch-head
    flops_fn=lambda s: 4 * s["batch_heads"] * s["seq"] * s["seq"] * s["head_dim"],
    elements_fn=lambda s: 4 * s["batch_heads"] * s["seq"] * s["head_dim"],
    largest_tensor_fn=lambda s: s["batch_heads"] * s["seq"] * max(s["seq"], s["head_dim"]),
)

OPS = (ATTENTION,)
