"""Near-duplicate solutions: MinHash over normalised token shingles, indexed with MinHashLSH.

Two samples are one when their tasks collide in the shape LSH (see signature.py)
and their code's estimated Jaccard similarity is >= the threshold. Renamed
copies with another BLOCK size normalise to the same tokens (tokens.py), so they
collide exactly; a different algorithm for the same task does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from datasketch import MinHash, MinHashLSH

from services.curator.tokens import normalised_tokens, shingles

_SEED = 1  # fixed: MinHashes must be comparable across processes and restarts


def code_minhash(code: str, *, num_perm: int = 128, shingle_len: int = 5) -> MinHash:
    """MinHash of `code`'s normalised token shingles."""
    mh = MinHash(num_perm=num_perm, seed=_SEED)
    for sh in shingles(normalised_tokens(code), shingle_len):
        mh.update(sh.encode())
    return mh


@dataclass(frozen=True)
class Entry:
    sample_id: str
    minhash: MinHash
    task_keys: frozenset[str]


class NearDupIndex:
    """Kept samples, searchable for near duplicates of a new one."""

    def __init__(self, *, threshold: float = 0.8, num_perm: int = 128) -> None:
        self.threshold = threshold
        self._lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        self._entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, minhash: MinHash, task_keys: frozenset[str]) -> str | None:
        """Sample id of an indexed near duplicate, or None."""
        for sid in sorted(self._lsh.query(minhash)):
            entry = self._entries[sid]
            if entry.task_keys & task_keys and entry.minhash.jaccard(minhash) >= self.threshold:
                return sid
        return None

    def add(self, sample_id: str, minhash: MinHash, task_keys: frozenset[str]) -> None:
        if sample_id in self._entries:
            return
        self._entries[sample_id] = Entry(sample_id, minhash, task_keys)
        self._lsh.insert(sample_id, minhash)

    def remove(self, sample_id: str) -> bool:
        """Forget a sample (a re-verification revoked it); False when it was not indexed."""
        if self._entries.pop(sample_id, None) is None:
            return False
        self._lsh.remove(sample_id)
        return True

    def __contains__(self, sample_id: object) -> bool:
        return sample_id in self._entries
