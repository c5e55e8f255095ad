"""Build the trainer and evaluator cores from the settings."""

from __future__ import annotations

from typing import Any

from kz_common.config import Settings
from kz_common.llm.defaults import resolve_model
from services.trainer.config import EvaluatorConfig, TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.evaluator import EvaluatorCore


def build_core(settings: Settings) -> TrainerCore:
    config = TrainerConfig.from_settings(settings.services)
    updates: dict[str, Any] = {"base_model": resolve_model(config.base_model, settings)}
    if "adapters_dir" not in settings.services.get("trainer", {}):
        updates["adapters_dir"] = settings.paths.data_dir / "adapters"
    return TrainerCore(config.model_copy(update=updates))


def build_evaluator(settings: Settings) -> EvaluatorCore:
    return EvaluatorCore(EvaluatorConfig.from_settings(settings.services))
