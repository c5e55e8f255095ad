"""Shared helpers for the catalogue and reference-kernel tests."""

from __future__ import annotations

import copy
import types
from collections.abc import Iterable

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


def check_model_at_scales(problem: types.ModuleType, family: str, shapes: list[dict[str, int]],
                          scales: Iterable[int], seeds: Iterable[int], label: str) -> None:
    """The problem's Model against its own float64 run, and ModelOpt against Model, with every
    input scaled by 2^exp as the verifier's reference worker scales its trials."""
    from kz_common.ops.tolerances import tolerance_for

    model, opt = problem.Model(), problem.ModelOpt()
    hi = copy.deepcopy(model).to(torch.float64)
    tol = tolerance_for(problem.KZ_DTYPE, family)
    for shape in shapes:
        for exp in scales:
            for seed in seeds:
                inputs = [x * 2.0 ** exp for x in draw_inputs(problem, shape, seed=seed)]
                what = f"{label}/{shape}/2^{exp}/seed {seed}"
                with torch.no_grad():
                    ref = model(*inputs)
                    exact = hi(*[x.double() for x in inputs]).to(ref.dtype)
                    base = opt(*inputs)
                assert ref.dtype == problem.KZ_DTYPE, what
                check_close(ref, exact, tol, what + " Model vs float64")
                check_close(base, ref, tol, what + " ModelOpt vs Model")
