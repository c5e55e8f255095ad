"""Shared helpers for the catalogue and reference-kernel tests."""

from __future__ import annotations

import types

import torch

from kz_common.ops.tolerances import Tolerance


def load_problem(source: str, name: str = "kz_problem") -> types.ModuleType:
    """exec() a problem (or solution) source into a fresh module."""
    mod = types.ModuleType(name)
    mod.__dict__["__file__"] = f"<{name}>"
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)  # noqa: S102 - trusted test sources
    return mod


def draw_inputs(problem: types.ModuleType, shape: dict[str, int], seed: int = 0) -> list[torch.Tensor]:
    """Set the problem's dim globals from `shape` and draw its inputs under a fixed seed."""
    for dim, value in shape.items():
        setattr(problem, dim, value)
    torch.manual_seed(seed)
    return problem.get_inputs()


def check_close(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, what: str = "") -> None:
    """Assert allclose(atol, rtol) and relative error norm <= tol.rel_norm, like the verifier."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != {ref.dtype}"
    o, r = out.float(), ref.float()
    assert torch.isfinite(o).all(), f"{what}: non-finite output"
    err = (o - r).abs()
    bound = tol.atol + tol.rtol * r.abs()
    worst = (err - bound).max().item() if err.numel() else 0.0
    assert worst <= 0, f"{what}: max abs err {err.max().item():.3g} exceeds atol/rtol {tol}"
    ref_norm = r.norm().item()
    if ref_norm > 0:
        rel = (o - r).norm().item() / ref_norm
        assert rel <= tol.rel_norm, f"{what}: rel error norm {rel:.3g} > {tol.rel_norm}"
