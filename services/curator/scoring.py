"""The score that ranks passing samples (higher is better).

    score = w_perf   * clip(log2(achieved / target), -3, 3)      # 0 when perf not measured
          + w_margin * clip(log10(rtol / max(err, 1e-12)), 0, 3) / 3
          - w_size   * log2(1 + code_tokens / 1000)

achieved/target: `speedup_vs_naive / value` for a naive_multiple target and
`speedup_vs_optimized / value` for an optimized_fraction target, so 0 means
"exactly on target" and each doubling adds w_perf. The margin term rewards error
far below the dtype/family tolerance (kz_common.ops.tolerance_for), saturating at
three orders of magnitude. The size term prefers shorter code mildly: a 2x
longer solution must be about w_size/w_perf faster to tie.
"""

from __future__ import annotations

import math

from kz_common.ops import tolerance_for, torch_dtype
from schemas import ChallengeContext, SolutionVerified
from services.curator.config import CuratorConfig
from services.curator.tokens import normalised_tokens


def perf_ratio(verdict: SolutionVerified, ctx: ChallengeContext) -> float | None:
    """Achieved / target performance, None when not measured."""
    if not verdict.perf_measured:
        return None
    achieved = verdict.speedup_vs_naive if ctx.target.kind == "naive_multiple" else verdict.speedup_vs_optimized
    if achieved is None or achieved <= 0:
        return None
    return achieved / ctx.target.value


def score(verdict: SolutionVerified, ctx: ChallengeContext, code: str, cfg: CuratorConfig) -> float:
    """Rank of one passing sample; see the module docstring for the formula."""
    ratio = perf_ratio(verdict, ctx)
    perf = 0.0 if ratio is None else max(-3.0, min(3.0, math.log2(ratio)))
    rtol = tolerance_for(torch_dtype(ctx.dtype), ctx.family).rtol
    err = verdict.max_rel_error
    margin = 0.0 if err is None else max(0.0, min(3.0, math.log10(rtol / max(err, 1e-12)))) / 3
    size = math.log2(1 + len(normalised_tokens(code)) / 1000)
    return round(cfg.w_perf * perf + cfg.w_margin * margin - cfg.w_size * size, 6)
