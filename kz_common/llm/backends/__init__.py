"""Text-generation backends behind one Protocol: vLLM offline, OpenAI-compatible HTTP, transformers.

Backend modules import their heavy dependencies lazily; importing this package is cheap.
"""

from kz_common.llm.backends.base import (
    AdapterRef,
    Completion,
    SolverBackend,
    TextBackend,
    sample_seed,
)
from kz_common.llm.backends.factory import BACKEND_KINDS, BackendSettings, make_backend

__all__ = [
    "BACKEND_KINDS",
    "AdapterRef",
    "BackendSettings",
    "Completion",
    "SolverBackend",
    "TextBackend",
    "make_backend",
    "sample_seed",
]
