#!/usr/bin/env bash
# Step time of a real job (psync-coordinator + WORLD psync-workers on
# 127.0.0.1, Gloo) with the coordinator holding every plan back DELAY ms
# (--test-only-plan-delay) next to no delay: shows whether a slow
# coordinator slows the workers. Runs each model both without and with
# --find-unused-parameters (which needs the plan of the same step in
# finalize, so its round trip must hide behind backward). Prints the median
# step time of rank 0 (its --summary) per row.
#
#   bench/run_plan_delay_bench.sh
#   DELAY=50 STEPS=400 MODELS="8,8,4 256,1024,1024,256" LOOKAHEAD=2 bench/run_plan_delay_bench.sh
#
# Environment: DELAY (ms, 50), STEPS (300), WORLD (2), MODELS (--widths of
# each model, space separated), LOOKAHEAD (the coordinator's
# --plan-lookahead, 2), BATCH (global batch, 64), BUILD_DIR (<repo>/build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
DELAY="${DELAY:-50}"
STEPS="${STEPS:-300}"
WORLD="${WORLD:-2}"
MODELS="${MODELS:-8,8,4 512,2048,2048,512}"
LOOKAHEAD="${LOOKAHEAD:-2}"
BATCH="${BATCH:-64}"

source "$ROOT/bench/lib.sh"
bench_build psync-coordinator >/dev/null
bench_build psync-worker >/dev/null
COORD=$BUILD_DIR/server/psync-coordinator
WORKER=$BUILD_DIR/worker/runtime/psync-worker
export OPENBLAS_NUM_THREADS=1 no_proxy=127.0.0.1,localhost
T=$(mktemp -d /tmp/psync-delay-bench-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT

# run WIDTHS DELAY_MS FLAGS...: prints rank 0's median step ms.
run() {
  local widths=$1 delay=$2; shift 2
  rm -f "$T/port" "$T"/sum_*.json
  "$COORD" --host=127.0.0.1 --port=0 --world-size="$WORLD" --port-file="$T/port" --exit-when-done \
    --plan-lookahead="$LOOKAHEAD" --test-only-plan-delay="${delay}ms" >"$T/coord.log" 2>&1 &
  local cpid=$!; PIDS+=("$cpid")
  for _ in $(seq 200); do [[ -s $T/port ]] && break; sleep 0.05; done
  local addr=127.0.0.1:$(cat "$T/port") wp=()
  for ((r = 0; r < WORLD; r++)); do
    "$WORKER" --coordinator="$addr" --rank=$r --world-size="$WORLD" --quiet --steps="$STEPS" --widths="$widths" \
      --global-batch="$BATCH" --summary="$T/sum_{rank}.json" "$@" >"$T/w$r.log" 2>&1 &
    wp+=($!); PIDS+=($!)
  done
  for p in "${wp[@]}"; do wait "$p" || { echo "worker failed: $(tail -2 "$T"/w*.log)" >&2; exit 1; }; done
  wait "$cpid" || true
  sed -n 's/.*"median_step_ms": *\([0-9.]*\).*/\1/p' "$T/sum_0.json" | awk '{printf "%.2f", $1}'
}

printf "%-22s %-8s %-14s %-16s %-16s\n" "MODEL" "K" "FIND_UNUSED" "STEP_MS(no delay)" "STEP_MS(${DELAY}ms delay)"
for m in $MODELS; do
  for fu in "" "--find-unused-parameters"; do
    a=$(run "$m" 0 $fu)
    b=$(run "$m" "$DELAY" $fu)
    printf "%-22s %-8s %-14s %-16s %-16s\n" "$m" "$LOOKAHEAD" "$([[ -n $fu ]] && echo yes || echo no)" "$a" "$b"
    echo "RESULT impl=plan_delay model=$m lookahead=$LOOKAHEAD find_unused=$([[ -n $fu ]] && echo 1 || echo 0) delay_ms=$DELAY median_ms_nodelay=$a median_ms_delay=$b"
  done
done
