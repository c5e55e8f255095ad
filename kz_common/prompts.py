"""The solver prompt: the solution contract, few-shot reference kernels, the problem.

One builder for everyone who needs the prompt text: the solver samples with it, the
trainer trains on it (a LoRA adapter must see exactly the prompts it will be asked),
and the tiny demo model's training texts are rendered with it.
"""

from __future__ import annotations

import hashlib

from kz_common.kernels import available_ops, reference_solution
from kz_common.ops import get_op
from schemas.events import ChallengeContext, ChallengeCreated, Target

CONSTRAINT_TEXT = {
    "no_optimized_library_call": (
        "no optimised library call: do not compute the result with torch / torch.nn.functional ops "
        "(torch.softmax, F.layer_norm, torch.matmul, @, ...), cuBLAS/cuDNN wrappers, torch.compile, "
        "or by calling Model / ModelOpt"
    ),
}

CONTRACT = """## Solution contract
- Reply with one Python module in a single ```python code block.
- Define `class ModelNew(nn.Module)` with the same constructor arguments as `Model`, whose
  `forward` takes the same inputs and returns the same outputs (shape, dtype, device).
- Compute the result in one or more `@triton.jit` kernels launched from `forward`.
- Import only torch, torch.nn, triton, triton.language and math.
- In `forward`, torch may only allocate outputs (torch.empty, torch.empty_like, torch.zeros) and
  inspect or reshape tensors (.shape, .stride(), .view, .reshape, .contiguous).
- Constraints: {constraints}.
- It must be correct for every shape in the range ({shapes}) at dtype {dtype}; performance target:
  {target}.
"""

HEADER = "You are an expert GPU kernel engineer. Write an optimised Triton kernel for the PyTorch " \
         "module below.\n\n"


def target_text(target: Target) -> str:
    if target.kind == "naive_multiple":
        return f"at most {target.value:g}x the naive reference's time"
    return f"at least {target.value:g}x the speed of the optimised baseline (ModelOpt)"


def build_prompt(challenge: ChallengeCreated | ChallengeContext, *, few_shot: int = 2,
                 seed_key: str = "") -> str:
    """The full prompt for a challenge; `seed_key` varies which examples are picked."""
    shapes = ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in challenge.shape_range.items())
    constraints = "; ".join(CONSTRAINT_TEXT.get(c, c) for c in challenge.constraints) or "none"
    parts = [HEADER, CONTRACT.format(constraints=constraints, shapes=shapes, dtype=challenge.dtype,
                                     target=target_text(challenge.target))]
    examples = pick_examples(challenge.op, challenge.family, few_shot, seed_key)
    if examples:
        parts.append("\n## Examples of accepted solutions\n")
        for op in examples:
            parts.append(f"\n### {op} ({get_op(op).family})\n```python\n{reference_solution(op).rstrip()}\n```\n")
    parts.append(f"\n## Problem\n```python\n{challenge.problem_source.rstrip()}\n```\n\n## Solution\n")
    return "".join(parts)


def pick_examples(op: str, family: str, k: int, seed_key: str = "") -> list[str]:
    """Up to k reference ops other than `op`: same family first, then a stable shuffled rest.

    Never the challenge's own op: the example would be the answer.
    """
    if k <= 0:
        return []
    candidates = [o for o in available_ops() if o != op]

    def rank(o: str) -> tuple[bool, str]:
        mix = hashlib.blake2b(f"{seed_key}|{op}|{o}".encode(), digest_size=4).hexdigest()
        return (get_op(o).family != family, mix)

    return sorted(candidates, key=rank)[:k]


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()


def format_completion(code: str) -> str:
    """The answer text a model is trained to produce for `code` (the extractor reads it back)."""
    return f"```python\n{code.strip()}\n```\n"
