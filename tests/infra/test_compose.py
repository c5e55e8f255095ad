"""docker-compose.yml (no Docker engine here): every service of the code is deployed, correctly wired."""

from __future__ import annotations

from pathlib import Path

import yaml

from kz_common.registry import SERVICES

ROOT = Path(__file__).resolve().parents[2]
GPU_SERVICES = {"solver", "verifier", "trainer"}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_registered_service_runs_as_its_own_container() -> None:
    services = _compose()["services"]
    for name in SERVICES:
        assert name in services, f"{name} missing from docker-compose.yml"
        svc = services[name]  # safe_load applies the `<<` merge keys as Compose does
        assert svc["command"] == ["kz", "service", name]
        assert svc["environment"]["KZ_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert svc["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        has_gpu = "deploy" in svc
        assert has_gpu == (name in GPU_SERVICES), f"{name}: GPU reservation {has_gpu}"


def test_kafka_runs_in_kraft_mode_and_topics_are_created_by_our_code() -> None:
    services = _compose()["services"]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]
    assert kafka["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert services["topics"]["command"] == ["kz", "topics", "--create"]


def test_gpu_reservations_name_nvidia() -> None:
    services = _compose()["services"]
    for name in GPU_SERVICES:
        [device] = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


def test_production_config_only_names_known_sections() -> None:
    import tomllib

    from kz_common.config import Settings

    doc = tomllib.loads((ROOT / "infra" / "kz.toml").read_text())
    Settings(**doc)  # extra="forbid": a typo in a section name fails here
    assert set(doc["services"]) <= set(SERVICES)
