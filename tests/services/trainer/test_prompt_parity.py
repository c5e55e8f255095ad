"""The trainer's training prompt must equal the solver's sampling prompt, byte for byte.

Both come from kz_common.prompts, but the solver renders from the challenge and the
trainer from the ChallengeContext carried by verdicts, with the challenge id as seed key.
"""

from __future__ import annotations

import pytest

from kz_common import prompts as solver_prompt
from kz_common.ops import cpu_test_range, op_names, render_problem
from schemas import ChallengeContext, ChallengeCreated, Target
from services.trainer.prompt import build_prompt



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
