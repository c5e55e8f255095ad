"""vLLM offline batch backend (`vllm.LLM`), the high-throughput path on GPUs.

vLLM is an optional dependency (extra `vllm`): it is imported when the backend
is constructed, never at module import, so CPU-only installs work unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kz_common.llm.backends.base import AdapterRef, check_request, sample_seed
from kz_common.llm.exceptions import BackendRequestError, BackendUnavailable
from schemas.events import Sampling


def import_vllm() -> Any:
    """The vllm module, or BackendUnavailable saying how to install it."""
    try:
        import vllm
    except ImportError as exc:
        raise BackendUnavailable(
            f"the 'vllm' backend needs vLLM: pip install 'kernelzero[vllm]' ({exc})"
        ) from exc
    return vllm


class VLLMBackend:
    """`LLM.generate` over all (prompt, sample) pairs in one batch, LoRA per request.

    Each sample is its own request with `SamplingParams(n=1, seed=...)` rather than
    one request with n>1: vLLM then draws sample j from seed `sample_seed(seed, j)`,
    so a reprocessed challenge reproduces each sample individually. Prefix caching
    makes the repeated prompt nearly free.
    """

    name = "vllm"
    supports_json_schema = True

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        enable_lora: bool = True,
        max_lora_rank: int = 64,
        max_loras: int = 4,
        use_chat_template: bool = True,
        seed: int = 0,
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.model_id = str(model)
        self.use_chat_template = use_chat_template
        self._enable_lora = enable_lora
        kwargs: dict[str, Any] = {
            "model": self.model_id, "dtype": dtype, "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization, "seed": seed, "enable_prefix_caching": True,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if enable_lora:
            kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=max_loras)
        self._llm = vllm.LLM(**kwargs)
        self._lora_ids: dict[str, int] = {}  # vLLM wants a stable positive int per adapter

    def generate(
        self,
        prompts: Sequence[str],
        sampling: Sampling,
        n: int = 1,
        adapter: AdapterRef | None = None,
        json_schema: dict[str, Any] | None = None,
    ) -> list[list[str]]:
        check_request(prompts, n)
        texts = [self._format(p) for p in prompts]
        expanded = [t for t in texts for _ in range(n)]
        params = [self._params(sampling, sample_seed(sampling.seed, j), json_schema)
                  for _ in texts for j in range(n)]
        outputs = self._llm.generate(expanded, params, lora_request=self._lora(adapter), use_tqdm=False)
        flat = [o.outputs[0].text for o in outputs]
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    # ------------------------------------------------------------------ internals

    def _format(self, prompt: str) -> str:
        if not self.use_chat_template:
            return prompt
        tok = self._llm.get_tokenizer()
        if not getattr(tok, "chat_template", None):
            return prompt
        return tok.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )

    def _params(self, sampling: Sampling, seed: int, schema: dict[str, Any] | None) -> Any:
        kwargs: dict[str, Any] = {
            "n": 1, "temperature": sampling.temperature, "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens, "seed": seed,
        }
        if schema is not None:
            kwargs.update(self._structured(schema))
        return self._vllm.SamplingParams(**kwargs)

    def _structured(self, schema: dict[str, Any]) -> dict[str, Any]:
        # vLLM >= 0.11 names it StructuredOutputsParams; earlier releases GuidedDecodingParams.
        sp = self._vllm.sampling_params
        if hasattr(sp, "StructuredOutputsParams"):
            return {"structured_outputs": sp.StructuredOutputsParams(json=schema)}
        if hasattr(sp, "GuidedDecodingParams"):
            return {"guided_decoding": sp.GuidedDecodingParams(json=schema)}
        raise BackendRequestError("this vLLM version offers no JSON-schema constrained decoding")

    def _lora(self, adapter: AdapterRef | None) -> Any:
        if adapter is None:
            return None
        if not self._enable_lora:
            raise BackendRequestError(f"adapter {adapter.name!r} requested but LoRA is disabled")
        from vllm.lora.request import LoRARequest

        lora_id = self._lora_ids.setdefault(adapter.name, len(self._lora_ids) + 1)
        return LoRARequest(adapter.name, lora_id, str(adapter.path))
