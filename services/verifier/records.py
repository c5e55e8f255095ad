"""Output records: how the sandboxed harness hands its tensors to the trusted parent.

One record per correctness call (`call_i`), timed set (`timed_k`) and holdout (`holdout_k`):
`NAME.bin` holds the bytes of each distinct storage the record's tensors view, copied once
from the device straight into the file's pages (tmpfs), and `NAME.json` says which tensor is
which view of which storage. The parent maps the .bin privately and builds the tensors from
the header after checking every number in it against the file: a candidate-written file is
read as bytes plus a bounded JSON, never unpickled. Tensors that shared a storage in the
sandbox share one again, so an output that aliases an input is still seen as one.

Before, the harness torch.save'd each record (a device copy, then a serialisation copy) and
the parent torch.load'ed it (a third copy): on the H200 1.7-1.9 s of a candidate's run and
0.7-1.0 s of its judgement for 0.5-1 GB of outputs.

Standalone (torch and the standard library): copied into the sandbox as kz_records.py.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

ALIGN = 64  # each storage starts on this boundary in the .bin (any dtype's view is aligned)
MAX_HEADER = 4 << 20
MAX_DIMS = 16
# Every dtype a reference output or input may have (a record of any other is refused whole)
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
    torch.complex128, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
    torch.bool)}


# ------------------------------------------------------------------ writer (in the sandbox)

CHUNK_BYTES = 8 << 20  # bytes copied per step of write_steps (~2-3 ms device-to-tmpfs)


def write(out_dir: str, name: str, groups: dict[str, list | None]) -> None:
    """Write `groups` (name -> list of tensors / plain data / anything, or None) as record
    `name`. Anything but a plain tensor or plain data (see `plain`) is written as null."""
    for _ in write_steps(out_dir, name, groups):
        pass


def write_steps(out_dir: str, name: str, groups: dict[str, list | None],
                from_file: Any = torch.from_file, empty: Any = torch.empty) -> Iterator[None]:
    """`write`, one CHUNK_BYTES copy per step (the caller may do other things in between;
    the header, written last, completes the record). `from_file`/`empty` are bound at
    import: the harness imports this module before the candidate's code runs."""
    slots: dict[tuple[str, int], int] = {}
    spans: list[tuple[int, int]] = []
    sources: list[Any] = []

    def entry(x: Any) -> dict[str, Any] | None:
        if type(x) is torch.Tensor:
            st = x.untyped_storage()
            key = (str(x.device), st.data_ptr())
            if key not in slots:
                start = -(-(spans[-1][0] + spans[-1][1]) // ALIGN) * ALIGN if spans else 0
                slots[key] = len(spans)
                spans.append((start, st.nbytes()))
                sources.append(st)
            return {"storage": slots[key], "dtype": str(x.dtype).removeprefix("torch."),
                    "shape": list(x.shape), "stride": list(x.stride()),
                    "offset": x.storage_offset()}
        return {"value": plain(x)} if _is_plain(x) else None

    header: dict[str, Any] = {"groups": {g: None if xs is None else [entry(x) for x in xs]
                                         for g, xs in groups.items()}}
    header["storages"] = [{"offset": o, "nbytes": n} for o, n in spans]
    path = os.path.join(out_dir, f"{name}.bin")
    total = spans[-1][0] + spans[-1][1] if spans else 0
    if total:
        dst = from_file(path, shared=True, size=total, dtype=torch.uint8)
        for (start, n), st in zip(spans, sources):
            src = empty(0, dtype=torch.uint8, device=st.device).set_(st)
            for a in range(0, n, CHUNK_BYTES):
                b = min(n, a + CHUNK_BYTES)
                dst[start + a:start + b].copy_(src[a:b])
                yield
        del dst  # unmapped: the bytes are in the file
    else:
        open(path, "wb").close()
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(header, f)


class Pending:
    """Records still to write, in order, one step (a chunk) at a time: the harness writes
    some while it waits for its timed phase's GO (lock-free time, in small steps so that
    GO waits for at most one), and the rest after its timed runs."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self._todo: list[tuple[str, dict[str, list | None]]] = []
        self._writer: Iterator[None] | None = None

    def add(self, name: str, groups: dict[str, list | None]) -> None:
        self._todo.append((name, groups))

    def step(self) -> bool:
        """One more chunk written (or a record completed); False once nothing is left."""
        if self._writer is None:
            if not self._todo:
                return False
            self._writer = write_steps(self.out_dir, *self._todo[0])
        if next(self._writer, _END) is _END:
            self._todo.pop(0)
            self._writer = None
        return True

    def flush(self) -> None:
        while self.step():
            pass


_END = object()


# ------------------------------------------------------------------ reader (the parent)

def read(out_dir: Path, name: str, max_bytes: int) -> dict[str, list | None] | None:
    """Record `name` as {group: [tensor | scalar | None, ...] or None}, or None when it is
    missing, bigger than `max_bytes`, or malformed in any way. Never raises."""
    try:
        header = _header(out_dir / f"{name}.json")
        bases = _storages(out_dir / f"{name}.bin", header.get("storages"), max_bytes)
        groups = header.get("groups")
        if not isinstance(groups, dict):
            raise ValueError("no groups")
        return {str(g): None if xs is None else [_item(bases, e) for e in _list(xs)]
                for g, xs in groups.items()}
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, OverflowError):
        return None


def _header(path: Path) -> dict[str, Any]:
    with open(path, "rb", opener=_nofollow) as f:
        raw = f.read(MAX_HEADER + 1)
    if len(raw) > MAX_HEADER:
        raise ValueError("header too big")
    header = json.loads(raw)
    if not isinstance(header, dict):
        raise ValueError("header is not an object")
    return header


def _storages(path: Path, spans: Any, max_bytes: int) -> list[torch.Tensor]:
    """One uint8 tensor per storage, each over its own span of a private map of the file."""
    with open(path, "rb", opener=_nofollow) as f:
        info = os.fstat(f.fileno())  # of the file actually opened
        size = info.st_size
        if size > max_bytes or not stat.S_ISREG(info.st_mode):
            raise ValueError("bad .bin")
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) if size else None
    bases = []
    for s in _list(spans):
        if not isinstance(s, dict):
            raise ValueError("bad storage")
        start, n = _nat(s.get("offset")), _nat(s.get("nbytes"))
        if start + n > size or start % ALIGN:
            raise ValueError("storage past the end of the file, or unaligned")
        # frombuffer: each its own storage (distinct data_ptr); the map stays alive with it
        bases.append(torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=start)
                     if n else torch.empty(0, dtype=torch.uint8))
    return bases


def _item(bases: list[torch.Tensor], e: Any) -> Any:
    if e is None:
        return None
    if not isinstance(e, dict):
        raise ValueError("bad entry")
    if "value" in e:
        if not _is_plain(e["value"]):
            raise ValueError("bad value")
        return e["value"]
    dtype = DTYPES[e["dtype"]]
    k = _nat(e["storage"])
    if k >= len(bases):
        raise ValueError("no such storage")
    shape, stride = _dims(e["shape"]), _dims(e["stride"])
    offset = _nat(e["offset"])
    if len(shape) != len(stride):
        raise ValueError("shape and stride differ in length")
    item = torch.empty(0, dtype=dtype).element_size()
    base = bases[k]
    elems = base.numel() // item
    if all(shape):  # the last element a view reaches must lie inside its storage
        last = offset + sum((n - 1) * s for n, s in zip(shape, stride))
        if last >= elems:
            raise ValueError("view past the end of its storage")
    elif offset > elems:
        raise ValueError("offset past the end of its storage")
    typed = base[:elems * item].view(dtype)
    return typed.as_strided(shape, stride, offset)


def plain(x: Any) -> Any:
    """Plain data as a record holds it: scalars, strings and None as they are, lists and
    tuples as lists (a problem's non-tensor inputs, e.g. a dim; compare with this)."""
    return [plain(v) for v in x] if isinstance(x, (list, tuple)) else x


def _is_plain(x: Any, depth: int = 0) -> bool:
    if x is None or type(x) in (bool, int, float, str):
        return True
    return type(x) in (list, tuple) and depth < 4 and all(_is_plain(v, depth + 1) for v in x)


def _list(x: Any) -> list:
    if not isinstance(x, list):
        raise ValueError("expected a list")
    return x


def _nat(x: Any) -> int:
    if type(x) is not int or not 0 <= x < 1 << 48:
        raise ValueError(f"bad number {x!r}")
    return x


def _dims(x: Any) -> list[int]:
    dims = [_nat(d) for d in _list(x)]
    if len(dims) > MAX_DIMS:
        raise ValueError("too many dims")
    return dims


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)
