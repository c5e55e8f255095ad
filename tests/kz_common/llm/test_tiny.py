"""Tiny model: build, cache, save/load, training, seeded generation, LoRA round trip."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from kz_common.llm.backends import AdapterRef
from kz_common.llm.backends.hf import TransformersBackend
from kz_common.llm.exceptions import ModelBuildError, ModelLoadError
from kz_common.llm.loading import load_causal_lm
from kz_common.llm.tiny import MARKER, build_tiny_model
from schemas.events import Sampling
from tests.kz_common.llm.helpers import TEST_SPEC, corpus

SAMPLE = Sampling(temperature=0.8, top_p=0.95, max_tokens=12, seed=7)
GREEDY = Sampling(temperature=0.0, top_p=1.0, max_tokens=12, seed=0)


def test_build_saves_a_loadable_llama(tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.hidden_size == TEST_SPEC["hidden"]
    assert model.config.vocab_size == len(tok) <= TEST_SPEC["vocab_size"]
    text = "def forward(self, x):\n\treturn x * 2  # é ✓\n"
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: lossless round trip
    assert json.loads((tiny_model / MARKER).read_text())["n_texts"] == len(corpus())


def test_build_is_cached_by_inputs(tiny_model: Path) -> None:
    root = tiny_model.parent
    start = time.monotonic()
    again = build_tiny_model(root, corpus(), train_steps=2, **TEST_SPEC)
    assert again == tiny_model and time.monotonic() - start < 1.0
    other = build_tiny_model(root, corpus()[:5], train_steps=0, **TEST_SPEC)
    assert other != tiny_model and (other / MARKER).is_file()


@pytest.mark.parametrize(
    "texts, kwargs, match",
    [([], {}, "non-empty"), (["  "], {}, "non-empty"), (["x"], {"vocab_size": 100}, "vocab_size"),
     (["x"], {"hidden": 40}, "hidden")],
)
def test_build_rejects_bad_inputs(tmp_path: Path, texts: list[str], kwargs: dict, match: str) -> None:
    with pytest.raises(ModelBuildError, match=match):
        build_tiny_model(tmp_path, texts, **kwargs)


def test_training_makes_it_regurgitate(tmp_path: Path) -> None:
    text = "@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pid = 0\n"
    path = build_tiny_model(tmp_path, [text], vocab_size=300, hidden=64, layers=1, train_steps=80)
    backend = TransformersBackend(path, device="cpu")
    prompt = text[:20]
    out = backend.generate([prompt], Sampling(temperature=0, top_p=1, max_tokens=40, seed=0))[0][0]
    assert (prompt + out).startswith(text.rstrip("\n"))


def test_seeded_sampling_is_reproducible_per_sample(tiny_model: Path) -> None:
    backend = TransformersBackend(tiny_model, device="cpu")
    three = backend.generate(["class Model", "def forward"], SAMPLE, n=3)
    assert len(three) == 2 and all(len(row) == 3 for row in three)
    again = backend.generate(["class Model", "def forward"], SAMPLE, n=3)
    assert again == three
    # sample j is drawn from seed + j, whatever n it was requested with
    shifted = SAMPLE.model_copy(update={"seed": SAMPLE.seed + 2})
    assert backend.generate(["class Model"], shifted, n=1)[0][0] == three[0][2]
    assert len(set(three[0])) > 1  # different seeds, different samples


def test_load_rejects_missing_dirs(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_causal_lm(tmp_path / "nope", "cpu")


def test_lora_adapter_round_trip(tiny_model: Path, lora_adapter: Path, tmp_path: Path) -> None:
    from peft import PeftModel

    base = load_causal_lm(tiny_model, "cpu")
    tuned = load_causal_lm(tiny_model, "cpu", adapter=lora_adapter)
    assert isinstance(tuned.model, PeftModel)
    ids = base.tokenizer("class Model(nn.Module):", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert not torch.allclose(base.model(ids).logits, tuned.model(ids).logits)
    with pytest.raises(ModelLoadError, match="adapter_config.json"):
        load_causal_lm(tiny_model, "cpu", adapter=tmp_path)


def test_backend_switches_adapters_without_reload(tiny_model: Path, lora_adapter: Path) -> None:
    backend = TransformersBackend(tiny_model, device="cpu")
    ref = AdapterRef.for_round(1, lora_adapter)
    plain = backend.generate(["class Model"], GREEDY)
    tuned = backend.generate(["class Model"], GREEDY, adapter=ref)
    assert tuned != plain
    assert backend.generate(["class Model"], GREEDY) == plain  # base model again
    assert backend.generate(["class Model"], GREEDY, adapter=ref) == tuned
