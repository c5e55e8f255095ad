"""Curator configuration: a frozen section validated from `Settings.services["curator"]`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class CuratorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # CPU runs measure no performance; set False there so passing samples can still be kept.
    require_perf: bool = True
    # A verdict whose run on unseen inputs (the verifier's holdouts) was this much slower than its
    # timed median is not kept: its speed came from inputs it had seen (a cache) or is unconfirmed.
    max_holdout_ratio: float = Field(default=1.25, gt=1)
    # A window closes after this many train verdicts (or when a newer round's verdict arrives).
    window_verdicts: int = Field(default=200, ge=1)
    # Fraction of a window's de-duplicated best-per-challenge candidates kept (5-10% per the design).
    keep_fraction: float = Field(default=0.10, gt=0, le=1)
    # Never keep fewer than this per window when anything passed: small windows still feed training.
    min_keep_per_window: int = Field(default=1, ge=0)
    # Weights of the score: perf (log2 speedup over target), numerical margin, code size penalty.
    w_perf: float = 1.0
    w_margin: float = 0.25
    w_size: float = 0.1
    # MinHash: permutations, shingle length in normalised tokens, Jaccard threshold for "same code".
    minhash_perm: int = Field(default=128, ge=16)
    shingle_len: int = Field(default=5, ge=1)
    dup_threshold: float = Field(default=0.8, gt=0, le=1)
    # Shape LSH: cell width in log2 units (1.0 = a factor of two) and number of shifted grids.
    shape_cell_log2: float = Field(default=1.0, gt=0)
    shape_grids: int = Field(default=2, ge=1)
    # Redundant-variant rule: normalised-token similarity above which two kernels are "the same".
    variant_similarity: float = Field(default=0.9, gt=0, le=1)
    # Record preference pairs against failed / rule-hit solutions too, not only worse passing ones.
    pairs_with_failed: bool = True
    # At most this many preference pairs per challenge and window (bounds event volume).
    max_pairs_per_challenge: int = Field(default=8, ge=0)
    # New kept samples that trigger a training request.
    train_threshold: int = Field(default=50, ge=1)
    # Share of new samples in a training set; the rest is replayed from the history pool.
    new_fraction: float = Field(default=0.3, gt=0, le=1)
    # Seed of the replay sampling (per round it is mixed with the round number).
    mix_seed: int = 0

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> CuratorConfig:
        """The curator section of `Settings.services` (missing = defaults)."""
        return cls.model_validate(services.get("curator", {}))
