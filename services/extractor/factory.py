"""Build the extractor core from the settings."""

from __future__ import annotations

from kz_common.config import Settings
from services.extractor.config import ExtractorConfig
from services.extractor.core import ExtractorCore


def build_core(settings: Settings) -> ExtractorCore:
    return ExtractorCore(ExtractorConfig.from_settings(settings.services))
