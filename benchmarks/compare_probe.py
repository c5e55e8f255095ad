"""What the parent's output comparison costs on a GPU host (numerics.compare), and where.

    python benchmarks/compare_probe.py [--out DIR]

For fp32 outputs of 256 MB and 1 GB: the comparison on the host's CPU at 1/4/8/16 torch
threads, and on the GPU, split into copying the output and its reference from pageable
host memory to the device and the comparison itself. The parent holds the shared GPU lock
for both GPU parts (compare_device.where). Then the verifier's own path for an output
read back from a record (mapped, as records.read does): the lock-free page-locked copy
(compare_device.Stager, twice: the first allocates, the second reuses the cached block)
and the copy to the device that is left under the lock, against the same record's
pageable copy. Prints a table; writes DIR/compare_probe.json. Skips without CUDA. Notes:
verifier_notes.md, eleventh session, call 4, and twelfth session.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from services.verifier import records  # noqa: E402
from services.verifier.compare_device import Stager  # noqa: E402
from services.verifier.numerics import Tol, compare  # noqa: E402

TOL = Tol(1e-4, 1e-4, 1e-4)


def _cpu(out: torch.Tensor, ref: torch.Tensor, threads: int) -> float:
    torch.set_num_threads(threads)
    compare(out, ref, TOL)  # warm
    t = time.perf_counter()
    compare(out, ref, TOL)
    return time.perf_counter() - t


def _gpu(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    torch.cuda.synchronize()
    t = time.perf_counter()
    o, r = out.to("cuda"), ref.to("cuda")
    torch.cuda.synchronize()
    copy = time.perf_counter() - t
    compare(o, r, TOL)  # warm (the first call pays CUDA start-up)
    torch.cuda.synchronize()
    t = time.perf_counter()
    compare(o, r, TOL)
    torch.cuda.synchronize()
    return copy, time.perf_counter() - t


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def _staged(out: torch.Tensor, tmp: Path) -> dict[str, float]:
    """The verifier's path for `out` as a candidate's record (compare_device.where)."""
    records.write(str(tmp), "call_0", {"outputs": [out], "inputs_after": None})
    row = {}
    for name in ("first", "again"):  # the first allocates page-locked memory, then reused
        data = records.read(tmp, "call_0", 1 << 40)  # freshly mapped each time
        t = time.perf_counter()
        with Stager(4 << 30).stage([data]) as staged:
            row[f"stage_{name}_s"] = round(time.perf_counter() - t, 4)
            copy = staged[0][0] if staged[0] else None
            assert copy is not None and copy.is_pinned(), "no page-locked copy"
            row[f"h2d_pinned_{name}_s"] = round(_timed(
                lambda: copy.to("cuda", non_blocking=True)), 4)
    data = records.read(tmp, "call_0", 1 << 40)
    row["h2d_record_pageable_s"] = round(_timed(lambda: data["outputs"][0].to("cuda")), 4)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    rows = []
    for n in (64 << 20, 256 << 20):  # fp32 elements: 256 MB and 1 GB
        ref = torch.randn(n)
        out = ref + 1e-6 * torch.randn(n)
        row = {"mb": n * 4 >> 20, **{f"cpu_{k}t_s": round(_cpu(out, ref, k), 3)
                                     for k in (1, 4, 8, 16)}}
        copy, cmp = _gpu(out, ref)
        row.update(gpu_copy_out_and_ref_s=round(copy, 4), gpu_compare_s=round(cmp, 4))
        with tempfile.TemporaryDirectory() as tmp:
            row.update(_staged(out, Path(tmp)))
        rows.append(row)
    print(" | ".join(rows[0]))
    for row in rows:
        print(" | ".join(str(v) for v in row.values()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compare_probe.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
