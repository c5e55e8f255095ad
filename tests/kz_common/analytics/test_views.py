"""Views over the archive: typed columns match the schemas, dedupe, newest verifier wins, lineage."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kz_common.analytics.cache import open_cached
from kz_common.analytics.columns import TYPE_COLUMNS
from kz_common.analytics.exceptions import NoArchive
from kz_common.analytics.synthetic import Flywheel, check_sample, generate
from kz_common.analytics.views import SUPERSEDED_LAST, VERSION_KEY, connect, newest_per_sample
from schemas import EVENTS, Producer, SampleCurated, encode, make_event
from services.archiver.offline import archive_messages


def test_every_event_type_has_a_view_with_schema_fields() -> None:
    assert set(TYPE_COLUMNS) == set(EVENTS)
    for etype, cols in TYPE_COLUMNS.items():
        fields = set(EVENTS[etype].model.model_fields)
        flat = {"challenge_id", "sample_index", "round", "family", "op", "reason"} & {c for c, _ in cols}
        assert flat <= fields | {"round", "family", "op"}, etype


def test_generator_is_schema_valid() -> None:
    assert check_sample(list(generate(2_000, challenges_per_round=50)), stride=7) > 100


def test_views_count_each_event_once_even_when_archived_twice(archive: Path, tmp_path: Path) -> None:
    messages = list(generate(1_000, challenges_per_round=40))
    archive_messages(messages, tmp_path)
    archive_messages(messages[:500], tmp_path / "dup", partitions=6)
    for f in (tmp_path / "dup").glob("*/*/*.parquet"):  # the same events again, other file names
        target = tmp_path / f.relative_to(tmp_path / "dup")
        f.rename(target.with_name("x" + target.name))
    con = connect(tmp_path)
    assert con.execute("SELECT count(*) FROM raw_log").fetchall() == [(len(messages) + 500,)]
    assert con.execute("SELECT count(*), count(DISTINCT event_id) FROM events").fetchall() == \
        [(len(messages), len(messages))]


def test_newest_verifier_version_wins_the_projection(tmp_path: Path) -> None:
    old, new = Flywheel(seed=1, verifier_version="1.9.0"), Flywheel(seed=1, verifier_version="1.10.0")
    new.clock = old.clock.replace(year=2024)  # the newer version's verdicts are even *older* in time
    archive_messages([*old.round(0, 20), *new.round(0, 20)], tmp_path)
    con = connect(tmp_path)
    versions = con.execute("SELECT DISTINCT verifier_version FROM curated_current").fetchall()
    assert versions == [("1.10.0",)]
    assert con.execute("SELECT count(*) FROM verified_current").fetchall() == \
        con.execute("SELECT count(*) FROM solution_verified WHERE verifier_version = '1.10.0'").fetchall()


@dataclass(frozen=True)
class Msg:
    topic: str
    key: bytes
    value: bytes


def decision(sample: str, verdict: str, version: str, kept: bool, reason: str, at: int, event_id: str) -> Msg:
    """A curator decision on sample (challenge `sample`, index 0), produced `at` ms after a fixed time."""
    p = SampleCurated(challenge_id=sample, verdict_event_id=verdict, verifier_version=version, kept=kept,
                      op="add", family="elementwise", dtype="float32", shape_bucket="n", code="x",
                      code_hash="h", score=1.0 if kept else None, reason=reason, sample_index=0)
    env = make_event(p, producer=Producer(service="curator", version="1"), correlation_id=sample)
    env = env.model_copy(update={"event_id": event_id,
                                 "produced_at": datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at)})
    return Msg("curated", sample.encode(), encode(env))


def test_curated_projection_follows_the_curators_retractions(tmp_path: Path) -> None:
    ids = [f"0190c000-0000-7000-8000-00000000000{i}" for i in range(8)]
    archive_messages([
        # a: kept by v1, re-verified by v1 again (a replay with the same verifier): the retraction and
        # the successor's decision share a timestamp, and the retraction has the larger event id.
        decision("a", "va1", "1", True, "kept", 0, ids[0]),
        decision("a", "va1", "1", False, "superseded_by:va2", 5, ids[7]),
        decision("a", "va2", "1", False, "failed:static", 5, ids[1]),
        # b: kept by v1, retracted when its v2 verdict arrived, v2 decision still waiting in a window.
        decision("b", "vb1", "1", True, "kept", 0, ids[2]),
        decision("b", "vb1", "1", False, "superseded_by:vb2", 5, ids[3]),
        # c: kept by v2; a late v1 verdict was decided superseded (later in time, older version).
        decision("c", "vc2", "2", True, "kept", 0, ids[4]),
        decision("c", "vc1", "1", False, "superseded_by:vc2", 9, ids[5]),
    ], tmp_path)
    for con in (connect(tmp_path), open_cached(tmp_path)):  # views over Parquet, and the cache
        rows = con.execute("SELECT challenge_id, verdict_event_id, kept, reason FROM curated_current "
                           "ORDER BY 1").fetchall()
        assert rows == [("a", "va2", False, "failed:static"), ("b", "vb1", False, "superseded_by:vb2"),
                        ("c", "vc2", True, "kept")]


@pytest.mark.parametrize("ranked", [False, True])
def test_newest_per_sample_matches_a_python_reference(ranked: bool) -> None:
    """Random versions, times and ties: the ranked-join projection picks what sorting by key would."""
    import duckdb

    rng = random.Random(7)
    versions = ["1.9", "1.10", "1.10.0", "v2", "2", "relay", None, "1.2.3", "10"]
    rows = [(f"c{rng.randrange(40)}", rng.choice([0, 1, None]), rng.choice(versions),
             datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=rng.randrange(4)),
             f"e{i:05d}", rng.choice(["kept", "superseded_by:x", None])) for i in range(600)]
    con = duckdb.connect()
    con.execute(VERSION_KEY)
    con.execute("CREATE TABLE t (challenge_id VARCHAR, sample_index INTEGER, verifier_version VARCHAR, "
                "produced_at TIMESTAMPTZ, event_id VARCHAR, reason VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", rows)

    def vkey(v: str | None) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", v or ""))

    for tiebreak in ("", SUPERSEDED_LAST):
        best: dict[tuple[str, int], tuple] = {}  # type: ignore[type-arg]
        for r in rows:
            last = tiebreak and (r[5] or "").startswith("superseded_by:")
            key = (vkey(r[2]), r[3], not last, r[4])
            k = (r[0], -1 if r[1] is None else r[1])
            if k not in best or key > best[k][0]:
                best[k] = (key, r[4])
        got = con.execute(f"SELECT event_id FROM ({newest_per_sample('t', tiebreak, ranked=ranked)})"
                          ).fetchall()
        assert sorted(e for (e,) in got) == sorted(e for _, e in best.values())


def test_lineage_reaches_the_challenge(archive: Path) -> None:
    con = connect(archive)
    rows = con.execute("""SELECT count(*), count(verdict_id), count(extraction_id), count(solution_id),
                                 count(challenge_event_id), count(model_round) FROM lineage""").fetchall()
    n, verdicts, extractions, solutions, challenges, model_rounds = rows[0]
    assert n > 0 and n == verdicts == extractions == solutions == challenges
    assert 0 < model_rounds < n  # round 0 samples come from the base model (no adapter round)


def test_missing_archive_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NoArchive, match="kz archive"):
        connect(tmp_path / "nothing")
