"""Best-per-challenge, top fraction with diversity, replay mixing."""

from __future__ import annotations

from services.curator.mixing import PoolItem, dataset_hash, replay_count, sample_replay
from services.curator.neardup import NearDupIndex, code_minhash
from services.curator.selection import (
    Candidate,
    best_per_challenge,
    keep_count,
    remove_near_dups,
    select_diverse,
)
from services.curator.signature import shape_lsh_keys
from tests.services.curator.samples import CLEAN, renamed, verdict
from tests.services.curator.test_patterns import LOOPED


def cand(sid: str, score: float | None, *, cid: str = "c1", family: str = "softmax", bucket: str = "b",
         code: str = CLEAN, reason: str = "") -> Candidate:
    v = verdict(code, challenge_id=cid, passed=score is not None)
    return Candidate(sid, v, code, bucket, shape_lsh_keys(v.context), code_minhash(code), score,
                     reason, (family, bucket))


def test_best_per_challenge_and_pairs() -> None:
    window = [cand("a", 1.0), cand("b", 2.0), cand("f", None, reason="failed:correctness"),
              cand("x", 0.5, cid="c2")]
    answers, losers, pairs = best_per_challenge(window, with_failed=True, max_pairs=8)
    assert [c.sample_id for c in answers] == ["b", "x"]
    assert [c.sample_id for c in losers] == ["a"]
    assert {(p.chosen.sample_id, p.rejected.sample_id, p.reason) for p in pairs} == {
        ("b", "a", "lower_score"), ("b", "f", "failed:correctness")}
    _, _, only_passing = best_per_challenge(window, with_failed=False, max_pairs=8)
    assert [p.rejected.sample_id for p in only_passing] == ["a"]
    _, _, capped = best_per_challenge(window, with_failed=True, max_pairs=1)
    assert len(capped) == 1


def test_challenge_with_only_failures_has_no_answer() -> None:
    answers, losers, pairs = best_per_challenge([cand("f", None, reason="failed:x")], with_failed=True,
                                                max_pairs=8)
    assert answers == losers == pairs == []


def test_near_dups_keep_the_best_and_respect_history() -> None:
    best, copy, other = cand("a", 2.0), cand("b", 1.0, code=renamed(CLEAN)), cand("c", 0.5, code=LOOPED)
    unique, dups = remove_near_dups([copy, best, other], NearDupIndex(), threshold=0.8, num_perm=128)
    assert [c.sample_id for c in unique] == ["a", "c"]
    assert [(c.sample_id, o) for c, o in dups] == [("b", "a")]
    history = NearDupIndex()
    history.add("old", code_minhash(CLEAN), best.task_keys)
    unique, dups = remove_near_dups([best], history, threshold=0.8, num_perm=128)
    assert unique == [] and dups[0][1] == "old"


def test_keep_count() -> None:
    assert keep_count(100, 0.1, 1) == 10
    assert keep_count(5, 0.1, 1) == 1  # at least one per window when anything passes
    assert keep_count(0, 0.1, 1) == 0
    assert keep_count(3, 0.1, 5) == 3


def test_select_diverse_balances_families_and_buckets() -> None:
    many = [cand(f"e{i}", 10.0 - i, family="elementwise") for i in range(8)]
    few = [cand("s0", 1.0, family="softmax"), cand("s1", 0.5, family="softmax", bucket="other")]
    kept, dropped = select_diverse(many + few, 4)
    ids = {c.sample_id for c in kept}
    assert ids == {"e0", "e1", "s0", "s1"}
    assert len(dropped) == 6
    top, _ = select_diverse(many, 3)
    assert [c.sample_id for c in top] == ["e0", "e1", "e2"]


def items(n: int, family: str = "f", bucket: str = "b", prefix: str = "h") -> list[PoolItem]:
    return [PoolItem(f"{prefix}{i}", family, bucket, f"c{i}") for i in range(n)]


def test_replay_count_ratio() -> None:
    assert replay_count(30, 0.3) == 70
    assert replay_count(10, 1.0) == 0


def test_short_history_gives_all_of_it() -> None:
    assert len(sample_replay(items(5), 70, seed=1)) == 5


def test_replay_is_stratified_and_deterministic() -> None:
    history = items(90, "elementwise", prefix="e") + items(10, "softmax", prefix="s")
    picked = sample_replay(history, 20, seed=3)
    assert sum(i.family == "softmax" for i in picked) == 10
    assert picked == sample_replay(history, 20, seed=3)
    assert picked != sample_replay(history, 20, seed=4)


def test_dataset_hash_is_order_free_and_content_sensitive() -> None:
    a = items(3)
    assert dataset_hash(a) == dataset_hash(list(reversed(a)))
    assert dataset_hash(a) != dataset_hash(a[:2])
    assert dataset_hash(a) != dataset_hash([PoolItem("h0", "f", "b", "other"), *a[1:]])

