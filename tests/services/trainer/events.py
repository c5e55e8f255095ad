"""Builders of trainer/evaluator input events."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from schemas import (
    AnyEnvelope,
    ChallengeContext,
    ChallengeCreated,
    Producer,
    SampleCurated,
    Sampling,
    SolutionExtracted,
    SolutionSampled,
    SolutionVerified,
    make_event,
)
from tests.services.curator.samples import CLEAN, context


def env(payload: BaseModel, service: str = "test", *, later_s: float = 0.0) -> AnyEnvelope:
    e = make_event(payload, producer=Producer(service=service, version="t"),
                   correlation_id=getattr(payload, "challenge_id", "x"))
    return e.model_copy(update={"produced_at": e.produced_at + timedelta(seconds=later_s)}) if later_s else e


def curated(sid: str, *, family: str = "softmax", dtype: str = "float32", kept: bool = True) -> SampleCurated:
    ctx = context(family=family, dtype=dtype)
    return SampleCurated(
        challenge_id=f"c-{sid}", verdict_event_id=sid, verifier_version="v", kept=kept, op=ctx.op,
        family=family, dtype=dtype, shape_bucket="b", code=CLEAN, code_hash=f"h{sid}",  # type: ignore[arg-type]
        score=1.0, reason="kept" if kept else "failed:x", context=ctx, sample_index=0,
    )


def eval_outcomes(ch: ChallengeCreated, passes: int, n: int, *, failed_extractions: int = 0,
                  unjudged: int = 0) -> list[BaseModel]:
    """Sampled + extracted/verified events of `n` samples of eval challenge `ch`, `passes` passing;
    the last `unjudged` verified ones "internal" (a device too full to run them)."""
    ctx = ChallengeContext.of(ch)
    out: list[BaseModel] = []
    for i in range(n):
        out.append(SolutionSampled(
            challenge_id=ch.challenge_id, context=ctx, sample_index=i, n_samples=n, backend="hf",
            model_id="tiny", adapter=None, adapter_round=ch.eval_round,
            sampling=Sampling(temperature=0.8, top_p=0.95, max_tokens=64, seed=i), prompt_hash="p",
            raw_output="...",
        ))
        if i < failed_extractions:
            out.append(SolutionExtracted(challenge_id=ch.challenge_id, context=ctx, sample_index=i,
                                         accepted=False, code=None, code_hash=None, reason="no fence"))
            continue
        out.append(SolutionVerified(
            challenge_id=ch.challenge_id, context=ctx, sample_index=i, code=CLEAN, code_hash="h",
            verifier_version="v", passed=i - failed_extractions < passes, stage="passed", reasons=[],
            device="cpu", isolation="none", perf_measured=False,
        ))
        if i >= n - unjudged:
            out[-1] = out[-1].model_copy(update={"passed": False, "stage": "internal"})
    return out
