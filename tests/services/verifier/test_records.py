"""Output records (records.py): the round trip, aliasing, and every malformed file refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from services.verifier import records


def _round_trip(tmp_path: Path, groups: dict) -> dict:
    records.write(str(tmp_path), "rec", groups)
    got = records.read(tmp_path, "rec", 1 << 30)
    assert got is not None
    return got


def test_tensors_views_and_scalars_come_back_bit_for_bit(tmp_path: Path) -> None:
    x = torch.randn(6, 5)
    h = torch.randn(4, 3).to(torch.bfloat16)
    outs = [x.t(), x[1:4, ::2], h, torch.arange(7, dtype=torch.int64), torch.ones(3) > 0,
            torch.empty(0, 4), None, object()]
    outs[6:6] = [torch.randn(3, dtype=torch.complex64)]
    after = [x, 3, 2.5, True, (1, [2, "a"]), None, object()]
    got = _round_trip(tmp_path, {"outputs": outs, "inputs_after": after})
    back = got["outputs"]
    for a, b in zip(outs[:7], back[:7]):
        assert b.dtype == a.dtype and b.shape == a.shape and b.stride() == a.stride()
        assert torch.equal(a, b)
    assert back[7] is None and back[8] is None
    assert got["inputs_after"][1:] == [3, 2.5, True, [1, [2, "a"]], None, None]
    assert records.plain(after[4]) == got["inputs_after"][4]
    assert torch.equal(got["inputs_after"][0], x)


def test_views_of_one_storage_share_one_again_and_others_do_not(tmp_path: Path) -> None:
    """The parent's alias check compares storages: an output that was a view of an input
    must still be one, and distinct tensors must not look shared."""
    x, y = torch.randn(8), torch.randn(8)
    got = _round_trip(tmp_path, {"outputs": [x[2:], y], "inputs_after": [x]})
    ptr = got["inputs_after"][0].untyped_storage().data_ptr()
    assert got["outputs"][0].untyped_storage().data_ptr() == ptr
    assert got["outputs"][1].untyped_storage().data_ptr() != ptr
    assert got["inputs_after"] and (tmp_path / "rec.bin").stat().st_size < 2 * 8 * 4 + 64


def test_a_record_without_tensors_and_a_missing_one(tmp_path: Path) -> None:
    assert _round_trip(tmp_path, {"outputs": [None], "inputs_after": None}) == {
        "outputs": [None], "inputs_after": None}
    assert records.read(tmp_path, "absent", 1 << 20) is None


def test_a_record_written_in_chunks_is_the_same_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Storages bigger than a chunk are copied in several steps; nothing is readable as a
    record before its last step (the header comes last), and the bytes are the same."""
    monkeypatch.setattr(records, "CHUNK_BYTES", 64)
    x, y = torch.randn(50), torch.arange(7, dtype=torch.int64)  # 200 bytes: 4 chunks; 1
    steps = records.write_steps(str(tmp_path), "rec", {"outputs": [x, y[2:]],
                                                       "inputs_after": None})
    for _ in range(5):
        next(steps)
        assert records.read(tmp_path, "rec", 1 << 20) is None
    assert next(steps, "end") == "end"
    got = records.read(tmp_path, "rec", 1 << 20)
    assert got is not None and torch.equal(got["outputs"][0], x)
    assert torch.equal(got["outputs"][1], y[2:])


def test_pending_records_are_written_in_order_a_step_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "CHUNK_BYTES", 64)
    pending = records.Pending(str(tmp_path))
    a, b = torch.randn(40), torch.randn(8)  # 160 bytes: 3 chunks; 1
    pending.add("a", {"outputs": [a], "inputs_after": None})
    pending.add("b", {"outputs": [b], "inputs_after": None})
    done = []
    for _ in range(4):  # three chunks and the header of a
        assert pending.step()
        done.append(records.read(tmp_path, "a", 1 << 20) is not None)
    assert done == [False, False, False, True]
    assert records.read(tmp_path, "b", 1 << 20) is None
    pending.add("c", {"outputs": [None], "inputs_after": None})  # added meanwhile: still in
    pending.flush()
    assert not pending.step()
    got = [records.read(tmp_path, n, 1 << 20) for n in "abc"]
    assert torch.equal(got[0]["outputs"][0], a) and torch.equal(got[1]["outputs"][0], b)
    assert got[2] == {"outputs": [None], "inputs_after": None}


def _tamper(tmp_path: Path, edit) -> dict | None:  # type: ignore[no-untyped-def]
    records.write(str(tmp_path), "rec", {"outputs": [torch.randn(4, 4)], "inputs_after": None})
    header = json.loads((tmp_path / "rec.json").read_text())
    edit(header)
    (tmp_path / "rec.json").write_text(json.dumps(header))
    return records.read(tmp_path, "rec", 1 << 20)


def _out(h: dict) -> dict:
    return h["groups"]["outputs"][0]


@pytest.mark.parametrize("edit", [
    lambda h: _out(h).update(shape=[4, 5]),  # reaches past its storage
    lambda h: _out(h).update(stride=[4, 2]),
    lambda h: _out(h).update(offset=1),
    lambda h: _out(h).update(stride=[-4, 1]),  # negative numbers
    lambda h: _out(h).update(shape=[4, 4, 1]),  # shape and stride of different lengths
    lambda h: _out(h).update(dtype="float8_e4m3fn"),  # a dtype outside the list
    lambda h: _out(h).update(dtype="float64"),  # 8-byte elements: twice the bytes there are
    lambda h: _out(h).update(storage=1),  # no such storage
    lambda h: _out(h).update(shape=[4.0, 4]),  # not integers
    lambda h: _out(h).update(shape=[True, 4]),
    lambda h: h["storages"][0].update(nbytes=10 ** 9),  # past the end of the file
    lambda h: h["storages"][0].update(offset=8),  # unaligned
    lambda h: h.update(groups=[]),
    lambda h: h["groups"].update(outputs={"a": 1}),
    lambda h: h["groups"]["outputs"].append({"value": {"a": 1}}),  # a value that is no data
    lambda h: h["groups"]["outputs"].append({"value": [[[[[1]]]]]}),  # nested too deep
    lambda h: h["groups"]["outputs"].append(7),
])
def test_every_malformed_header_is_refused_whole(tmp_path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    assert _tamper(tmp_path, edit) is None


def test_oversized_symlinked_or_garbage_files_are_refused(tmp_path: Path) -> None:
    records.write(str(tmp_path), "rec", {"outputs": [torch.randn(64)], "inputs_after": None})
    assert records.read(tmp_path, "rec", 100) is None  # 256 bytes over a 100-byte cap
    (tmp_path / "link.json").symlink_to(tmp_path / "rec.json")
    (tmp_path / "link.bin").symlink_to(tmp_path / "rec.bin")
    assert records.read(tmp_path, "link", 1 << 20) is None
    (tmp_path / "junk.json").write_bytes(os.urandom(64))
    (tmp_path / "junk.bin").write_bytes(b"")
    assert records.read(tmp_path, "junk", 1 << 20) is None
    (tmp_path / "big.json").write_text(" " * (records.MAX_HEADER + 1) + "{}")
    (tmp_path / "big.bin").write_bytes(b"")
    assert records.read(tmp_path, "big", 1 << 20) is None
