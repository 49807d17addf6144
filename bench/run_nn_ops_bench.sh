#!/usr/bin/env bash
# Side-by-side per-op benchmark of the GPT and CNN layers: psync-nn-ops-bench vs
# bench/nn_ops_torch.py, one thread each, ROUNDS alternating rounds; the
# table shows each side's best min and median per op and the psync/torch
# ratio of the medians (< 1: psync faster). Rows only torch has (the
# convolutions with oneDNN off, *_im2col) show "-" for psync.
#
#   bench/run_nn_ops_bench.sh                 # B=16 T=64 C=128 H=4 V=256, 64 images
#   ROUNDS=5 bench/run_nn_ops_bench.sh --batch=8 --embd=256
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
ROUNDS="${ROUNDS:-3}"

source "$ROOT/bench/lib.sh"
BENCH=$(bench_build psync-nn-ops-bench)
bench_same_kernels "$BENCH"
have_torch=1
bench_have_torch || have_torch=0
bench_same_threads 1

RESULTS=()
for ((r = 1; r <= ROUNDS; r++)); do
  bench_side "round $r/$ROUNDS" "$BENCH" "$@"
  if [[ $have_torch -eq 1 ]]; then bench_side "round $r/$ROUNDS" "$PY" "$ROOT/bench/nn_ops_torch.py" "$@"; fi
done

printf '%s\n' "${RESULTS[@]}" | awk '
  /^RESULT/ {
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); f[kv[1]] = kv[2] }
    k = f["impl"] SUBSEP f["op"]
    if (!(k in mn) || f["min_us"] + 0 < mn[k]) mn[k] = f["min_us"] + 0
    if (!(k in md) || f["median_us"] + 0 < md[k]) md[k] = f["median_us"] + 0
    if (!(f["op"] in seen)) { seen[f["op"]] = 1; order[++n] = f["op"] }
  }
  END {
    printf "\n%-20s %12s %12s %12s %12s %8s\n", "op", "psync_min", "psync_med", "torch_min", "torch_med", "ratio"
    for (i = 1; i <= n; ++i) {
      o = order[i]; p = "psync" SUBSEP o; t = "torch" SUBSEP o
      ratio = (p in md && t in md && md[t] > 0) ? sprintf("%.2f", md[p] / md[t]) : "-"
      printf "%-20s %12s %12s %12s %12s %8s\n", o, (p in mn) ? sprintf("%.1f", mn[p]) : "-", (p in md) ? sprintf("%.1f", md[p]) : "-", (t in mn) ? sprintf("%.1f", mn[t]) : "-", (t in md) ? sprintf("%.1f", md[t]) : "-", ratio
    }
    print "(microseconds per call, best of the rounds; ratio = psync median / torch median)"
  }'
