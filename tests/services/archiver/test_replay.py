"""Re-verification by replay, and restoring a fresh broker from the archive.

A v1 test verifier accepts a kernel with a cheat marker; v2 rejects it. Both run
through the real ServiceRunner on the real broker. After replaying `extracted`
with v2, the curated projection (newest verifier version per sample) drops the
cheat while the honest kernels stay kept.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from pydantic import BaseModel

from kz_common.analytics.views import connect
from kz_common.broker import EmbeddedBroker
from kz_common.config import Settings
from schemas import (
    AnyEnvelope,
    ChallengeContext,
    SampleCurated,
    SolutionExtracted,
    SolutionVerified,
    make_event,
)
from services.archiver.config import ArchiverConfig
from services.archiver.consumer import archive_once
from services.archiver.exceptions import ReplayError
from services.archiver.replay import replay, restore
from tests.kz_common.harness import ORIGIN, publish_events, read, run_until
from tests.kz_common.relay import CODE, challenge
from tests.services.archiver.conftest import free_port, settings_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]
CHEAT = "# cheat: return torch.softmax(x)\n"


class RuleVerifier:
    """v1 passes every accepted extraction; v2 also rejects code carrying the cheat marker."""

    name, inputs, stateful = "verifier", ("extracted",), False

    def __init__(self, version: str) -> None:
        self.version = version

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        p = event.payload
        cheat = self.version != "1" and CHEAT in (p.code or "")
        passed = p.accepted and not cheat
        return [SolutionVerified(
            challenge_id=p.challenge_id, context=p.context, sample_index=p.sample_index, code=p.code,
            code_hash=p.code_hash, verifier_version=self.version, passed=passed,
            stage="passed" if passed else "static", reasons=["library shortcut"] if cheat else [],
            device="cpu", isolation="none", perf_measured=False)]


class VerdictCurator:
    name, version, inputs, stateful = "curator", "1", ("verified",), False

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        v = event.payload
        return [SampleCurated(
            challenge_id=v.challenge_id, verdict_event_id=event.event_id, verifier_version=v.verifier_version,
            kept=v.passed, op=v.context.op, family=v.context.family, dtype=v.context.dtype, shape_bucket="n",
            code=v.code, code_hash=v.code_hash, score=1.0 if v.passed else None,
            reason="kept" if v.passed else f"failed:{v.stage}", context=v.context, sample_index=v.sample_index)]


def extractions() -> list[AnyEnvelope]:
    out = []
    for i in range(3):
        code = CODE + (CHEAT if i == 2 else "")
        p = SolutionExtracted(challenge_id=f"c{i}", context=ChallengeContext.of(challenge(i)), sample_index=0,
                              accepted=True, code=code, code_hash=hashlib.sha256(code.encode()).hexdigest(),
                              reason=None)
        out.append(make_event(p, producer=ORIGIN, correlation_id=f"c{i}"))
    return out


def kept(s: Settings) -> dict[str, bool]:
    root = ArchiverConfig.from_settings(s.services).archive_root(s.paths.data_dir)
    con = connect(root)
    return dict(con.execute("SELECT challenge_id, kept FROM curated_current ORDER BY 1").fetchall())


def test_replay_with_a_stricter_verifier_removes_the_cheat(arch_settings: Settings, tmp_path: Path) -> None:
    s = arch_settings
    bootstrap = s.kafka.bootstrap_servers or ""
    publish_events(s, "extracted", extractions())
    asyncio.run(run_until([RuleVerifier("1"), VerdictCurator()], s, lambda: len(read(s, "curated")) == 3))
    archive_once(s, bootstrap, max_s=60)
    assert kept(s) == {"c0": True, "c1": True, "c2": True}  # v1 let the cheat through

    stats = replay(s, bootstrap, "extracted", tag="verifier-2")
    assert (stats.read, stats.published) == (3, 3)
    asyncio.run(run_until([RuleVerifier("2"), VerdictCurator()], s, lambda: len(read(s, "curated")) == 6))
    archive_once(s, bootstrap, max_s=60)
    assert kept(s) == {"c0": True, "c1": True, "c2": False}

    con = connect(ArchiverConfig.from_settings(s.services).archive_root(s.paths.data_dir))
    lineage = con.execute("""SELECT l.challenge_id, l.verifier_version, l.passed, l.extraction_id IS NOT NULL
                             FROM lineage l JOIN curated_current c ON c.event_id = l.curated_id
                             ORDER BY 1""").fetchall()
    assert lineage == [("c0", "2", True, True), ("c1", "2", True, True), ("c2", "2", False, True)]
    # The same replay again mints the same ids: consumers would drop every copy.
    again = replay(s, bootstrap, "extracted", tag="verifier-2", source="archive")
    assert (again.published, again.skipped) == (3, 3)  # copies under this tag are not re-copied
    ids = [e["event_id"] for e in read(s, "extracted")]
    assert len(ids) == 9 and len(set(ids)) == 6


def test_restore_fills_a_fresh_broker_from_the_archive(arch_settings: Settings, tmp_path: Path) -> None:
    s = arch_settings
    bootstrap = s.kafka.bootstrap_servers or ""
    events = extractions()
    publish_events(s, "extracted", events)
    archive_once(s, bootstrap, max_s=60)
    with EmbeddedBroker(Settings(kafka={"embedded_port": free_port()}).kafka) as fresh:
        s2 = settings_for(fresh.bootstrap, s.paths.data_dir, prefix=s.kafka.topic_prefix)
        stats = restore(s2, fresh.bootstrap)
        assert stats.per_topic["extracted"] == 3
        assert sorted(e["event_id"] for e in read(s2, "extracted")) == sorted(e.event_id for e in events)
        # The archive already holds every restored event: archiving the new broker adds nothing.
        assert archive_once(s2, fresh.bootstrap, max_s=60).rows == 0
        with pytest.raises(ReplayError, match="not empty"):
            restore(s2, fresh.bootstrap)


def test_bad_replay_requests_are_clear_errors(arch_settings: Settings) -> None:
    with pytest.raises(ReplayError, match="unknown topic"):
        replay(arch_settings, "unused:1", "nope", tag="x")
    with pytest.raises(ReplayError, match="tag"):
        replay(arch_settings, "unused:1", "extracted", tag="two words")
