"""Errors raised by the trainer, the evaluator and the dataset export."""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every trainer error."""


class TrainingError(TrainerError):
    """A LoRA training run could not be set up or finished."""


class NoExamplesError(TrainingError):
    """Nothing to train on: no examples, or none fits the sequence length."""


class ExportError(TrainerError):
    """A dataset could not be exported in the requested format."""


class ConfigError(TrainerError, ValueError):
    """A trainer configuration value is missing or out of range."""
