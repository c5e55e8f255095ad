"""Errors of the archiver, replay and restore."""

from kz_common.exceptions import KernelZeroError


class ArchiveError(KernelZeroError):
    """The archive cannot be read or written."""


class ArchiveNotFound(ArchiveError):
    """The archive directory is missing or holds no Parquet files."""


class ReplayError(KernelZeroError):
    """A replay or restore request is malformed or cannot be carried out."""
