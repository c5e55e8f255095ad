"""Errors raised by the op catalogue and the problem renderer.

Every error is a `CatalogueError` (a `ValueError`), so callers can catch one type;
the subclasses say what was wrong.
"""

from __future__ import annotations


class CatalogueError(ValueError):
    """Base class: a request to the op catalogue could not be honoured."""


class UnknownOpError(CatalogueError, KeyError):
    """The op name is not in the catalogue."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnsupportedDtypeError(CatalogueError):
    """The op does not support the requested dtype."""


class ShapeRangeError(CatalogueError):
    """A shape range or concrete shape is malformed or outside the op's limits."""


class DimMismatchError(ShapeRangeError):
    """A shape range or concrete shape has missing or extra dimensions."""
