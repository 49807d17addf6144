#!/bin/sh
# psync container entrypoint: the first argument names the program, the rest
# are its flags (docs/cli-contract.md). Runs under tini (PID 1), so signals
# reach the program and zombies are reaped.
#
#   psync-coordinator | coordinator   -> psync-coordinator ARGS...
#   psync-worker      | worker        -> psync-worker ARGS...
#   psyncctl          | ctl           -> psyncctl ARGS...
#   psync-launch      | launch        -> psync-launch ARGS...
#   anything else (sh, bash, ...)     -> exec'd as given (debugging)
#
# Environment glue (only where the variable is not already set):
#   RANK  <- JOB_COMPLETION_INDEX      (Kubernetes Indexed Job)
#   PSYNC_WORKER_BIN: a program of your own to run as the worker (a main that
#     registers a model and returns psync::runtime::WorkerMain; see
#     Dockerfile.your-model): `psync-worker` runs it, `psync-launch` gets
#     --worker-bin=PSYNC_WORKER_BIN
#   PSYNC_COORDINATOR <- MASTER_ADDR:MASTER_PORT   (default target of psyncctl)
set -eu

if [ -z "${RANK:-}" ] && [ -n "${JOB_COMPLETION_INDEX:-}" ]; then
  RANK=$JOB_COMPLETION_INDEX
  export RANK
fi
if [ -z "${PSYNC_COORDINATOR:-}" ] && [ -n "${MASTER_ADDR:-}" ]; then
  PSYNC_COORDINATOR="${MASTER_ADDR}:${MASTER_PORT:-29500}"
  export PSYNC_COORDINATOR
fi

if [ "$#" -eq 0 ]; then
  echo "usage: <psync-coordinator|psync-worker|psyncctl|psync-launch> [flags...]" >&2
  exit 2
fi

prog=$1
shift
case "$prog" in
  psync-coordinator|coordinator) exec psync-coordinator "$@" ;;
  psync-worker|worker)           exec "${PSYNC_WORKER_BIN:-psync-worker}" "$@" ;;
  psyncctl|ctl)                  exec psyncctl "$@" ;;
  psync-launch|launch)
    if [ -n "${PSYNC_WORKER_BIN:-}" ]; then exec psync-launch --worker-bin="$PSYNC_WORKER_BIN" "$@"; fi
    exec psync-launch "$@" ;;
  *)                             exec "$prog" "$@" ;;
esac
