"""Test cores: each hop turns its input into the next stage's event with no real work.

They exercise the backbone (runner, dedupe, dead letters, recovery) exactly as
the real cores do; the real cores are tested in tests/services.
"""

from __future__ import annotations

import hashlib
import threading

from pydantic import BaseModel

from kz_common.core import ProcessingError
from schemas import (
    AnyEnvelope,
    ChallengeContext,
    ChallengeCreated,
    Sampling,
    SampleCurated,
    SolutionExtracted,
    SolutionSampled,
    SolutionVerified,
    Target,
)

CODE = "import triton\n@triton.jit\ndef k(): pass\nclass ModelNew: pass\n"


def challenge(i: int, problem: str = "class Model: pass") -> ChallengeCreated:
    return ChallengeCreated(
        challenge_id=f"c{i}", op="add", family="elementwise", dtype="float32",
        shape_range={"n": (1, 64)}, target=Target(kind="naive_multiple", value=1.5),
        difficulty=0, generator="programmatic", round=0, problem_source=problem,
    )


class Relay:
    """A stage that maps each input payload with `step` and declares itself stateless."""

    stateful = False

    def __init__(self, name: str, inputs: tuple[str, ...], fail_on: str | None = None) -> None:
        self.name, self.version, self.inputs, self.fail_on = name, "test", inputs, fail_on
        self.seen = 0
        self._lock = threading.Lock()  # a core with `concurrency` is called from threads

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        with self._lock:
            self.seen += 1
        p = event.payload
        if self.fail_on and getattr(p, "challenge_id", "") == self.fail_on:
            raise ProcessingError(f"refusing {self.fail_on}")
        return [step(p)]


def step(p: BaseModel) -> BaseModel:
    if isinstance(p, ChallengeCreated):
        return SolutionSampled(
            challenge_id=p.challenge_id, context=ChallengeContext.of(p), sample_index=0, n_samples=1,
            backend="relay", model_id="none", adapter=None, adapter_round=None,
            sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=1, seed=0),
            prompt_hash="0", raw_output=f"```python\n{CODE}```",
        )
    if isinstance(p, SolutionSampled):
        return SolutionExtracted(
            challenge_id=p.challenge_id, context=p.context, sample_index=p.sample_index, accepted=True,
            code=CODE, code_hash=hashlib.sha256(CODE.encode()).hexdigest(), reason=None,
        )
    if isinstance(p, SolutionExtracted):
        return SolutionVerified(
            challenge_id=p.challenge_id, context=p.context, sample_index=p.sample_index, code=p.code,
            code_hash=p.code_hash, verifier_version="relay", passed=True, stage="passed", reasons=[],
            device="cpu", isolation="none", perf_measured=False,
        )
    if isinstance(p, SolutionVerified):
        return SampleCurated(
            challenge_id=p.challenge_id, verdict_event_id="x", verifier_version=p.verifier_version,
            kept=True, op=p.context.op, family=p.context.family, dtype=p.context.dtype,
            shape_bucket="n:0-6", code=p.code, code_hash=p.code_hash, score=1.0, reason="relay",
        )
    raise ProcessingError(f"relay has no step for {type(p).__name__}")


def chain() -> list[Relay]:
    return [
        Relay("solver", ("challenges",)),
        Relay("extractor", ("solutions",)),
        Relay("verifier", ("extracted",)),
        Relay("curator", ("verified",)),
    ]
