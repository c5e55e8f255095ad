"""Which payload model each event type carries, and which topic it travels on."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from pydantic import BaseModel

from schemas import events as ev


@dataclass(frozen=True)
class EventSpec:
    """One event type: its payload model, current schema version and logical topic."""

    type: str
    model: builtins.type[BaseModel]  # (`type` is the field above)
    version: int
    topic: str


_SPECS = [
    EventSpec("round.started", ev.RoundStarted, 1, "control"),
    EventSpec("challenge.created", ev.ChallengeCreated, 1, "challenges"),
    EventSpec("curriculum.adjusted", ev.CurriculumAdjusted, 1, "curriculum"),
    EventSpec("solution.sampled", ev.SolutionSampled, 1, "solutions"),
    EventSpec("solution.extracted", ev.SolutionExtracted, 1, "extracted"),
    EventSpec("solution.verified", ev.SolutionVerified, 1, "verified"),
    EventSpec("sample.curated", ev.SampleCurated, 1, "curated"),
    EventSpec("preference.recorded", ev.PreferenceRecorded, 1, "curated"),
    EventSpec("training.requested", ev.TrainingRequested, 1, "training-requests"),
    EventSpec("round.trained", ev.RoundTrained, 1, "rounds"),
    EventSpec("round.evaluated", ev.RoundEvaluated, 1, "rounds"),
    EventSpec("dead.letter", ev.DeadLetter, 1, "dead-letters"),
]

EVENTS: dict[str, EventSpec] = {s.type: s for s in _SPECS}
BY_MODEL: dict[type[BaseModel], EventSpec] = {s.model: s for s in _SPECS}
# Logical topic name -> the event types it carries, in pipeline order.
TOPICS: dict[str, tuple[str, ...]] = {}
for _s in _SPECS:
    TOPICS[_s.topic] = TOPICS.get(_s.topic, ()) + (_s.type,)
