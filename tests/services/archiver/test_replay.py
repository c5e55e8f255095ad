"""Re-verification by replay, and restoring a fresh broker from the archive.

A v1 test verifier accepts a kernel that caches its outputs across calls; v2 has
a new rule that rejects it. Both run with the REAL CuratorCore through the real
ServiceRunner on the real broker: the cheat is curated and trained on, `kz
replay extracted` re-verifies everything with v2, the curator (restarted: its
state is rebuilt from the log) retracts the cheat while the honest kernels stay
kept (not duplicates of their own earlier verdicts), the curated projection
(newest verifier version per sample) agrees, and the next training request no
longer contains the cheat.
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
from schemas import AnyEnvelope, ChallengeContext, SolutionExtracted, SolutionVerified, make_event
from services.archiver.config import ArchiverConfig
from services.archiver.consumer import archive_once
from services.archiver.exceptions import ReplayError
from services.archiver.replay import replay, restore
from services.curator.config import CuratorConfig
from services.curator.core import CuratorCore
from tests.kz_common.harness import ORIGIN, publish_events, read, run_until
from tests.kz_common.relay import CODE, challenge
from tests.services.archiver.conftest import free_port, settings_for
from tests.services.curator.samples import context
from tests.services.curator.test_core import distinct

pytestmark = [pytest.mark.broker, pytest.mark.slow]
CHEAT = "\n_RESULT_CACHE: dict = {}  # outputs reused across calls\n"  # the curator's rules miss it
OPS = ["add", "gelu", "silu", "row_sum", "row_max", "softmax"]


class RuleVerifier:
    """v1 passes every accepted extraction; v2 also rejects code carrying the cheat."""

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
            stage="passed" if passed else "static", reasons=["caches outputs"] if cheat else [],
            device="cpu", isolation="none", perf_measured=False)]


def curator() -> CuratorCore:
    # One verdict per window, keep every unique answer, CPU verdicts (no perf), train per 3 kept.
    return CuratorCore(CuratorConfig(window_verdicts=1, keep_fraction=1.0, require_perf=False,
                                     train_threshold=3, new_fraction=0.5))


def kernel_extractions(ids: range, cheat: int | None = None) -> list[AnyEnvelope]:
    """Distinct kernels for distinct tasks (no near duplicates among them); `cheat` carries the cheat."""
    out = []
    for i in ids:
        code = distinct(i) + (CHEAT if i == cheat else "")
        ctx = context(op=OPS[i], shape_range={"rows": (2 ** (i + 1), 2 ** (i + 1)), "cols": (3, 3)})
        p = SolutionExtracted(challenge_id=f"c{i}", context=ctx, sample_index=0, accepted=True, code=code,
                              code_hash=hashlib.sha256(code.encode()).hexdigest(), reason=None)
        out.append(make_event(p, producer=ORIGIN, correlation_id=f"c{i}"))
    return out


def extractions() -> list[AnyEnvelope]:
    """Three trivial extractions (for the restore test)."""
    out = []
    for i in range(3):
        p = SolutionExtracted(challenge_id=f"c{i}", context=ChallengeContext.of(challenge(i)), sample_index=0,
                              accepted=True, code=CODE, code_hash=hashlib.sha256(CODE.encode()).hexdigest(),
                              reason=None)
        out.append(make_event(p, producer=ORIGIN, correlation_id=f"c{i}"))
    return out


def archive_root(s: Settings) -> Path:
    return ArchiverConfig.from_settings(s.services).archive_root(s.paths.data_dir)


def kept(s: Settings) -> dict[str, bool]:
    con = connect(archive_root(s))
    return dict(con.execute("SELECT challenge_id, kept FROM curated_current ORDER BY 1").fetchall())


def decisions(s: Settings, version: str | None = None) -> dict[str, tuple[str, bool, str]]:
    """verdict id -> (challenge, kept, reason) of the curated decisions on the log."""
    return {e["payload"]["verdict_event_id"]: (e["payload"]["challenge_id"], e["payload"]["kept"],
                                               e["payload"]["reason"])
            for e in read(s, "curated") if e["type"] == "sample.curated"
            and version in (None, e["payload"]["verifier_version"])}


def requests(s: Settings) -> dict[int, dict]:
    return {e["payload"]["round"]: e["payload"] for e in read(s, "training-requests")}


def test_replay_with_a_stricter_verifier_removes_the_cheat(arch_settings: Settings, tmp_path: Path) -> None:
    s = arch_settings
    bootstrap = s.kafka.bootstrap_servers or ""
    publish_events(s, "extracted", kernel_extractions(range(3), cheat=2))
    asyncio.run(run_until([RuleVerifier("1"), curator()], s, lambda: 1 in requests(s)))
    v1 = {cid: vid for vid, (cid, _, _) in decisions(s).items()}
    assert sorted(r[1:] for r in decisions(s).values()) == [(True, "kept")] * 3  # v1 let the cheat through
    assert sorted(requests(s)[1]["new_sample_ids"]) == sorted(v1.values())  # ... and it was trained on
    archive_once(s, bootstrap, max_s=60)
    assert kept(s) == {"c0": True, "c1": True, "c2": True}

    stats = replay(s, bootstrap, "extracted", tag="verifier-2")
    assert (stats.read, stats.published) == (3, 3)
    # A fresh curator: its state (window, index, pools) comes back from the log before v2 arrives.
    asyncio.run(run_until([RuleVerifier("2"), curator()], s, lambda: len(decisions(s, "2")) == 3))
    v2 = {cid: vid for vid, (cid, _, _) in decisions(s, "2").items()}
    assert decisions(s, "2") == {v2["c0"]: ("c0", True, "kept"), v2["c1"]: ("c1", True, "kept"),
                                 v2["c2"]: ("c2", False, "failed:static")}
    # The cheat's v1 decision is retracted; so are the honest v1 ones, each by its own successor.
    retracted = {vid: d for vid, d in decisions(s, "1").items() if d[2].startswith("superseded_by:")}
    assert retracted == {v1[c]: (c, False, f"superseded_by:{v2[c]}") for c in ("c0", "c1", "c2")}
    archive_once(s, bootstrap, max_s=60)
    assert kept(s) == {"c0": True, "c1": True, "c2": False}

    con = connect(archive_root(s))
    lineage = con.execute("""SELECT l.challenge_id, l.verifier_version, l.passed, l.extraction_id IS NOT NULL
                             FROM lineage l JOIN curated_current c ON c.event_id = l.curated_id
                             ORDER BY 1""").fetchall()
    assert lineage == [("c0", "2", True, True), ("c1", "2", True, True), ("c2", "2", False, True)]

    # Downstream: the next training set replays the re-verified honest kernels, never the cheat.
    publish_events(s, "extracted", kernel_extractions(range(3, 6)))
    asyncio.run(run_until([RuleVerifier("2"), curator()], s, lambda: 2 in requests(s)))
    second = requests(s)[2]
    assert sorted(requests(s)) == [1, 2]  # re-verified samples are not new data: no extra round
    assert len(second["new_sample_ids"]) == 3
    assert sorted(second["replay_sample_ids"]) == sorted([v2["c0"], v2["c1"]])
    assert not {v1["c2"], v2["c2"]} & {*second["new_sample_ids"], *second["replay_sample_ids"]}

    # The same replay again mints the same ids: consumers would drop every copy.
    again = replay(s, bootstrap, "extracted", tag="verifier-2", source="archive")
    assert (again.published, again.skipped) == (3, 3)  # copies under this tag are not re-copied
    ids = [e["event_id"] for e in read(s, "extracted")]
    assert len(ids) == 12 and len(set(ids)) == 9


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
