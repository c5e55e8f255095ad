"""The frozen held-out evaluation set.

A task type is (op family, dtype). Each type seen so far gets the first
`eval_ops_per_type` ops of its family (by name) that support the dtype, each over
one fixed range: the middle half (in log2) of the op's catalogue range per dim.
Everything is a pure function of the task type and the config, so a type's
held-out tasks are identical in every round; only challenge ids change, because
each round's solver samples them anew. Random generator ranges essentially never
equal these ranges exactly, and the curator drops any train verdict whose task
is exactly an eval task, so held-out tasks never enter training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kz_common.ops import all_ops, render_problem
from schemas import ChallengeCreated, Target
from services.trainer.config import TrainerConfig


def task_type(family: str, dtype: str) -> str:
    return f"{family}/{dtype}"


@dataclass(frozen=True)
class HeldOutTask:
    op: str
    family: str
    dtype: str
    shape_range: dict[str, tuple[int, int]]

    @property
    def type(self) -> str:
        return task_type(self.family, self.dtype)


def middle_half(lo: int, hi: int) -> tuple[int, int]:
    """The middle half of [lo, hi] on a log2 scale."""
    a, b = math.log2(lo), math.log2(hi)
    return max(lo, round(2 ** (a + (b - a) / 4))), min(hi, round(2 ** (a + 3 * (b - a) / 4)))


def heldout_tasks(types: set[tuple[str, str]], cfg: TrainerConfig) -> list[HeldOutTask]:
    """The held-out tasks covering `types` ((family, dtype) pairs), in a fixed order."""
    tasks = []
    for family, dtype in sorted(types):
        ops = sorted((o for o in all_ops(family) if dtype in o.dtypes), key=lambda o: o.name)
        for op in ops[: cfg.eval_ops_per_type]:
            base = op.cpu_range if cfg.eval_shape_source == "cpu" else op.default_range
            rng = {d: middle_half(*base[d]) for d in op.dims}
            tasks.append(HeldOutTask(op.name, family, dtype, rng))
    return tasks


def eval_challenges(
    tasks: list[HeldOutTask], *, round: int, arm: int, cfg: TrainerConfig, adapter_path: str | None = None
) -> list[ChallengeCreated]:
    """Challenges measuring round `arm`'s adapter (at `adapter_path`; arm 0 = base model) in round `round`."""
    device = "cpu" if cfg.eval_shape_source == "cpu" else "cuda"
    return [
        ChallengeCreated(
            challenge_id=f"eval-r{round}-a{arm}-{t.op}-{t.dtype}",
            op=t.op, family=t.family, dtype=t.dtype,  # type: ignore[arg-type]
            shape_range=t.shape_range,
            target=Target(kind="naive_multiple", value=cfg.eval_target_value),
            difficulty=0, generator="programmatic", round=round,
            problem_source=render_problem(t.op, t.dtype, t.shape_range, device=device),
            purpose="eval", eval_round=arm, eval_adapter_path=adapter_path if arm else None,
        )
        for t in tasks
    ]
