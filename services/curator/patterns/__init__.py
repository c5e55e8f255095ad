"""Pattern detectors: each a named rule that returns RuleHits with evidence; any hit removes a sample.

Rules (module docstrings define each, with the counter-examples that must not fire):
constant_branch, value_shortcut, redundant_variants (branches.py), dead_code
(dead_code.py), library_call (library.py), hardcoded_shape (hardcoded.py), and
unparseable when the code is not Python at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas import RuleHit
from services.curator.exceptions import CodeParseError
from services.curator.patterns.branches import constant_branch, redundant_variants, value_shortcut
from services.curator.patterns.dead_code import dead_code
from services.curator.patterns.hardcoded import challenge_dims, hardcoded_shape
from services.curator.patterns.library import library_call
from services.curator.patterns.source import Source, parse_source

RULES = ("constant_branch", "value_shortcut", "redundant_variants", "dead_code", "library_call",
         "hardcoded_shape", "unparseable")


def run_patterns(
    code: str, shape_range: Mapping[str, tuple[int, int]], *, variant_similarity: float = 0.9
) -> list[RuleHit]:
    """Every rule hit for one solution of a challenge over `shape_range`."""
    try:
        src = parse_source(code)
    except CodeParseError as exc:
        return [RuleHit(rule="unparseable", evidence=str(exc))]
    return [
        *constant_branch(src),
        *value_shortcut(src),
        *redundant_variants(src, variant_similarity),
        *dead_code(src),
        *library_call(src),
        *hardcoded_shape(src, challenge_dims(shape_range)),
    ]


__all__ = ["RULES", "Source", "parse_source", "run_patterns"]
