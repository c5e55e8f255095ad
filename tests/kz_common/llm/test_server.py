"""The OpenAI HTTP backend against a real local server serving the tiny model."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kz_common.llm.backends import AdapterRef, BackendSettings, make_backend
from kz_common.llm.backends.hf import TransformersBackend
from kz_common.llm.backends.openai_http import OpenAIBackend
from kz_common.llm.exceptions import BackendRequestError, UnknownBackend
from kz_common.llm.server import make_server
from schemas.events import Sampling

SAMPLE = Sampling(temperature=0.9, top_p=0.95, max_tokens=10, seed=11)


@pytest.fixture(scope="module")
def local(tiny_model: Path) -> Iterator[tuple[str, TransformersBackend]]:
    engine = TransformersBackend(tiny_model, device="cpu")
    server = make_server(engine, "127.0.0.1", 0, served_name="tiny")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", engine
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_completions_match_the_engine_sample_for_sample(local) -> None:
    url, engine = local
    client = OpenAIBackend(url, "tiny")
    remote = client.generate(["class Model", "import torch"], SAMPLE, n=3)
    assert remote == engine.generate(["class Model", "import torch"], SAMPLE, n=3)


def test_chat_endpoint_and_json_schema_is_accepted(local) -> None:
    url, engine = local
    chat = OpenAIBackend(url, "tiny", chat=True)
    schema = {"type": "object", "properties": {"op": {"type": "string"}}}
    out = chat.generate(["propose a challenge"], SAMPLE, n=2, json_schema=schema)
    prompt = engine.format_chat([{"role": "user", "content": "propose a challenge"}])
    assert out == engine.generate([prompt], SAMPLE, n=2)


def test_adapters_are_registered_and_addressed_by_name(local, lora_adapter: Path) -> None:
    url, engine = local
    client = OpenAIBackend(url, "tiny")
    ref = AdapterRef.for_round(1, lora_adapter)
    greedy = SAMPLE.model_copy(update={"temperature": 0.0})
    tuned = client.generate(["class Model"], greedy, adapter=ref)
    assert tuned == engine.generate(["class Model"], greedy, adapter=ref)
    assert tuned != client.generate(["class Model"], greedy)
    client2 = OpenAIBackend(url, "tiny")  # a second client: the server says "already loaded"
    assert client2.generate(["class Model"], greedy, adapter=ref) == tuned
    with urllib.request.urlopen(f"{url}/models") as resp:
        assert [m["id"] for m in json.load(resp)["data"]] == ["tiny", "round-1"]


def test_errors_are_clear(local) -> None:
    url, _ = local
    with pytest.raises(BackendRequestError, match="404.*does not exist"):
        OpenAIBackend(url, "no-such-model").generate(["x"], SAMPLE)
    with pytest.raises(BackendRequestError, match="400.*max_tokens"):
        OpenAIBackend(url, "tiny").generate(["x"], SAMPLE.model_copy(update={"max_tokens": 10**9}))
    with pytest.raises(BackendRequestError, match="not a LoRA adapter"):
        OpenAIBackend(url, "tiny").generate(["x"], SAMPLE, adapter=AdapterRef("bad", Path("/nonexistent")))
    with pytest.raises(BackendRequestError, match="127.0.0.1:9"):
        OpenAIBackend("http://127.0.0.1:9/v1", "tiny", timeout_s=2).generate(["x"], SAMPLE)
    with pytest.raises(BackendRequestError, match="sequence of strings"):
        OpenAIBackend(url, "tiny").generate("x", SAMPLE)  # type: ignore[arg-type]


def test_factory_builds_the_configured_backend(local) -> None:
    url, _ = local
    backend = make_backend(BackendSettings(kind="openai", model="tiny", openai_base_url=url))
    assert isinstance(backend, OpenAIBackend) and backend.supports_json_schema
    with pytest.raises(UnknownBackend, match="expected one of vllm, openai, transformers"):
        make_backend(BackendSettings(kind="llamacpp", model="x"))
    with pytest.raises(UnknownBackend, match="need a model"):
        make_backend(BackendSettings(kind="openai"))
