"""Build the curator core from the settings."""

from __future__ import annotations

from kz_common.config import Settings
from services.curator.config import CuratorConfig
from services.curator.core import CuratorCore


def build_core(settings: Settings) -> CuratorCore:
    return CuratorCore(CuratorConfig.from_settings(settings.services))
