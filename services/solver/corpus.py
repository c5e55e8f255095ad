"""Training texts for the tiny demo model: solver prompt + reference solution, per op.

Fed to `kz_common.llm.tiny.build_tiny_model`, they teach the tiny model to answer a
solver prompt with the reference kernel for that op, so a demo flywheel moves real,
verifiable Triton code end to end without a real LLM.
"""

from __future__ import annotations

from collections.abc import Iterable

from kz_common.kernels import available_ops, reference_solution
from kz_common.ops import cpu_test_range, get_op, render_problem
from schemas.events import ChallengeContext, Target
from kz_common.prompts import build_prompt


def demo_context(op: str, dtype: str = "float32") -> ChallengeContext:
    """A CPU-sized challenge context for `op`, as the cpu_mode challenger would draw."""
    spec = get_op(op)
    shape_range = cpu_test_range(op)
    target = Target(kind="naive_multiple", value=1.5)  # the challenger's rung 0
    return ChallengeContext(
        op=op, family=spec.family, dtype=dtype, shape_range=shape_range,  # type: ignore[arg-type]
        target=target, constraints=["no_optimized_library_call"], difficulty=0, round=0,
        problem_source=render_problem(op, dtype, shape_range, device="cpu"),
    )


def solution_text(op: str) -> str:
    """The answer as the solver should write it: one fenced module."""
    return f"```python\n{reference_solution(op).rstrip()}\n```\n"


def training_texts(ops: Iterable[str] | None = None, *, few_shot: int = 0,
                   dtypes: tuple[str, ...] = ("float32", "float16")) -> list[str]:
    """prompt + solution for each op with a reference kernel, at each dtype."""
    chosen = list(ops) if ops is not None else available_ops()
    return [build_prompt(demo_context(op, dt), few_shot=few_shot) + solution_text(op)
            for op in chosen for dt in dtypes]
