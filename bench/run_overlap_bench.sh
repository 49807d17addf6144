#!/usr/bin/env bash
# Side-by-side DDP benchmark on CPU, world 2 on one host: psync-overlap-bench
# (psync reducer / serial allreduce / no priorities, over each of BACKENDS:
# Gloo on 127.0.0.1, shm) vs bench/ddp_torch.py (PyTorch DDP, Gloo), same
# MLP, per-rank batch, bucket cap and threads per process. Prints both
# tables, then per backend: psync's world-2 step vs its own no-communication
# step at the same per-rank batch, exposed communication as a share of
# backward, and the psync/DDP step-time ratio.
#
#   bench/run_overlap_bench.sh
#   WIDTHS=1024,1024,1024,1024,1024,1024,1024,1024,1024 BATCH=32 ALTERNATE=3 bench/run_overlap_bench.sh
#
# Environment: WIDTHS, BATCH (per rank), STEPS, WARMUP, THREADS (per rank
# process), WORLD (2), BUCKET_CAP_MB (25), BACKENDS (gloo,shm), MODES
# (compute,overlap,serial,noprio; also nocheck), ROUNDS (modes are interleaved and each
# reports its best median: the least disturbed by other load), ALTERNATE (1:
# psync and PyTorch runs alternate this many times; each keeps its best
# median), BUILD_DIR (<repo>/build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
WIDTHS="${WIDTHS:-512,2048,2048,2048,512}"
BATCH="${BATCH:-64}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-3}"
THREADS="${THREADS:-1}"
WORLD="${WORLD:-2}"
BUCKET_CAP_MB="${BUCKET_CAP_MB:-25}"
ROUNDS="${ROUNDS:-3}"
BACKENDS="${BACKENDS:-gloo,shm}"
MODES="${MODES:-compute,overlap,serial,noprio}"
ALTERNATE="${ALTERNATE:-1}"

source "$ROOT/bench/lib.sh"
BENCH=$(bench_build psync-overlap-bench)
bench_same_kernels "$BENCH"
bench_same_threads "$THREADS"

common=(--widths="$WIDTHS" --batch="$BATCH" --steps="$STEPS" --warmup="$WARMUP" --threads="$THREADS"
        --world="$WORLD" --bucket_cap_mb="$BUCKET_CAP_MB" --rounds="$ROUNDS")
have_torch=0
bench_have_torch 'import torch.distributed as d; assert d.is_gloo_available()' && have_torch=1
results=""
for ((round = 1; round <= ALTERNATE; round++)); do
  echo "== [$round/$ALTERNATE] $BENCH ${common[*]} --backends=$BACKENDS --modes=$MODES"
  psync_out=$("$BENCH" "${common[@]}" --backends="$BACKENDS" --modes="$MODES")
  echo "$psync_out"
  results+=$'\n'"$psync_out"
  if ((have_torch)); then
    echo "== [$round/$ALTERNATE] $PY $ROOT/bench/ddp_torch.py ${common[*]}"
    torch_out=$("$PY" "$ROOT/bench/ddp_torch.py" "${common[@]}")
    echo "$torch_out"
    results+=$'\n'"$torch_out"
  fi
done

echo
echo "== best of $ALTERNATE alternating run(s)"
printf '%s\n' "$results" | grep '^RESULT' | awk '
  {
    delete v
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    key = v["impl"] "/" v["mode"]
    if (!(key in med)) { order[++n] = key }
    if (!(key in med) || v["median_ms"] + 0 < med[key]) {
      med[key] = v["median_ms"] + 0; exp_[key] = v["exposed_ms"] + 0
      bwd[key] = ("backward_ms" in v) ? v["backward_ms"] + 0 : -1
    }
    if (("cpu_ms" in v) && (!(key in cpu) || v["cpu_ms"] + 0 < cpu[key])) cpu[key] = v["cpu_ms"] + 0
  }
  END {
    printf "%-20s %12s %12s %14s %12s\n", "impl/mode", "median ms", "exposed ms", "exposed/bwd", "cpu ms/step"
    cb = ("psync/compute" in bwd) ? bwd["psync/compute"] : -1
    for (i = 1; i <= n; i++) {
      k = order[i]; share = "-"
      if (k ~ /^psync\// && k != "psync/compute" && cb > 0) share = sprintf("%d%%", 100 * (med[k] - med["psync/compute"]) / cb)
      printf "%-20s %12.2f %12.2f %14s %12.2f\n", k, med[k], exp_[k], share, (k in cpu) ? cpu[k] : -1
    }
    for (i = 1; i <= n; i++) {
      k = order[i]
      if (k !~ /^psync\/overlap/) continue
      if ("psync/compute" in med && med["psync/compute"] > 0)
        printf "%s: world-%s step / own no-communication step: %.2fx\n", k, "'"$WORLD"'", med[k] / med["psync/compute"]
      if (("torch/ddp" in med) && med["torch/ddp"] > 0)
        printf "%s / PyTorch DDP step (median): %.2fx  (<1 = psync faster)\n", k, med[k] / med["torch/ddp"]
      if ((k in cpu) && ("psync/compute" in cpu) && cpu["psync/compute"] > 0)
        printf "%s: CPU per step / own no-communication CPU per step: %.2fx\n", k, cpu[k] / cpu["psync/compute"]
      if ((k in cpu) && ("torch/ddp" in cpu) && cpu["torch/ddp"] > 0)
        printf "%s / PyTorch DDP CPU per step: %.2fx\n", k, cpu[k] / cpu["torch/ddp"]
    }
    if (("psync/compute" in med) && ("torch/compute" in med) && med["torch/compute"] > 0)
      printf "psync/PyTorch compute-only step: %.2fx\n", med["psync/compute"] / med["torch/compute"]
  }'
