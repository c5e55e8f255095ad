"""The broker lost mid-stream (Tansu keeps memory only) and rebuilt from the archive.

Real services (extractor, verifier, curator) and the archiver (`kz archive --follow`)
on a broker of the test's own. During wave 1 the archiver is SIGKILLed and restarted.
Wave 2 is archived while the extractor is down, then the archiver goes down for good,
the extractor comes back, and the broker is stopped as soon as events the archive never
saw are on it: they die with the broker and must be made again from their restored
inputs. A fresh, empty broker is filled with `kz replay --to-broker` (the CLI), the
services are started on it and a third wave follows. Afterwards, on the new broker:

- every sample of all three waves has exactly one extraction, verdict and curation
  decision, no event id twice, training rounds numbered on from the restored ones
  (`assert_chain`): the work lost with the old broker was redone from the restored
  inputs, with the same event ids, and nothing restored was redone a second time;
- the malformed record of wave 1 has exactly one dead letter (restored), although the
  extractor's new consumer group read it again;
- the archive holds every event of the new log exactly once, and every record that is
  not an event exactly once too.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kz_common.admin import create_topics
from kz_common.broker import EmbeddedBroker
from kz_common.config import Settings
from schemas import TOPICS, AnyEnvelope
from services.archiver.store import ArchiveStore
from tests.faults import candidates as C
from tests.faults.chaos import kill_and_restart
from tests.faults.conftest import curator_section, verifier_section
from tests.faults.pipeline import (
    NOISE,
    ROOT,
    Services,
    assert_chain,
    dead_letters,
    drained,
    events,
    fenced,
    publish,
    publish_events,
    sampled,
    service_env,
    summary,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]
PIPELINE = ("extractor", "verifier", "curator")
GROUPS = {"extractor": ("solutions",), "verifier": ("extracted",), "curator": ("verified",)}
GARBAGE = b"\xfe\xed not an event"
STAGES = (("solutions", "solution.sampled"), ("extracted", "solution.extracted"))


def wave(n: int, kinds: str) -> list[AnyEnvelope]:
    """Samples of challenge w<n>: h = honest, c = static cheat, x = noise."""
    code = {"h": fenced(C.HONEST), "c": fenced(C.STATIC_CHEAT), "x": NOISE}
    return [sampled(f"w{n}-{i % 3}", i, code[k], n_samples=len(kinds)) for i, k in enumerate(kinds)]


def archived(root: Path) -> list[dict]:
    """Every archive row: its event id, log coordinate and (for a record that is not an event) bytes."""
    rows: list[dict] = []
    for path in ArchiveStore(root).files():
        rows += pq.read_table(path, columns=["event_id", "topic", "partition", "offset", "raw"]).to_pylist()
    return rows


def archived_ids(root: Path) -> set[str]:
    return {r["event_id"] for r in archived(root) if r["event_id"]}


def log_ids(s: Settings) -> set[str]:
    return {d["event_id"] for t in TOPICS for d in events(s, t)}


def test_lost_broker_is_restored_from_the_archive_and_the_pipeline_carries_on(
        start_broker: Callable[[], tuple[EmbeddedBroker, Settings]], verifier_cache: Path,
        tmp_path: Path) -> None:
    old, s1 = start_broker()
    create_topics(s1.kafka, old.bootstrap)
    services = {"verifier": verifier_section(verifier_cache), "curator": curator_section(window_verdicts=1),
                "archiver": {"flush_interval_s": 0.5}}
    root = tmp_path / "archive"  # <paths.data_dir>/archive: the services' data dir is tmp_path
    w1, w2, w3 = wave(1, "hxcx"), wave(2, "xhx"), wave(3, "xcx")

    with Services(s1, tmp_path, services) as svc:
        svc.start(*PIPELINE, "archiver")
        publish(s1, "solutions", [GARBAGE], [b"junk"])
        publish_events(s1, "solutions", w1)
        wave1_ids = {e.event_id for e in w1}
        svc.wait(lambda: wave1_ids <= archived_ids(root), 60, "wave 1's samples archived")
        kill = kill_and_restart(svc, s1, "archiver", tuple(TOPICS), (), {"verifier": GROUPS["verifier"]}, 0)
        assert kill.uncommitted + kill.upstream_pending > 0, kill  # mid-stream: more was coming its way
        svc.wait(lambda: drained(s1, GROUPS) and log_ids(s1) <= archived_ids(root),
                 90, lambda: f"wave 1 to be processed and archived; {summary(s1)}")

        # Wave 2 reaches the archive while the extractor is down; then the archiver goes down for
        # good and the extractor comes back: whatever is made from wave 2 from then on exists on
        # this broker only, and dies with it.
        svc.kill("extractor")
        publish_events(s1, "solutions", w2)
        wave2_ids = {e.event_id for e in w2}
        svc.wait(lambda: wave2_ids <= archived_ids(root), 30, "wave 2's samples in the archive")
        svc.kill("archiver")
        svc.start("extractor")
        unarchived = svc.wait(lambda: log_ids(s1) - archived_ids(root), 90, "events the archive does not hold",
                              *PIPELINE)
        old.stop()
        for name in PIPELINE:  # they lost their broker: no graceful exit to wait for
            svc.kill(name)

    _, s2 = start_broker()  # a fresh port: nothing still connected to the old one reaches it
    env = service_env(s2, tmp_path, services)
    restore = subprocess.run([sys.executable, "-m", "kz_common.cli", "replay", "--to-broker"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120, check=False)
    assert restore.returncode == 0, restore.stderr + restore.stdout
    restored = log_ids(s2)
    assert restored == archived_ids(root) and not restored & unarchived
    # the restored log is behind: wave 2's samples are back, what was made from them is not
    restored_stages = [len(events(s2, t, k)) for t, k in STAGES]
    assert restored_stages[0] == len(w1) + len(w2) and restored_stages[1] == len(w1), restored_stages

    with Services(s2, tmp_path, services) as svc:
        svc.start(*PIPELINE, "archiver")
        publish_events(s2, "solutions", w3)
        svc.wait(lambda: drained(s2, GROUPS) and log_ids(s2) <= archived_ids(root),
                 150, lambda: f"recovery and wave 3; {summary(s2)}")
        svc.check()

    samples = w1 + w2 + w3
    got = assert_chain(s2, samples)
    honest = {e.event_id for e in samples if "ModelNew" in e.payload.raw_output  # type: ignore[union-attr]
              and "import os" not in e.payload.raw_output}  # type: ignore[union-attr]
    passed = {x["causation_id"] for x in got["extracted"]
              if any(v["causation_id"] == x["event_id"] and v["payload"]["passed"] for v in got["verified"])}
    assert passed == honest, (len(passed), len(honest))
    assert unarchived <= log_ids(s2), "an event lost with the old broker was not made again (same id)"

    letters = dead_letters(s2)
    assert [(x["consumer"], x["source_topic"]) for x in letters] == [("extractor", "solutions")], letters

    rows = archived(root)
    ids = Counter(r["event_id"] for r in rows if r["event_id"])
    assert set(ids) == log_ids(s2) and max(ids.values()) == 1, [i for i, n in ids.items() if n > 1]
    raw = Counter((r["topic"], r["partition"], r["offset"], r["raw"]) for r in rows if not r["event_id"])
    assert [k[3] for k in raw] == [GARBAGE] and max(raw.values()) == 1, raw
