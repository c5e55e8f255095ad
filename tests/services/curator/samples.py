"""Solution texts and event builders shared by the curator tests."""

from __future__ import annotations

from schemas import ChallengeContext, SolutionVerified, Target, Timing

CLEAN = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * stride + offs, num / den, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        if x.numel() == 0:
            return out
        BLOCK = triton.next_power_of_2(n_cols)
        softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=BLOCK)
        return out
'''


def context(
    op: str = "softmax",
    family: str = "softmax",
    dtype: str = "float32",
    shape_range: dict[str, tuple[int, int]] | None = None,
    purpose: str = "train",
    round: int = 0,
    target: float = 1.5,
) -> ChallengeContext:
    return ChallengeContext(
        op=op, family=family, dtype=dtype,  # type: ignore[arg-type]
        shape_range=shape_range or {"rows": (256, 1024), "cols": (300, 4096)},
        target=Target(kind="naive_multiple", value=target), constraints=["no_optimized_library_call"],
        difficulty=0, round=round, purpose=purpose,  # type: ignore[arg-type]
        eval_round=round if purpose == "eval" else None, problem_source="class Model: ...",
    )


def verdict(
    code: str = CLEAN,
    *,
    challenge_id: str = "c1",
    sample_index: int = 0,
    passed: bool = True,
    speedup: float | None = 2.0,
    err: float = 1e-6,
    ctx: ChallengeContext | None = None,
    perf: bool = True,
    holdout_ratio: float | None = None,
) -> SolutionVerified:
    return SolutionVerified(
        challenge_id=challenge_id, context=ctx or context(), sample_index=sample_index, code=code,
        code_hash=f"h{hash(code) & 0xffffffff:x}", verifier_version="v1", passed=passed,
        stage="passed" if passed else "correctness", reasons=[] if passed else ["mismatch"],
        device="cuda", isolation="none", perf_measured=perf and speedup is not None,
        timing=Timing(candidate_ms=1.0, naive_ms=speedup, holdout_ratio=holdout_ratio),
        speedup_vs_naive=speedup,
        max_rel_error=err if passed else 1.0,
    )


def envelope(payload: SolutionVerified):  # -> AnyEnvelope
    from schemas import Producer, make_event

    return make_event(payload, producer=Producer(service="verifier", version="t"),
                      correlation_id=payload.challenge_id)


def renamed(code: str, block: int = 512) -> str:
    """A copy of CLEAN-like code with identifiers renamed and a different block constant."""
    return (code.replace("softmax_kernel", "my_kernel").replace("x_ptr", "inp").replace("out_ptr", "res")
            .replace("n_cols", "ncol").replace("BLOCK=BLOCK", f"BLOCK={block}"))
