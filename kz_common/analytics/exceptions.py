"""Errors of the analytics layer."""

from kz_common.exceptions import KernelZeroError


class AnalyticsError(KernelZeroError):
    """The archive cannot be queried."""


class NoArchive(AnalyticsError):
    """The archive directory is missing or empty."""


class QueryFailed(AnalyticsError):
    """DuckDB rejected a query (syntax, unknown column, ...)."""


class UnknownQuery(AnalyticsError):
    """No named query has that name."""
