"""Build the configured backend from plain settings (mapped from kz_common.config by callers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kz_common.llm.backends.base import TextBackend
from kz_common.llm.exceptions import UnknownBackend

BackendKind = Literal["vllm", "openai", "transformers"]
BACKEND_KINDS: tuple[str, ...] = ("vllm", "openai", "transformers")


@dataclass(frozen=True)
class BackendSettings:
    """Everything any backend needs; each backend reads only its own fields."""

    kind: str = "transformers"
    model: str = ""  # model dir or hub id; for 'openai' the served model name
    device: str = "auto"  # transformers only
    dtype: str = "auto"
    use_chat_template: bool = False  # wrap prompts as one user turn (instruct models)
    max_loras: int = 4  # adapters kept loaded at once
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    openai_api_key: str | None = None
    openai_chat: bool = False  # /v1/chat/completions instead of /v1/completions
    openai_timeout_s: float = 300.0
    openai_max_concurrency: int = 8
    openai_json_mode: str = "response_format"
    openai_load_adapters: bool = True
    vllm_tensor_parallel_size: int = 1
    vllm_gpu_memory_utilization: float = 0.85
    vllm_max_model_len: int | None = None
    vllm_max_lora_rank: int = 64
    vllm_enable_lora: bool = True


def make_backend(settings: BackendSettings) -> TextBackend:
    """The backend named by `settings.kind`; UnknownBackend for anything else."""
    if not settings.model:
        raise UnknownBackend("backend settings need a model (dir, hub id or served name)")
    if settings.kind == "transformers":
        from kz_common.llm.backends.hf import TransformersBackend

        return TransformersBackend(
            settings.model, device=settings.device, dtype=settings.dtype,
            use_chat_template=settings.use_chat_template, max_loaded_adapters=settings.max_loras,
        )
    if settings.kind == "openai":
        from kz_common.llm.backends.openai_http import OpenAIBackend

        if settings.openai_json_mode not in ("response_format", "structured_outputs", "guided_json", "none"):
            raise UnknownBackend(f"unknown openai_json_mode {settings.openai_json_mode!r}")
        return OpenAIBackend(
            settings.openai_base_url, settings.model, api_key=settings.openai_api_key,
            chat=settings.openai_chat, timeout_s=settings.openai_timeout_s,
            max_concurrency=settings.openai_max_concurrency,
            load_adapters=settings.openai_load_adapters,
            json_mode=settings.openai_json_mode,  # type: ignore[arg-type]
        )
    if settings.kind == "vllm":
        from kz_common.llm.backends.vllm_offline import VLLMBackend

        return VLLMBackend(
            settings.model, dtype=settings.dtype,
            tensor_parallel_size=settings.vllm_tensor_parallel_size,
            gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
            max_model_len=settings.vllm_max_model_len, enable_lora=settings.vllm_enable_lora,
            max_lora_rank=settings.vllm_max_lora_rank, max_loras=settings.max_loras,
            use_chat_template=settings.use_chat_template,
        )
    raise UnknownBackend(f"unknown backend {settings.kind!r}; expected one of {', '.join(BACKEND_KINDS)}")
