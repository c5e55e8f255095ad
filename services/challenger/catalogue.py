"""The challenger's view of the op catalogue: which ops, dtypes and shape ranges it may use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kz_common.ops import CatalogueError, OpSpec, all_ops, get_op
from services.challenger.config import ChallengerConfig
from services.challenger.exceptions import ChallengerConfigError, InvalidProposal

CPU_DTYPES = ("float32", "float16")  # the Triton interpreter emulates bf16 poorly


@dataclass(frozen=True)
class Proposal:
    """An op, dtype and shape range proposed for a challenge (target comes from the ladder)."""

    op: str
    dtype: str
    shape_range: dict[str, tuple[int, int]]


class Catalogue:
    """Allowed ops, dtypes and base ranges under a config; validates proposals."""

    def __init__(self, config: ChallengerConfig) -> None:
        self.cpu_mode = config.cpu_mode
        try:
            self.ops: list[OpSpec] = [get_op(n) for n in config.ops] if config.ops else all_ops()
        except CatalogueError as exc:
            raise ChallengerConfigError(f"challenger.ops: {exc}") from exc
        self._dtypes = {op.name: self._op_dtypes(op, config.dtypes) for op in self.ops}
        empty = [n for n, d in self._dtypes.items() if not d]
        if empty:
            raise ChallengerConfigError(f"no allowed dtype for ops {empty} under this config")
        self.families: list[str] = sorted({op.family for op in self.ops})

    def _op_dtypes(self, op: OpSpec, wanted: list[str] | None) -> tuple[str, ...]:
        allowed = [d for d in op.dtypes if not self.cpu_mode or d in CPU_DTYPES]
        return tuple(d for d in allowed if wanted is None or d in wanted)

    def dtypes(self, op: str) -> tuple[str, ...]:
        return self._dtypes[op]

    def base_range(self, op: OpSpec) -> Mapping[str, tuple[int, int]]:
        """Where challenges for `op` are drawn: its CPU-sized range or its default range."""
        return op.cpu_range if self.cpu_mode else op.default_range

    def ops_of(self, family: str) -> list[OpSpec]:
        return [op for op in self.ops if op.family == family]

    def validate(self, op: object, dtype: object, shape_range: object) -> Proposal:
        """A normalised Proposal, or InvalidProposal saying exactly what is wrong."""
        if not isinstance(op, str) or op not in self._dtypes:
            raise InvalidProposal(f"op {op!r} is not one of {sorted(self._dtypes)}")
        if dtype not in self._dtypes[op]:
            raise InvalidProposal(f"dtype {dtype!r} is not allowed for {op}; use one of {self._dtypes[op]}")
        spec = get_op(op)
        if not isinstance(shape_range, Mapping):
            raise InvalidProposal(f"shape_range must be an object of [min, max] pairs, got {shape_range!r}")
        try:
            rng = spec.validate_range({d: tuple(v) if isinstance(v, list) else v
                                       for d, v in shape_range.items()})
        except CatalogueError as exc:
            raise InvalidProposal(str(exc)) from exc
        base = self.base_range(spec)
        outside = [d for d, (lo, hi) in rng.items() if lo < base[d][0] or hi > base[d][1]]
        if outside:
            raise InvalidProposal(
                f"shape_range for {outside} must stay within " + ", ".join(
                    f"{d} in [{base[d][0]}, {base[d][1]}]" for d in outside))
        return Proposal(op, str(dtype), rng)
