"""Errors of the challenge generator and the curriculum controller."""

from __future__ import annotations

from kz_common.core import ProcessingError


class ChallengerError(ValueError):
    """Base class of challenger errors that are not processing failures."""


class ChallengerConfigError(ChallengerError):
    """The challenger or curriculum configuration is invalid."""


class InvalidProposal(ChallengerError):
    """A proposed challenge (usually from the LLM) is malformed or outside the catalogue."""


class GenerationFailed(ProcessingError):
    """The LLM generator produced no valid challenge within its attempts.

    A ProcessingError, so the Kafka adapter dead-letters the round.started event;
    `raw_text` keeps the last raw LLM output for inspection.
    """

    def __init__(self, message: str, raw_text: str, attempts: int) -> None:
        super().__init__(f"{message}; last raw output ({len(raw_text)} chars): {raw_text[:2000]!r}")
        self.raw_text = raw_text
        self.attempts = attempts
