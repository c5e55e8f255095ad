"""EvaluatorCore: frozen-point evaluation of a trained round -> RoundEvaluated (promote or not).

Eval challenges (purpose="eval") of round r carry eval_round = the arm they
measure: r for the candidate adapter, the incumbent round (0 = base model) for
the side-by-side re-measurement. Every sample counts once: a failed extraction
is a failure, a verdict counts as its `passed`. A round is decided when every
one of its eval challenges (listed in RoundTrained) has all `n_samples`
outcomes, or when `timeout_s` of event time has passed since RoundTrained (then
with what arrived; missing samples are simply not counted).

The incumbent it compares against is the one current at decision time: the
same-round re-measurement if that measured it, else the incumbent's own
candidate-arm counts from when it was evaluated. A round older than the current
incumbent is never promoted (it was overtaken while being measured). The
decision itself is `stats.decide`: by default ("no_regression") the round is
promoted unless it is significantly worse than the incumbent or a task type
drops by more than `max_type_drop`.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from schemas import (
    AnyEnvelope,
    ChallengeContext,
    ChallengeCreated,
    RoundEvaluated,
    RoundTrained,
    SolutionExtracted,
    SolutionSampled,
    SolutionVerified,
)
from services.trainer.config import EvaluatorConfig
from services.trainer.heldout import task_type
from services.trainer.stats import Counts, Decision, decide


class EvaluatorCore:
    """The evaluator service's core (state: eval challenges, sample outcomes, rounds)."""

    name = "evaluator"
    version = "2"  # 2: verdicts that judged nothing of the kernel are left out of the rates
    inputs: tuple[str, ...] = ("challenges", "solutions", "extracted", "verified", "rounds")

    def __init__(self, config: EvaluatorConfig | None = None) -> None:
        self.cfg = config or EvaluatorConfig()
        self.arms: dict[str, tuple[int, int, str]] = {}  # challenge -> (round, arm, task type)
        self.expected: dict[str, int] = {}  # challenge -> n_samples
        # challenge -> sample index -> passed (None: the verdict judged nothing of the kernel)
        self.outcomes: dict[str, dict[int, bool | None]] = {}
        self.trained: dict[int, tuple[RoundTrained, datetime]] = {}
        self.measured: dict[int, Counts] = {}  # round -> its candidate-arm counts, once decided
        self.decided: set[int] = set()
        self.incumbent = 0

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        p = event.payload
        if isinstance(p, ChallengeCreated) and p.purpose == "eval":
            self._register(p.challenge_id, ChallengeContext.of(p))
        elif isinstance(p, SolutionSampled) and p.context.purpose == "eval":
            self._register(p.challenge_id, p.context)
            self.expected[p.challenge_id] = p.n_samples
        elif isinstance(p, SolutionExtracted) and p.context.purpose == "eval" and not p.accepted:
            self._outcome(p.challenge_id, p.context, p.sample_index, False)
        elif isinstance(p, SolutionVerified) and p.context.purpose == "eval":
            # a verdict that judged nothing of the kernel completes the sample, counts neither way
            self._outcome(p.challenge_id, p.context, p.sample_index,
                          p.passed if p.judged else None)
        elif isinstance(p, RoundTrained):
            self.trained.setdefault(p.round, (p, event.produced_at))
        elif isinstance(p, RoundEvaluated):
            if p.promoted:  # our own decisions come back on the rounds topic after a restart
                self.incumbent = max(self.incumbent, p.round)
            self.decided.add(p.round)
            return []
        else:
            return []
        return self._decide_ready(event.produced_at)

    # ------------------------------------------------------------------ bookkeeping

    def _register(self, cid: str, ctx: ChallengeContext) -> None:
        if ctx.eval_round is not None:
            self.arms.setdefault(cid, (ctx.round, ctx.eval_round, task_type(ctx.family, ctx.dtype)))

    def _outcome(self, cid: str, ctx: ChallengeContext, index: int, passed: bool | None) -> None:
        self._register(cid, ctx)
        self.outcomes.setdefault(cid, {})[index] = passed

    def complete(self, rnd: int) -> bool:
        """Whether every eval challenge of round `rnd` has all its sample outcomes."""
        trained, _ = self.trained[rnd]
        return bool(trained.eval_challenge_ids) and all(
            cid in self.expected and len(self.outcomes.get(cid, {})) >= self.expected[cid]
            for cid in trained.eval_challenge_ids
        )

    def counts(self, rnd: int, arm: int) -> Counts:
        out = Counts()
        for cid, (r, a, ttype) in sorted(self.arms.items()):
            if r == rnd and a == arm:
                for _, ok in sorted(self.outcomes.get(cid, {}).items()):
                    if ok is not None:
                        out.add(ttype, ok)
        return out

    # ------------------------------------------------------------------ decisions

    def _decide_ready(self, now: datetime) -> list[BaseModel]:
        out: list[BaseModel] = []
        for rnd in sorted(self.trained):
            if rnd in self.decided:
                continue
            _, started = self.trained[rnd]
            timed_out = (now - started).total_seconds() >= self.cfg.timeout_s
            if self.complete(rnd) or timed_out:
                out.append(self._evaluate(rnd, timed_out=timed_out and not self.complete(rnd)))
        return out

    def _evaluate(self, rnd: int, *, timed_out: bool) -> RoundEvaluated:
        trained, _ = self.trained[rnd]
        cand = self.counts(rnd, rnd)
        baseline = self.incumbent
        same_round = self.counts(rnd, baseline)
        previous = same_round if same_round.total else self.measured.get(baseline)
        if rnd <= self.incumbent:
            decision = Decision(False, f"superseded: round {self.incumbent} was promoted meanwhile")
        else:
            decision = decide(cand, previous, self.cfg)
        if timed_out:
            decision = Decision(decision.promoted, f"{decision.reason} (timed out, partial eval)")
        self.decided.add(rnd)
        self.measured[rnd] = cand
        if decision.promoted:
            self.incumbent = rnd
        return RoundEvaluated(
            round=rnd, adapter_path=trained.adapter_path, eval_pass_rates=cand.rates(),
            previous_pass_rates=previous.rates() if previous else {}, promoted=decision.promoted,
            reason=decision.reason, baseline_round=baseline, eval_counts=dict(sorted(cand.total.items())),
        )
