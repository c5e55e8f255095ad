"""The op registry: name -> OpSpec."""

from __future__ import annotations

from kz_common.ops import (
    attention,
    elementwise,
    fused_activation,
    matmul,
    normalization,
    reduction,
    softmax,
)
from kz_common.ops.exceptions import UnknownOpError
from kz_common.ops.spec import OpSpec

_REGISTRY: dict[str, OpSpec] = {}
for _module in (elementwise, fused_activation, softmax, normalization, reduction, matmul, attention):
    for _spec in _module.OPS:
        if _spec.name in _REGISTRY:
            raise RuntimeError(f"op {_spec.name!r} registered twice")
        _REGISTRY[_spec.name] = _spec


def get_op(name: str) -> OpSpec:
    """The OpSpec named `name`, or UnknownOpError listing the known ops."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownOpError(f"unknown op {name!r}; known ops: {sorted(_REGISTRY)}") from None


def all_ops(family: str | None = None) -> list[OpSpec]:
    """Every op in registration order, optionally only those of one family."""
    return [s for s in _REGISTRY.values() if family is None or s.family == family]


def op_names() -> list[str]:
    """Names of every op, in registration order."""
    return list(_REGISTRY)


def cpu_test_range(op: str) -> dict[str, tuple[int, int]]:
    """A small shape range for `op` that runs in reasonable time under TRITON_INTERPRET=1."""
    return dict(get_op(op).cpu_range)
