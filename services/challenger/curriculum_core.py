"""CurriculumCore: train verdicts in, curriculum.adjusted decisions out."""

from __future__ import annotations

from pydantic import BaseModel

from schemas import AnyEnvelope
from schemas.events import CurriculumAdjusted, SolutionVerified
from services.challenger.config import CurriculumConfig
from services.challenger.curriculum import Curriculum


class CurriculumCore:
    """Family and rung come from the verdict's ChallengeContext (event-carried state), so
    the core needs no join with the challenges topic; eval verdicts are ignored: frozen
    evaluation sets must not steer training difficulty, and so are verdicts that judged
    nothing of the kernel (`SolutionVerified.judged`): counted as failures they would lower
    a rung the solver may well hold.
    """

    name = "curriculum"
    version = "2"  # 2: verdicts that judged nothing of the kernel are ignored
    inputs: tuple[str, ...] = ("verified",)

    def __init__(self, config: CurriculumConfig | None = None) -> None:
        self.curriculum = Curriculum(config)

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        verdict = event.payload
        if (not isinstance(verdict, SolutionVerified) or verdict.context.purpose == "eval"
                or not verdict.judged):
            return []
        ctx = verdict.context
        decision = self.curriculum.record(ctx.family, ctx.difficulty, verdict.passed)
        if decision is None:
            return []
        return [CurriculumAdjusted(
            family=decision.family, old_difficulty=decision.old_difficulty,
            new_difficulty=decision.new_difficulty, pass_rate=decision.pass_rate,
            window=decision.window, reason=decision.reason,
        )]

    def observe(self, event: AnyEnvelope) -> None:
        """Replay hook: state changes only (process has no side effects here)."""
        self.process(event)
