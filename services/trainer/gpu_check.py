"""One-off GPU check: a few LoRA steps of the tiny model on cuda, printing time/step and loss.

    python -m services.trainer.gpu_check --out DIR [--steps 20] [--hidden 256 --layers 4]

Standalone: builds the tiny model locally (no downloads) from the kernel-like
text below, trains a LoRA adapter with `train_lora` on cuda (bf16 base, fp32
adapter), reloads the adapter with peft and prints one JSON line of results.
Exit status 1 when cuda is missing or the loss is not finite.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from services.trainer.config import LoraTrainConfig
from services.trainer.lora import TrainExample, train_lora

_CODE = '''import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)

    import torch

    from kz_common.llm.tiny import build_tiny_model

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "cuda is not available"}))
        return 1
    base = build_tiny_model(args.out / "models", [_CODE] * 4, hidden=args.hidden, layers=args.layers)
    examples = [TrainExample(f"s{i}", f"Write a Triton add kernel (variant {i}).\n", _CODE) for i in range(32)]
    cfg = LoraTrainConfig(device=args.device, max_steps=args.steps, batch_size=args.batch_size, epochs=10)
    result = train_lora(base, examples, cfg, args.out / "adapter", dataset_hash="gpu-check")
    reloaded = _reload(base, result.adapter_dir, args.device)
    m = result.metrics
    ok = math.isfinite(m["loss_last"]) and reloaded
    print(json.dumps({
        "ok": ok, "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "steps": m["steps"], "sec_per_step": m["sec_per_step"], "loss_first": m["loss_first"],
        "loss_last": m["loss_last"], "seconds": m["seconds"], "adapter": str(result.adapter_dir),
        "adapter_reloads": reloaded,
    }))
    return 0 if ok else 1


def _reload(base: Path, adapter: Path, device: str) -> bool:
    """Whether the saved adapter loads back with peft onto the base model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True).to(device)  # type: ignore[arg-type]
    return isinstance(PeftModel.from_pretrained(model, str(adapter)), PeftModel)


if __name__ == "__main__":
    sys.exit(main())
