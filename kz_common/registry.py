"""Which services exist, and how each one's core is built from the settings.

Each entry names a factory `module:function` taking `Settings` and returning a
ServiceCore. Imports are lazy so `kz broker` or `kz topics` never pay for torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from kz_common.config import Settings
from kz_common.core import ServiceCore
from kz_common.exceptions import ConfigError

# In pipeline order; `kz run` starts them all.
SERVICES: dict[str, str] = {
    "challenger": "services.challenger.factory:build_core",
    "curriculum": "services.challenger.factory:build_curriculum",
    "solver": "services.solver.factory:build_core",
    "extractor": "services.extractor.factory:build_core",
    "verifier": "services.verifier.factory:build_core",
    "curator": "services.curator.factory:build_core",
    "trainer": "services.trainer.factory:build_core",
    "evaluator": "services.trainer.factory:build_evaluator",
}


def build_core(name: str, settings: Settings) -> ServiceCore:
    """Instantiate the core of service `name`."""
    if name not in SERVICES:
        raise ConfigError(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
    module, _, function = SERVICES[name].partition(":")
    factory = cast(Callable[[Settings], ServiceCore], getattr(importlib.import_module(module), function))
    core = factory(settings)
    if core.name != name:
        raise ConfigError(f"factory for {name!r} built a core named {core.name!r}")
    return core
