"""`kz run` end to end: embedded broker, every real service as its own process, one round."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from kz_common.config import Settings
from kz_common.flywheel import run_flywheel
from tests.conftest import free_port

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_one_round_accounts_for_every_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # services run as `python -m kz_common.cli`
    settings = Settings(
        kafka={"embedded_port": free_port()},
        paths={"data_dir": tmp_path},
        services={"solver": {"n_samples": 2, "max_tokens": 48, "few_shot": 1},
                  "trainer": {"few_shot": 1}},
    )
    [ledger] = run_flywheel(settings, rounds=1, challenges=2, round_timeout_s=400,
                            console=Console(file=(tmp_path / "out.txt").open("w")))
    assert ledger.challenges == 2
    assert ledger.samples == 4
    # every sample reached a curation decision or a dead letter, and every stage saw it
    assert ledger.accounted("curated") == 4
    assert ledger.extracted == 4 and ledger.verified + ledger.dead >= 4
    logs = {p.name for p in (tmp_path / "logs").iterdir()}
    assert {"solver.log", "verifier.log", "curator.log", "broker.log"} <= logs
