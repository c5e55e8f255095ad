"""A real few-step LoRA run on the tiny model: peft format, manifest, prompt masking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from services.trainer.config import LLAMA_TARGETS, LoraTrainConfig
from services.trainer.exceptions import NoExamplesError
from services.trainer.lora import TrainExample, _encode, read_manifest, train_lora
from tests.services.curator.samples import CLEAN

FAST = LoraTrainConfig(max_steps=4, batch_size=2, lr=5e-3, device="cpu")


def examples(n: int = 3) -> list[TrainExample]:
    return [TrainExample(f"s{i}", f"Write softmax number {i}.\n", f"```python\n{CLEAN}```\n") for i in range(n)]


def test_train_saves_a_loadable_peft_adapter(tiny_model: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "round-0001"
    result = train_lora(tiny_model, examples(), FAST, out, dataset_hash="abc")
    assert {"adapter_config.json", "adapter_model.safetensors", "manifest.json"} <= {p.name for p in out.iterdir()}
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 16 and cfg["lora_alpha"] == 32 and cfg["lora_dropout"] == 0.05
    assert set(cfg["target_modules"]) == set(LLAMA_TARGETS)
    weights = load_file(out / "adapter_model.safetensors")
    assert weights and all("lora_" in k for k in weights)
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in weights.items())  # it trained
    manifest = read_manifest(out)
    assert manifest is not None
    assert manifest["dataset_hash"] == "abc" and manifest["sample_ids"] == ["s0", "s1", "s2"]
    assert manifest["base_model"] == str(tiny_model) and manifest["metrics"]["steps"] == 4
    assert result.metrics["loss_last"] < result.metrics["loss_first"]
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    tuned = PeftModel.from_pretrained(base, str(out))
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        with tuned.disable_adapter():
            plain = tuned(ids).logits
        assert not torch.allclose(tuned(ids).logits, plain)


def test_loss_only_on_solution_tokens(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    ex = examples(1)[0]
    (ids, labels), = _encode([ex], tok, FAST)
    n_prompt = len(tok(ex.prompt, add_special_tokens=False)["input_ids"])
    assert (labels[:n_prompt] == -100).all()
    assert (labels[n_prompt:] == ids[n_prompt:]).all()
    assert int(labels[-1]) == tok.eos_token_id


def test_chat_template_prompt_is_masked_too(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    ex = examples(1)[0]
    (_, labels), = _encode([ex], tok, FAST.model_copy(update={"use_chat_template": True}))
    rendered = tok.apply_chat_template([{"role": "user", "content": ex.prompt}], tokenize=False,
                                       add_generation_prompt=True)
    n_prompt = len(tok(rendered, add_special_tokens=False)["input_ids"])
    assert rendered != ex.prompt and (labels[:n_prompt] == -100).all() and labels[n_prompt] != -100


def test_examples_that_do_not_fit_are_skipped(tiny_model: Path, tmp_path: Path) -> None:
    short = LoraTrainConfig(max_seq_len=16, max_steps=1, device="cpu")
    with pytest.raises(NoExamplesError):
        train_lora(tiny_model, examples(), short, tmp_path / "a")
    fit = [TrainExample("tiny", "a", "b"), *examples(1)]
    result = train_lora(tiny_model, fit, short, tmp_path / "b")
    assert result.metrics["examples"] == 1 and result.metrics["skipped"] == 1
