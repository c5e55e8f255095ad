"""Errors raised by the curator."""

from __future__ import annotations


class CuratorError(Exception):
    """Base class of every curator error."""


class CodeParseError(CuratorError):
    """A solution's code is not valid Python, so no rule can inspect it."""


class ConfigError(CuratorError, ValueError):
    """A curator configuration value is out of range."""
