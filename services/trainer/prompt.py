"""Prompt and completion text of a training example.

The prompt must be the one the solver sends for the same challenge, or the
adapter learns a distribution it is never asked for. No shared prompt builder
exists in kz_common yet, so this one is built from the challenge fields; keep it
in step with the solver's (see the report: this is duplicated until it moves to
kz_common). The completion is the code in a ```python fence, which the
extractor's first rule reads back.
"""

from __future__ import annotations

from schemas import ChallengeContext

INSTRUCTION = (
    "You are an expert GPU kernel engineer. Write a Triton implementation of the PyTorch "
    "module below.\n"
    "Define `class ModelNew(nn.Module)` with the same constructor and forward signature as "
    "`Model`, computing the same result with one or more `@triton.jit` kernels. Do not call "
    "torch (or torch.nn.functional) math in forward; only allocate outputs and launch kernels. "
    "Read sizes from the input tensors: shapes vary within the stated range.\n"
)


def build_prompt(ctx: ChallengeContext) -> str:
    """The instruction for one challenge: task facts, then the rendered problem source."""
    dims = ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in ctx.shape_range.items())
    target = (f"{ctx.target.value:g}x faster than the naive reference" if ctx.target.kind == "naive_multiple"
              else f"at least {ctx.target.value:g} of the optimised baseline's speed")
    return (
        f"{INSTRUCTION}\n"
        f"Op: {ctx.op} ({ctx.family}), dtype: {ctx.dtype}, shapes: {dims}.\n"
        f"Performance target: {target}.\n"
        f"Constraints: {', '.join(ctx.constraints) or 'none'}.\n\n"
        f"```python\n{ctx.problem_source.rstrip()}\n```\n\n"
        "Answer with the complete solution in one ```python block.\n"
    )


def format_completion(code: str) -> str:
    """The answer text the model is trained to produce for `code`."""
    return f"```python\n{code.strip()}\n```\n"
