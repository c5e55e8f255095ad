"""transformers `generate` backend: the CPU/GPU fallback and the engine of the local server."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from kz_common.llm.backends.base import AdapterRef, Completion, check_request, sample_seed
from kz_common.llm.exceptions import BackendRequestError
from kz_common.llm.loading import LoadedModel, attach_adapter, load_causal_lm
from schemas.events import Sampling


class TransformersBackend:
    """Sampling with `model.generate`, one seeded call per sample; LoRA adapters via PEFT.

    Adapters are loaded on first use and switched with `set_adapter`, so a new
    adapter (a promoted round) is picked up without reloading the base model.
    """

    name = "transformers"
    supports_json_schema = False  # no constrained decoding: callers validate and retry

    def __init__(
        self,
        model: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        use_chat_template: bool = False,
        max_loaded_adapters: int = 4,
        local_files_only: bool = True,
    ) -> None:
        self._lm: LoadedModel = load_causal_lm(
            model, device, dtype=dtype, local_files_only=local_files_only
        )
        self.model_id = str(model)
        self.use_chat_template = use_chat_template
        self._max_adapters = max(1, max_loaded_adapters)
        self._adapters: OrderedDict[str, AdapterRef] = OrderedDict()  # loaded, LRU order
        # One model, possibly shared by server threads: generation and adapter switches serialise.
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> Any:
        return self._lm.tokenizer

    @property
    def context_length(self) -> int:
        return int(getattr(self._lm.model.config, "max_position_embeddings", 2048))

    def generate(
        self,
        prompts: Sequence[str],
        sampling: Sampling,
        n: int = 1,
        adapter: AdapterRef | None = None,
        json_schema: dict[str, Any] | None = None,
    ) -> list[list[str]]:
        completions = self.complete(prompts, sampling, n, adapter)
        return [[c.text for c in row] for row in completions]

    def complete(
        self,
        prompts: Sequence[str],
        sampling: Sampling,
        n: int = 1,
        adapter: AdapterRef | None = None,
    ) -> list[list[Completion]]:
        """Like `generate`, with finish reasons and token counts."""
        check_request(prompts, n)
        with self._lock, self._activate(adapter):
            return [[self._one(p, sampling, j) for j in range(n)] for p in prompts]

    def format_chat(self, messages: list[dict[str, str]]) -> str:
        """Render chat messages into a prompt with the tokenizer's chat template."""
        tok = self._lm.tokenizer
        if not getattr(tok, "chat_template", None):
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    # ------------------------------------------------------------------ internals

    def _activate(self, adapter: AdapterRef | None):  # -> context manager
        model = self._lm.model
        if adapter is None:
            # The base model: a PeftModel keeps its adapters but bypasses them here.
            return model.disable_adapter() if self._adapters else nullcontext()
        known = self._adapters.get(adapter.name)
        if known is not None and known.path != adapter.path:
            raise BackendRequestError(
                f"adapter name {adapter.name!r} already bound to {known.path}, not {adapter.path}"
            )
        self._lm.model = attach_adapter(model, adapter.path, adapter.name)
        self._adapters[adapter.name] = adapter
        self._adapters.move_to_end(adapter.name)
        self._evict()
        return nullcontext()

    def _evict(self) -> None:
        while len(self._adapters) > self._max_adapters:
            old, _ = self._adapters.popitem(last=False)  # least recently used, never the active one
            self._lm.model.delete_adapter(old)

    def _one(self, prompt: str, sampling: Sampling, index: int) -> Completion:
        import torch

        text = self.format_chat([{"role": "user", "content": prompt}]) if self.use_chat_template else prompt
        tok = self._lm.tokenizer
        ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        # Keep the end of an over-long prompt: the task statement comes last.
        budget = max(1, self.context_length - sampling.max_tokens)
        ids = ids[:, -budget:].to(self._lm.device)
        torch.manual_seed(sample_seed(sampling.seed, index))
        kwargs: dict[str, Any] = {"max_new_tokens": sampling.max_tokens, "pad_token_id": tok.pad_token_id}
        if sampling.temperature > 0:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p)
        else:
            kwargs.update(do_sample=False)
        with torch.no_grad():
            out = self._lm.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs
            )
        new = out[0, ids.shape[1]:].tolist()
        stopped = bool(new) and new[-1] == tok.eos_token_id
        return Completion(
            text=tok.decode(new, skip_special_tokens=True),
            finish_reason="stop" if stopped or len(new) < sampling.max_tokens else "length",
            prompt_tokens=int(ids.shape[1]),
            completion_tokens=len(new),
        )
