"""`train_lora`: one LoRA adapter from the base model on instruction/solution pairs.

Loss is on the solution tokens only (prompt labels are -100). The adapter is
always trained from the base weights, never on top of an earlier adapter, and
saved in standard peft format (adapter_config.json + adapter_model.safetensors,
loadable by peft and vLLM) next to a manifest.json. The run is written to a
temporary directory and renamed into place, so a crash leaves no half adapter.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.trainer.config import LoraTrainConfig
from services.trainer.exceptions import NoExamplesError, TrainingError

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class TrainExample:
    sample_id: str
    prompt: str
    completion: str


@dataclass(frozen=True)
class TrainResult:
    adapter_dir: Path
    metrics: dict[str, float]
    manifest: dict[str, Any] = field(default_factory=dict)


def train_lora(
    base_model_path: str | Path,
    examples: Sequence[TrainExample],
    config: LoraTrainConfig,
    out_dir: Path,
    *,
    dataset_hash: str = "",
    extra_manifest: dict[str, Any] | None = None,
) -> TrainResult:
    """Train a LoRA adapter on `examples` and save it (with manifest.json) to `out_dir`."""
    import torch

    started = time.time()
    torch.manual_seed(config.seed)
    model, tokenizer, device = _load(base_model_path, config)
    seqs = _encode(examples, tokenizer, config)
    if not seqs:
        raise NoExamplesError(f"none of {len(examples)} examples fits max_seq_len={config.max_seq_len}")
    model = _wrap(model, config)
    losses, step_times = _fit(model, seqs, tokenizer.pad_token_id, config, device)
    steady = sorted(step_times[1:] or step_times)  # step 1 pays for kernel warm-up
    metrics = {
        "examples": float(len(seqs)), "skipped": float(len(examples) - len(seqs)),
        "steps": float(len(losses)), "loss_first": losses[0], "loss_last": losses[-1],
        "loss_mean": sum(losses) / len(losses),
        "train_tokens": float(sum(int((lab != -100).sum()) for _, lab in seqs)),
        "seconds": round(time.time() - started, 3),
        "sec_per_step": round(steady[len(steady) // 2], 4),
    }
    manifest = {
        "base_model": str(base_model_path), "dataset_hash": dataset_hash,
        "sample_ids": [e.sample_id for e in examples], "metrics": metrics,
        "created_at": datetime.now(UTC).isoformat(), "device": device,
        "lora": config.model_dump(mode="json"), **(extra_manifest or {}),
    }
    _save(model, manifest, Path(out_dir))
    return TrainResult(Path(out_dir), metrics, manifest)


def read_manifest(adapter_dir: Path) -> dict[str, Any] | None:
    """The manifest of a finished adapter directory, None when there is none."""
    path = Path(adapter_dir) / MANIFEST
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# ------------------------------------------------------------------ steps


def _load(base: str | Path, config: LoraTrainConfig) -> tuple[Any, Any, str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = config.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if config.dtype == "auto":
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        dtype = getattr(torch, config.dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(base), dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load base model {base!r}: {exc}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model.to(device), tokenizer, device  # type: ignore[arg-type]


def _encode(examples: Sequence[TrainExample], tokenizer: Any, config: LoraTrainConfig) -> list[tuple[Any, Any]]:
    """(input_ids, labels) per example that fits; prompt positions get label -100."""
    import torch

    out = []
    for ex in examples:
        text = _chat(tokenizer, ex.prompt) if config.use_chat_template else ex.prompt
        prompt = tokenizer(text, add_special_tokens=config.add_special_tokens)["input_ids"]
        answer = tokenizer(ex.completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(prompt) + len(answer) > config.max_seq_len:
            continue
        ids = torch.tensor(prompt + answer, dtype=torch.long)
        labels = torch.tensor([-100] * len(prompt) + answer, dtype=torch.long)
        out.append((ids, labels))
    return out


def _chat(tokenizer: Any, prompt: str) -> str:
    """The prompt as one user turn, rendered exactly like kz_common.llm's HF backend does."""
    messages = [{"role": "user", "content": prompt}]
    if not getattr(tokenizer, "chat_template", None):
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    text: str = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text


def _wrap(model: Any, config: LoraTrainConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    present = {name.split(".")[-1] for name, _ in model.named_modules()}
    targets = [t for t in config.target_modules if t in present]
    if not targets:
        raise TrainingError(f"none of the target modules {config.target_modules} exists in the model")
    lora = LoraConfig(r=config.r, lora_alpha=config.alpha, lora_dropout=config.dropout,
                      target_modules=targets, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    for p in model.parameters():  # adapter weights in fp32 even over a bf16 base: stable updates
        if p.requires_grad:
            p.data = p.data.float()
    return model


def _fit(
    model: Any, seqs: list[tuple[Any, Any]], pad_id: int, config: LoraTrainConfig, device: str
) -> tuple[list[float], list[float]]:
    """(loss per optimiser step, seconds per optimiser step)."""
    import torch
    from transformers import get_cosine_schedule_with_warmup

    per_epoch = math.ceil(len(seqs) / (config.batch_size * config.grad_accum))
    total = per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    sched = get_cosine_schedule_with_warmup(opt, math.ceil(config.warmup_ratio * total), total)
    rng = random.Random(config.seed)
    model.train()
    losses: list[float] = []
    times: list[float] = []
    batches = _batches(seqs, config.batch_size, rng)
    while len(losses) < total:
        t0 = time.perf_counter()
        step_loss = 0.0
        for _ in range(config.grad_accum):
            ids, labels, mask = _pad(next(batches), pad_id, device)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss / config.grad_accum
            loss.backward()
            step_loss += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(round(step_loss, 6))
    model.eval()
    return losses, times


def _batches(seqs: list[tuple[Any, Any]], size: int, rng: random.Random):  # type: ignore[no-untyped-def]
    """Endless epochs of shuffled micro-batches."""
    while True:
        order = list(range(len(seqs)))
        rng.shuffle(order)
        for i in range(0, len(order), size):
            yield [seqs[j] for j in order[i : i + size]]


def _pad(batch: list[tuple[Any, Any]], pad_id: int, device: str) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (x, y) in enumerate(batch):
        ids[i, : len(x)], labels[i, : len(y)], mask[i, : len(x)] = x, y, 1
    return ids.to(device), labels.to(device), mask.to(device)


def _save(model: Any, manifest: dict[str, Any], out_dir: Path) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".tmp-{out_dir.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)  # peft: adapter_config.json + adapter_model.safetensors
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
