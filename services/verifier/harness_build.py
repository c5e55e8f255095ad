"""The candidate's models, built in the sandbox (copied next to the harness as kz_build.py).

ModelNew's constructor is candidate code too, and the harness first runs it before it has
any GPU lock. So the harness builds under kz_trace's compile_only (a kernel the
constructor launches is compiled, not run) and, if a launch was held back, builds again
once its shared lock is granted. Standalone: torch only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

_manual_seed = torch.manual_seed  # bound before the candidate's code runs


def build_model(mod: Any, shape: dict, inputs_dir: str, device: str,
                load: Callable[..., Any]) -> torch.nn.Module:
    """ModelNew for one shape: the reference's init inputs and seed, then its state if the
    parameter names match."""
    init = load(os.path.join(inputs_dir, shape["init_file"]), weights_only=True)
    _manual_seed(shape["init_seed"])
    model = mod.ModelNew(*init)
    if shape.get("state_file"):
        state = load(os.path.join(inputs_dir, shape["state_file"]), weights_only=True)
        own = model.state_dict()
        if own and set(own) == set(state):
            model.load_state_dict(state)
    return model.to(device)


def build_all(mod: Any, job: dict, load: Callable[..., Any]) -> dict[int, torch.nn.Module] | str:
    """A model per shape the job's calls use, or why construction failed."""
    models: dict[int, torch.nn.Module] = {}
    try:
        for s in sorted({c["shape_index"] for c in job["calls"]}):
            models[s] = build_model(mod, job["shapes"][s], job["inputs"], job["device"], load)
    except BaseException as exc:  # noqa: BLE001 - every failure is a verdict
        return f"ModelNew construction failed: {type(exc).__name__}: {str(exc)[:300]}"
    return models
