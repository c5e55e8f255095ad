"""Run one shard of a case suite from cases.py; print one JSON line per case.

    TRITON_INTERPRET=1 python -m tests.kz_common.kernels.worker interp 0 2
    python -m tests.kz_common.kernels.worker sm90 1 2

The environment must be final before this module runs: nothing here imports
triton before the cases do.
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def main(suite: str, shard: int, n_shards: int) -> None:
    from tests.kz_common.kernels.cases import SUITES, Skip

    cases = SUITES[suite]()
    for i, (case_id, fn) in enumerate(sorted(cases.items())):
        if i % n_shards != shard:
            continue
        t0 = time.perf_counter()
        try:
            fn()
            status, detail = "passed", ""
        except Skip as exc:
            status, detail = "skipped", str(exc)
        except BaseException:  # noqa: BLE001 - every failure is reported, never raised
            status, detail = "failed", traceback.format_exc()[-4000:]
        record = {"id": case_id, "status": status, "detail": detail,
                  "seconds": round(time.perf_counter() - t0, 2)}
        print("KZCASE " + json.dumps(record), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
