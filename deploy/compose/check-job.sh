#!/bin/sh
# The compose "runner" (also used by tests/integration/netns/netns_test.sh):
# checks a running psync job through psyncctl, then shuts it down.
#   1. waits until the coordinator answers `psyncctl status`
#   2. waits until the job is RUNNING with every rank joined and at least
#      PSYNC_CHECK_MIN_ITERATION iterations done
#   3. prints `psyncctl workers`, then `psyncctl shutdown --wait`
#   4. checks the job ended FINISHED
# Exit 0 on success, 1 otherwise. Bounded by PSYNC_CHECK_TIMEOUT_S.
# psyncctl finds the coordinator through PSYNC_COORDINATOR and the token
# through PSYNC_TOKEN (docs/cli-contract.md). POSIX sh: the runtime image has
# no bash-only tools, no python, no jq.
set -u
min_iter=${PSYNC_CHECK_MIN_ITERATION:-10}
limit=${PSYNC_CHECK_TIMEOUT_S:-120}
start=$(date +%s)

say() { echo "check-job: $*"; }
die() { say "FAIL: $*" >&2; exit 1; }
left() { echo $((limit - ($(date +%s) - start))); }

# field JSON KEY: value of the first "KEY": in JSON (number or string, quotes removed).
field() {
  printf '%s' "$1" | tr ',{}[]' '\n\n\n\n\n' \
    | sed -n "s/^[[:space:]]*\"$2\"[[:space:]]*:[[:space:]]*\"\{0,1\}\([^\"]*\)\"\{0,1\}[[:space:]]*\$/\1/p" | head -n1
}

status=""
while :; do
  if status=$(timeout 10 psyncctl --json status 2>/dev/null); then break; fi
  [ "$(left)" -gt 0 ] || die "coordinator ${PSYNC_COORDINATOR:-127.0.0.1:29500} not answering after ${limit}s"
  sleep 1
done
say "coordinator answers at ${PSYNC_COORDINATOR:-127.0.0.1:29500}"

while :; do
  status=$(timeout 10 psyncctl --json status 2>/dev/null) || status=""
  state=$(field "$status" state)
  iter=$(field "$status" iteration)
  joined=$(field "$status" joined)
  world=$(field "$status" world_size)
  [ -n "$world" ] || world=$(field "$status" worldSize)
  case "$state" in
    *ABORTED*|*FINISHED*) die "job ended before the check ($state): $status" ;;
  esac
  case "$iter" in ''|-*|*[!0-9]*) iter=-1 ;; esac
  if [ "$iter" -ge "$min_iter" ] && [ "${joined:-0}" = "${world:-x}" ]; then break; fi
  [ "$(left)" -gt 0 ] || die "no progress to iteration $min_iter within ${limit}s (state=$state iteration=$iter joined=$joined/$world)"
  sleep 1
done
say "job running: state=$state iteration=$iter joined=$joined/$world"

timeout 10 psyncctl workers || die "psyncctl workers failed"

out=$(timeout "$(left)" psyncctl shutdown --wait 2>&1) || die "psyncctl shutdown --wait failed: $out"
say "shutdown: $out"

status=$(timeout 10 psyncctl --json status 2>/dev/null) || die "psyncctl status after shutdown failed"
state=$(field "$status" state)
case "$state" in
  *FINISHED*) say "OK: job finished cleanly after shutdown (state=$state)" ;;
  *) die "job state after shutdown is '$state', want FINISHED: $status" ;;
esac
