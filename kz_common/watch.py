"""Follow the event log and account for every sample of a round (used by `kz run`)."""

from __future__ import annotations

import base64
import time
from collections import defaultdict
from dataclasses import dataclass, field

import orjson
from kafka import KafkaConsumer, TopicPartition

from kz_common.admin import assign_from, scan
from kz_common.config import KafkaConfig
from kz_common.topics import logical, topic_specs

QUIET_S = 1.5  # a round's challenges arrive in one burst; wait this long past the last one
_STAGE_OF_TOPIC = {"solutions": 0, "extracted": 1, "verified": 2, "curated": 3}
_STAGES = ("solutions", "extracted", "verified", "curated")


@dataclass
class _Challenge:
    n_samples: int | None = None
    reached: list[set[int]] = field(default_factory=lambda: [set(), set(), set(), set()])
    dead_at: dict[int, int] = field(default_factory=dict)  # sample -> first stage it never reached
    dead_whole: bool = False  # the challenge itself was dead-lettered by the solver


@dataclass
class RoundLedger:
    round: int
    challenges: int = 0
    samples: int = 0
    extracted: int = 0
    extracted_ok: int = 0
    verified: int = 0
    passed: int = 0
    curated: int = 0
    kept: int = 0
    dead: int = 0
    expected_samples: int = 0
    _accounted: dict[str, int] = field(default_factory=dict)
    _settled: bool = False

    def accounted(self, stage: str) -> int:
        return self._accounted.get(stage, 0)

    def complete(self) -> bool:
        return self._settled and self.accounted("curated") == self.expected_samples

    def describe(self) -> str:
        parts = ", ".join(f"{s} {self.accounted(s)}/{self.expected_samples}" for s in _STAGES)
        return f"{self.challenges} challenges; {parts}; {self.dead} dead letters"


class Watcher:
    """A group-less consumer over every topic, from the beginning, polled by the caller."""

    def __init__(self, kafka: KafkaConfig, bootstrap: str) -> None:
        self.kafka = kafka
        self.rounds_of: dict[str, int] = {}  # challenge id -> round (training challenges only)
        self.last_challenge_at: dict[int, float] = {}
        self.per: dict[str, _Challenge] = defaultdict(_Challenge)
        self.tally: dict[int, RoundLedger] = {}
        self.rounds_started: set[int] = set()
        self.training: list[str] = []
        # The log so far, read to its end (next_round depends on every earlier round.started),
        # then followed from exactly there: nothing read twice, nothing skipped.
        topics = [s.physical for s in topic_specs(kafka)]
        after: dict[tuple[str, int], int] = {}
        for rec in scan(bootstrap, *topics):
            self._ingest(logical(kafka, rec.topic), rec.value)
            after[(rec.topic, rec.partition)] = rec.offset + 1
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
        tps = [TopicPartition(t, p) for t in topics for p in (self.consumer.partitions_for_topic(t) or ())]
        assign_from(self.consumer, tps, after)

    def next_round(self) -> int:
        """The first round number not used by an earlier run on this log."""
        return max(self.rounds_started, default=-1) + 1

    def poll(self, seconds: float = 0.3) -> None:
        deadline = time.monotonic() + seconds
        while True:
            batch = self.consumer.poll(timeout_ms=100)
            for records in batch.values():
                for rec in records:
                    self._ingest(logical(self.kafka, rec.topic), rec.value)
            if not batch and time.monotonic() >= deadline:
                return

    def ledger(self, r: int) -> RoundLedger:
        led = self.tally.setdefault(r, RoundLedger(r))
        mine = [c for c, rr in self.rounds_of.items() if rr == r]
        led.challenges = len(mine)
        led.expected_samples = sum(self.per[c].n_samples or 0 for c in mine)
        known = all(self.per[c].n_samples is not None or self.per[c].dead_whole for c in mine)
        quiet = time.monotonic() - self.last_challenge_at.get(r, time.monotonic()) > QUIET_S
        led._settled = bool(mine) and known and quiet
        for i, stage in enumerate(_STAGES):
            led._accounted[stage] = sum(
                len(self.per[c].reached[i]) + sum(1 for s, d in self.per[c].dead_at.items()
                                                  if d <= i and s not in self.per[c].reached[i])
                for c in mine
            )
        return led

    def training_summary(self) -> str:
        return "training: " + ("; ".join(self.training) if self.training else "no round triggered yet")

    # ------------------------------------------------------------------ ingest

    def _ingest(self, topic: str, value: bytes) -> None:
        try:
            doc = orjson.loads(value)
            p = doc["payload"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        kind = doc.get("type")
        if kind == "round.started":
            self.rounds_started.add(p["round"])
        elif kind == "challenge.created" and p.get("purpose", "train") == "train":
            self.rounds_of[p["challenge_id"]] = p["round"]
            self.last_challenge_at[p["round"]] = time.monotonic()
            self.tally.setdefault(p["round"], RoundLedger(p["round"]))
        elif topic in _STAGE_OF_TOPIC:
            self._stage(topic, p)
        elif kind == "dead.letter":
            self._dead(p)
        elif kind in ("training.requested", "round.trained", "round.evaluated"):
            self.training.append(_training_line(kind, p))

    def _stage(self, topic: str, p: dict) -> None:
        cid = p.get("challenge_id")
        if cid not in self.rounds_of:
            return
        led = self.tally[self.rounds_of[cid]]
        ch = self.per[cid]
        stage = _STAGE_OF_TOPIC[topic]
        sample = p.get("sample_index")
        if sample is None:  # a decision not tied to one sample: count it once per event
            sample = -1 - len(ch.reached[stage])
        if sample in ch.reached[stage]:
            return  # a redelivered duplicate
        ch.reached[stage].add(sample)
        if topic == "solutions":
            ch.n_samples = p["n_samples"]
            led.samples += 1
        elif topic == "extracted":
            led.extracted += 1
            led.extracted_ok += bool(p.get("accepted"))
        elif topic == "verified":
            led.verified += 1
            led.passed += bool(p.get("passed"))
        else:
            led.curated += 1
            led.kept += bool(p.get("kept"))

    def _dead(self, p: dict) -> None:
        try:
            original = orjson.loads(base64.b64decode(p["original_b64"]))["payload"]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return
        cid = original.get("challenge_id") if isinstance(original, dict) else None
        if cid not in self.rounds_of:
            return
        self.tally[self.rounds_of[cid]].dead += 1
        source = p["source_topic"]
        ch = self.per[cid]
        if source == "challenges":
            ch.dead_whole = True
        elif source in _STAGE_OF_TOPIC:  # the sample never reaches the stage after its source
            ch.dead_at.setdefault(original.get("sample_index", 0), _STAGE_OF_TOPIC[source] + 1)


def _training_line(kind: str, p: dict) -> str:
    if kind == "training.requested":
        return f"round {p['round']} requested ({len(p['new_sample_ids'])} new + {len(p['replay_sample_ids'])} replayed)"
    if kind == "round.trained":
        return f"round {p['round']} trained ({p['adapter_path']})"
    return f"round {p['round']} {'PROMOTED' if p['promoted'] else 'not promoted'}: {p['reason']}"
