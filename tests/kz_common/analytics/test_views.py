"""Views over the archive: typed columns match the schemas, dedupe, newest verifier wins, lineage."""

from __future__ import annotations

from pathlib import Path

import pytest

from kz_common.analytics.columns import TYPE_COLUMNS
from kz_common.analytics.exceptions import NoArchive
from kz_common.analytics.synthetic import Flywheel, check_sample, generate
from kz_common.analytics.views import connect
from schemas import EVENTS
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
