"""OpenAI-compatible HTTP backend (`/v1/completions` or `/v1/chat/completions`).

Works against vLLM's `vllm serve`, SGLang, TGI's OpenAI mode, hosted APIs, and
`kz_common.llm.server`. Stdlib `urllib` only, so no HTTP client dependency.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from kz_common.llm.backends.base import AdapterRef, check_request, sample_seed
from kz_common.llm.exceptions import BackendRequestError
from schemas.events import Sampling

JsonMode = Literal["response_format", "structured_outputs", "guided_json", "none"]


class OpenAIBackend:
    """One HTTP request per (prompt, sample), each with its own seed, sent concurrently.

    LoRA adapters are addressed by model name (vLLM serves each loaded adapter
    as a model); with `load_adapters`, an adapter is registered on first use
    through vLLM's `/v1/load_lora_adapter` (the server needs
    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; kz_common.llm.server supports it too).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        chat: bool = False,
        timeout_s: float = 300.0,
        max_concurrency: int = 8,
        load_adapters: bool = True,
        json_mode: JsonMode = "response_format",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.chat = chat
        self.timeout_s = timeout_s
        self.max_concurrency = max(1, max_concurrency)
        self.load_adapters = load_adapters
        self.json_mode = json_mode
        self.supports_json_schema = json_mode != "none"
        self._api_key = api_key
        self._registered: dict[str, str] = {}  # adapter name -> path, registered with the server

    def generate(
        self,
        prompts: Sequence[str],
        sampling: Sampling,
        n: int = 1,
        adapter: AdapterRef | None = None,
        json_schema: dict[str, Any] | None = None,
    ) -> list[list[str]]:
        check_request(prompts, n)
        if adapter is not None and self.load_adapters:
            self._register(adapter)
        model = adapter.name if adapter is not None else self.model_id
        jobs = [(p, sample_seed(sampling.seed, j)) for p in prompts for j in range(n)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(jobs) or 1)) as pool:
            texts = list(pool.map(lambda job: self._one(model, job[0], sampling, job[1], json_schema), jobs))
        return [texts[i * n:(i + 1) * n] for i in range(len(prompts))]

    # ------------------------------------------------------------------ internals

    def _one(
        self, model: str, prompt: str, sampling: Sampling, seed: int, schema: dict[str, Any] | None
    ) -> str:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": seed,
            "n": 1,
        }
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if schema is not None:
            body.update(self._schema_fields(schema))
        path = "/chat/completions" if self.chat else "/completions"
        reply = self._post(path, body)
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] if self.chat else choice["text"]
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendRequestError(f"malformed reply from {path}: {str(reply)[:300]}") from exc
        if not isinstance(text, str):
            raise BackendRequestError(f"reply text from {path} is {type(text).__name__}, expected str")
        return text

    def _schema_fields(self, schema: dict[str, Any]) -> dict[str, Any]:
        # Three spellings of the same request across server generations.
        if self.json_mode == "response_format":  # OpenAI API; vLLM chat + completions
            return {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": "output", "schema": schema, "strict": True}}}
        if self.json_mode == "structured_outputs":  # vLLM >= 0.12 extra parameter
            return {"structured_outputs": {"json": schema}}
        if self.json_mode == "guided_json":  # vLLM < 0.12 extra parameter
            return {"guided_json": schema}
        return {}

    def _register(self, adapter: AdapterRef) -> None:
        path = str(adapter.path)
        if self._registered.get(adapter.name) == path:
            return
        try:
            self._post("/load_lora_adapter", {"lora_name": adapter.name, "lora_path": path})
        except BackendRequestError as exc:
            if "already" not in str(exc).lower():  # vLLM answers 400 "...already been loaded"
                raise
        self._registered[adapter.name] = path

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise BackendRequestError(f"POST {path}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise BackendRequestError(f"POST {self.base_url}{path}: {exc}") from exc
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BackendRequestError(f"POST {path}: reply is not JSON: {raw[:200]!r}") from exc
