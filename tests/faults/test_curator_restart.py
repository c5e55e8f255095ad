"""A SIGKILLed curator whose window spans partitions: the restart neither loses nor repeats
a curation decision. Deterministic, unlike the mid-stream kills of test_sigkill_samples.

The curator's window is global, but after a restart the runner replays the committed
verdicts partition by partition, not in the order they were consumed. Here (window of
two, verdicts consumed one by one in the order a@p0, b@p1, c@p0, then a SIGKILL while the
curator is idle, so everything is committed) the live window {a, b} closes at b and c
waits. Re-running the replayed verdicts in partition order (a, c, b) would close {a, c}
instead: c "decided" with its outputs discarded, b put back in the window and decided a
second time when d@p1 arrives, c never.

The curator rebuilds its state from its own decisions on the log instead (a and b are
decided; c, with no decision, is the open window), so d closes {c, d}: every verdict is
decided exactly once, c and d by the same close, as an uninterrupted curator would. The
real curator service, real verdict events, a real SIGKILL.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest

from kz_common.config import Settings
from schemas import AnyEnvelope, Producer, SolutionVerified, make_event
from tests.faults.chaos import key_on
from tests.faults.conftest import curator_section
from tests.faults.pipeline import Services, events, lag, publish_events
from tests.services.curator.samples import context
from tests.services.curator.test_core import distinct

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]
VERIFIER = Producer(service="verifier", version="fault-test")
OPS = ("add", "gelu", "silu", "row_sum")


def passing(i: int, partition: int) -> AnyEnvelope:
    """A passing verdict of a distinct kernel for its own task, keyed onto `partition`."""
    cid = key_on(partition, 3, f"cur{i}")
    code = distinct(i)
    ctx = context(op=OPS[i], shape_range={"rows": (2 ** (i + 1), 2 ** (i + 1)), "cols": (3, 3)})
    payload = SolutionVerified(
        challenge_id=cid, context=ctx, sample_index=0, code=code,
        code_hash=hashlib.sha256(code.encode()).hexdigest(), verifier_version="fault-test",
        passed=True, stage="passed", reasons=[], device="cpu", isolation="none", perf_measured=False)
    return make_event(payload, producer=VERIFIER, correlation_id=cid)


def test_restarted_curator_decides_every_verdict_once(fault_settings: Settings, tmp_path: Path) -> None:
    s = fault_settings
    a, b, c, d = passing(0, 0), passing(1, 1), passing(2, 0), passing(3, 1)
    services = {"curator": curator_section(window_verdicts=2, train_threshold=100)}

    def consumed() -> bool:
        return lag(s, "curator", ("verified",)) == 0

    with Services(s, tmp_path, services) as svc:
        svc.start("curator")
        svc.wait_consuming("curator")
        for verdict in (a, b, c):  # one at a time: the consumption order is the publication order
            publish_events(s, "verified", [verdict])
            svc.wait(consumed, 60, "the curator to commit the verdict")
        assert len(events(s, "curated", "sample.curated")) == 2  # a and b; c waits in the window
        svc.kill("curator")
        svc.start("curator")
        svc.wait_consuming("curator")
        publish_events(s, "verified", [d])
        svc.wait(lambda: consumed() and len(events(s, "curated")) >= 4, 60,
                 "four curation decisions")
        svc.check()

    curated = events(s, "curated", "sample.curated")
    per_verdict = Counter(e["payload"]["verdict_event_id"] for e in curated)
    assert per_verdict == Counter({v.event_id: 1 for v in (a, b, c, d)}), {
        name: per_verdict[v.event_id] for name, v in zip("abcd", (a, b, c, d), strict=True)}
    closed_by = {e["payload"]["verdict_event_id"]: e["causation_id"] for e in curated}
    assert [closed_by[v.event_id] for v in (a, b, c, d)] == [b.event_id, b.event_id, d.event_id, d.event_id]
