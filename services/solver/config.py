"""Solver configuration: a frozen section validated from `Settings.services["solver"]`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kz_common.llm.backends import BackendSettings


class SolverConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Which backend samples: vLLM offline on GPUs, an OpenAI-compatible server, or transformers.
    backend: Literal["vllm", "openai", "transformers"] = "transformers"
    # Model dir or hub id (vllm / transformers); for 'openai' the served model name.
    model: str = ""
    # transformers only: 'auto' picks cuda when visible.
    device: str = "auto"
    # 'auto': bf16 on GPUs, fp32 on CPU.
    dtype: str = "auto"
    # Wrap the prompt as one user turn with the tokenizer's chat template (instruct models).
    use_chat_template: bool = False
    # Adapters kept loaded at once (current promoted + candidates under evaluation).
    max_loras: int = Field(default=4, ge=1)
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    openai_api_key: str | None = None
    # /v1/chat/completions instead of /v1/completions.
    openai_chat: bool = False
    openai_timeout_s: float = Field(default=300.0, gt=0)
    openai_max_concurrency: int = Field(default=8, ge=1)
    # Register adapters via /v1/load_lora_adapter on first use (vLLM runtime LoRA updating).
    openai_load_adapters: bool = True
    vllm_tensor_parallel_size: int = Field(default=1, ge=1)
    vllm_gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    vllm_max_model_len: int | None = None
    # Must be >= the trainer's LoRA rank.
    vllm_max_lora_rank: int = Field(default=64, ge=1)
    # Samples per challenge: several tries raise pass@k and give preference pairs.
    n_samples: int = Field(default=4, ge=1, le=64)
    # Enough randomness for diverse samples, not so much that code breaks.
    temperature: float = Field(default=0.8, ge=0, le=2)
    top_p: float = Field(default=0.95, gt=0, le=1)
    # A full kernel module is 1-3k tokens.
    max_tokens: int = Field(default=2048, ge=16)
    # Mixed into every sample seed: change it to draw a fresh set of samples for the same challenges.
    seed_salt: str = ""
    # Reference kernels shown as examples in the prompt (0 disables; never the challenge's own op).
    few_shot: int = Field(default=2, ge=0, le=8)
    # Adapter to start from (e.g. the last promoted round after a restart); None = base model.
    initial_adapter: str | None = None
    initial_adapter_round: int | None = None

    def backend_settings(self) -> BackendSettings:
        return BackendSettings(
            kind=self.backend, model=self.model, device=self.device, dtype=self.dtype,
            use_chat_template=self.use_chat_template, max_loras=self.max_loras,
            openai_base_url=self.openai_base_url, openai_api_key=self.openai_api_key,
            openai_chat=self.openai_chat, openai_timeout_s=self.openai_timeout_s,
            openai_max_concurrency=self.openai_max_concurrency,
            openai_load_adapters=self.openai_load_adapters,
            vllm_tensor_parallel_size=self.vllm_tensor_parallel_size,
            vllm_gpu_memory_utilization=self.vllm_gpu_memory_utilization,
            vllm_max_model_len=self.vllm_max_model_len, vllm_max_lora_rank=self.vllm_max_lora_rank,
        )

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> SolverConfig:
        return cls.model_validate(services.get("solver", {}))
