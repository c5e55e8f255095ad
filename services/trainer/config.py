"""Trainer and evaluator configuration: frozen sections of `Settings.services`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LoraTrainConfig(_Section):
    """Hyper-parameters of one `train_lora` run."""

    # LoRA rank/alpha/dropout per the design; alpha = 2r keeps the update scale at 2.
    r: int = Field(default=16, ge=1)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    # Every attention and MLP projection of a Llama-style block.
    target_modules: tuple[str, ...] = LLAMA_TARGETS
    # AdamW peak learning rate, cosine-decayed to 0 after a linear warmup.
    lr: float = Field(default=2e-4, gt=0)
    warmup_ratio: float = Field(default=0.03, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0)
    # 1-2 epochs: more over-fits the small curated sets.
    epochs: int = Field(default=2, ge=1, le=10)
    # Cap on optimiser steps (None = epochs decide); tests and gpu_check set a few.
    max_steps: int | None = Field(default=None, ge=1)
    # Sequences per micro-batch and micro-batches per optimiser step.
    batch_size: int = Field(default=4, ge=1)
    grad_accum: int = Field(default=1, ge=1)
    # Examples longer than this (prompt + completion) are skipped, never truncated: cut code is wrong code.
    # The solver's prompts carry few-shot reference kernels: 2-4k tokens before the answer.
    max_seq_len: int = Field(default=8192, ge=16)
    max_grad_norm: float = Field(default=1.0, gt=0)
    # "auto": cuda when available; the tiny model trains on cpu in seconds.
    device: str = "auto"
    # "auto": bfloat16 on cuda (fp32 master weights of the adapter), float32 on cpu.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # Trades compute for memory on long sequences with big models.
    gradient_checkpointing: bool = False
    # Must match how the solver encodes prompts (the HF backend uses add_special_tokens=False).
    add_special_tokens: bool = False
    # Must match services.solver use_chat_template: the prompt as one user turn of the chat template.
    use_chat_template: bool = False
    seed: int = 0


class TrainerConfig(_Section):
    # Base model directory or hub id; every round's adapter starts from it (never stacked).
    base_model: str = ""
    # Round adapters land in adapters_dir/round-NNNN (peft format + manifest.json).
    adapters_dir: Path = Path("var/adapters")
    train: LoraTrainConfig = LoraTrainConfig()
    # Reference kernels in the prompt: must equal services.solver few_shot, or prompts differ.
    few_shot: int = Field(default=2, ge=0, le=8)
    # Held-out set: ops per (family, dtype) task type (sorted by name) and their fixed target.
    eval_ops_per_type: int = Field(default=2, ge=1)
    eval_target_value: float = Field(default=1.0, gt=0)
    # Which catalogue range the held-out challenges use: "cpu" for interpreter runs, else "default".
    eval_shape_source: Literal["default", "cpu"] = "default"
    # Also re-evaluate the incumbent (eval_round = incumbent, 0 = base model) on each round's set,
    # so candidate and incumbent are measured side by side by the same solver and verifier.
    remeasure_incumbent: bool = True

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> TrainerConfig:
        return cls.model_validate(services.get("trainer", {}))


class EvaluatorConfig(_Section):
    # "no_regression": promote unless significantly worse; "z_test": significant gain; "margin": fixed gain.
    rule: Literal["no_regression", "z_test", "margin"] = "no_regression"
    # One-sided z cut-off (1.645 is p < 0.05): no_regression rejects z <= -it, z_test needs z >= it.
    z_threshold: float = Field(default=1.645, gt=0)
    # For rule="margin": candidate pass rate must exceed the incumbent's by at least this.
    margin: float = 0.02
    # Fewer eval samples than this in either arm: not promoted (too noisy to decide).
    min_samples: int = Field(default=20, ge=1)
    # Veto: any task type with >= min_type_samples in both arms dropping by more than this.
    max_type_drop: float = Field(default=0.25, gt=0, le=1)
    # A type with fewer samples than this in either arm cannot veto (its rate is too noisy).
    min_type_samples: int = Field(default=8, ge=1)
    # Decide with what arrived once this long (by event time) has passed since the eval set went out.
    timeout_s: float = Field(default=3600.0, gt=0)

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> EvaluatorConfig:
        return cls.model_validate(services.get("evaluator", {}))
