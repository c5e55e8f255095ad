"""ExtractorCore: one SolutionExtracted (accepted or rejected with a reason) per SolutionSampled."""

from __future__ import annotations

from pydantic import BaseModel

from schemas import AnyEnvelope
from schemas.events import SolutionExtracted, SolutionSampled
from services.extractor.config import ExtractorConfig
from services.extractor.extract import extract


class ExtractorCore:
    """Stateless: the output depends on the input event alone."""

    name = "extractor"
    version = "1"
    inputs: tuple[str, ...] = ("solutions",)
    stateful = False  # nothing to rebuild on restart

    def __init__(self, config: ExtractorConfig | None = None) -> None:
        self.config = config or ExtractorConfig()

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        sample = event.payload
        if not isinstance(sample, SolutionSampled):
            return []
        result = extract(sample.raw_output, max_code_chars=self.config.max_code_chars,
                         tab_size=self.config.tab_size)
        return [SolutionExtracted(
            challenge_id=sample.challenge_id,
            context=sample.context,
            sample_index=sample.sample_index,
            accepted=result.accepted,
            code=result.code,
            code_hash=result.code_hash,
            reason=result.reason,
        )]
