"""Reference kernels vs torch eager on the GPU: achieved bandwidth / FLOP rate vs measured peak.

For each op, at a large shape: check the reference Triton kernel against the
optimised baseline (ModelOpt), time both with triton.testing.do_bench (median,
L2 flushed between runs), and express the result as a fraction of this device's
measured copy bandwidth (memory-bound ops) or bf16/fp16 matmul rate (matmul,
attention). Target (issue 7): >= 85% of peak bandwidth for large softmax,
layernorm and rmsnorm rows, and at least torch eager.

Usage (GPU only): python benchmarks/kernels.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BIG = {"rows": 8192, "cols": 8192}  # the catalogue's max corner: 128 MB in fp16, > 2x the L2
CASES = [  # op, dtype, shape
    ("softmax", "float16", BIG),
    ("softmax", "float32", BIG),
    ("softmax", "float16", {"rows": 8192, "cols": 1024}),
    ("layernorm", "float16", BIG),
    ("layernorm", "bfloat16", BIG),
    ("rmsnorm", "float16", BIG),
    ("rmsnorm", "bfloat16", BIG),
    ("add", "float16", BIG),
    ("gelu", "bfloat16", BIG),
    ("silu", "float16", BIG),
    ("bias_gelu", "float16", BIG),
    ("row_sum", "float32", BIG),
    ("row_max", "float16", BIG),
    ("matmul", "float16", {"M": 8192, "N": 8192, "K": 8192}),
    ("matmul", "bfloat16", {"M": 4096, "N": 4096, "K": 4096}),
    ("attention", "float16", {"batch_heads": 64, "seq": 2048, "head_dim": 64}),
]
COMPUTE_BOUND = {"matmul", "attention"}


def peaks(torch, do_bench) -> dict[str, float]:  # type: ignore[no-untyped-def]
    n = 1 << 30  # 2 GiB fp16 source
    src = torch.randn(n, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    bw = 2 * src.numel() * 2 / (ms * 1e-3)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms_mm = do_bench(lambda: a @ b, warmup=50, rep=300, return_mode="median")
    del src, dst
    return {"copy_bytes_per_s": bw, "bf16_flops_per_s": 2 * 8192**3 / (ms_mm * 1e-3)}


def run_case(torch, do_bench, op: str, dtype: str, shape: dict[str, int], peak: dict[str, float]) -> dict:  # type: ignore[no-untyped-def]
    from kz_common.kernels import import_source, reference_solution
    from kz_common.ops import get_op, render_problem

    spec = get_op(op)
    rng = {d: (v, v) for d, v in shape.items()}
    problem = import_source(f"problem_{op}", render_problem(op, dtype, rng, shapes=[shape], device="cuda"))
    for d, v in shape.items():
        setattr(problem, d, v)
    solution = import_source(f"solution_{op}", reference_solution(op))
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    init = problem.get_init_inputs()
    new, opt = solution.ModelNew(*init).cuda(), problem.ModelOpt(*init).cuda()
    out, ref = new(*inputs), opt(*inputs)
    tol = spec.tolerance(dtype)
    ok = bool(torch.allclose(out.float(), ref.float(), atol=tol.atol, rtol=tol.rtol))
    rel = float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))
    t_new = do_bench(lambda: new(*inputs), warmup=25, rep=200, return_mode="median")
    t_opt = do_bench(lambda: opt(*inputs), warmup=25, rep=200, return_mode="median")
    nbytes, flops = spec.bytes_moved(shape, dtype), spec.flops(shape)
    row = {"op": op, "dtype": dtype, "shape": shape, "correct": ok, "rel_err": rel,
           "triton_ms": t_new, "torch_ms": t_opt, "speedup_vs_torch": t_opt / t_new,
           "triton_GBps": nbytes / (t_new * 1e-3) / 1e9, "torch_GBps": nbytes / (t_opt * 1e-3) / 1e9}
    if op in COMPUTE_BOUND:
        row["fraction_of_peak"] = flops / (t_new * 1e-3) / peak["bf16_flops_per_s"]
        row["torch_fraction_of_peak"] = flops / (t_opt * 1e-3) / peak["bf16_flops_per_s"]
        row["bound"] = "flops"
    else:
        row["fraction_of_peak"] = nbytes / (t_new * 1e-3) / peak["copy_bytes_per_s"]
        row["torch_fraction_of_peak"] = nbytes / (t_opt * 1e-3) / peak["copy_bytes_per_s"]
        row["bound"] = "bandwidth"
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: skipping kernel benchmark")
        return 0
    import triton
    from triton.testing import do_bench

    torch.backends.cuda.matmul.allow_tf32 = False
    peak = peaks(torch, do_bench)
    rows = []
    for op, dtype, shape in CASES:
        try:
            rows.append(run_case(torch, do_bench, op, dtype, shape, peak))
        except Exception as exc:  # report and go on: one broken case must not hide the rest
            rows.append({"op": op, "dtype": dtype, "shape": shape, "error": repr(exc)[:300]})
        torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name()
    fp = {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
          "python": platform.python_version(), "peak_copy_GBps": peak["copy_bytes_per_s"] / 1e9,
          "peak_bf16_TFLOPs": peak["bf16_flops_per_s"] / 1e12}
    print(f"\n{gpu}: copy peak {fp['peak_copy_GBps']:.0f} GB/s, bf16 matmul {fp['peak_bf16_TFLOPs']:.0f} TFLOP/s")
    print(f"{'op':10} {'dtype':9} {'ok':3} {'triton ms':>9} {'torch ms':>9} {'x torch':>7} {'GB/s':>7} {'of peak':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['op']:10} {r['dtype']:9} ERROR {r['error'][:80]}")
            continue
        print(f"{r['op']:10} {r['dtype']:9} {'y' if r['correct'] else 'N':3} {r['triton_ms']:9.3f} "
              f"{r['torch_ms']:9.3f} {r['speedup_vs_torch']:7.2f} {r['triton_GBps']:7.0f} {r['fraction_of_peak']:7.1%}")
    args.out.mkdir(parents=True, exist_ok=True)
    name = gpu.replace(" ", "_")
    (args.out / f"kernels_{name}.json").write_text(json.dumps({"fingerprint": fp, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
