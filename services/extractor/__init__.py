"""Extractor: pulls the solution code out of a raw LLM sample, or says why it cannot."""

from services.extractor.core import ExtractorCore
from services.extractor.extract import Extraction, extract

__all__ = ["Extraction", "ExtractorCore", "extract"]
