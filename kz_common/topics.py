"""The topic registry: logical names from `schemas.TOPICS` mapped to physical Kafka topics.

Every event is keyed by its correlation id (the challenge id), so all events
of one challenge land on one partition and stay in order. Pipeline topics share
one partition count so a challenge maps to the same partition number on every
topic (the default partitioner hashes the key the same way everywhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from kz_common.config import KafkaConfig
from kz_common.exceptions import ConfigError
from schemas import TOPICS


@dataclass(frozen=True)
class TopicSpec:
    logical: str  # name used in code, e.g. "verified"
    physical: str  # name on the broker, e.g. "kz.verified"
    partitions: int
    event_types: tuple[str, ...]


def topic_specs(kafka: KafkaConfig) -> list[TopicSpec]:
    """Every topic the system uses, in pipeline order."""
    return [
        TopicSpec(name, kafka.topic_prefix + name, kafka.partitions, types)
        for name, types in TOPICS.items()
    ]


def physical(kafka: KafkaConfig, logical: str) -> str:
    """Broker-side topic name for a logical topic; rejects names the registry does not know."""
    if logical not in TOPICS:
        raise ConfigError(f"unknown topic {logical!r}; known: {', '.join(TOPICS)}")
    return kafka.topic_prefix + logical


def logical(kafka: KafkaConfig, physical_name: str) -> str:
    """Inverse of `physical`."""
    name = physical_name.removeprefix(kafka.topic_prefix)
    if name not in TOPICS or not physical_name.startswith(kafka.topic_prefix):
        raise ConfigError(f"{physical_name!r} is not a KernelZero topic")
    return name
