#!/usr/bin/env bash
# Optimizer step time over a GPT's parameters: psync-optim-bench vs
# bench/torch_optim.py (Debian's python3-torch), same shapes and threads,
# alternating ROUNDS times; the table keeps each side's best median.
#
#   bench/run_optim_bench.sh                                  # V=256 T=64 L=4 C=128
#   GPT="--vocab-size=50257 --block-size=1024 --n-layer=12 --n-embd=768" bench/run_optim_bench.sh
#   bench/run_optim_bench.sh --device=cuda                    # extra flags go to both sides
#
# Environment: GPT (the model flags), STEPS (50), WARMUP (5), THREADS (nproc;
# psync's optimizer is single-threaded, torch gets this many), ROUNDS (3),
# BUILD_DIR (<repo>/build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
GPT="${GPT:---vocab-size=256 --block-size=64 --n-layer=4 --n-embd=128}"
STEPS="${STEPS:-50}"
WARMUP="${WARMUP:-5}"
THREADS="${THREADS:-$(nproc)}"
ROUNDS="${ROUNDS:-3}"

source "$ROOT/bench/lib.sh"
BENCH=$(bench_build psync-optim-bench)
have_torch=1
bench_have_torch || have_torch=0
bench_same_threads "$THREADS"

read -r -a gpt <<<"$GPT"
common=("${gpt[@]}" --steps="$STEPS" --warmup="$WARMUP" "$@")
RESULTS=()
for ((r = 1; r <= ROUNDS; r++)); do
  bench_side "round $r/$ROUNDS" "$BENCH" "${common[@]}"
  if [[ $have_torch -eq 1 ]]; then
    bench_side "round $r/$ROUNDS" "$PY" "$ROOT/bench/torch_optim.py" "${common[@]}" --threads="$THREADS"
  fi
done

echo
echo "optimizer step, GPT $GPT, torch threads $THREADS, $STEPS steps x $ROUNDS round(s), best median ms"
printf '%s\n' "${RESULTS[@]}" | awk '
  {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    key = v["impl"] " " v["op"]
    if (!(key in med) || v["median_ms"] + 0 < med[key]) med[key] = v["median_ms"] + 0
    ops[v["op"]] = 1
  }
  END {
    printf "%-16s %12s %12s %10s\n", "op", "psync ms", "torch ms", "ratio"
    for (op in ops) {
      p = ("psync " op) in med ? sprintf("%.3f", med["psync " op]) : "-"
      t = ("torch " op) in med ? sprintf("%.3f", med["torch " op]) : "-"
      ratio = (("psync " op) in med && ("torch " op) in med && med["torch " op] > 0) ? sprintf("%.2fx", med["psync " op] / med["torch " op]) : "-"
      printf "%-16s %12s %12s %10s\n", op, p, t, ratio
    }
  }'
