#!/usr/bin/env bash
# The verifier benchmark's device calls, each one command (run from the repo root there).
#   bash benchmarks/device_verifier.sh record
#       The rate of record (497 candidates, --repeat 7; 490 before the cheat suite's 35th,
#       host_compute, 483 before its 34th, precision_downcast), on an H200 only: any other
#       card exits 3 at once, before the wheels are installed.
#   bash benchmarks/device_verifier.sh ab OLD_DIR ORDER [benchmark args]
#       This checkout and OLD_DIR (a `git archive` of the baseline, carried as `.old`) side
#       by side on one machine, default 213 candidates a pass (210 before host_compute,
#       207 before precision_downcast), primed; then the table of
#       benchmarks/verifier_ab.py, whose baseline column is the old run (old1 if two).
#       ORDER: new-first, old-first (two passes, ~310 s on an H100), new-old-new and
#       old-new-old run three passes in one call (~470 s on an H100), each capped at 190 s,
#       so that a drift over the call falls on both sides: read the middle run against the
#       mean of the outer two.
#   bash benchmarks/device_verifier.sh pass [benchmark args]
#       One pass of this checkout alone, default 70 candidates primed with 12 (~90 s on an
#       H100): a check of what a pass records (e.g. `prime_stubs`), never a rate to compare.
#       With `--config NAME:K=V` a second pass of this checkout follows, other settings.
#   bash benchmarks/device_verifier.sh hog GB [benchmark args]
#       One pass of this checkout (default 213 candidates, --repeat 3, ~170 s on an H100)
#       beside a process that holds GB GiB of the device: the card's memory runs short as a
#       fuller card's would, so the pass shows whether any verdict changes (`oom_reruns`,
#       honest passed). Output in $OUT/hog and $OUT/hog.log. HOG_CAP_S (default 480)
#       caps the pass's seconds. $OUT/hog_mem.log: the device's memory in use every 20 s.
#   bash benchmarks/device_verifier.sh tests
#       The GPU tests (`-m gpu`, ~290 s on an H100), output in $OUT/gpu_tests.log. Test files
#       whose imports the image lacks (datasketch, duckdb) hold no GPU test: their collection
#       errors are reported and skipped over.
# Results go to $OUT (or ./device-out); ab packs them into $OUT/ab.tgz. The device image
# lacks pydantic, orjson, kafka-python: carry them as wheels in .whl/.
set -u
OUT=${OUT:-device-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)  # absolute: old runs elsewhere
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/card.txt"
mode=${1:-}; shift || true
if [ "$mode" != record ] && [ "$mode" != tests ] && [ "$mode" != pass ] \
   && { [ "$mode" != hog ] || ! [[ "${1:-}" =~ ^[1-9][0-9]*$ ]]; } \
   && { [ "$mode" != ab ] || [ $# -lt 2 ] \
     || [ ! -d "$1" ] || { [ "$2" != new-first ] && [ "$2" != old-first ] \
       && [ "$2" != new-old-new ] && [ "$2" != old-new-old ]; }; }; then
  echo "usage: $0 record | tests | pass [benchmark args] | hog GB [benchmark args]" \
       "| ab OLD_DIR new-first|old-first|new-old-new|old-new-old [benchmark args]"; exit 2
fi
if [ "$mode" = record ] && ! grep -q H200 "$OUT/card.txt"; then
  echo "not an H200: no record run"; exit 3
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
# One benchmark pass (args: the array `args`) of the checkout in $1 (`.` or the old one)
# into $OUT/$2 and $OUT/$2.log, at most $3 s; never a stale JSON from an earlier call.
run_pass() { rm -rf "${OUT:?}/$2"
             (cd "$1" && PYTHONPATH=/tmp/site:$PWD timeout "$3" python3 \
               benchmarks/verifier.py --out "$OUT/$2" "${args[@]}") > "$OUT/$2.log" 2>&1; }
# The stubs the prime seeded in run $1's pass cache (none: its first slots build them).
prime_stubs() { python3 -c 'import json, sys; print(sys.argv[1], "prime_stubs:",
                  json.load(open(sys.argv[2])).get("prime_stubs"))' \
                  "$1" "$OUT/$1/verifier_bench.json"; }
case "$mode" in
  record)
    PYTHONPATH=/tmp/site:$PWD timeout 540 python3 benchmarks/verifier.py --out "$OUT/record" \
      --repeat 7 --cold-only --no-timer 2>&1 | grep -A2 "^pass |" | head -3 | cut -c1-400 ;;
  tests)
    PYTHONPATH=/tmp/site:$PWD timeout 540 python3 -m pytest -q -m gpu -p no:cacheprovider \
      -W ignore --continue-on-collection-errors tests --ignore=tests/kz_common/analytics \
      --ignore=tests/schemas --ignore=tests/services/archiver > "$OUT/gpu_tests.log" 2>&1
    tail -3 "$OUT/gpu_tests.log" ;;  # pytest exits 1 on the collection errors alone
  pass)
    args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--repeat 1 --cold-only --no-timer --prime 12)
    run_pass . new 540
    grep -A2 "^pass |" "$OUT/new.log" | head -12 | cut -c1-400  # a --config pass's too
    prime_stubs new ;;
  hog)
    gb=$1; shift
    args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--repeat 3 --cold-only --no-timer)
    python3 -c "import sys, time, torch
x = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device='cuda'); x.fill_(1)
torch.cuda.synchronize(); print('holding', x.numel() >> 20, 'MiB', flush=True); time.sleep(3600)" \
      "$gb" > "$OUT/hog_holder.log" 2>&1 &
    holder=$!
    # who holds the device's memory, every 20 s (the hog, the batch's processes)
    while sleep 20; do date -u +%T; nvidia-smi --query-compute-apps=pid,used_memory \
      --format=csv,noheader | sort -t, -k2 -n | awk -F, '{n++; s+=$2} END {print n, "apps", s, "MiB"}'
      nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader; done \
      > "$OUT/hog_mem.log" 2>&1 &
    poller=$!
    sleep 8; cat "$OUT/hog_holder.log"  # torch's import and the fill: held before the pass
    run_pass . hog "${HOG_CAP_S:-480}"
    kill "$holder" "$poller"
    grep -A2 "^pass |" "$OUT/hog.log" | head -3 | cut -c1-300
    grep -o "oom_reruns=[0-9]*" "$OUT/hog.log" | head -1
    # the verdicts by stage, as they came (the pass's only output if HOG_CAP_S cut it off)
    grep "^verdict " "$OUT/hog.log" | awk '{print $4}' | sort | uniq -c | tr '\n' ' '; echo ;;
  ab)
    old=$1; order=$2; shift 2
    args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--repeat 3 --cold-only --no-timer --prime 12)
    cap=280  # a pass's limit; three passes must fit one 600 s device call
    [ "$order" != new-old-new ] && [ "$order" != old-new-old ] || cap=190
    run_new() { run_pass . "$1" $cap; }
    run_old() { run_pass "$old" "$1" $cap; }
    case "$order" in  # names: the runs this call made, old (or old1) first as the baseline
      old-first) run_old old; run_new new; names=(old new) ;;
      new-first) run_new new; run_old old; names=(old new) ;;
      new-old-new) run_new new1; run_old old; run_new new2; names=(old new1 new2) ;;
      old-new-old) run_old old1; run_new new; run_old old2; names=(old1 new old2) ;;
    esac
    finished=(); runs=()
    for name in "${names[@]}"; do
      [ -f "$OUT/$name/verifier_bench.json" ] || continue
      finished+=("$name"); runs+=("$name=$OUT/$name/verifier_bench.json")
    done
    if [ ${#runs[@]} -lt 2 ]; then
      echo "fewer than two passes finished:"; tail -n 3 "$OUT"/*.log
    else
      python3 benchmarks/verifier_ab.py "${runs[@]}" --out "$OUT"
    fi
    for name in "${finished[@]}"; do prime_stubs "$name"; done
    # The device tool returns at most 8 files: three passes write 9. One archive holds all.
    (cd "$OUT" && tar czf ab.tgz --remove-files -- *) ;;
esac
