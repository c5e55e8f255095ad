"""The DuckDB cache answers like the plain views and loads only new files, once each."""

from __future__ import annotations

from pathlib import Path

from kz_common.analytics.cache import open_cached
from kz_common.analytics.synthetic import Flywheel
from kz_common.analytics.views import connect
from services.archiver.offline import archive_messages

CHECKS = ["SELECT count(*), count(DISTINCT event_id) FROM events",
          "SELECT round, family, count(*), sum(passed::INT) FROM verified_current GROUP BY ALL ORDER BY ALL",
          "SELECT count(*), count(solution_id), sum(kept::INT) FROM lineage"]


def answers(con) -> list:  # type: ignore[no-untyped-def]
    return [con.execute(sql).fetchall() for sql in CHECKS]


def test_cache_matches_views_and_refreshes_incrementally(tmp_path: Path) -> None:
    fly = Flywheel(seed=3)
    first = list(fly.round(0, 30))
    archive_messages(first, tmp_path)
    with open_cached(tmp_path) as con:
        assert answers(con) == answers(connect(tmp_path))
    second = list(fly.round(1, 30))
    archive_messages(second, tmp_path / "next")
    for f in (tmp_path / "next").glob("*/*/*.parquet"):  # new files, as the archiver adds them
        dest = tmp_path / f.relative_to(tmp_path / "next")
        dest.parent.mkdir(parents=True, exist_ok=True)
        f.rename(dest.with_name("n" + dest.name))
    archive_messages(first[:100], tmp_path / "again")  # and a stray copy of already-loaded events
    for f in (tmp_path / "again").glob("*/*/*.parquet"):
        f.rename((tmp_path / f.relative_to(tmp_path / "again")).with_name("a" + f.name))
    with open_cached(tmp_path) as con:
        got = answers(con)
        loaded = con.execute("SELECT count(*) FROM _files").fetchall()[0][0]
    assert got == answers(connect(tmp_path))
    assert got[0] == [(len(first) + len(second), len(first) + len(second))]
    assert loaded == len(list(tmp_path.glob("*/*/*.parquet")))
