"""Payload models of every KernelZero event, grouped by the topic they travel on.

This module is the single source of truth for what an event carries. Bumping a
model's fields means bumping its `SCHEMA_VERSION` in `schemas.registry`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from schemas.envelope import Record

Dtype = Literal["float32", "float16", "bfloat16"]
Device = Literal["cpu", "cuda"]

# --------------------------------------------------------------------------- control


class RoundStarted(Record):
    """Ask the challenge generator for a new flywheel round of challenges."""

    round: int = Field(ge=0)
    n_challenges: int = Field(ge=1)
    seed: int


# --------------------------------------------------------------------------- challenges


class Target(Record):
    """Performance target: a multiple of the naive reference or a fraction of the optimised one."""

    kind: Literal["naive_multiple", "optimized_fraction"]
    value: float = Field(gt=0)


class ChallengeCreated(Record):
    """A kernel task: op, allowed shape range, dtype, performance target, constraints."""

    challenge_id: str = Field(min_length=1)
    op: str = Field(min_length=1, description="op name in the catalogue, e.g. 'softmax'")
    family: str = Field(min_length=1, description="op family, e.g. 'normalization'")
    dtype: Dtype
    shape_range: dict[str, tuple[int, int]] = Field(
        description="inclusive [min, max] per named dimension"
    )
    target: Target
    constraints: list[str] = Field(default_factory=lambda: ["no_optimized_library_call"])
    difficulty: int = Field(ge=0, description="curriculum rung this challenge was drawn from")
    generator: Literal["programmatic", "llm"]
    round: int = Field(ge=0, description="flywheel round")
    problem_source: str = Field(description="the KernelBench-format problem rendered from the above")
    purpose: Literal["train", "eval"] = Field(
        default="train", description="'eval': part of a frozen-point evaluation, not training data"
    )
    eval_round: int | None = Field(
        default=None, description="for eval challenges: the trained round whose adapter is evaluated"
    )
    eval_adapter_path: str | None = Field(
        default=None,
        description="for eval challenges: that round's adapter dir (None = base model or look up "
        "round.trained), so the solver needs no cross-topic ordering",
    )

    @model_validator(mode="after")
    def _ranges_ordered(self) -> ChallengeCreated:
        for dim, (lo, hi) in self.shape_range.items():
            if not 1 <= lo <= hi:
                raise ValueError(f"shape_range[{dim!r}] must satisfy 1 <= min <= max, got {lo}, {hi}")
        return self


class ChallengeContext(Record):
    """The challenge facts every downstream event carries (event-carried state).

    Copied from the challenge by the solver and passed along unchanged, so the
    extractor, verifier, curriculum, curator and evaluator each need only their
    own input event: no joins across topics, no ordering assumptions between
    topics, and a stateless consumer can be restarted or scaled at will.
    """

    op: str
    family: str
    dtype: Dtype
    shape_range: dict[str, tuple[int, int]]
    target: Target
    constraints: list[str]
    difficulty: int = Field(ge=0)
    round: int = Field(ge=0)
    purpose: Literal["train", "eval"] = "train"
    eval_round: int | None = None
    problem_source: str

    @classmethod
    def of(cls, challenge: ChallengeCreated) -> ChallengeContext:
        return cls(**challenge.model_dump(include=set(cls.model_fields)))


class CurriculumAdjusted(Record):
    """A curriculum controller decision for one op family."""

    family: str
    old_difficulty: int = Field(ge=0)
    new_difficulty: int = Field(ge=0)
    pass_rate: float = Field(ge=0, le=1)
    window: int = Field(ge=1, description="verdicts in the rolling window")
    reason: str


# --------------------------------------------------------------------------- solutions


class Sampling(Record):
    """Everything needed to reproduce one sample."""

    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    max_tokens: int = Field(ge=1)
    seed: int


class SolutionSampled(Record):
    """One raw LLM sample for a challenge."""

    challenge_id: str
    context: ChallengeContext
    sample_index: int = Field(ge=0)
    n_samples: int = Field(ge=1)
    backend: str = Field(description="'vllm', 'openai', 'transformers', ...")
    model_id: str
    adapter: str | None = Field(description="LoRA adapter name, None for the base model")
    adapter_round: int | None
    sampling: Sampling
    prompt_hash: str
    raw_output: str


class SolutionExtracted(Record):
    """The code pulled out of one sample, or why none could be."""

    challenge_id: str
    context: ChallengeContext
    sample_index: int = Field(ge=0)
    accepted: bool
    code: str | None
    code_hash: str | None
    reason: str | None

    @model_validator(mode="after")
    def _consistent(self) -> SolutionExtracted:
        if self.accepted and (self.code is None or self.code_hash is None):
            raise ValueError("an accepted extraction carries code and code_hash")
        if not self.accepted and not self.reason:
            raise ValueError("a rejected extraction carries a reason")
        return self


# --------------------------------------------------------------------------- verified


class Timing(Record):
    """Median device times in milliseconds, None where not measured."""

    candidate_ms: float | None = None
    naive_ms: float | None = None
    optimized_ms: float | None = None
    spread: float | None = Field(default=None, description="(p90 - p10) / median of candidate runs")
    holdout_ratio: float | None = Field(
        default=None,
        description="fastest run on inputs the candidate had never seen (timed once) / the "
        "timed median; above 1.05 candidate_ms was raised to it (a cache, or a noisy run)",
    )


# Verdict stages that judge nothing of the kernel (or of the model that wrote it):
# "internal", the verifier's own infrastructure or a device too full for any run (verifier
# 1.14), and "problem", the rendered problem itself was unusable. Pass rates leave them out.
UNJUDGED_STAGES = ("internal", "problem")


class SolutionVerified(Record):
    """The verifier's verdict on one extracted solution."""

    challenge_id: str
    context: ChallengeContext
    sample_index: int = Field(ge=0)
    code: str | None = Field(description="the verified code, carried so the curator needs no join")
    code_hash: str | None
    verifier_version: str
    passed: bool
    stage: str = Field(description="first failing stage, or 'passed'")
    reasons: list[str]
    device: Device
    isolation: str = Field(description="how the candidate was isolated, e.g. 'bwrap+uid'")
    perf_measured: bool
    timing: Timing = Field(default_factory=Timing)
    speedup_vs_naive: float | None = None
    speedup_vs_optimized: float | None = None
    roofline_fraction: float | None = None
    max_rel_error: float | None = None
    triton_launches: int | None = None
    fingerprint: dict[str, str] = Field(default_factory=dict)

    @property
    def judged(self) -> bool:
        """Whether the verdict is on the kernel (its stage is not in UNJUDGED_STAGES)."""
        return self.stage not in UNJUDGED_STAGES


# --------------------------------------------------------------------------- curated


class RuleHit(Record):
    """A curator rule that fired, with the evidence."""

    rule: str
    evidence: str


class SampleCurated(Record):
    """A curator decision on one verified solution; `verdict_event_id` is its sample id."""

    challenge_id: str
    verdict_event_id: str = Field(description="the sample id used in training requests")
    verifier_version: str
    kept: bool
    op: str
    family: str
    dtype: Dtype
    shape_bucket: str
    code: str | None
    code_hash: str | None
    score: float | None
    rule_hits: list[RuleHit] = Field(default_factory=list)
    reason: str
    context: ChallengeContext | None = Field(
        default=None, description="the curator always sets it: trainer and export need no join"
    )
    sample_index: int | None = Field(default=None, ge=0)


class PreferenceRecorded(Record):
    """Two solutions of one challenge, the better one chosen: a DPO/GRPO preference pair."""

    challenge_id: str
    context: ChallengeContext
    chosen_sample_id: str
    rejected_sample_id: str
    chosen_code: str
    rejected_code: str
    chosen_score: float
    rejected_score: float | None = Field(description="None when the rejected one did not pass")
    reason: str = Field(description="why it lost: 'lower_score', 'failed:<stage>', 'rule:<names>'")


# --------------------------------------------------------------------------- training


class TrainingRequested(Record):
    """Enough curated samples: train a round on this mixed set."""

    round: int = Field(ge=1)
    new_sample_ids: list[str]
    replay_sample_ids: list[str]
    dataset_hash: str


class RoundTrained(Record):
    """A LoRA adapter trained for a round, awaiting frozen-point evaluation."""

    round: int = Field(ge=1)
    adapter_path: str
    base_model: str
    dataset_hash: str
    metrics: dict[str, float]
    eval_challenge_ids: list[str] = Field(
        default_factory=list, description="the frozen-point eval challenges published for this round"
    )


class RoundEvaluated(Record):
    """The frozen-point evaluation of a round's adapter and the promotion decision."""

    round: int = Field(ge=1)
    adapter_path: str | None
    eval_pass_rates: dict[str, float]
    previous_pass_rates: dict[str, float]
    promoted: bool
    reason: str
    baseline_round: int | None = Field(
        default=None, description="the incumbent round compared against; 0 = the base model"
    )
    eval_counts: dict[str, int] = Field(
        default_factory=dict, description="eval samples behind each pass rate of this round"
    )


# --------------------------------------------------------------------------- dead letters


class DeadLetter(Record):
    """An input a service could not decode, validate or process, kept with its original bytes."""

    source_topic: str
    partition: int
    offset: int
    consumer: str
    error_kind: Literal["decode", "schema", "processing", "oversize"]
    error: str
    original_b64: str = Field(description="the original message value, base64")
    original_event_id: str | None = None
