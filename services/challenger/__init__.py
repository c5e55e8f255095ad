"""Challenge generator (programmatic or LLM) and the curriculum controller."""

from services.challenger.core import ChallengerCore
from services.challenger.curriculum_core import CurriculumCore

__all__ = ["ChallengerCore", "CurriculumCore"]
