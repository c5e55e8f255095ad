"""A small OpenAI-compatible HTTP server backed by the transformers backend (`kz serve`).

Endpoints (the subset of vLLM's server that KernelZero uses):
  GET  /health, GET /v1/models
  POST /v1/completions, POST /v1/chat/completions   (n, seed, max_tokens, temperature, top_p)
  POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter   (vLLM's runtime LoRA API)
A request's `model` is the served model name (base) or a loaded adapter's name.
`response_format` / `structured_outputs` are accepted but not enforced: this
server does no constrained decoding, so clients must validate what they get.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kz_common.llm.backends.base import AdapterRef, Completion
from kz_common.llm.backends.hf import TransformersBackend
from kz_common.llm.exceptions import LLMError
from schemas.events import Sampling

MAX_BODY_BYTES = 8 * 1024 * 1024


class ApiError(Exception):
    """An error answered to the client as an OpenAI-style error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class ModelService:
    """Request handling independent of HTTP plumbing: maps request bodies to completions."""

    def __init__(self, backend: TransformersBackend, served_name: str) -> None:
        self.backend = backend
        self.served_name = served_name
        self.adapters: dict[str, AdapterRef] = {}
        self._lock = threading.Lock()

    def models(self) -> dict[str, Any]:
        names = [self.served_name, *sorted(self.adapters)]
        return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "kernelzero"}
                                           for n in names]}

    def load_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise ApiError(400, "load_lora_adapter needs string fields lora_name and lora_path")
        if not (Path(path) / "adapter_config.json").is_file():
            raise ApiError(400, f"{path} is not a LoRA adapter directory (no adapter_config.json)")
        with self._lock:
            known = self.adapters.get(name)
            if known is not None:
                raise ApiError(400, f"The lora adapter '{name}' has already been loaded.")
            self.adapters[name] = AdapterRef(name=name, path=Path(path))
        return {"status": "ok", "lora_name": name}

    def unload_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("lora_name")
        with self._lock:
            if name not in self.adapters:
                raise ApiError(404, f"adapter {name!r} is not loaded", "not_found_error")
            del self.adapters[name]
        return {"status": "ok", "lora_name": name}

    def completions(self, body: dict[str, Any], chat: bool) -> dict[str, Any]:
        adapter = self._adapter_for(body.get("model"))
        prompt = self._chat_prompt(body) if chat else body.get("prompt")
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt must be a string" if not chat else "messages are malformed")
        n = _int(body, "n", 1, lo=1, hi=64)
        sampling = Sampling(
            temperature=_num(body, "temperature", 1.0, lo=0.0, hi=5.0),
            top_p=_num(body, "top_p", 1.0, lo=1e-6, hi=1.0),
            max_tokens=_int(body, "max_tokens", 16, lo=1, hi=self.backend.context_length),
            seed=_int(body, "seed", 0, lo=0, hi=2**31 - 2),
        )
        rows = self.backend.complete([prompt], sampling, n, adapter)
        return _reply(body.get("model") or self.served_name, rows[0], chat)

    def _adapter_for(self, model: object) -> AdapterRef | None:
        if model in (None, "", self.served_name):
            return None
        with self._lock:
            ref = self.adapters.get(model) if isinstance(model, str) else None
        if ref is None:
            raise ApiError(404, f"The model `{model}` does not exist.", "not_found_error")
        return ref

    def _chat_prompt(self, body: dict[str, Any]) -> str:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ApiError(400, "messages must be a non-empty list of {role, content} strings")
        return self.backend.format_chat(messages)


def _reply(model: str, completions: list[Completion], chat: bool) -> dict[str, Any]:
    if chat:
        choices = [{"index": i, "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish_reason} for i, c in enumerate(completions)]
    else:
        choices = [{"index": i, "text": c.text, "logprobs": None, "finish_reason": c.finish_reason}
                   for i, c in enumerate(completions)]
    prompt_tokens = completions[0].prompt_tokens if completions else 0
    completion_tokens = sum(c.completion_tokens for c in completions)
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def _num(body: dict[str, Any], key: str, default: float, *, lo: float, hi: float) -> float:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
        raise ApiError(400, f"{key} must be a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _int(body: dict[str, Any], key: str, default: int, *, lo: int, hi: int) -> int:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ApiError(400, f"{key} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


class _Handler(BaseHTTPRequestHandler):
    service: ModelService  # set on the subclass make_server creates
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: callers log what they need
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send(200, self.service.models())
        else:
            self._send(404, _error(ApiError(404, f"no route {self.path}", "not_found_error")))

    def do_POST(self) -> None:
        routes = {
            "/v1/completions": lambda b: self.service.completions(b, chat=False),
            "/v1/chat/completions": lambda b: self.service.completions(b, chat=True),
            "/v1/load_lora_adapter": self.service.load_adapter,
            "/v1/unload_lora_adapter": self.service.unload_adapter,
        }
        try:
            route = routes.get(self.path)
            if route is None:
                raise ApiError(404, f"no route {self.path}", "not_found_error")
            self._send(200, route(self._body()))
        except ApiError as exc:
            self._send(exc.status, _error(exc))
        except LLMError as exc:
            self._send(500, _error(ApiError(500, str(exc), "server_error")))

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            raise ApiError(400, f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError(400, "body must be a JSON object")
        return body

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _error(exc: ApiError) -> dict[str, Any]:
    return {"error": {"message": str(exc), "type": exc.kind, "code": exc.status}}


def make_server(
    backend: TransformersBackend, host: str = "127.0.0.1", port: int = 0, served_name: str | None = None
) -> ThreadingHTTPServer:
    """A server bound to (host, port) (port 0: any free port); call serve_forever() to run it."""
    service = ModelService(backend, served_name or backend.model_id)
    handler = type("KZHandler", (_Handler,), {"service": service})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve(model: str, host: str = "127.0.0.1", port: int = 8000, device: str = "auto",
          served_name: str | None = None) -> None:
    """Load `model` and serve it until interrupted (what `kz serve` runs)."""
    server = make_server(TransformersBackend(model, device=device), host, port, served_name)
    print(f"serving {model} on http://{host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible server for a local model")
    parser.add_argument("--model", required=True, help="model directory (or hub id if cached)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--served-name", default=None, help="model name clients send (default: --model)")
    args = parser.parse_args(argv)
    serve(args.model, args.host, args.port, args.device, args.served_name)


if __name__ == "__main__":
    main()
