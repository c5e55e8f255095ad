"""The real verifier service (`kz service verifier`) fed candidates that hang, segfault and
exhaust memory, between honest ones and malformed records, on one partition (in order).

Every bad candidate must come back as a rejected verdict naming what happened, the
malformed records as dead letters, the honest solutions must still pass, and the
service must still be running at the end.
"""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from kz_common.config import Settings
from schemas import encode
from tests.faults import candidates as C
from tests.faults.conftest import verifier_section
from tests.faults.pipeline import Services, drained, events, extracted, publish

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(150)]

WALL_S = 12.0  # candidate wall clock: a sandboxed torch import + the small `add` shapes fit


def test_hang_segfault_oom_are_rejected_and_the_verifier_keeps_going(
        fault_settings: Settings, verifier_cache: Path, tmp_path: Path) -> None:
    s = fault_settings
    cid = "vf-add"  # one key: one partition, so the verifier sees the stream in this order
    stream = {
        "honest-first": extracted(cid, 0, C.HONEST),
        "hang": extracted(cid, 1, C.HANG),
        "segfault": extracted(cid, 2, C.SEGFAULT),
        "oom": extracted(cid, 3, C.OOM),
        "honest-last": extracted(cid, 4, C.HONEST),
    }
    not_json = b"\x00\xff{not json"
    no_code = orjson.loads(encode(stream["hang"]))
    no_code["payload"]["code"] = None  # accepted without code: violates SolutionExtracted
    malformed = [not_json, orjson.dumps(no_code)]
    values = [encode(stream["honest-first"]), encode(stream["hang"]), malformed[0],
              encode(stream["segfault"]), encode(stream["oom"]), malformed[1], encode(stream["honest-last"])]
    publish(s, "extracted", values, [cid.encode()] * len(values))

    services = {"verifier": verifier_section(verifier_cache, wall_timeout_s=WALL_S)}
    with Services(s, tmp_path, services) as svc:
        svc.start("verifier")
        svc.wait(lambda: drained(s, {"verifier": ("extracted",)}),
                 120, "the verifier to finish the stream")
        svc.check("verifier")  # still running after hang, segfault and OOM

    verdicts = {d["causation_id"]: d["payload"] for d in events(s, "verified", "solution.verified")}
    assert len(events(s, "verified")) == len(stream) == len(verdicts)  # one verdict per input
    by_name = {name: verdicts[e.event_id] for name, e in stream.items()}

    for name in ("honest-first", "honest-last"):
        v = by_name[name]
        assert (v["passed"], v["stage"]) == (True, "passed"), (name, v["reasons"])
    expected = {"hang": ("timed out", "cpu limit"), "segfault": ("sigsegv", "segfault"),
                "oom": ("memory",)}
    for name, words in expected.items():
        v = by_name[name]
        text = " | ".join(v["reasons"]).lower()
        assert not v["passed"] and v["stage"] == "runtime", (name, v["stage"], v["reasons"])
        assert any(w in text for w in words), f"{name}: reason does not say what happened: {v['reasons']}"

    letters = [d["payload"] for d in events(s, "dead-letters", "dead.letter")]
    assert sorted(base64.b64decode(x["original_b64"]) for x in letters) == sorted(malformed)
    kinds = {base64.b64decode(x["original_b64"]): x["error_kind"] for x in letters}
    assert kinds == {not_json: "decode", malformed[1]: "schema"}
    assert all(x["consumer"] == "verifier" for x in letters)
