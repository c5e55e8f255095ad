"""The problem module as the reference worker drives it (copied next to it as
kz_problem_api.py): loading it, its shapes and dims, its models, its outputs.

A problem defines Model and get_inputs, optionally get_init_inputs, ModelOpt and
KZ_SHAPES (dim overrides per shape); its int globals are the dims get_inputs and
get_init_inputs read. Standalone (torch only): the repo is not visible in the sandbox.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch


def load(work: str, device: str) -> Any:
    """The problem's module from `work`/problem.py, KZ_DEVICE set before its body runs
    (which may read it) and again after (a default the body set gives way)."""
    spec = importlib.util.spec_from_file_location("kz_problem", os.path.join(work, "problem.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    mod.KZ_DEVICE = device  # type: ignore[attr-defined]
    spec.loader.exec_module(mod)
    mod.KZ_DEVICE = device  # type: ignore[attr-defined]
    return mod


def select_shapes(mod: object, k: int) -> list[dict]:
    """At most `k` of the problem's shapes, spread evenly from its first to its last."""
    shapes = list(getattr(mod, "KZ_SHAPES", None) or [{}])
    if len(shapes) <= k:
        return shapes
    idx = sorted({round(i * (len(shapes) - 1) / (k - 1)) for i in range(k)})
    return [shapes[i] for i in idx]


def dims(mod: object) -> dict[str, int]:
    return {k: v for k, v in vars(mod).items()
            if type(v) is int and not k.startswith("_") and k.isidentifier()}


def set_dims(mod: object, overrides: dict) -> None:
    """Set a shape's dims on the problem module: get_inputs/get_init_inputs read them."""
    for k, v in overrides.items():
        setattr(mod, k, v)


def build(mod: object, cls_name: str, init: list, seed: int, device: str) -> torch.nn.Module:
    torch.manual_seed(seed)
    return getattr(mod, cls_name)(*init).to(device)


def flatten(out: object) -> list[torch.Tensor]:
    outs = [out] if isinstance(out, torch.Tensor) else list(out)  # type: ignore[call-overload]
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise TypeError("Model.forward must return a tensor or a tuple of tensors")
    return outs
