"""Challenger and curriculum configuration, validated from `Settings.services[...]`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ChallengerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # 'programmatic' samples the catalogue (seeded, free); 'llm' asks an LLM for JSON proposals.
    generator: Literal["programmatic", "llm"] = "programmatic"
    # Shapes from cpu_test_range and dtypes float32/float16, so TRITON_INTERPRET=1 can verify them.
    cpu_mode: bool = False
    # Restrict to these catalogue ops (None = every op).
    ops: list[str] | None = None
    # Restrict dtypes (None = each op's dtypes; cpu_mode narrows to float32/float16).
    dtypes: list[str] | None = None
    # Device the rendered problems target when not in cpu_mode.
    device: str = "cuda"
    # Difficulty rung every family starts at before the curriculum says otherwise.
    initial_difficulty: int = Field(default=0, ge=0)
    # Recent challenge signatures remembered for near-duplicate refusal and the LLM summary.
    history_size: int = Field(default=512, ge=1)
    # Two ranges whose every bound is within this many octaves are near duplicates.
    dup_tolerance_octaves: float = Field(default=0.5, ge=0)
    # Proposals tried per challenge slot before the slot is skipped (saturated space).
    max_resamples: int = Field(default=16, ge=1)
    # LLM generator: attempts at valid JSON per proposal before the round is dead-lettered.
    llm_max_attempts: int = Field(default=3, ge=1)
    # LLM generator sampling: some temperature for variety; proposals are short.
    llm_temperature: float = Field(default=0.8, ge=0)
    llm_top_p: float = Field(default=0.95, gt=0, le=1)
    llm_max_tokens: int = Field(default=256, ge=16)

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> ChallengerConfig:
        return cls.model_validate(services.get("challenger", {}))


class CurriculumConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Target band of the pass rate: above -> harder, below -> easier.
    low: float = Field(default=0.30, ge=0, le=1)
    high: float = Field(default=0.60, ge=0, le=1)
    # Rolling window of train verdicts per (family, difficulty).
    window: int = Field(default=50, ge=1)
    # Fresh verdicts at the current rung needed before any decision (anti-flap).
    min_verdicts: int = Field(default=20, ge=1)
    # Re-entering a rung the family fell back from needs this factor more evidence per bounce.
    bounce_factor: float = Field(default=2.0, ge=1)
    # Highest rung (the ladder's top).
    max_difficulty: int = Field(default=3, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> CurriculumConfig:
        if not self.low < self.high:
            raise ValueError(f"need low < high, got {self.low}, {self.high}")
        if self.min_verdicts > self.window:
            raise ValueError(f"min_verdicts {self.min_verdicts} exceeds window {self.window}")
        return self

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> CurriculumConfig:
        return cls.model_validate(services.get("curriculum", {}))
