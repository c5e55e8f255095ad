"""One frozen configuration for every KernelZero process.

Precedence: explicit arguments > environment variables (prefix `KZ_`, nested
sections joined with `__`, e.g. `KZ_KAFKA__BOOTSTRAP_SERVERS=host:9092`) > the
TOML file named by `KZ_CONFIG` (default `./kz.toml`, optional) > the defaults
below. Every default carries a one-line comment saying why it is what it is.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaConfig(Section):
    # None: start the embedded Tansu broker; "host:port[,host:port]" uses that cluster instead.
    bootstrap_servers: str | None = None
    # Loopback only: the embedded broker has no authentication.
    embedded_host: str = "127.0.0.1"
    # Off the usual 9092 so a developer's own Kafka is never hit by accident.
    embedded_port: int = 19092
    # Namespaces our topics on a shared cluster.
    topic_prefix: str = "kz."
    # Per pipeline topic; the ceiling on workers in one consumer group.
    partitions: int = Field(default=6, ge=1)
    # 1 for the embedded broker; set 3 on a production cluster.
    replication_factor: int = Field(default=1, ge=1)
    # Tansu makes every group join wait session_timeout/2, so keep it short.
    session_timeout_ms: int = 6000
    # Must be well under the session timeout.
    heartbeat_interval_ms: int = 2000
    # A verification or training step may block the handler this long.
    max_poll_interval_ms: int = 1_800_000
    # Records handed to one batch handler; larger batches amortise commits.
    batch_max_records: int = 500
    # Longest a batch poll waits for records when none are buffered (returns early on data).
    batch_timeout_ms: int = 100
    # Longest the broker holds an empty fetch; short waits make idle consumers spin the broker.
    fetch_max_wait_ms: int = 100
    # Tansu and default Kafka brokers reject messages over 1 MB.
    max_message_bytes: int = 1_000_000


class RunnerConfig(Section):
    # Consumers rebuild their "already processed" set from their own outputs at start.
    rebuild_from_log: bool = True
    # Upper bound on remembered event ids per service (oldest evicted first).
    dedupe_capacity: int = 2_000_000
    # Seconds to wait for in-flight batches on SIGTERM before exiting.
    shutdown_grace_s: float = 10.0
    # Prometheus /metrics port of a service; 0 = off (tests and ad-hoc runs need no free port).
    metrics_port: int = Field(default=0, ge=0, le=65535)
    # Loopback: the endpoint has no authentication. Containers set 0.0.0.0 to be scraped.
    metrics_host: str = "127.0.0.1"


class PathsConfig(Section):
    # Working data: caches, archive, adapters, tiny model. Relative to the cwd.
    data_dir: Path = Path("var")


class Settings(BaseSettings):
    """The whole configuration. Build with `get_settings()`; never mutate."""

    model_config = SettingsConfigDict(
        frozen=True,
        env_prefix="KZ_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    kafka: KafkaConfig = KafkaConfig()
    runner: RunnerConfig = RunnerConfig()
    paths: PathsConfig = PathsConfig()
    # Free-form per-service sections ("solver", "verifier", ...): each service validates its own.
    services: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = Path(os.environ.get("KZ_CONFIG", "kz.toml"))
        toml = TomlConfigSettingsSource(settings_cls, toml_file=toml_path)
        return (init_settings, env_settings, toml)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    config = os.environ.get("KZ_CONFIG")
    if config and not Path(config).is_file():
        raise FileNotFoundError(f"KZ_CONFIG={config!r} does not exist")
    return Settings()
