"""ExtractorCore: one SolutionExtracted per SolutionSampled, context carried, nothing dropped."""

from __future__ import annotations

import hashlib

from kz_common.kernels import reference_solution
from kz_common.ops import cpu_test_range, render_problem
from schemas import Producer, make_event
from schemas.events import (
    ChallengeContext,
    ChallengeCreated,
    RoundStarted,
    Sampling,
    SolutionExtracted,
    SolutionSampled,
    Target,
)
from services.extractor import ExtractorCore
from services.extractor.config import ExtractorConfig

SOLVER = Producer(service="solver", version="1")


def context() -> ChallengeContext:
    rng = cpu_test_range("add")
    challenge = ChallengeCreated(
        challenge_id="r0-test", op="add", family="elementwise", dtype="float32", shape_range=rng,
        target=Target(kind="naive_multiple", value=1.5), difficulty=0, generator="programmatic",
        round=0, problem_source=render_problem("add", "float32", rng),
    )
    return ChallengeContext.of(challenge)


def sampled(raw: str, index: int = 0):  # -> envelope
    payload = SolutionSampled(
        challenge_id="r0-test", context=context(), sample_index=index, n_samples=2,
        backend="transformers", model_id="tiny", adapter=None, adapter_round=None,
        sampling=Sampling(temperature=0.8, top_p=0.95, max_tokens=64, seed=index),
        prompt_hash="0" * 64, raw_output=raw,
    )
    return make_event(payload, producer=SOLVER, correlation_id="r0-test")


def test_accepted_sample_carries_code_hash_and_context() -> None:
    code = reference_solution("add")
    [out] = ExtractorCore().process(sampled(f"Here you go:\n```python\n{code}```\n", index=1))
    assert isinstance(out, SolutionExtracted) and out.accepted and out.reason is None
    assert out.code_hash == hashlib.sha256(out.code.encode()).hexdigest()
    assert (out.challenge_id, out.sample_index, out.context) == ("r0-test", 1, context())


def test_rejected_sample_is_published_with_its_reason() -> None:
    [out] = ExtractorCore().process(sampled("I think you should use torch.add."))
    assert not out.accepted and out.reason == "no python code block found"
    assert out.code is None and out.code_hash is None


def test_config_limits_apply() -> None:
    code = reference_solution("add")
    core = ExtractorCore(ExtractorConfig(max_code_chars=1000))
    [out] = core.process(sampled(f"```python\n{code}```"))
    assert not out.accepted and "over the 1000 limit" in out.reason


def test_other_event_types_produce_nothing() -> None:
    control = make_event(RoundStarted(round=0, n_challenges=1, seed=0), producer=SOLVER,
                         correlation_id="round-0")
    assert ExtractorCore().process(control) == []
