"""SIGKILL of the sample-path services mid-stream: extractor, verifier, curator, curriculum.

Real `kz service NAME` processes; a background publisher trickles solver samples
(honest kernels, static cheats, noise) and malformed records onto the topics, and
each service is SIGKILLed once while that stream is flowing and restarted at once.
Afterwards:

- every sample has exactly one extraction, one verdict and one curation decision, no
  event id is on any topic twice, and training requests number their rounds 1..n
  with no sample new in two of them (`assert_chain`);
- every verdict is the one the input deserves (a kill never turns into a verdict);
- the curriculum's decisions are exactly those a fresh CurriculumCore makes over
  the verdict log;
- every malformed record is dead-lettered by each consumer of its topic.

Order across partitions: a restarted stateful service replays its committed inputs
partition by partition, not in the order it consumed them. The curator no longer depends
on that order (it rebuilds its decisions from its own outputs: test_curator_restart), but
the curriculum still rebuilds from the replay alone, so each curriculum family's verdicts
sit on one partition here; the curator's window is one verdict with a training request
per kept sample, which keeps the expected decisions computable per partition.
"""

from __future__ import annotations

import base64
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest

from kz_common.config import Settings
from kz_common.kernels import reference_solution
from schemas import AnyEnvelope, decode, encode
from services.challenger.config import CurriculumConfig
from services.challenger.curriculum_core import CurriculumCore
from tests.faults import candidates as C
from tests.faults.chaos import Item, Kill, Trickle, item, key_on, kill_and_restart, produced_by
from tests.faults.conftest import curator_section, verifier_section
from tests.faults.pipeline import (
    NOISE,
    Services,
    assert_chain,
    dead_letters,
    drained,
    events,
    extracted,
    fenced,
    sampled,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(200)]

# One op per family, each family's challenge keyed onto its own partition (see the docstring).
OPS = ("add", "row_sum", "softmax")
# Per challenge: (kind, difficulty). An honest pass at the family's rung moves it up one
# (min_verdicts=1); verdicts drawn at another rung do not count, so the second rise needs the
# first one in the state, rebuilt by replay if the curriculum was killed in between.
PLAN = (("honest", 0), ("cheat", 0), ("noise", 0), ("honest", 1), ("cheat", 1), ("noise", 1))
CURRICULUM: dict[str, Any] = {"min_verdicts": 1, "window": 4, "low": 0.3, "high": 0.6}
GROUPS = {"extractor": ("solutions",), "verifier": ("extracted",), "curator": ("verified",),
          "curriculum": ("verified",)}
OUTPUTS = {"extractor": ("extracted",), "verifier": ("verified",),
           "curator": ("curated", "training-requests"), "curriculum": ("curriculum",)}
UPSTREAM = {"extractor": (), "verifier": ("extractor",), "curator": ("extractor", "verifier"),
            "curriculum": ("extractor", "verifier")}
# Kill order, and how many events the victim must have produced first. Early kills: a restarted
# verifier re-runs every committed extraction while it warms up (VerifierCore has no `observe`
# and is not marked stateless), so a late verifier kill costs a whole re-verification.
KILLS = (("extractor", 3), ("verifier", 3), ("curator", 2), ("curriculum", 1))


def code_for(kind: str, op: str) -> str:
    honest = reference_solution(op)
    return {"honest": fenced(honest), "cheat": fenced("import os\n" + honest), "noise": NOISE}[kind]


def workload() -> tuple[list[AnyEnvelope], list[Item], dict[str, list[bytes]]]:
    """Samples, the stream to publish (samples with malformed records between them), and the
    malformed records by the topic they are published on."""
    samples = []
    for part, op in enumerate(OPS):
        cid = key_on(part, 3, f"k-{op}")
        samples += [sampled(cid, i, code_for(kind, op), op=op, difficulty=d, n_samples=len(PLAN))
                    for i, (kind, d) in enumerate(PLAN)]
    # round-robin over the families, so every partition is busy all the time
    samples.sort(key=lambda s: (s.payload.sample_index, s.payload.context.op))  # type: ignore[union-attr]
    no_raw = orjson.loads(encode(sampled("k-junk", 0, NOISE)))
    del no_raw["payload"]["raw_output"]  # required by SolutionSampled
    no_code = orjson.loads(encode(extracted("k-junk", 0, C.HONEST)))
    no_code["payload"]["code"] = None  # accepted without code: violates SolutionExtracted
    bad = {
        "solutions": [b"\x00\xffnot json at all", orjson.dumps(no_raw),
                      encode(extracted("k-junk", 1, C.HONEST))],  # a valid event on the wrong topic
        "extracted": [orjson.dumps(no_code)],
        "verified": [b"{\"truncated\": "],
    }
    stream: list[Item] = [item("solutions", s) for s in samples]
    for n, (topic, value) in enumerate((t, v) for t, vs in bad.items() for v in vs):
        stream.insert(3 + 4 * n, (topic, b"junk", value))
    return samples, stream, bad


def test_services_killed_mid_stream_lose_and_duplicate_nothing(
        fault_settings: Settings, verifier_cache: Path, tmp_path: Path) -> None:
    s = fault_settings
    samples, stream, bad = workload()
    services = {"verifier": verifier_section(verifier_cache),
                "curator": curator_section(window_verdicts=1), "curriculum": CURRICULUM}
    kills: list[Kill] = []
    with Services(s, tmp_path, services) as svc:
        svc.start(*GROUPS)
        for name in GROUPS:
            svc.wait_consuming(name)
        trickle = Trickle(s, stream, every_s=1.0)  # about the verifier's pace on two cores
        trickle.start()

        def produced(name: str, k: int) -> bool:
            trickle.check()
            return produced_by(s, name, OUTPUTS[name]) >= k

        for name, after in KILLS:
            svc.wait(partial(produced, name, after), 90, f"{name} to produce {after} events before its kill")
            kills.append(kill_and_restart(svc, s, name, GROUPS[name], OUTPUTS[name],
                                          {u: GROUPS[u] for u in UPSTREAM[name]}, trickle.unpublished))
        trickle.join(60)
        trickle.check()
        svc.wait(lambda: drained(s, GROUPS), 120, "the pipeline to drain")
        svc.check()

    assert [k.service for k in kills] == [n for n, _ in KILLS]
    assert all(k.mid_stream for k in kills), kills
    assert svc.starts == Counter({n: 2 for n in GROUPS})

    got = assert_chain(s, samples)
    kind = {s.event_id: PLAN[s.payload.sample_index][0] for s in samples}  # type: ignore[union-attr]
    extraction_of = {e["event_id"]: e["causation_id"] for e in got["extracted"]}
    for v in got["verified"]:
        p, k = v["payload"], kind[extraction_of[v["causation_id"]]]
        deserved = {"honest": (True, "passed"), "cheat": (False, "static"), "noise": (False, "extraction")}[k]
        assert (p["passed"], p["stage"]) == deserved, (k, p["stage"], p["reasons"])
    kept = [c for c in got["curated"] if c["payload"]["kept"]]
    assert {c["payload"]["op"] for c in kept} == set(OPS), [c["payload"]["reason"] for c in got["curated"]]
    assert got["requests"], "no training request: the curator never closed a window with a kept sample"

    # The curriculum: exactly the decisions a fresh core makes over the same verdict log.
    oracle = CurriculumCore(CurriculumConfig(**CURRICULUM))
    expected = {}
    for v in events(s, "verified", "solution.verified"):
        for decision in oracle.process(decode(orjson.dumps(v))):
            expected[v["event_id"]] = decision.model_dump(mode="json")
    adjusted = events(s, "curriculum", "curriculum.adjusted")
    assert {d["causation_id"]: d["payload"] for d in adjusted} == expected
    assert len(adjusted) == len(expected) >= 2 * len(OPS), adjusted  # each family up twice

    # Malformed records: each consumer of the topic dead-letters each one, once (kills included).
    consumers = {"solutions": ("extractor",), "extracted": ("verifier",),
                 "verified": ("curator", "curriculum")}
    want = Counter((c, value) for topic, values in bad.items() for value in values for c in consumers[topic])
    letters = dead_letters(s)
    got_letters = Counter((x["consumer"], base64.b64decode(x["original_b64"])) for x in letters)
    assert got_letters == want, [(x["consumer"], x["error_kind"], x["error"][:100]) for x in letters]
