"""infra/prometheus.yml scrapes every registered service on the port docker-compose.yml gives it."""

from __future__ import annotations

from pathlib import Path

import yaml

from kz_common.config import RunnerConfig
from kz_common.registry import SERVICES

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def test_every_service_serves_metrics_beyond_its_container() -> None:
    services = _load("docker-compose.yml")["services"]
    for name in SERVICES:
        env = services[name]["environment"]
        port = env["KZ_RUNNER__METRICS_PORT"]
        RunnerConfig(metrics_port=int(port), metrics_host=env["KZ_RUNNER__METRICS_HOST"])  # validates
        assert int(port) > 0, f"{name}: metrics off"
        assert env["KZ_RUNNER__METRICS_HOST"] == "0.0.0.0", f"{name}: loopback cannot be scraped"
        assert port in services[name]["expose"]


def test_prometheus_scrapes_every_registered_service() -> None:
    services = _load("docker-compose.yml")["services"]
    jobs = {job["job_name"]: job for job in _load("infra/prometheus.yml")["scrape_configs"]}
    assert set(jobs) == set(SERVICES)
    for name, job in jobs.items():
        [static] = job["static_configs"]
        port = services[name]["environment"]["KZ_RUNNER__METRICS_PORT"]
        assert static["targets"] == [f"{name}:{port}"]
    prometheus = services["prometheus"]
    assert "./infra/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert prometheus["profiles"] == ["metrics"]  # optional: `docker compose up` alone stays as it was
