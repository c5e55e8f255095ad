"""The challenge-generator interface and the programmatic (seeded catalogue) sampler."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from services.challenger.catalogue import Catalogue, Proposal
from services.challenger.ladder import rung, sample_shape_range


@dataclass(frozen=True)
class ProposalRequest:
    """What a generator knows when proposing challenge `index` of a round."""

    round: int
    seed: int
    index: int
    attempt: int  # resample number for this slot (0 first)
    difficulty: Mapping[str, int]  # family -> current rung
    history_summary: str = ""
    feedback: tuple[str, ...] = field(default=())  # why earlier proposals for this slot were refused

    def derived_seed(self, salt: str = "") -> int:
        """A seed unique to (round seed, round, slot, attempt): same inputs, same proposal."""
        text = f"{self.seed}|{self.round}|{self.index}|{self.attempt}|{salt}"
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big") % (2**31 - 1)


@runtime_checkable
class ChallengeGenerator(Protocol):
    kind: Literal["programmatic", "llm"]

    def propose(self, request: ProposalRequest) -> Proposal:
        """One proposal; raise GenerationFailed when none can be made."""
        ...


class ProgrammaticGenerator:
    """Uniform over families, then ops, then dtypes; log-uniform shape sub-ranges per rung.

    Families first, so a family with many ops (elementwise) does not crowd out
    single-op families (matmul, attention).
    """

    kind: Literal["programmatic", "llm"] = "programmatic"

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue

    def propose(self, request: ProposalRequest) -> Proposal:
        rng = random.Random(request.derived_seed("programmatic"))
        family = rng.choice(self.catalogue.families)
        op = rng.choice(self.catalogue.ops_of(family))
        dtype = rng.choice(self.catalogue.dtypes(op.name))
        span = rung(request.difficulty.get(family, 0)).span
        shape_range = sample_shape_range(self.catalogue.base_range(op), span, rng)
        return Proposal(op.name, dtype, shape_range)
