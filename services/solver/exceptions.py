"""Errors of the solver service."""

from __future__ import annotations

from kz_common.core import ProcessingError


class SolverError(ValueError):
    """Base class of solver errors that are not processing failures."""


class SolverConfigError(SolverError):
    """The solver configuration is invalid."""


class AdapterUnknown(ProcessingError):
    """An eval challenge names a round whose adapter this solver has not been told about."""


class SamplingFailed(ProcessingError):
    """The backend failed to sample a challenge (the challenge is dead-lettered)."""
