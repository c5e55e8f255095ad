"""The archiver on a real embedded broker: every topic, raw garbage, exactly-once effect."""

from __future__ import annotations

import base64

import pyarrow.parquet as pq
import pytest

from kz_common.analytics.views import connect
from kz_common.config import Settings
from schemas import DeadLetter, Producer, decode, encode, make_event
from services.archiver.config import ArchiverConfig
from services.archiver.consumer import archive_once
from services.archiver.exceptions import ArchiveError
from services.archiver.rows import LogRecord, to_message, to_row
from services.archiver.store import ArchiveStore
from tests.kz_common.harness import challenge_events, publish, publish_events

pytestmark = pytest.mark.broker


def _root(s: Settings):
    return ArchiverConfig.from_settings(s.services).archive_root(s.paths.data_dir)


def test_archives_every_topic_including_garbage_and_dead_letters(arch_settings: Settings) -> None:
    s = arch_settings
    events = challenge_events(20)
    publish_events(s, "challenges", events)
    letter = make_event(DeadLetter(source_topic="challenges", partition=0, offset=3, consumer="solver",
                                   error_kind="decode", error="not JSON",
                                   original_b64=base64.b64encode(b"\xff").decode()),
                        producer=Producer(service="solver", version="1"), correlation_id="dead-letter")
    publish_events(s, "dead-letters", [letter])
    publish(s, "extracted", [b"\xffnot json at all"])
    stats = archive_once(s, s.kafka.bootstrap_servers or "", max_s=60)
    assert (stats.records, stats.rows, stats.duplicates) == (22, 22, 0)
    con = connect(_root(s))
    ids = {r[0] for r in con.execute("SELECT event_id FROM challenge_created").fetchall()}
    assert ids == {e.event_id for e in events}
    assert con.execute("SELECT consumer, error_kind FROM dead_letter").fetchall() == [("solver", "decode")]
    raw = con.execute("SELECT raw, type FROM raw_log WHERE topic = 'extracted'").fetchall()
    assert raw == [(b"\xffnot json at all", None)]


def test_restart_and_fresh_group_do_not_duplicate_rows(arch_settings: Settings) -> None:
    s = arch_settings
    bootstrap = s.kafka.bootstrap_servers or ""
    first = challenge_events(30)
    publish_events(s, "challenges", first)
    assert archive_once(s, bootstrap, max_s=60).rows == 30
    # Restart of the same group: resumes from its committed offsets, reads only the new events.
    publish_events(s, "challenges", challenge_events(5, start=100))
    again = archive_once(s, bootstrap, max_s=60)
    assert (again.records, again.rows) == (5, 5)
    # Worst case of a crash before any commit: a group with no offsets re-reads the whole log.
    # Every record is already on disk, so nothing is written twice.
    fresh = ArchiverConfig.from_settings(s.services).model_copy(update={"group": "archiver-crashed"})
    replayed = archive_once(s, bootstrap, fresh, max_s=60)
    assert (replayed.records, replayed.rows, replayed.duplicates) == (35, 0, 35)
    rows = sum(pq.read_metadata(p).num_rows for p in ArchiveStore(_root(s)).files())
    assert rows == 35


def test_same_rows_rewrite_the_same_file(tmp_path) -> None:
    events = challenge_events(4)
    rows = [to_row(LogRecord("challenges", 0, i, b"k", encode(e), 1_700_000_000_000))
            for i, e in enumerate(events)]
    store = ArchiveStore(tmp_path)
    first = store.write(rows)
    second = store.write([dict(r) for r in rows])
    assert first == second and len(store.files()) == 1
    # Offsets restarting at 0 on a new broker carry other events: a new file, history kept.
    other = [to_row(LogRecord("challenges", 0, i, b"k", encode(e), None))
             for i, e in enumerate(challenge_events(4, start=50))]
    store.write(other)
    assert len(store.files()) == 2


def test_row_round_trips_to_an_equal_envelope() -> None:
    event = challenge_events(1)[0]
    row = to_row(LogRecord("challenges", 2, 7, b"c0", encode(event), None))
    assert row["facts"] and "problem_source" in row["payload"]
    back = decode(to_message(row))
    assert back == event


def test_bad_settings_are_a_clear_error() -> None:
    with pytest.raises(ArchiveError, match="flush_records"):
        ArchiverConfig.from_settings({"archiver": {"flush_records": 0}})
