"""Extractor configuration: a frozen section validated from `Settings.services["extractor"]`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ExtractorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Longer code is rejected: real kernels are a few KB, and events must stay under 1 MB.
    max_code_chars: int = Field(default=100_000, ge=1000)
    # Tab stop used to expand tabs in indentation (LLMs that emit tabs mostly mean 4 columns).
    tab_size: int = Field(default=4, ge=1, le=8)

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> ExtractorConfig:
        """The extractor section of `Settings.services` (missing = defaults)."""
        return cls.model_validate(services.get("extractor", {}))
