"""Errors raised by the shared LLM layer (model building, loading, text backends, server).

Every error is an `LLMError`, so callers can catch one type.
"""

from __future__ import annotations


class LLMError(RuntimeError):
    """Base class: an LLM could not be built, loaded or queried."""


class ModelBuildError(LLMError):
    """The tiny model could not be built from the given inputs."""


class ModelLoadError(LLMError):
    """A model, tokenizer or adapter directory could not be loaded."""


class BackendUnavailable(LLMError):
    """A backend's optional dependency is not installed (e.g. vLLM)."""


class BackendRequestError(LLMError):
    """A backend call failed (HTTP error, malformed response, bad arguments)."""


class UnknownBackend(LLMError, ValueError):
    """The configured backend name is not one of the supported backends."""
