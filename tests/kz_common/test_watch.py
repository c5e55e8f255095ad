"""The `kz run` watcher against the real broker: it reads the whole log so far, then follows it."""

from __future__ import annotations

from kz_common.config import Settings
from kz_common.flywheel import publish_round
from kz_common.watch import Watcher
from schemas import TrainingRequested, make_event
from tests.kz_common.harness import ORIGIN, challenge_events, publish_events


def _training(r: int) -> list:
    return [make_event(TrainingRequested(round=r, new_sample_ids=[f"s{r}"], replay_sample_ids=[],
                                         dataset_hash=f"h{r}"), producer=ORIGIN, correlation_id=f"t{r}")]


def test_the_watcher_reads_the_log_so_far_then_each_later_event_once(settings: Settings) -> None:
    bootstrap = settings.kafka.bootstrap_servers or ""
    for r in (0, 1):
        publish_round(settings, bootstrap, r, 4)
    publish_events(settings, "challenges", challenge_events(4))
    publish_events(settings, "training-requests", _training(1))

    watcher = Watcher(settings.kafka, bootstrap)
    try:
        assert watcher.next_round() == 2  # a new run never reuses an earlier run's round number
        assert watcher.ledger(0).challenges == 4
        assert watcher.training == ["round 1 requested (1 new + 0 replayed)"]

        publish_round(settings, bootstrap, 2, 4)
        publish_events(settings, "challenges", challenge_events(2, start=4))
        publish_events(settings, "training-requests", _training(2))
        watcher.poll(2.0)
        assert watcher.next_round() == 3
        assert watcher.ledger(0).challenges == 6
        assert watcher.training == ["round 1 requested (1 new + 0 replayed)",
                                    "round 2 requested (1 new + 0 replayed)"]  # none read twice
    finally:
        watcher.consumer.close()
