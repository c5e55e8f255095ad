"""The one interface every text-generation backend implements, and its shared value types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from schemas.events import Sampling

SEED_MODULUS = 2**31 - 1  # every backend (vLLM, HF, OpenAI servers) accepts seeds in int32 range


@dataclass(frozen=True)
class AdapterRef:
    """A LoRA adapter: unique name, directory, and the flywheel round that trained it."""

    name: str
    path: Path
    round: int | None = None

    @classmethod
    def for_round(cls, round_: int, path: str | Path) -> AdapterRef:
        """The canonical adapter ref of a trained round (name 'round-<n>')."""
        return cls(name=f"round-{round_}", path=Path(path), round=round_)


@dataclass(frozen=True)
class Completion:
    """One generated continuation with token accounting (what an OpenAI server reports)."""

    text: str
    finish_reason: str  # 'stop' (EOS reached) or 'length' (max_tokens reached)
    prompt_tokens: int
    completion_tokens: int


def sample_seed(base_seed: int, sample_index: int) -> int:
    """Seed of sample `sample_index` when a request asks for n samples with seed `base_seed`.

    Every backend draws each sample as its own seeded request, so sample j is
    reproducible on its own, whatever n or batch it was drawn in.
    """
    return (base_seed + sample_index) % SEED_MODULUS


@runtime_checkable
class TextBackend(Protocol):
    """Generate n continuations per prompt.

    `sampling.seed` is the base seed: continuation j of every prompt uses
    `sample_seed(sampling.seed, j)`. `adapter=None` means the base model.
    `json_schema` asks for output constrained to that JSON schema where the
    backend can enforce it (`supports_json_schema`); others ignore it, so callers
    must still validate.
    """

    name: str  # 'vllm' | 'openai' | 'transformers'
    model_id: str
    supports_json_schema: bool

    def generate(
        self,
        prompts: Sequence[str],
        sampling: Sampling,
        n: int = 1,
        adapter: AdapterRef | None = None,
        json_schema: dict[str, Any] | None = None,
    ) -> list[list[str]]:
        """`n` continuations for each prompt, in prompt order."""
        ...


# The solver's name for the same interface.
SolverBackend = TextBackend


def check_request(prompts: Sequence[str], n: int) -> None:
    """Shared argument validation, so every backend fails the same clear way."""
    from kz_common.llm.exceptions import BackendRequestError

    if isinstance(prompts, str):
        raise BackendRequestError("prompts must be a sequence of strings, not one string")
    if n < 1:
        raise BackendRequestError(f"n must be >= 1, got {n}")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise BackendRequestError(f"prompt {i} is {type(p).__name__}, expected str")
