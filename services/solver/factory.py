"""Build the solver core (and its model backend) from the settings."""

from __future__ import annotations

from kz_common.config import Settings
from kz_common.llm.backends import make_backend
from kz_common.llm.defaults import resolve_model
from services.solver.config import SolverConfig
from services.solver.core import SolverCore


def build_core(settings: Settings) -> SolverCore:
    config = SolverConfig.from_settings(settings.services)
    config = config.model_copy(update={"model": resolve_model(config.model, settings)})
    return SolverCore(make_backend(config.backend_settings()), config)
