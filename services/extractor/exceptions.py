"""Errors of the extractor service."""

from __future__ import annotations


class ExtractorError(ValueError):
    """Base class of extractor errors."""


class ExtractorConfigError(ExtractorError):
    """The extractor configuration is invalid."""
