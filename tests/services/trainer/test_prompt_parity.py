"""The trainer's prompt copy must equal the solver's prompt, byte for byte.

Services never import each other, so the trainer carries a copy of the solver's
prompt builder; this test (tests may import both) catches drift between them.
"""

from __future__ import annotations

import pytest

from kz_common.ops import cpu_test_range, op_names, render_problem
from schemas import ChallengeContext, ChallengeCreated, Target
from services.trainer.prompt import build_prompt

solver_prompt = pytest.importorskip("services.solver.prompt")


@pytest.mark.parametrize("op", op_names())
@pytest.mark.parametrize("few_shot", [0, 2, 3])
def test_trainer_prompt_equals_solver_prompt(op: str, few_shot: int) -> None:
    from kz_common.ops import get_op

    rng = cpu_test_range(op)
    ch = ChallengeCreated(
        challenge_id=f"ch-{op}-7", op=op, family=get_op(op).family, dtype="float16", shape_range=rng,
        target=Target(kind="optimized_fraction", value=0.8), difficulty=1, generator="programmatic",
        round=2, problem_source=render_problem(op, "float16", rng),
    )
    expected = solver_prompt.build_prompt(ch, few_shot=few_shot, seed_key=ch.challenge_id)
    assert build_prompt(ChallengeContext.of(ch), ch.challenge_id, few_shot=few_shot) == expected
