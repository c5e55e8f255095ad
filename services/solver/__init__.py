"""Solver: samples candidate kernels for challenges from the configured LLM backend."""

from services.solver.core import SolverCore, challenge_seed
from kz_common.prompts import build_prompt

__all__ = ["SolverCore", "build_prompt", "challenge_seed"]
