#!/usr/bin/env bash
# The main job: build psync (scripts/build.sh installs missing packages
# first), then train the default model (MLP 32,64,64,16 on the seeded
# synthetic regression set) with psync-launch: a local coordinator and 2 CPU
# workers (--backend=auto: shared memory on one host), and print a closing summary.
#
#   scripts/run-job.sh [extra worker flags]     e.g. --steps=1000 --accumulate=2
#
# Environment: PSYNC_BUILD_DIR (default build/), PSYNC_NPROC (2),
# PSYNC_STEPS (300), PSYNC_OUT (default: a fresh directory under /tmp) for the
# weights (final.safetensors), per-rank summaries and Chrome traces.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PSYNC_BUILD_DIR:-$root/build}
nproc_workers=${PSYNC_NPROC:-2}
steps=${PSYNC_STEPS:-300}
out=${PSYNC_OUT:-$(mktemp -d /tmp/psync-job-XXXXXX)}
mkdir -p "$out"

bash "$root/scripts/build.sh"

launch=$build/client/launch/psync-launch
for bin in "$launch" "$build/server/psync-coordinator" "$build/worker/runtime/psync-worker"; do
  [[ -x $bin ]] || { echo "run-job: $bin was not built" >&2; exit 1; }
done

echo "run-job: psync-launch --nproc=$nproc_workers, $steps steps, outputs in $out"
start=$(date +%s.%N)
set +e
"$launch" --nproc="$nproc_workers" --port=0 -- \
  --steps="$steps" --progress-every=50 \
  --save="$out/final.safetensors" --summary="$out/summary-{rank}.json" --trace="$out/trace-{rank}.json" "$@"
rc=$?
set -e
end=$(date +%s.%N)

field() { sed -n "s/.*\"$2\": *\\([^,}]*\\).*/\\1/p" "$1" | head -1 | tr -d '"'; }
echo
echo "==================== psync job summary ===================="
printf "%-6s %-8s %-12s %-12s %-12s %s\n" rank steps final_loss median_ms p90_ms exit
for ((r = 0; r < nproc_workers; r++)); do
  f=$out/summary-$r.json
  if [[ -f $f ]]; then
    printf "%-6s %-8s %-12.6f %-12.3f %-12.3f %s\n" "$r" "$(field "$f" steps_completed)" \
      "$(field "$f" final_loss | sed 's/null/nan/')" "$(field "$f" median_step_ms | sed 's/null/nan/')" \
      "$(field "$f" p90_step_ms | sed 's/null/nan/')" "$(field "$f" exit_reason)"
  else
    printf "%-6s (no summary written)\n" "$r"
  fi
done
echo "wall time: $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s;  exit code: $rc"
[[ -f $out/final.safetensors ]] && echo "weights: $out/final.safetensors"
echo "traces:  $out/trace-*.json (open in https://ui.perfetto.dev)"
echo "==========================================================="
exit "$rc"
