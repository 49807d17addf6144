#!/usr/bin/env bash
# The suite N times in a row under `ctest -j2` with a CPU hog beside it
# (stress-ng --cpu 2, Debian's stress-ng, installed when missing and run as
# root): a test that races the clock shows up here, not in CI.
#
#   scripts/stress-test.sh [N] [ctest args]     e.g. scripts/stress-test.sh 10 -E compose_integration
#
# Builds first (scripts/build.sh). Prints one line per round (passed/failed,
# wall time, the failing tests' names) and a total; exits 1 when any round had
# a failure. Logs: $PSYNC_STRESS_OUT (default a fresh /tmp/psync-stress-*).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PSYNC_BUILD_DIR:-$root/build}
rounds=${1:-10}
shift || true
[[ $rounds =~ ^[0-9]+$ && $rounds -gt 0 ]] || { echo "stress-test: N must be a positive integer, got '$rounds'" >&2; exit 2; }
out=${PSYNC_STRESS_OUT:-$(mktemp -d /tmp/psync-stress-XXXXXX)}
mkdir -p "$out"

if ! command -v stress-ng >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends stress-ng >&2
  else
    echo "stress-test: stress-ng is missing: sudo apt-get install -y stress-ng" >&2; exit 1
  fi
fi
PSYNC_WITH_DEPLOY_TOOLS=1 bash "$root/scripts/build.sh"

stress-ng --cpu 2 --timeout 0 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true' EXIT

bad_rounds=0
for ((r = 1; r <= rounds; r++)); do
  log=$out/round-$r.log
  start=$(date +%s)
  if (cd "$build" && ctest -j 2 --timeout 300 --output-on-failure "$@") >"$log" 2>&1; then status=passed
  else status=FAILED; bad_rounds=$((bad_rounds + 1)); fi
  # (|| true: a clean round has no failure lines, and grep's exit 1 must not end the script)
  summary=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1 || true)
  failing=$(grep -E '^\s+[0-9]+ - .* \((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)\)' "$log" | sed 's/^ *//' | tr '\n' ';' || true)
  echo "round $r/$rounds: $status in $(($(date +%s) - start)) s: ${summary:-no ctest summary (see $log)} ${failing}"
done
echo "stress-test: $((rounds - bad_rounds)) of $rounds rounds without a failure (stress-ng --cpu 2 beside ctest -j2); logs in $out"
((bad_rounds == 0))
