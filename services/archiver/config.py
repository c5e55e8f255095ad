"""The archiver's section of the settings (`settings.services["archiver"]`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.archiver.exceptions import ArchiveError


class ArchiverConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # None: <paths.data_dir>/archive, next to the other working data.
    root: Path | None = None
    # Consumer group; its committed offsets mark what is durably archived.
    group: str = "archiver"
    # Rows buffered before a file is written: bigger files query faster.
    flush_records: int = Field(default=20_000, ge=1)
    # ...but never hold rows longer than this, so the archive trails the log by seconds.
    flush_interval_s: float = Field(default=2.0, gt=0)
    # Event ids remembered to drop re-archiving (seeded from the archive at start).
    seen_capacity: int = Field(default=5_000_000, ge=1)
    # Parquet row group size: DuckDB parallelises and prunes per row group.
    row_group_rows: int = Field(default=100_000, ge=1_000)

    @classmethod
    def from_settings(cls, services: dict[str, dict[str, Any]]) -> ArchiverConfig:
        try:
            return cls.model_validate(services.get("archiver", {}))
        except ValidationError as exc:
            raise ArchiveError(f"invalid [services.archiver] settings: {exc}") from exc

    def archive_root(self, data_dir: Path) -> Path:
        return self.root if self.root is not None else data_dir / "archive"
