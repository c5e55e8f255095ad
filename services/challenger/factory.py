"""Build the challenger and curriculum cores from the settings."""

from __future__ import annotations

import dataclasses

from kz_common.config import Settings
from services.challenger.config import ChallengerConfig, CurriculumConfig
from services.challenger.core import ChallengerCore
from services.challenger.curriculum_core import CurriculumCore


def build_core(settings: Settings) -> ChallengerCore:
    config = ChallengerConfig.from_settings(settings.services)
    if config.generator != "llm":
        return ChallengerCore(config)
    from kz_common.llm.backends import make_backend
    from kz_common.llm.backends.factory import BackendSettings
    from kz_common.llm.defaults import resolve_model

    # services.challenger_llm holds BackendSettings fields (kind, model, openai_base_url, ...).
    backend = BackendSettings(**settings.services.get("challenger_llm", {}))
    backend = dataclasses.replace(backend, model=resolve_model(backend.model, settings))
    return ChallengerCore.from_config(config, make_backend(backend))


def build_curriculum(settings: Settings) -> CurriculumCore:
    return CurriculumCore(CurriculumConfig.from_settings(settings.services))
