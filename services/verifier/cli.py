"""`kz verify PROBLEM SOLUTION [--device cpu|cuda] [--json]`.

Exit codes: 0 passed, 1 rejected, 2 misuse (bad path, unreadable or unparsable
problem, non-discriminating problem). --json prints exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

from services.verifier.core import verify
from services.verifier.exceptions import ProblemError
from services.verifier.options import VerifyOptions
from services.verifier.reference import literal_meta
from services.verifier.report import VerifyReport

EXIT_PASSED, EXIT_REJECTED, EXIT_MISUSE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 on misuse too, keep it quiet
        self.print_usage(sys.stderr)
        print(f"kz verify: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_MISUSE)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kz verify", description="Verify a Triton solution against a problem.")
    p.add_argument("problem", type=Path, help="problem source (KernelBench format)")
    p.add_argument("solution", type=Path, help="solution source (defines ModelNew)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--isolation", default="auto", help="auto or a sandbox mode")
    p.add_argument("--timeout", type=float, default=300.0, help="candidate wall-clock limit (s)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code (never raises for bad candidates)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_MISUSE
    try:
        problem = _read(args.problem)
        solution = _read(args.solution)
        literal_meta(problem)  # unparsable / incomplete problem = misuse, before any work
        options = VerifyOptions(device=args.device, isolation=args.isolation,
                                wall_timeout_s=args.timeout)
        report = verify(problem, solution, options)
    except (OSError, UnicodeDecodeError, ProblemError, ValueError) as exc:
        return _misuse(str(exc), args.json)
    _emit(report, args.json)
    if report.misuse:
        return EXIT_MISUSE
    return EXIT_PASSED if report.passed else EXIT_REJECTED


def _read(path: Path) -> str:
    if not path.is_file():
        raise OSError(f"no such file: {path}")
    return path.read_text(encoding="utf-8")


def _misuse(message: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"passed": False, "stage": "misuse", "reasons": [message]}))
    else:
        print(f"kz verify: error: {message}", file=sys.stderr)
    return EXIT_MISUSE


def _emit(report: VerifyReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_jsonable(report.to_dict()), sort_keys=True))
        return
    verdict = "PASSED" if report.passed else f"REJECTED at {report.stage}"
    print(f"{verdict}  (device={report.device}, isolation={report.isolation})")
    for r in report.reasons[:10]:
        print(f"  - {r}")
    t = report.timings
    if report.perf_measured and t:
        print(f"  candidate {t.candidate_ms:.4f} ms | naive {t.naive_ms} ms | "
              f"optimised {t.optimized_ms} ms | spread {t.spread}")
        print(f"  speedup vs naive {report.speedup_vs_naive}, vs optimised "
              f"{report.speedup_vs_optimized}, roofline {report.roofline_fraction}")
    if report.max_rel_error is not None:
        print(f"  max relative error {report.max_rel_error:.3g}, "
              f"triton launches {report.triton_launches}")


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None  # strict JSON has no NaN/Infinity
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x if isinstance(x, (str, int, float, bool)) or x is None else str(x)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
