"""Shared test helpers: a tiny-model corpus and real (randomly initialised) LoRA adapters."""

from __future__ import annotations

from pathlib import Path

from kz_common.ops import all_ops

TEST_SPEC = {"vocab_size": 400, "hidden": 64, "layers": 1}


def corpus() -> list[str]:
    """Python text from the op catalogue: enough code for a byte-level BPE to learn from."""
    texts = []
    for op in all_ops():
        texts += [op.reference_source, op.baseline_source, op.inputs_source]
    return texts


def make_lora_adapter(model_dir: Path, out_dir: Path, *, seed: int = 0, r: int = 4) -> Path:
    """Save a real PEFT LoRA adapter for `model_dir` whose weights are random, not zero.

    Zero-initialised B (PEFT's default) would make the adapter a no-op; random
    init makes its effect on the outputs observable, as a trained one would be.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = LoraConfig(r=r, lora_alpha=4 * r, target_modules=["q_proj", "v_proj", "o_proj"],
                     init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, cfg)
    peft_model.save_pretrained(out_dir)
    return out_dir
