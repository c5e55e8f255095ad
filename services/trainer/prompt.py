"""Prompt and completion text of a training example.

The prompt is the solver's, byte for byte (kz_common.prompts), with the examples
picked by challenge id as the solver picks them; otherwise the adapter would learn
a distribution it is never asked for. tests/services/trainer/test_prompt_parity.py
checks the two stay identical.
"""

from __future__ import annotations

from kz_common.prompts import build_prompt as _solver_prompt
from kz_common.prompts import format_completion
from schemas import ChallengeContext

__all__ = ["build_prompt", "format_completion"]


def build_prompt(ctx: ChallengeContext, challenge_id: str, *, few_shot: int = 2) -> str:
    """The solver's prompt for challenge `challenge_id` with context `ctx`."""
    return _solver_prompt(ctx, few_shot=few_shot, seed_key=challenge_id)
