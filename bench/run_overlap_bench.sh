#!/usr/bin/env bash
# Side-by-side DDP benchmark on CPU, world 2 over 127.0.0.1 (Gloo):
# psync-overlap-bench (psync reducer / serial allreduce / no priorities)
# vs bench/ddp_torch.py (PyTorch DDP), same MLP, per-rank batch, bucket cap
# and threads per process. Prints both tables and the psync/DDP step-time
# ratio.
#
#   bench/run_overlap_bench.sh
#   WIDTHS=512,2048,2048,2048,512 BATCH=64 STEPS=20 ROUNDS=3 THREADS=1 bench/run_overlap_bench.sh
#
# Environment: WIDTHS, BATCH (per rank), STEPS, WARMUP, THREADS (per rank
# process), WORLD (2), BUCKET_CAP_MB (25), ROUNDS (modes are interleaved and
# each reports its best median: the least disturbed by other load),
# BUILD_DIR (<repo>/build).
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
PY=/usr/bin/python3

source "$ROOT/bench/lib.sh"
BENCH=$(bench_build psync-overlap-bench)
bench_same_threads "$THREADS"

common=(--widths="$WIDTHS" --batch="$BATCH" --steps="$STEPS" --warmup="$WARMUP" --threads="$THREADS"
        --world="$WORLD" --bucket_cap_mb="$BUCKET_CAP_MB" --rounds="$ROUNDS")
echo "== $BENCH ${common[*]}"
psync_out=$("$BENCH" "${common[@]}")
echo "$psync_out"

torch_out=""
if bench_have_torch 'import torch.distributed as d; assert d.is_gloo_available()'; then
  echo "== $PY $ROOT/bench/ddp_torch.py ${common[*]}"
  torch_out=$("$PY" "$ROOT/bench/ddp_torch.py" "${common[@]}")
  echo "$torch_out"
fi

echo
printf '%s\n%s\n' "$psync_out" "$torch_out" | grep '^RESULT' | awk '
  {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    key = v["impl"] "/" v["mode"]; med[key] = v["median_ms"] + 0; exp_[key] = v["exposed_ms"] + 0
    order[++n] = key
  }
  END {
    printf "%-16s %12s %12s\n", "impl/mode", "median ms", "exposed ms"
    for (i = 1; i <= n; i++) printf "%-16s %12.2f %12.2f\n", order[i], med[order[i]], exp_[order[i]]
    if (("psync/overlap" in med) && ("torch/ddp" in med) && med["torch/ddp"] > 0)
      printf "ratio psync/PyTorch DDP step time (median): %.2fx  (<1 = psync faster)\n", med["psync/overlap"] / med["torch/ddp"]
    if (("psync/compute" in med) && ("torch/compute" in med) && med["torch/compute"] > 0)
      printf "ratio psync/PyTorch compute-only step: %.2fx\n", med["psync/compute"] / med["torch/compute"]
  }'
