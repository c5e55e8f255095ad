"""Load a causal LM + tokenizer (optionally with a LoRA adapter) from a local dir or hub id."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kz_common.llm.exceptions import ModelLoadError


@dataclass
class LoadedModel:
    """A model ready for `generate`, with the tokenizer and where it came from."""

    model: Any  # PreTrainedModel, or PeftModel when an adapter is attached
    tokenizer: Any  # PreTrainedTokenizerBase
    model_id: str
    device: str


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; other values pass through."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but no CUDA GPU is visible")
    return device


def resolve_dtype(dtype: str, device: str):  # -> torch.dtype
    """'auto' -> bfloat16 on GPUs that support it, float32 otherwise (CPU half math is slow)."""
    import torch

    if dtype == "auto":
        if device.startswith("cuda") and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in table:
        raise ModelLoadError(f"unknown dtype {dtype!r}; expected one of auto, {', '.join(table)}")
    return table[dtype]


def load_causal_lm(
    path_or_id: str | Path,
    device: str = "auto",
    adapter: str | Path | None = None,
    *,
    dtype: str = "auto",
    local_files_only: bool = True,
    adapter_name: str = "default",
) -> LoadedModel:
    """Load model + tokenizer from `path_or_id`; with `adapter`, attach that PEFT LoRA dir.

    `local_files_only` defaults to True: KernelZero machines may have no hub
    access, and a silent download attempt would hang rather than fail clearly.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = resolve_device(device)
    source = str(path_or_id)
    if isinstance(path_or_id, Path) and not path_or_id.is_dir():
        raise ModelLoadError(f"model directory {path_or_id} does not exist")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_files_only)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=resolve_dtype(dtype, dev), local_files_only=local_files_only
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {source!r}: {exc}") from exc
    if tokenizer.pad_token_id is None:  # many instruct models ship without a pad token
        tokenizer.pad_token = tokenizer.eos_token
    model.to(dev)  # type: ignore[arg-type]  # transformers stubs mistype .to
    model.eval()
    if adapter is not None:
        model = attach_adapter(model, adapter, adapter_name)
    return LoadedModel(model=model, tokenizer=tokenizer, model_id=source, device=dev)


def attach_adapter(model: Any, adapter: str | Path, name: str) -> Any:
    """Attach a LoRA adapter dir to `model` (wrapping it in a PeftModel the first time)."""
    from peft import PeftModel

    path = Path(adapter)
    if not (path / "adapter_config.json").is_file():
        raise ModelLoadError(f"{path} is not a PEFT adapter directory (no adapter_config.json)")
    try:
        if isinstance(model, PeftModel):
            if name not in model.peft_config:
                model.load_adapter(str(path), adapter_name=name)
            model.set_adapter(name)
            return model
        peft_model = PeftModel.from_pretrained(model, str(path), adapter_name=name)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelLoadError(f"cannot load adapter {path}: {exc}") from exc
    peft_model.eval()
    return peft_model
