"""The model a run uses when none is configured: the locally built tiny Llama.

No pretrained weights can be downloaded here, so the embedded default is a
small LlamaForCausalLM with a tokenizer trained on the reference-kernel corpus.
It is a real model that the solver samples and the trainer fine-tunes, but it
has learned nothing useful: expect its samples to fail extraction. Point
`services.solver.model` / `services.trainer.base_model` at a real model
directory for real results.
"""

from __future__ import annotations

from pathlib import Path

from kz_common.config import Settings


def resolve_model(configured: str, settings: Settings) -> str:
    """`configured` if set, else the (cached) tiny model under the data dir."""
    if configured:
        return configured
    from kz_common.kernels import available_ops, reference_solution
    from kz_common.llm.tiny import build_tiny_model

    # The tokenizer learns from the seed corpus (reference kernels): byte-level BPE still
    # covers any prompt text. Solver and trainer both land on the same cached directory.
    texts = [reference_solution(op) for op in available_ops()]
    return str(build_tiny_model(settings.paths.data_dir / "models", texts))
