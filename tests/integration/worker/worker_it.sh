#!/usr/bin/env bash
# Integration tests of psync-worker / psync-launch with real processes on
# 127.0.0.1 (free ports via --port 0 + --port-file), bounded waits, and
# cleanup of every child this script started.
#
#   worker_it.sh CASE BIN_DIR [BACKEND]
#     BIN_DIR: the build directory (server/psync-coordinator,
#     worker/runtime/psync-worker, client/psyncctl, client/launch/psync-launch,
#     tests/integration/worker/weights_diff).
#     BACKEND: --backend for every worker (default: the worker's default,
#     auto). auto: workers get LOCAL_RANK/LOCAL_WORLD_SIZE of one host (so
#     auto picks shm); hier: PSYNC_HOST_ID makes N/2 ranks per "host" (one
#     per host at N=2), so the cross-host path runs too.
# Exit: 0 pass, 1 fail, 77 skipped.
set -uo pipefail
CASE=$1
B=$(cd "$2" && pwd)
BACKEND=${3:-}
WORKER=$B/worker/runtime/psync-worker
COORD=$B/server/psync-coordinator
CTL=$B/client/psyncctl
LAUNCH=$B/client/launch/psync-launch
DIFF=$B/tests/integration/worker/weights_diff
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/psync-it-XXXXXX)
export OPENBLAS_NUM_THREADS=1 no_proxy=127.0.0.1,localhost
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [[ -n ${KEEP_T:-} ]] && echo "kept $T" || rm -rf "$T"  # KEEP_T=1: keep the logs of a failed case
}
trap cleanup EXIT
fail() { echo "FAIL [$CASE]: $*"; for f in "$T"/*.log; do [[ -f $f ]] && { echo "--- $f"; tail -5 "$f"; }; done; exit 1; }
note() { echo "[$CASE] $*"; }

# start_coord N [extra flags]: sets CPID, CADDR.
start_coord() {
  local n=$1; shift
  rm -f "$T/port"
  "$COORD" --host=127.0.0.1 --port=0 --world-size="$n" --port-file="$T/port" "$@" >"$T/coord.log" 2>&1 &
  CPID=$!; PIDS+=("$CPID")
  for _ in $(seq 200); do [[ -s $T/port ]] && break; sleep 0.05; done
  [[ -s $T/port ]] || fail "coordinator did not write its port file"
  CADDR=127.0.0.1:$(cat "$T/port")
}
# start_worker RANK WORLD [flags]: sets WPID[RANK]; logs in $T/w$RANK.log.
# With BACKEND set, the worker gets --backend and the host layout for it.
declare -A WPID
start_worker() {
  local r=$1 w=$2; shift 2
  local env=() flags=()
  if [[ -n $BACKEND ]]; then
    flags=(--backend="$BACKEND")
    case $BACKEND in
      auto) env=(LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$w") ;;
      hier) local per=$((w / 2 > 0 ? w / 2 : 1)); ((w == 2)) && per=1; env=(PSYNC_HOST_ID="host$((r / per))") ;;
    esac
  fi
  env "${env[@]}" "$WORKER" --coordinator="$CADDR" --rank="$r" --world-size="$w" "${flags[@]}" "$@" >"$T/w$r.log" 2>&1 &
  WPID[$r]=$!; PIDS+=("${WPID[$r]}")
}
# wait_exit PID SECONDS: sets rc to the exit code, or "timeout". (Not in a
# $(...) subshell: only this shell can wait for its children.)
wait_exit() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null; do
    # a finished child stays a zombie (kill -0 succeeds) until `wait` reaps it
    if [[ $(ps -o stat= -p "$pid" 2>/dev/null) == Z* ]]; then break; fi
    sleep 0.1; t=$((t + 1))
    if ((t > limit * 10)); then rc=timeout; return; fi
  done
  wait "$pid"; rc=$?
}
# wait_iteration ADDR N [TOKEN]: waits (every 0.1 s, up to 60 s) until the
# coordinator at ADDR has made the plan of iteration N, i.e. training is
# under way on every rank (instead of sleeping a fixed time).
wait_iteration() {
  local addr=$1 n=$2 token=${3:-} it=""
  for _ in $(seq 600); do
    it=$(PSYNC_TOKEN=$token "$CTL" --coordinator="$addr" --json status 2>/dev/null |
         sed -n 's/.*"iteration":"\{0,1\}\(-\{0,1\}[0-9]*\).*/\1/p')
    [[ -n $it ]] && ((it >= n)) && return 0
    sleep 0.1
  done
  fail "the job at $addr did not reach iteration $n within 60 s (last: ${it:-none})"
}
# launcher_coordinator LOG: waits for psync-launch's "coordinator ADDR (pid N;
# token in FILE)" line; sets LADDR and LTOK (the token itself).
launcher_coordinator() {
  local log=$1 tokfile
  for _ in $(seq 600); do grep -q "token in " "$log" && break; sleep 0.1; done
  LADDR=$(sed -n 's/.*coordinator \([0-9.]*:[0-9]*\) (pid [0-9]*; token in \([^)]*\)).*/\1/p' "$log")
  tokfile=$(sed -n 's/.*coordinator [0-9.]*:[0-9]* (pid [0-9]*; token in \([^)]*\)).*/\1/p' "$log")
  [[ -n $LADDR && -s $tokfile ]] || fail "psync-launch printed no coordinator address and token file: $(cat "$log")"
  LTOK=$(cat "$tokfile")
}
# status_field ADDR TOKEN FIELD: one top-level field of psyncctl --json status ("" if unreachable).
status_field() {
  PSYNC_TOKEN=$2 "$CTL" --coordinator="$1" --json status 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$3" 2>/dev/null
}
# wait_generation ADDR TOKEN G: waits (every 0.1 s, up to 60 s) until the job runs generation G.
wait_generation() {
  local g=""
  for _ in $(seq 600); do
    g=$(status_field "$1" "$2" generation)
    [[ $g == "$3" && $(status_field "$1" "$2" state) == JOB_RUNNING ]] && return 0
    sleep 0.1
  done
  fail "the job at $1 did not run generation $3 within 60 s (last: ${g:-none})"
}
# rank_pid ADDR TOKEN [RANK]: the pid the coordinator knows for RANK, or
# without RANK every rank's pid in rank order (one psyncctl call, so the
# pids are of one moment).
rank_pid() {
  PSYNC_TOKEN=$2 "$CTL" --coordinator="$1" --json workers | /usr/bin/python3 -c '
import json, sys
workers = sorted(json.load(sys.stdin)["workers"], key=lambda w: w.get("rank", 0))
if len(sys.argv) > 1:
    print([w["pid"] for w in workers if w.get("rank", 0) == int(sys.argv[1])][0])
else:
    print(" ".join(str(w["pid"]) for w in workers))' ${3:+"$3"}
}
json_field() { sed -n "s/.*\"$2\": *\\([^,}]*\\).*/\\1/p" "$1" | head -1 | tr -d '"'; }
# free_port: a port nobody listens on now (for --start-coordinator, which
# binds the port --coordinator names).
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# start_node NAME NODE_RANK ADDR [launch flags] -- [worker flags]: one node of
# a 2-node job of 2 ranks each (NODE_NPROC ranks, if set) on this host; sets
# NPID[NAME], logs $T/NAME.log.
declare -A NPID
start_node() {
  local name=$1 node=$2 addr=$3; shift 3
  "$LAUNCH" --nnodes=2 --node-rank="$node" --nproc="${NODE_NPROC:-2}" --coordinator="$addr" "$@" >"$T/$name.log" 2>&1 &
  NPID[$name]=$!; PIDS+=("${NPID[$name]}")
}
# newest_checkpoint DIR: the name of the newest DIR/ckpt-*.safetensors ("" if none).
newest_checkpoint() {
  local cks=()
  shopt -s nullglob
  cks=("$1"/ckpt-*.safetensors)
  shopt -u nullglob
  ((${#cks[@]})) && echo "${cks[-1]##*/}"
}
# newest_checkpoint_after DIR OLD PID: waits (every 10 ms, up to 60 s, while
# PID runs) for a newest checkpoint other than OLD and prints its name (""
# if none came). No process per look beyond the subshell: the caller acts
# within milliseconds of rank 0's write.
newest_checkpoint_after() {
  local ck=""
  for _ in $(seq 6000); do
    ck=$(newest_checkpoint "$1")
    [[ -n $ck && $ck != "$2" ]] && { echo "$ck"; return; }
    kill -0 "$3" 2>/dev/null || return
    sleep 0.01
  done
}
# wait_nodes NAME...: each launcher must exit 0 within 120 s.
wait_nodes() {
  local n
  for n in "$@"; do
    wait_exit "${NPID[$n]}" 120
    [[ $rc == 0 ]] || fail "node $n: psync-launch exited $rc: $(tail -5 "$T/$n.log")"
  done
}

# run_job N OUT [flags]: coordinator + N workers, all must exit 0 within 120 s.
run_job() {
  local n=$1 out=$2; shift 2
  start_coord "$n"
  for ((r = 0; r < n; r++)); do start_worker "$r" "$n" --quiet "$@" --save="$out"; done
  for ((r = 0; r < n; r++)); do
    local rc; wait_exit "${WPID[$r]}" 120
    [[ $rc == 0 ]] || fail "rank $r of $n exited $rc ($*)"
  done
  kill "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null
}
same_weights() {  # A B [tol]
  local msg; msg=$("$DIFF" "$1" "$2" "${3:-1e-5}") || fail "weights differ: $msg ($1 vs $2)"
  note "$(basename "$1") vs $(basename "$2"): $msg"
}
# equal_to_single N [flags]: N workers == 1 worker
equal_to_single() {
  local n=$1; shift
  run_job 1 "$T/w1.st" "$@"
  run_job "$n" "$T/wn.st" "$@"
  same_weights "$T/w1.st" "$T/wn.st" "${EQUAL_TOL:-1e-5}"
}

# gpt_vs_torch CFG...: each CFG "WORLD|flags both take|psync-only flags": gpt_reference.py (PyTorch,
# one process on the full batch) and a psync job of WORLD ranks train the GPT 20 AdamW steps from the
# same initial weights and data; the weights must agree within 1e-4.
# mlp_vs_torch "N|COMMON|EXTRA" ...: per config, torch_reference.py (one
# PyTorch process on the full batch, COMMON flags) and an N-rank psync job
# (COMMON and EXTRA) on the same inputs end with weights within 1e-5.
# zero_checkpoint_resumes Z N...: a W=4 --zero=Z GPT run's step-10 checkpoint
# resumes at each world N (N=4: bit for bit the uninterrupted run; else
# 1e-4) and at W=4 under --zero=0 (bit for bit): one unsharded format.
zero_checkpoint_resumes() {
  local z=$1 n; shift
  head -c 30000 /dev/urandom >"$T/tokens.bin"
  local GPT=(--model=gpt --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 --data="$T/tokens.bin"
             --data-format=bytes --optimizer=adamw --lr=0.003 --weight-decay=0.1 --clip-grad-norm=1 --global-batch=12
             --lr-schedule=cosine --warmup-steps=3 --zero="$z" --bucket-cap-mb=0.02 --first-bucket-mb=0.005)
  # the uninterrupted run also leaves its step-10 checkpoint (the schedule spans all 20 steps)
  run_job 4 "$T/whole.st" "${GPT[@]}" --steps=20 --checkpoint-dir="$T/ckpt" --checkpoint-every=10 --keep-checkpoints=0
  for n in "$@"; do
    rm -rf "$T/ck$n" && mkdir "$T/ck$n" && cp "$T/ckpt/ckpt-00000010.safetensors" "$T/ck$n/"
    run_job "$n" "$T/r$n.st" "${GPT[@]}" --steps=20 --checkpoint-dir="$T/ck$n" --resume
    grep -q "resumed from .*ckpt-00000010" "$T/w0.log" || fail "W=$n did not resume from step 10"
    [[ $n == 4 ]] && same_weights "$T/whole.st" "$T/r$n.st" 0 || same_weights "$T/whole.st" "$T/r$n.st" 1e-4
  done
  # the same file resumes without --zero too (one format)
  rm -rf "$T/ck0" && mkdir "$T/ck0" && cp "$T/ckpt/ckpt-00000010.safetensors" "$T/ck0/"
  run_job 4 "$T/r0.st" "${GPT[@]/--zero=$z/--zero=0}" --steps=20 --checkpoint-dir="$T/ck0" --resume
  same_weights "$T/whole.st" "$T/r0.st" 0
}

mlp_vs_torch() {
  if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then echo "SKIP: no PyTorch"; exit 77; fi
  local R=$HERE/torch_reference.py cfg n common extra
  /usr/bin/python3 "$R" make-inputs --rows=200 --seed=3 --init="$T/init.st" --data="$T/data.st" || fail "make-inputs"
  for cfg in "$@"; do
    IFS='|' read -r n common extra <<<"$cfg"
    # shellcheck disable=SC2086
    /usr/bin/python3 "$R" train --init="$T/init.st" --data="$T/data.st" --world-size="$n" --steps=25 $common \
      --out="$T/torch.st" || fail "torch reference failed"
    # shellcheck disable=SC2086
    run_job "$n" "$T/psync.st" --init="$T/init.st" --data="$T/data.st" --steps=25 $common $extra
    same_weights "$T/torch.st" "$T/psync.st" 1e-5
  done
}

gpt_vs_torch() {
  if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then echo "SKIP: no PyTorch"; exit 77; fi
  local R=$HERE/gpt_reference.py cfg n common extra
  local MODEL=(--vocab-size=64 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32)
  /usr/bin/python3 "$R" make-inputs "${MODEL[@]}" --tokens=6000 --seed=5 --init="$T/init.st" \
    --data="$T/tokens.bin" --data-format=bytes || fail "make-inputs"
  for cfg in "$@"; do
    IFS='|' read -r n common extra <<<"$cfg"
    # shellcheck disable=SC2086
    /usr/bin/python3 "$R" train --n-head=2 --init="$T/init.st" --data="$T/tokens.bin" --data-format=bytes \
      --world-size="$n" --steps=20 --lr=0.003 --beta2=0.95 $common --out="$T/torch.st" || fail "gpt reference failed"
    # shellcheck disable=SC2086
    run_job "$n" "$T/psync.st" --model=gpt "${MODEL[@]}" --init="$T/init.st" --data="$T/tokens.bin" \
      --data-format=bytes --optimizer=adamw --lr=0.003 --beta2=0.95 --steps=20 $common $extra
    same_weights "$T/torch.st" "$T/psync.st" 1e-4
  done
}

# same_as_uninterrupted_nodes STEPS: after a 2-node job against $CPID that
# saved $T/r.st, runs it again uninterrupted (a fresh coordinator, the same
# topology) and compares the weights bit for bit.
same_as_uninterrupted_nodes() {
  local steps=$1; shift
  kill "$CPID"; wait "$CPID" 2>/dev/null
  start_coord 4
  start_node u0 0 "$CADDR" -- --steps="$steps" --quiet --save="$T/u.st" "$@"
  start_node u1 1 "$CADDR" -- --steps="$steps" --quiet "$@"
  wait_nodes u0 u1
  same_weights "$T/u.st" "$T/r.st" 0
}

# same_as_uninterrupted_node STEPS: after a one-node job of 4 ranks against
# $CPID that saved $T/r.st, runs it again uninterrupted (a fresh coordinator)
# and compares the weights bit for bit.
same_as_uninterrupted_node() {
  kill "$CPID"; wait "$CPID" 2>/dev/null
  start_coord 4
  "$LAUNCH" --nnodes=1 --node-rank=0 --nproc=4 --coordinator="$CADDR" -- --steps="$1" --quiet --save="$T/u.st" \
    >"$T/u0.log" 2>&1 &
  NPID[u0]=$!; PIDS+=("${NPID[u0]}")
  wait_nodes u0
  same_weights "$T/u.st" "$T/r.st" 0
}

# coordinator_kills ADDR TOKEN KILL: three kill -9s of the 4-rank job's
# coordinator at random iterations (PSYNC_CHAOS_SEED), each by the function
# KILL K, which kills it and sees a coordinator back at ADDR; after each the
# job goes on (a new plan) and every worker keeps its pid.
coordinator_kills() {
  local addr=$1 token=$2 kill_fn=$3 seed=${PSYNC_CHAOS_SEED:-$RANDOM} at=50 k before now t0
  RANDOM=$seed
  note "seed $seed (PSYNC_CHAOS_SEED)"
  wait_iteration "$addr" 50 "$token"
  before=$(rank_pid "$addr" "$token")
  # The kills end by iteration 1250 of the caller's 3000 or more: the job
  # (and a launcher's coordinator with it) must outlive the checks after
  # the last one (seen failing when kill 3 came at 1379 on a loaded machine).
  for k in 1 2 3; do
    at=$((at + 150 + RANDOM % 250))
    wait_iteration "$addr" "$at" "$token"
    t0=$(date +%s%N)
    "$kill_fn" "$k"
    wait_iteration "$addr" $((at + 1)) "$token"
    note "kill $k at iteration $at: the next plan $((($(date +%s%N) - t0) / 1000000)) ms after the kill"
    now=$(rank_pid "$addr" "$token")
    [[ $now == "$before" ]] || fail "the ranks' pids were $before and are $now after kill $k"
  done
}

# live_chaos STEPS KILLS [worker flags]: psync-launch --nproc=4
# --max-restarts=KILLS+1 --recovery=live, no checkpoint directory; KILLS
# kill -9s of a random worker (a replacement too), each at a random
# iteration ahead of the last, and one right after another (while the job
# recovers from it). Then: exit 0, the ranks never killed kept their pids,
# every rank ran STEPS steps, and the weights equal an uninterrupted run's
# bit for bit (the same world, batches and reduction order).
live_chaos() {
  local steps=$1 kills=$2; shift 2
  local seed=${PSYNC_CHAOS_SEED:-$RANDOM}
  RANDOM=$seed
  "$LAUNCH" --nproc=4 --max-restarts=$((kills + 1)) --recovery=live -- --steps="$steps" --quiet --save="$T/r.st" \
    --summary="$T/rs{rank}.json" "$@" >"$T/rl.log" 2>&1 &
  LP=$!; PIDS+=("$LP")
  launcher_coordinator "$T/rl.log"
  wait_iteration "$LADDR" 20 "$LTOK"
  local -a first killed=() pids
  mapfile -t first < <(ps --ppid "$LP" -o pid=,args= | awk '/psync-worker/ {print $1}')
  local k it=20 v
  for ((k = 1; k <= kills; k++)); do
    if ((k != 3)); then  # kill 3 follows kill 2 at once: during its recovery
      it=$((it + 20 + RANDOM % (steps / (3 * kills))))
      wait_iteration "$LADDR" "$it" "$LTOK"
    fi
    # A worker killed a moment ago may still be listed (a zombie until the
    # launcher reaps it, and kill succeeds on one): only the living count.
    mapfile -t pids < <(ps --ppid "$LP" -o pid=,stat=,args= |
      awk -v dead=" ${killed[*]} " '/psync-worker/ && $2 !~ /^Z/ && index(dead, " " $1 " ") == 0 {print $1}')
    ((${#pids[@]})) || fail "kill $k: no psync-worker under psync-launch"
    v=${pids[$((RANDOM % ${#pids[@]}))]}
    kill -9 "$v" && killed+=("$v")
  done
  wait_exit "$LP" 180
  [[ $rc == 0 ]] || fail "psync-launch exited $rc after $kills kills (seed $seed): $(tail -5 "$T/rl.log")"
  local p r
  for r in 0 1 2 3; do
    [[ $(json_field "$T/rs$r.json" steps_completed) == "$steps" ]] || fail "rank $r: $(cat "$T/rs$r.json")"
  done
  local kept=0
  for p in "${first[@]}"; do [[ " ${killed[*]} " == *" $p "* ]] || kept=$((kept + 1)); done
  # The processes never killed ran to the end: the launcher started one
  # replacement per kill and nothing else.
  [[ $(grep -c "starting a replacement, the other workers keep training" "$T/rl.log") == "$kills" ]] ||
    fail "want $kills replacements (seed $seed): $(grep -E "died|ended" "$T/rl.log")"
  grep -q "(after $kills restarts); exit 0" "$T/rl.log" || fail "closing line: $(tail -1 "$T/rl.log")"
  note "seed $seed: $kills kills, $kept of 4 first processes never killed ran to the end; $(grep -cE "healed from rank|rebuilt the sharded state" "$T/rl.log") heals"
  "$LAUNCH" --nproc=4 -- --steps="$steps" --quiet --save="$T/u.st" "$@" 2>"$T/ul.log" || fail "uninterrupted run failed"
  same_weights "$T/u.st" "$T/r.st" 0
}

# live_phases STEPS [worker flags]: live recovery with kills at chosen
# moments (PSYNC_TEST_KILL, worker/runtime/test_kill.h): at iteration 150
# a worker dies inside forward, then the heal source of that recovery dies
# while it heals the replacement; at 400 a worker dies with backward's
# first bucket reduction in flight (LIVE_AT_400=step: right after its
# optimizer step, for --zero, which has no such hook), at 650 right after
# its optimizer step.
# 4 ranks, no checkpoint directory: the job ends with 4 replacements and
# nothing else restarted, at most one iteration computed again per kill,
# and exactly the weights of an uninterrupted run.
live_phases() {
  local steps=$1; shift
  local at400=${LIVE_AT_400:-allreduce}
  local kills=forward@150@$T/k1,heal@150@$T/k2,$at400@400@$T/k3,step@650@$T/k4
  PSYNC_TEST_KILL=$kills "$LAUNCH" --nproc=4 --max-restarts=5 --recovery=live -- --steps="$steps" --quiet \
    --save="$T/r.st" --summary="$T/rs{rank}.json" "$@" >"$T/rl.log" 2>&1 &
  LP=$!; PIDS+=("$LP")
  launcher_coordinator "$T/rl.log"
  wait_iteration "$LADDR" 660 "$LTOK"
  local recomputed
  recomputed=$(PSYNC_TOKEN=$LTOK "$CTL" --coordinator="$LADDR" status |
    sed -n 's/.*; \([0-9]*\) iteration(s) computed again in all.*/\1/p')
  wait_exit "$LP" 180
  [[ $rc == 0 ]] || fail "psync-launch exited $rc: $(tail -5 "$T/rl.log")"
  local k r phase
  for k in 1 2 3 4; do [[ -s $T/k$k ]] || fail "kill $k (${kills//@$T\//@}) did not happen: $(grep -i "test hook" "$T/rl.log")"; done
  for phase in forward heal "$at400" step; do
    grep -q "PSYNC_TEST_KILL: pid [0-9]* killed at $phase of iteration" "$T/rl.log" || fail "no kill at $phase"
  done
  for r in 0 1 2 3; do
    [[ $(json_field "$T/rs$r.json" steps_completed) == "$steps" ]] || fail "rank $r: $(cat "$T/rs$r.json")"
  done
  [[ $(grep -c "starting a replacement, the other workers keep training" "$T/rl.log") == 4 ]] ||
    fail "want 4 replacements and no other restart: $(grep -E "died|ended" "$T/rl.log")"
  [[ -n $recomputed ]] && ((recomputed <= 4)) || fail "$recomputed iterations computed again for 4 kills"
  note "4 kills (forward, heal, $at400, step): 4 replacements, $recomputed iteration(s) computed again; $(grep -cE "healed from rank|rebuilt the sharded state" "$T/rl.log") heals"
  "$LAUNCH" --nproc=4 -- --steps="$steps" --quiet --save="$T/u.st" "$@" 2>"$T/ul.log" || fail "uninterrupted run failed"
  same_weights "$T/u.st" "$T/r.st" 0
}

case $CASE in
  equal_2)            equal_to_single 2 --steps=40 ;;
  equal_4_accumulate) equal_to_single 4 --steps=30 --accumulate=2 ;;
  equal_2_skip_always) equal_to_single 2 --steps=30 --skip-layer=1 --find-unused-parameters ;;
  equal_4_skip_odd_accumulate)
    equal_to_single 4 --steps=30 --skip-layer=1 --skip-pattern=odd --accumulate=2 --find-unused-parameters \
      --momentum=0.9 --weight-decay=0.001 ;;
  equal_4_gpt)  # a GPT with odd-step block skipping: 4 ranks == 1 process
    # Seeded bytes (the same data every run); AdamW amplifies the different
    # summation order of 4 ranks to a few 1e-6 after 12 steps: bound 3e-5.
    python3 -c 'import random,sys; random.seed(7); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))' \
      >"$T/tokens.bin"
    EQUAL_TOL=3e-5 equal_to_single 4 --model=gpt --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 \
      --data="$T/tokens.bin" --data-format=bytes --optimizer=adamw --lr=0.003 --steps=12 --global-batch=8 \
      --skip-block=0 --skip-pattern=odd --find-unused-parameters ;;
  equal_bf16_gpt)  # --precision=bf16: 2 and 3 ranks == 1 process
    # The per-sequence forward and backward do not depend on the split, but
    # for one factor: each rank's loss is the mean over its own tokens, so
    # the loss gradient carries 1/N_local into the bfloat16 logit gradients
    # and rounds with it. 2 ranks scale it by exactly 1/2 (a power of two: the
    # same bf16 roundings); 3 ranks by 1/3, which rounds differently in a few
    # logit gradients per step (2^-9 relative each).
    python3 -c 'import random,sys; random.seed(7); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))' \
      >"$T/tokens.bin"
    BF16=(--model=gpt --precision=bf16 --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32
          --data="$T/tokens.bin" --data-format=bytes --steps=12 --global-batch=12)
    # SGD: 2 ranks differ from one process by the float32 round-off of the
    # buckets' summation order (within 1e-4); 3 ranks also by those roundings
    # (measured 2.4e-4 after 12 steps at lr 0.05, momentum 0.9: bound 1e-3).
    SGD=(--optimizer=sgd --lr=0.05 --momentum=0.9)
    run_job 1 "$T/w1.st" "${BF16[@]}" "${SGD[@]}"
    run_job 2 "$T/w2.st" "${BF16[@]}" "${SGD[@]}"
    same_weights "$T/w1.st" "$T/w2.st" 1e-4
    run_job 3 "$T/w3.st" "${BF16[@]}" "${SGD[@]}"
    same_weights "$T/w1.st" "$T/w3.st" 1e-3
    # AdamW, 2 ranks: float32 round-off flips an occasional bf16 weight
    # copy, and the key third of c_attn's bias (an exactly zero gradient:
    # softmax ignores a per-row constant) takes lr-sized steps on pure
    # rounding noise, so its max difference reaches ~lr; every other tensor
    # stays within 2% of how far it moved (bf16_agreement.py --same; measured
    # 0.21 of that bound). (At 3 ranks AdamW also turns the 1/3 rounding
    # differences above into ~9% of the movement: bf16 logit gradients hold
    # p - 1 at the target class to 8 bits, whatever the scale.)
    ADAM=(--optimizer=adamw --lr=0.003 --weight-decay=0.1)
    run_job 1 "$T/a0.st" "${BF16[@]}" "${ADAM[@]}" --steps=0  # the initial weights
    run_job 1 "$T/a1.st" "${BF16[@]}" "${ADAM[@]}"
    run_job 2 "$T/a2.st" "${BF16[@]}" "${ADAM[@]}"
    out=$(/usr/bin/python3 "$HERE/bf16_agreement.py" --same "$T/a0.st" "$T/a1.st" "$T/a2.st") \
      || fail "AdamW bf16, 2 ranks vs 1: $out"
    note "AdamW bf16, 2 ranks vs 1: $(tail -1 <<<"$out") ($("$DIFF" "$T/a1.st" "$T/a2.st" 1 | tail -1))" ;;
  equal_2_cuda_shm)  # --backend=shm on CUDA: 2 ranks sharing cuda:0 (NCCL refuses that) == 1 process on it
    if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU 0"; then echo "SKIP: no CUDA device"; exit 77; fi
    python3 -c 'import random,sys; random.seed(7); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))' \
      >"$T/tokens.bin"
    GPT=(--model=gpt --device=cuda:0 --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32
         --data="$T/tokens.bin" --data-format=bytes --optimizer=adamw --lr=0.003 --steps=12 --global-batch=8)
    run_job 1 "$T/w1.st" "${GPT[@]}"
    run_job 2 "$T/w2.st" "${GPT[@]}" --backend=shm
    same_weights "$T/w1.st" "$T/w2.st" 3e-5
    run_job 1 "$T/b1.st" "${GPT[@]}" --precision=bf16 --optimizer=sgd --lr=0.05 --momentum=0.9
    run_job 2 "$T/b2.st" "${GPT[@]}" --precision=bf16 --optimizer=sgd --lr=0.05 --momentum=0.9 --backend=shm
    same_weights "$T/b1.st" "$T/b2.st" 1e-4 ;;
  equal_2_cnn)  # the CNN on Fashion-MNIST: 2 ranks == 1 process
    [[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] || { echo "SKIP: no dataset-fashion-mnist"; exit 77; }
    equal_to_single 2 --model=cnn --cnn-channels=4,8 --data=fashion-mnist --shuffle --optimizer=adamw --lr=0.002 \
      --global-batch=16 --steps=8 --eval-examples=64 ;;
  equal_2_small_buckets)  # many buckets, bucket plan rebuilt from rank 0's order
    equal_to_single 2 --steps=30 --bucket-cap-mb=0.004 --first-bucket-mb=0.001 ;;

  torch)
    mlp_vs_torch "2||" "2|--accumulate=2 --skip-layer=1 --skip-pattern=lastmicro|--find-unused-parameters" \
                 "4|--skip-layer=1 --skip-pattern=odd --momentum=0.9 --weight-decay=0.01|--find-unused-parameters" ;;
  torch_zero3)  # --zero=3 (parameters sharded, each layer gathered for its forward and backward)
                # against torch_reference.py: the MLP at W=2 and 4, a layer skipped, accumulation
    Z="--zero=3 --optimizer=sgd --bucket-cap-mb=0.004 --first-bucket-mb=0.001"
    mlp_vs_torch "2||$Z" "2|--accumulate=2 --skip-layer=1 --skip-pattern=lastmicro|--find-unused-parameters $Z" \
                 "4|--skip-layer=1 --skip-pattern=odd --momentum=0.9 --weight-decay=0.01|--find-unused-parameters $Z --zero3-prefetch=2"
    # the GPT: W=2, 3 and 4, a block skipped on odd steps, accumulation with a block skipped in the last micro-batch
    Z=(--zero=3 --bucket-cap-mb=0.01 --first-bucket-mb=0.005)
    gpt_vs_torch "2|--global-batch=12 --lr-schedule=cosine --warmup-steps=3 --clip-grad-norm=0.5 --weight-decay=0.1|${Z[*]}" \
                 "3|--global-batch=12 --skip-block=1 --skip-pattern=odd|--find-unused-parameters ${Z[*]}" \
                 "4|--global-batch=8 --accumulate=2 --skip-block=1 --skip-pattern=lastmicro|--find-unused-parameters ${Z[*]} --reshard-after-forward=false" ;;

  gpt_torch)  # --model=gpt against gpt_reference.py (PyTorch, one process on the full batch), 20 AdamW steps
    gpt_vs_torch "2|--global-batch=8|" \
                 "2|--global-batch=8 --lr-schedule=cosine --warmup-steps=3 --clip-grad-norm=0.5 --weight-decay=0.1|" \
                 "4|--global-batch=8 --skip-block=1 --skip-pattern=odd|--find-unused-parameters" \
                 "2|--global-batch=8 --accumulate=4 --skip-block=0 --skip-pattern=lastmicro|--find-unused-parameters" ;;
  zero_equal)  # --zero=1, 2 and 3 end with the weights of --zero=0: bit for bit on shm without
               # clipping (the reduce-scatter sums in the allreduce's order), within 1e-6 with it;
               # at --precision=bf16 too
    python3 -c 'import random,sys; random.seed(9); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))' \
      >"$T/tokens.bin"
    GPT=(--model=gpt --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 --data="$T/tokens.bin"
         --data-format=bytes --optimizer=adamw --lr=0.003 --weight-decay=0.1 --global-batch=12 --steps=12
         --bucket-cap-mb=0.02 --first-bucket-mb=0.005 --skip-block=1 --skip-pattern=odd --find-unused-parameters)
    # shm (BACKEND shm, or auto with one host's LOCAL_*) sums in one order; gloo and hier do not
    [[ $BACKEND == shm || $BACKEND == auto ]] && exact=0 || exact=3e-5
    for n in 2 3; do
      run_job "$n" "$T/z0.st" "${GPT[@]}" --zero=0
      for z in 1 2 3; do
        run_job "$n" "$T/z$z.st" "${GPT[@]}" --zero="$z"
        same_weights "$T/z0.st" "$T/z$z.st" "$exact"
      done
      run_job "$n" "$T/c0.st" "${GPT[@]}" --zero=0 --clip-grad-norm=0.5 --accumulate=2
      run_job "$n" "$T/c1.st" "${GPT[@]}" --zero=1 --clip-grad-norm=0.5 --accumulate=2
      same_weights "$T/c0.st" "$T/c1.st" "$([[ $exact == 0 ]] && echo 1e-6 || echo "$exact")"
    done
    # --precision=bf16: the bf16 copies follow the gathered weights, so the
    # sharded runs match the unsharded bf16 run as closely as float32 does
    run_job 2 "$T/b0.st" "${GPT[@]}" --precision=bf16 --zero=0
    for z in 1 2 3; do
      run_job 2 "$T/b$z.st" "${GPT[@]}" --precision=bf16 --zero="$z"
      same_weights "$T/b0.st" "$T/b$z.st" "$exact"
    done ;;
  zero_memory)  # the per-rank summary at W=4: optimizer state, gradients, parameters and activations held, zero 0 / 1 / 2 / 3
    head -c 40000 /dev/urandom >"$T/tokens.bin"
    GPT=(--model=gpt --vocab-size=256 --block-size=16 --n-layer=4 --n-head=2 --n-embd=64 --data="$T/tokens.bin"
         --data-format=bytes --optimizer=adamw --lr=0.003 --global-batch=8 --steps=3 --bucket-cap-mb=0.05
         --first-bucket-mb=0.05)
    for z in 0 1 2 3; do run_job 4 "$T/m$z.st" "${GPT[@]}" --zero="$z" --summary="$T/m$z-{rank}.json"; done
    for r in 0 1 2 3; do
      s0=$(json_field "$T/m0-$r.json" optimizer_state_bytes); s1=$(json_field "$T/m1-$r.json" optimizer_state_bytes)
      g0=$(json_field "$T/m0-$r.json" gradient_bytes); g2=$(json_field "$T/m2-$r.json" gradient_bytes)
      p0=$(json_field "$T/m0-$r.json" parameter_bytes); p3=$(json_field "$T/m3-$r.json" parameter_bytes)
      w3=$(json_field "$T/m3-$r.json" parameter_window_bytes)
      a0=$(json_field "$T/m0-$r.json" activation_bytes); a3=$(json_field "$T/m3-$r.json" activation_bytes)
      note "rank $r: optimizer state $s1 of $s0 bytes, gradients (--zero=2) $g2 of $g0 bytes, parameters (--zero=3) $p3 of $p0 bytes ($w3 of them the window), activations $a3 (--zero=3) and $a0 (--zero=0) bytes"
      # --zero=3: a quarter of the parameters, plus the window: at most the 4 buckets of the
      # fused MLP (c_fc and c_proj), the prefetched one and the one kept, each at most b
      /usr/bin/python3 -c "import sys; p0,p3,w3=map(int,sys.argv[1:]); b=64*256*4+4*64*4; \
sys.exit(0 if p3 - w3 <= 0.3*p0 and w3 <= 6*b else 1)" "$p0" "$p3" "$w3" ||
        fail "rank $r: parameters $p3/$p0 (window $w3) over the bound"
      # what a forward saves for backward does not depend on where the parameters live
      /usr/bin/python3 -c "import sys; a0,a3=map(int,sys.argv[1:]); sys.exit(0 if a0 > 0 and abs(a3 - a0) <= 0.02*a0 else 1)" \
        "$a0" "$a3" || fail "rank $r: activations $a3 bytes with --zero=3, $a0 with --zero=0"
      # one bucket: the largest (a 64 x 256 weight alone, over the 0.05 MiB cap), padded to 4 x 64 floats
      /usr/bin/python3 -c "import sys; s0,s1,g0,g2=map(int,sys.argv[1:]); b=64*256*4+4*64*4; \
sys.exit(0 if s1 <= 0.26*s0 and g2 <= 0.26*g0 + b else 1)" "$s0" "$s1" "$g0" "$g2" ||
        fail "rank $r: state $s1/$s0, gradients $g2/$g0 over the bound"
    done ;;
  zero_reshard)  # a W=4 --zero=1 checkpoint resumes at W=4 (bit for bit), W=2 and W=3 (1e-4) of the
                 # uninterrupted W=4 run: the optimizer state is one logical checkpoint, re-sliced
    zero_checkpoint_resumes 1 4 2 3 ;;
  zero3_checkpoint)  # the same with --zero=3 (parameters sharded too): W=4, W=2 and --zero=0
    zero_checkpoint_resumes 3 4 2 ;;
  gpt_torch_zero)  # --zero=1|2 against gpt_reference.py (one PyTorch process, full batch): W=2, 3, 4,
                   # a block skipped on odd steps, accumulation with a block skipped in the last micro-batch
    Z=(--bucket-cap-mb=0.01 --first-bucket-mb=0.005)
    gpt_vs_torch "2|--global-batch=12 --lr-schedule=cosine --warmup-steps=3 --clip-grad-norm=0.5 --weight-decay=0.1|--zero=1 ${Z[*]}" \
                 "3|--global-batch=12 --skip-block=1 --skip-pattern=odd|--find-unused-parameters --zero=1 ${Z[*]}" \
                 "4|--global-batch=8 --skip-block=1 --skip-pattern=odd|--find-unused-parameters --zero=2 ${Z[*]}" \
                 "2|--global-batch=8 --accumulate=4 --skip-block=0 --skip-pattern=lastmicro|--find-unused-parameters --zero=2 ${Z[*]}" \
                 "3|--global-batch=12 --accumulate=2 --skip-block=0 --skip-pattern=lastmicro|--find-unused-parameters --zero=1 ${Z[*]}" \
                 "4|--global-batch=8 --accumulate=2 --skip-block=1 --skip-pattern=lastmicro --clip-grad-norm=0.5|--find-unused-parameters --zero=1 ${Z[*]}" ;;

  gpt_bf16_torch)  # --precision=bf16 against gpt_reference.py --precision=bf16 (torch.autocast on the CPU), 20 AdamW steps
    if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then echo "SKIP: no PyTorch"; exit 77; fi
    R=$HERE/gpt_reference.py
    MODEL=(--vocab-size=64 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32)
    /usr/bin/python3 "$R" make-inputs "${MODEL[@]}" --tokens=6000 --seed=5 --init="$T/init.st" \
      --data="$T/tokens.bin" --data-format=bytes || fail "make-inputs"
    TRAIN=(--init="$T/init.st" --data="$T/tokens.bin" --data-format=bytes --steps=20 --lr=0.003 --beta2=0.95
           --global-batch=8 --weight-decay=0.1)
    for p in fp32 bf16; do
      /usr/bin/python3 "$R" train --n-head=2 --world-size=2 --precision=$p "${TRAIN[@]}" --out="$T/torch_$p.st" \
        || fail "gpt reference ($p) failed"
      run_job 2 "$T/psync_$p.st" --model=gpt "${MODEL[@]}" --optimizer=adamw --precision=$p "${TRAIN[@]}"
    done
    # float32 stays torch's twin (as gpt_torch); bf16 follows torch's bf16
    # within a few times what bf16 rounding itself does (bf16_agreement.py).
    same_weights "$T/torch_fp32.st" "$T/psync_fp32.st" 1e-4
    "$DIFF" "$T/psync_bf16.st" "$T/psync_fp32.st" 1e-4 >/dev/null && fail "--precision=bf16 trained float32 weights"
    out=$(/usr/bin/python3 "$HERE/bf16_agreement.py" "$T/init.st" "$T/torch_fp32.st" "$T/torch_bf16.st" "$T/psync_bf16.st") \
      || fail "psync bf16 vs torch bf16: $out"
    note "psync bf16 vs torch bf16: $(tail -1 <<<"$out")" ;;

  resume_bf16)  # --precision=bf16: a run cut at step 6 and resumed == an uninterrupted run, bit for bit
    head -c 20000 /dev/urandom >"$T/tokens.bin"
    GPT=(--model=gpt --precision=bf16 --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32
         --data="$T/tokens.bin" --data-format=bytes --optimizer=adamw --lr=0.003 --weight-decay=0.1 --clip-grad-norm=1
         --global-batch=8)
    run_job 2 "$T/whole.st" "${GPT[@]}" --steps=12
    run_job 2 "$T/first.st" "${GPT[@]}" --steps=6 --checkpoint-dir="$T/ckpt" --checkpoint-every=3
    run_job 2 "$T/resumed.st" "${GPT[@]}" --steps=12 --checkpoint-dir="$T/ckpt" --resume
    grep -q "resumed from .*ckpt-00000006" "$T/w0.log" || fail "rank 0 did not say it resumed from step 6"
    same_weights "$T/whole.st" "$T/resumed.st" 0
    "$B/worker/sample/psync-sample" --checkpoint="$T/resumed.st" --precision=bf16 --tokens=20 --prompt=ab >"$T/s1" \
      || fail "psync-sample --precision=bf16"
    note "bf16 sample bytes: $(wc -c <"$T/s1")" ;;

  resume)  # a run cut at step 8 and resumed from its checkpoint == an uninterrupted run, bit for bit;
           # psync-sample and --init read checkpoints and --save files; --resume refuses a --save file
    head -c 20000 /dev/urandom >"$T/tokens.bin"
    GPT=(--model=gpt --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 --data="$T/tokens.bin"
         --data-format=bytes --optimizer=adamw --lr=0.003 --weight-decay=0.1 --clip-grad-norm=1 --global-batch=8)
    run_job 2 "$T/whole.st" "${GPT[@]}" --steps=16
    run_job 2 "$T/first.st" "${GPT[@]}" --steps=8 --checkpoint-dir="$T/ckpt" --checkpoint-every=3 --keep-checkpoints=2
    ls "$T/ckpt" | tr '\n' ' ' | grep -q "ckpt-00000006.safetensors ckpt-00000008.safetensors $" \
      || fail "checkpoints kept: $(ls "$T/ckpt" | tr '\n' ' ') (want steps 6 and 8)"
    run_job 2 "$T/resumed.st" "${GPT[@]}" --steps=16 --checkpoint-dir="$T/ckpt" --resume
    grep -q "resumed from .*ckpt-00000008" "$T/w0.log" || fail "rank 0 did not say it resumed from step 8"
    same_weights "$T/whole.st" "$T/resumed.st" 0
    # psync-sample rebuilds the model from a checkpoint alone and from a --save file.
    "$B/worker/sample/psync-sample" --checkpoint="$T/ckpt/ckpt-00000016.safetensors" --tokens=20 --prompt=ab >"$T/s1" \
      || fail "psync-sample on a checkpoint"
    "$B/worker/sample/psync-sample" --checkpoint="$T/resumed.st" --tokens=20 --prompt=ab >"$T/s2" \
      || fail "psync-sample on a --save file"
    cmp -s "$T/s1" "$T/s2" || fail "the same weights sampled differently"
    note "sample bytes: $(wc -c <"$T/s1")"
    # --init reads a --save file (a weights-only checkpoint): 0 steps from it save the same bits.
    run_job 1 "$T/init0.st" "${GPT[@]}" --steps=0 --init="$T/first.st"
    same_weights "$T/first.st" "$T/init0.st" 0
    # --resume refuses a weights-only file (a --save file) by name, before joining: exit 2.
    mkdir -p "$T/wonly" && cp "$T/resumed.st" "$T/wonly/ckpt-00000016.safetensors"
    out=$("$WORKER" "${GPT[@]}" --steps=20 --checkpoint-dir="$T/wonly" --resume --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *wonly/ckpt-00000016.safetensors* && $out == *"weights only"* ]] \
      || fail "--resume from a --save file: rc=$rc out=$out"
    note "--resume from a --save file: $out" ;;

  shutdown)
    start_coord 2
    for r in 0 1; do
      start_worker $r 2 --steps=1000000 --quiet --save="$T/stop.st" --summary="$T/sum{rank}.json" --checkpoint-dir="$T/ckpt"
    done
    wait_iteration "$CADDR" 2
    "$CTL" --coordinator="$CADDR" shutdown >"$T/ctl.log" 2>&1 || fail "psyncctl shutdown failed"
    for r in 0 1; do wait_exit "${WPID[$r]}" 20; [[ $rc == 0 ]] || fail "rank $r exited $rc after shutdown"; done
    k0=$(json_field "$T/sum0.json" steps_completed); k1=$(json_field "$T/sum1.json" steps_completed)
    [[ -n $k0 && $k0 == "$k1" ]] || fail "steps_completed differ: $k0 vs $k1"
    ((k0 > 0 && k0 < 1000000)) || fail "steps_completed $k0"
    note "both ranks stopped after $k0 steps"
    # The stop wrote a final checkpoint at the stopped step (a later --resume continues there).
    [[ -f $T/ckpt/$(printf 'ckpt-%08d.safetensors' "$k0") ]] || fail "no checkpoint at step $k0: $(ls "$T/ckpt" 2>&1)"
    kill "$CPID"; wait "$CPID" 2>/dev/null
    run_job 1 "$T/single.st" --steps="$k0"
    same_weights "$T/single.st" "$T/stop.st" ;;

  kill_worker)
    start_coord 4
    for r in 0 1 2 3; do start_worker $r 4 --steps=1000000 --quiet; done
    wait_iteration "$CADDR" 2
    t0=$(date +%s.%N)
    kill -9 "${WPID[2]}"
    for r in 0 1 3; do
      wait_exit "${WPID[$r]}" 10
      [[ $rc != timeout ]] || fail "rank $r still running 10 s after rank 2 was killed"
      [[ $rc != 0 ]] || fail "rank $r exited 0 after losing rank 2"
      grep -q "rank 2" "$T/w$r.log" || fail "rank $r's error does not name rank 2: $(tail -1 "$T/w$r.log")"
      note "rank $r: exit $rc: $(tail -1 "$T/w$r.log")"
    done
    note "all survivors exited within $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') s"
    kill -0 "$CPID" || fail "the coordinator died"
    # Segment names carry the creator's pid: none of this job's may be left.
    for r in 0 1 2 3; do
      left=$(ls /dev/shm | grep "^psync\.[0-9]*\.${WPID[$r]}\.") && fail "rank $r left /dev/shm/$left"
    done
    "$CTL" --coordinator="$CADDR" status >"$T/status.txt" 2>&1
    grep -qiE "abort|lost" "$T/status.txt" || fail "psyncctl status does not report the loss: $(cat "$T/status.txt")"
    grep -q "2" "$T/status.txt" || fail "psyncctl status does not name rank 2"
    note "psyncctl status: $(grep -iE "abort|lost" "$T/status.txt" | head -2 | tr '\n' ' ')" ;;

  kill_coordinator)  # no coordinator comes back within the workers' --coordinator-grace: they exit 5
    start_coord 2
    for r in 0 1; do start_worker $r 2 --steps=1000000 --quiet --coordinator-grace=2s; done
    wait_iteration "$CADDR" 2
    kill -9 "$CPID"
    for r in 0 1; do
      wait_exit "${WPID[$r]}" 10
      [[ $rc == 5 ]] || fail "rank $r: exit $rc, want 5 within 10 s (2 s of --coordinator-grace)"
      grep -q "no coordinator took over within 2s" "$T/w$r.log" || fail "rank $r's message does not say why"
      note "rank $r: $(tail -1 "$T/w$r.log")"
    done ;;

  bad_input)
    out=$("$WORKER" --no-such-flag=1 2>&1); rc=$?
    [[ $rc == 2 && $out == *no-such-flag* && $(wc -l <<<"$out") == 1 ]] || fail "unknown flag: rc=$rc out=$out"
    out=$("$WORKER" --steps=abc 2>&1); rc=$?
    [[ $rc == 2 && $out == *steps* ]] || fail "bad value: rc=$rc out=$out"
    out=$("$WORKER" --global-batch=10 --accumulate=3 --world-size=1 2>&1); rc=$?
    [[ $rc == 2 && $out == *global-batch* && $out == *accumulate* ]] || fail "batch geometry: rc=$rc out=$out"
    out=$("$WORKER" --skip-layer=2 2>&1); rc=$?
    [[ $rc == 2 && $out == *skip-layer* ]] || fail "skip layer: rc=$rc out=$out"
    head -c 100 /dev/urandom >"$T/corrupt.st"
    out=$("$WORKER" --init="$T/corrupt.st" --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *corrupt.st* ]] || fail "corrupt --init: rc=$rc out=$out"
    note "corrupt --init: $out"
    printf '\x10\x00\x00\x00\x00\x00\x00\x00{"x":{"dtype"' >"$T/trunc.st"
    out=$("$WORKER" --init="$T/trunc.st" --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *trunc.st* ]] || fail "truncated --init: rc=$rc out=$out"
    "$WORKER" --help >/dev/null 2>&1 || fail "--help"
    # OpenBLAS kernels (worker/tensor/cpu/blas_core.h): where OpenBLAS did not recognise the CPU
    # and fell back to old kernels, psync-worker re-runs itself once with OPENBLAS_CORETYPE set
    # from the CPU's features (OPENBLAS_VERBOSE=2 prints the core at each load); a value the
    # user set is kept.
    cores=$(OPENBLAS_VERBOSE=2 "$WORKER" --help 2>&1 >/dev/null | sed -n 's/^Core: //p' | tr '\n' ' ')
    [[ -n $cores ]] || fail "OPENBLAS_VERBOSE=2 printed no core"
    if grep -qw avx2 /proc/cpuinfo && [[ $cores == Prescott* || $cores == Core2* || $cores == Nehalem* ]]; then
      [[ $cores == *" Haswell " || $cores == *" SkylakeX " ]] || fail "old OpenBLAS kernels on an AVX2 CPU: $cores"
    fi
    forced=$(OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$WORKER" --help 2>&1 >/dev/null | sed -n 's/^Core: //p' | tr '\n' ' ')
    [[ $forced == "Prescott " ]] || fail "the user's OPENBLAS_CORETYPE=Prescott was not kept: $forced"
    note "OpenBLAS kernels: $cores(loads)"
    # widths mismatch with --data: x [4,8], y [4,4] (F32 zeros) against the default widths 32,64,64,16
    python_bin=$(command -v /usr/bin/python3 || command -v python3)
    "$python_bin" - "$T/data8.st" <<'EOF' || fail "writing data8.st"
import json, struct, sys
n = 4
hdr = {"x": {"dtype": "F32", "shape": [n, 8], "data_offsets": [0, n * 8 * 4]},
       "y": {"dtype": "F32", "shape": [n, 4], "data_offsets": [n * 8 * 4, n * 12 * 4]}}
h = json.dumps(hdr).encode(); h += b" " * ((8 - (8 + len(h)) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * (n * 12 * 4))
EOF
    out=$("$WORKER" --data="$T/data8.st" --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *data8.st* && $out == *"'x'"* ]] || fail "widths vs --data: rc=$rc out=$out"
    note "widths mismatch: $out"
    out=$("$WORKER" --coordinator=127.0.0.1:1 --steps=1 --timeout=2s 2>&1); rc=$?
    [[ $rc == 3 ]] || fail "unreachable coordinator: rc=$rc out=$out"
    note "unreachable coordinator: exit 3: $out" ;;

  job_mismatch)  # ranks whose flags would make them train different jobs (the same shapes) are refused at
    # Join before any step, both at once (not after --join-timeout), naming the flag and both values
    seq 1 3000 >"$T/text.txt"
    base=(--model=gpt --data="$T/text.txt" --data-format=bytes --n-layer=1 --n-embd=32 --block-size=16
          --global-batch=4 --steps=5 --quiet)
    # (--n-embd: other shapes, named by the flag before the parameters differ)
    for pair in "--n-head 4 8" "--lr 0.05 0.01" "--steps 5 1000" "--clip-grad-norm 0 1" "--n-embd 32 64"; do
      read -r flag a b <<<"$pair"
      start_coord 2
      start_worker 0 2 "${base[@]}" "$flag=$a"
      start_worker 1 2 "${base[@]}" "$flag=$b"
      wait_exit "${WPID[0]}" 30; rc0=$rc
      wait_exit "${WPID[1]}" 30; rc1=$rc
      [[ $rc0 == 3 && $rc1 == 3 ]] || fail "$flag=$a vs $flag=$b: exits $rc0 and $rc1 (want 3 and 3, at once)"
      for r in 0 1; do
        grep -Eq -- "$flag is '($a|$b)' on rank [01] \(.*\) but '($a|$b)' on rank [01] " "$T/w$r.log" ||
          fail "rank $r does not name $flag and both values: $(tail -2 "$T/w$r.log")"
      done
      (($(grep -c "Join from .* refused" "$T/coord.log") == 2)) || fail "$flag: the coordinator did not refuse both Joins"
      note "$flag: both ranks refused: $(tail -1 "$T/w1.log")"
      kill "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null
    done ;;

  launch)
    out=$("$LAUNCH" --nproc=2 -- --steps=30 --progress-every=10 --save="$T/l.st" --summary="$T/ls{rank}.json" \
      --trace="$T/lt{rank}.json" 2>"$T/launch.log"); rc=$?
    [[ $rc == 0 ]] || fail "psync-launch exited $rc"
    grep -q "step 30/30" <<<"$out" || fail "no progress line from rank 0: $out"
    [[ -s $T/ls0.json && -s $T/ls1.json && -s $T/lt0.json && -s $T/lt1.json && -s $T/l.st ]] || fail "outputs missing"
    for ev in '"forward"' '"backward"' 'AccumulateGrad(layers.0.weight)' 'allreduce bucket' 'launch bucket' \
              '"finalize"' '"optimizer step"'; do
      grep -q "$ev" "$T/lt0.json" || fail "trace lacks $ev"
    done
    run_job 1 "$T/one.st" --steps=30
    same_weights "$T/one.st" "$T/l.st"
    out=$("$LAUNCH" --nproc=2 -- --no-such-flag 2>"$T/launch2.log"); rc=$?
    [[ $rc == 2 ]] || fail "bad worker flag through psync-launch: exit $rc"
    # Ctrl-C: SIGINT to the launcher stops the job through the coordinator.
    "$LAUNCH" --nproc=2 -- --steps=1000000 --quiet --summary="$T/int{rank}.json" >"$T/int.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    for _ in $(seq 600); do grep -q "token in " "$T/int.log" && break; sleep 0.1; done
    laddr=$(sed -n 's/.*coordinator \([0-9.]*:[0-9]*\) (pid [0-9]*; token in \([^)]*\)).*/\1/p' "$T/int.log")
    ltok=$(sed -n 's/.*coordinator [0-9.]*:[0-9]* (pid [0-9]*; token in \([^)]*\)).*/\1/p' "$T/int.log")
    [[ -n $laddr && -s $ltok ]] || fail "psync-launch printed no coordinator address and token file: $(cat "$T/int.log")"
    wait_iteration "$laddr" 2 "$(cat "$ltok")"
    kill -INT "$LP"
    wait_exit "$LP" 30
    [[ $rc == 0 ]] || fail "psync-launch after SIGINT: exit $rc"
    k0=$(json_field "$T/int0.json" steps_completed); k1=$(json_field "$T/int1.json" steps_completed)
    [[ -n $k0 && $k0 == "$k1" ]] || fail "SIGINT: steps_completed differ: $k0 vs $k1"
    note "SIGINT stopped both ranks after $k0 steps"
    # kill -9 of the launcher: its coordinator and workers do not outlive it.
    "$LAUNCH" --nproc=2 -- --steps=1000000 --quiet >"$T/k9.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    launcher_coordinator "$T/k9.log"
    wait_iteration "$LADDR" 2 "$LTOK"
    kids=("$(sed -n 's/.*coordinator [0-9.]*:[0-9]* (pid \([0-9]*\);.*/\1/p' "$T/k9.log")"
          "$(sed -n 's/.*plan relay [0-9.]*:[0-9]* (pid \([0-9]*\)).*/\1/p' "$T/k9.log")"
          "$(rank_pid "$LADDR" "$LTOK" 0)" "$(rank_pid "$LADDR" "$LTOK" 1)")
    kill -9 "$LP"
    for p in "${kids[@]}"; do
      [[ -n $p ]] || fail "no pid for a child of psync-launch: ${kids[*]}"
      for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && { kill -9 "$p"; fail "child $p outlived the killed psync-launch by 30 s"; }
    done
    note "kill -9 of psync-launch: coordinator, relay and both workers (${kids[*]}) exited" ;;

  launch_relay)
    # psync-launch's plan relay (on by default with --nproc > 1): the host's
    # ranks share one Train stream; the weights are exactly those of the same
    # job with one stream per worker (--relay=false).
    "$LAUNCH" --nproc=2 -- --steps=200 --quiet --save="$T/relay.st" 2>"$T/relay.log" ||
      fail "psync-launch (relay) exited $?: $(tail -5 "$T/relay.log")"
    grep -q "psync-launch: plan relay 127.0.0.1:[0-9]* (pid [0-9]*): one Train stream for the 2 local ranks" \
      "$T/relay.log" || fail "no relay line: $(cat "$T/relay.log")"
    grep -q "psync-relay: host stream for ranks 0,1 (generation 1)" "$T/relay.log" ||
      fail "the relay opened no host stream for ranks 0,1: $(cat "$T/relay.log")"
    "$LAUNCH" --nproc=2 --relay=false -- --steps=200 --quiet --save="$T/norelay.st" 2>"$T/norelay.log" ||
      fail "psync-launch --relay=false exited $?: $(tail -5 "$T/norelay.log")"
    grep -q "plan relay" "$T/norelay.log" && fail "--relay=false still started a relay: $(cat "$T/norelay.log")"
    same_weights "$T/relay.st" "$T/norelay.st" 0
    # kill -9 of a worker under the relay: the coordinator hears of it through
    # the relay (rank 1 named), rank 0 is aborted, the job ends (137) and the
    # relay exits with it.
    "$LAUNCH" --nproc=2 -- --steps=1000000 --quiet >"$T/rk.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    launcher_coordinator "$T/rk.log"
    wait_iteration "$LADDR" 2 "$LTOK"
    rpid=$(sed -n 's/.*plan relay [0-9.]*:[0-9]* (pid \([0-9]*\)).*/\1/p' "$T/rk.log")
    [[ -n $rpid ]] || fail "no relay pid: $(cat "$T/rk.log")"
    kill -9 "$(rank_pid "$LADDR" "$LTOK" 1)"
    wait_exit "$LP" 60
    [[ $rc == 137 ]] || fail "psync-launch exited $rc after kill -9 of rank 1 under the relay, want 137"
    grep -q "job aborted at iteration [0-9]*: rank 1 (.*) lost: stream closed (relayed by psync-relay)" "$T/rk.log" ||
      fail "rank 0 was not told that rank 1 was lost: $(cat "$T/rk.log")"
    grep -q "rank 0: exit 4, rank 1: killed by signal 9 (Killed); exit 137" "$T/rk.log" ||
      fail "closing line: $(tail -1 "$T/rk.log")"
    for _ in $(seq 100); do kill -0 "$rpid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$rpid" 2>/dev/null && fail "psync-relay $rpid outlived its job"
    note "$(grep -o "job aborted at iteration [0-9]*: rank 1 ([^)]*) lost: [^;]*" "$T/rk.log" | head -1)" ;;

  launch_restart)
    # kill -9 of a worker mid-run under --max-restarts=1: the launcher restarts
    # every worker with --resume, the coordinator takes them back as
    # generation 2 from the newest checkpoint's step, the job finishes (exit 0)
    # with exactly the weights of an uninterrupted run.
    "$LAUNCH" --nproc=2 --max-restarts=1 --recovery=restart -- --steps=3000 --quiet --save="$T/r.st" --summary="$T/rs{rank}.json" \
      --checkpoint-dir="$T/ck" --checkpoint-every=100 >"$T/rl.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    launcher_coordinator "$T/rl.log"
    wait_iteration "$LADDR" 250 "$LTOK"
    victim=$(rank_pid "$LADDR" "$LTOK" 1)
    [[ -n $victim ]] || fail "no pid for rank 1"
    kill -9 "$victim"
    wait_generation "$LADDR" "$LTOK" 2
    st=$(PSYNC_TOKEN=$LTOK "$CTL" --coordinator="$LADDR" status)
    grep -q "generation 2  restarts 1/1" <<<"$st" || fail "psyncctl status: $st"
    grep -q "last restart: generation 1: rank 1 (" <<<"$st" || fail "psyncctl status does not name rank 1: $st"
    note "$(head -1 <<<"$st")"
    wait_exit "$LP" 120
    [[ $rc == 0 ]] || fail "psync-launch exited $rc after one restart"
    [[ $(grep -c "psync-launch: rank .* died" "$T/rl.log") == 1 ]] || fail "want one restart line: $(cat "$T/rl.log")"
    grep -q "psync-launch: rank 1 died (killed by signal 9 (Killed)); restart 1 of 1" "$T/rl.log" ||
      fail "restart line does not name rank 1 and SIGKILL: $(grep died "$T/rl.log")"
    note "$(grep died "$T/rl.log")"
    grep -q "(after 1 restart); exit 0" "$T/rl.log" || fail "closing line: $(tail -1 "$T/rl.log")"
    for r in 0 1; do
      [[ $(json_field "$T/rs$r.json" steps_completed) == 3000 ]] || fail "rank $r: $(cat "$T/rs$r.json")"
    done
    grep -q "resumed from .*ckpt-0000[0-9]*00.safetensors" "$T/rl.log" || fail "generation 2 did not resume from a checkpoint"
    note "$(grep -o "resumed from [^ ]* (step [0-9]*" "$T/rl.log" | head -1)"
    "$LAUNCH" --nproc=2 -- --steps=3000 --quiet --save="$T/u.st" 2>"$T/ul.log" || fail "uninterrupted run failed"
    same_weights "$T/u.st" "$T/r.st" 0 ;;

  launch_live)
    # Live recovery: kill -9 of rank 1 mid-run under --max-restarts=1
    # --recovery=live. Rank 0 stays (same pid), rejoins generation 2 with its
    # state in memory; the launcher starts a replacement for rank 1 alone,
    # which is healed from a live peer (no checkpoint directory at all); the
    # job ends with exactly the weights of an uninterrupted run.
    "$LAUNCH" --nproc=2 --max-restarts=1 --recovery=live -- --steps=3000 --quiet --save="$T/r.st" \
      --summary="$T/rs{rank}.json" >"$T/rl.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    launcher_coordinator "$T/rl.log"
    wait_iteration "$LADDR" 250 "$LTOK"
    survivor=$(rank_pid "$LADDR" "$LTOK" 0)
    victim=$(rank_pid "$LADDR" "$LTOK" 1)
    [[ -n $victim && -n $survivor ]] || fail "no pids for ranks 0 and 1"
    kill -9 "$victim"
    wait_generation "$LADDR" "$LTOK" 2
    [[ $(rank_pid "$LADDR" "$LTOK" 0) == "$survivor" ]] || fail "rank 0 was restarted: pid $survivor became $(rank_pid "$LADDR" "$LTOK" 0)"
    st=$(PSYNC_TOKEN=$LTOK "$CTL" --coordinator="$LADDR" status)
    grep -q "generation 2  restarts 1/1" <<<"$st" || fail "psyncctl status: $st"
    grep -q "recovery live: 1 in place, the last took [0-9.]* s; 1 iteration(s) computed again in all" <<<"$st" ||
      fail "psyncctl status shows no live recovery: $st"
    note "$(grep "recovery live" <<<"$st")"
    wait_exit "$LP" 120
    [[ $rc == 0 ]] || fail "psync-launch exited $rc after one live recovery: $(tail -5 "$T/rl.log")"
    grep -q "psync-launch: rank 1 died (killed by signal 9 (Killed)); restart 1 of 1 (live recovery): starting a replacement, the other workers keep training" "$T/rl.log" ||
      fail "no replacement line: $(grep -E "died|rank" "$T/rl.log" | head)"
    grep -q "rank=0.*rejoining generation 2 with the state of step [0-9]* (live recovery)" "$T/rl.log" ||
      fail "rank 0 did not rejoin in-process: $(grep -i "rejoin\|generation" "$T/rl.log" | head)"
    grep -q "rank=1.*healed from rank 0 at step [0-9]*" "$T/rl.log" || fail "rank 1 was not healed from rank 0: $(grep -i heal "$T/rl.log")"
    note "$(grep -o "healed from rank 0 at step [0-9]* ([0-9.]* s" "$T/rl.log" | head -1)"
    for r in 0 1; do
      [[ $(json_field "$T/rs$r.json" steps_completed) == 3000 ]] || fail "rank $r: $(cat "$T/rs$r.json")"
    done
    "$LAUNCH" --nproc=2 -- --steps=3000 --quiet --save="$T/u.st" 2>"$T/ul.log" || fail "uninterrupted run failed"
    same_weights "$T/u.st" "$T/r.st" 0 ;;

  launch_live_chaos)  # the MLP over gloo, five kills
    live_chaos 2000 5 --backend=gloo ;;
  launch_live_chaos_gpt)  # the GPT over shared memory, five kills
    python3 -c 'import random,sys; random.seed(7); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))' \
      >"$T/tokens.bin"
    live_chaos 2000 5 --backend=shm --model=gpt --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 \
      --data="$T/tokens.bin" --data-format=bytes --optimizer=adamw --lr=0.003 --global-batch=8 ;;

  launch_live_chaos_zero)  # --zero=1 over shared memory, five kills (the optimizer shards rebuilt from replicas)
    live_chaos 2000 5 --backend=shm --zero=1 --optimizer=adamw --lr=0.003 ;;
  launch_live_phases)  # the GPT over gloo, kills at chosen moments
    python3 -c 'import random,sys; random.seed(7); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))' \
      >"$T/tokens.bin"
    live_phases 900 --backend=gloo --model=gpt --vocab-size=256 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 \
      --data="$T/tokens.bin" --data-format=bytes --optimizer=adamw --lr=0.003 --global-batch=8 ;;
  launch_live_phases_mlp)  # the MLP over shared memory
    live_phases 900 --backend=shm ;;
  launch_live_phases_zero)  # --zero=2: the lost rank's optimizer shard rebuilt from its replica
    LIVE_AT_400=step live_phases 900 --backend=gloo --zero=2 --optimizer=adamw --lr=0.003 ;;
  launch_live_chaos_zero3)  # --zero=3 over shared memory, five kills (parameter shards too, from replicas)
    live_chaos 2000 5 --backend=shm --zero=3 --optimizer=adamw --lr=0.003 ;;
  launch_live_phases_zero3)  # --zero=3, the GPT over gloo, kills at chosen moments
    python3 -c 'import random,sys; random.seed(7); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(20000)))' \
      >"$T/tokens.bin"
    LIVE_AT_400=step live_phases 900 --backend=gloo --zero=3 --model=gpt --vocab-size=256 --block-size=16 --n-layer=2 \
      --n-head=2 --n-embd=32 --data="$T/tokens.bin" --data-format=bytes --optimizer=adamw --lr=0.003 --global-batch=8 ;;
  launch_live_mtbf)
    # Failures at a mean time between them of 3 s (exponential gaps) for 60 s
    # (MTBF_S, CHAOS_S): a random worker of 4 is killed each time, a
    # replacement too. The job (no checkpoint directory, --recovery=live) is
    # then stopped with psyncctl shutdown and must end with the weights of an
    # uninterrupted run of as many steps, bit for bit.
    mtbf=${MTBF_S:-3} chaos=${CHAOS_S:-60}
    seed=${PSYNC_CHAOS_SEED:-$RANDOM}
    "$LAUNCH" --nproc=4 --max-restarts=1000 -- --steps=100000000 --quiet --backend=gloo --save="$T/r.st" \
      --summary="$T/rs{rank}.json" >"$T/rl.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    launcher_coordinator "$T/rl.log"
    wait_iteration "$LADDR" 20 "$LTOK"
    mapfile -t gaps < <(/usr/bin/python3 -c 'import random,sys; r=random.Random(int(sys.argv[1])); t=0
while True:
    g=r.expovariate(1/float(sys.argv[2])); t+=g
    if t>float(sys.argv[3]): break
    print("%.3f" % g)' "$seed" "$mtbf" "$chaos")
    kills=0
    for g in "${gaps[@]}"; do
      sleep "$g"  # the failure schedule itself: what this test is about
      kill -0 "$LP" 2>/dev/null || fail "psync-launch ended during the chaos (seed $seed): $(tail -5 "$T/rl.log")"
      # Only the living: a zombie not reaped yet would count as a kill.
      mapfile -t pids < <(ps --ppid "$LP" -o pid=,stat=,args= | awk '/psync-worker/ && $2 !~ /^Z/ {print $1}')
      ((${#pids[@]})) || continue
      kill -9 "${pids[$((RANDOM % ${#pids[@]}))]}" 2>/dev/null && kills=$((kills + 1))
    done
    # The world formed again (a kill during a recovery makes no generation
    # of its own, so count nothing): then stop the job. If it does not,
    # what the coordinator and the processes say goes into the failure.
    formed=""
    for _ in $(seq 600); do
      [[ $(status_field "$LADDR" "$LTOK" state) == JOB_RUNNING ]] &&
        (($(status_field "$LADDR" "$LTOK" iteration) >= 0)) && formed=1 && break
      sleep 0.1
    done
    if [[ -z $formed ]]; then
      # Where every worker stands (gdb, where installed: each thread's stack).
      for p in $(ps --ppid "$LP" -o pid=,args= | awk '/psync-worker/ {print $1}'); do
        echo "--- psync-worker $p"
        command -v gdb >/dev/null && timeout 30 gdb -p "$p" -batch -ex "thread apply all bt 12" 2>/dev/null |
          grep -E "^Thread|^#" | cut -c1-150
      done >"$T/stacks.log" 2>&1
      fail "the job did not run again within 60 s of the last of $kills kills (seed $seed): $(
        PSYNC_TOKEN=$LTOK "$CTL" --coordinator="$LADDR" status 2>&1; PSYNC_TOKEN=$LTOK "$CTL" --coordinator="$LADDR" workers 2>&1
        ps --ppid "$LP" -o pid=,stat=,wchan:20=,args= 2>&1 | cut -c1-160); stacks: $(head -c 20000 "$T/stacks.log")"
    fi
    wait_iteration "$LADDR" "$(( $(status_field "$LADDR" "$LTOK" iteration) + 5 ))" "$LTOK"
    PSYNC_TOKEN=$LTOK "$CTL" --coordinator="$LADDR" shutdown --reason="chaos over" >/dev/null ||
      fail "psyncctl shutdown failed"
    wait_exit "$LP" 120
    [[ $rc == 0 ]] || fail "psync-launch exited $rc after $kills kills (seed $seed): $(tail -5 "$T/rl.log")"
    steps=$(json_field "$T/rs0.json" steps_completed)
    for r in 1 2 3; do
      [[ $(json_field "$T/rs$r.json" steps_completed) == "$steps" ]] || fail "rank $r: $(cat "$T/rs$r.json")"
    done
    # At least one replacement per kill; a new process whose generation
    # failed to form (another kill meanwhile) may exit 3 and be replaced too.
    replaced=$(grep -c "starting a replacement, the other workers keep training" "$T/rl.log")
    ((replaced >= kills)) || fail "$replaced replacements for $kills kills (seed $seed)"
    note "seed $seed: $kills kills in ${chaos} s (MTBF ${mtbf} s), $replaced replacements, $steps steps; $(grep -cE "healed from rank|rebuilt the sharded state" "$T/rl.log") heals"
    "$LAUNCH" --nproc=4 -- --steps="$steps" --quiet --backend=gloo --save="$T/u.st" 2>"$T/ul.log" ||
      fail "uninterrupted run failed"
    same_weights "$T/u.st" "$T/r.st" 0 ;;

  launch_restart_zero)
    # --max-restarts --recovery=restart with --zero=2 over shm: kill -9 of rank 1 mid-run, every worker
    # restarts from the newest checkpoint (the sharded state gathered into it, re-sliced on resume), the
    # job ends with the weights of an uninterrupted --zero=2 run, bit for bit (live recovery with --zero:
    # launch_live_phases_zero)
    ZF=(--zero=2 --optimizer=adamw --lr=0.01 --weight-decay=0.1 --bucket-cap-mb=0.004 --first-bucket-mb=0.001)
    "$LAUNCH" --nproc=2 --max-restarts=1 --recovery=restart -- --steps=2000 --quiet --save="$T/r.st" "${ZF[@]}" \
      --checkpoint-dir="$T/ck" --checkpoint-every=100 >"$T/rl.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    launcher_coordinator "$T/rl.log"
    wait_iteration "$LADDR" 250 "$LTOK"
    victim=$(rank_pid "$LADDR" "$LTOK" 1)
    [[ -n $victim ]] || fail "no pid for rank 1"
    kill -9 "$victim"
    wait_generation "$LADDR" "$LTOK" 2
    wait_exit "$LP" 120
    [[ $rc == 0 ]] || fail "psync-launch exited $rc after one restart: $(tail -5 "$T/rl.log")"
    grep -q "resumed from .*ckpt-0000[0-9]*00.safetensors" "$T/rl.log" || fail "generation 2 did not resume from a checkpoint"
    note "$(grep -o "resumed from [^ ]* (step [0-9]*" "$T/rl.log" | head -1)"
    "$LAUNCH" --nproc=2 -- --steps=2000 --quiet --save="$T/u.st" "${ZF[@]}" 2>"$T/ul.log" || fail "uninterrupted run failed"
    same_weights "$T/u.st" "$T/r.st" 0 ;;
  launch_restart_exhausted)
    # --max-restarts=1 and two deaths: the second ends the job with the
    # killed worker's code; one restart line only.
    "$LAUNCH" --nproc=2 --max-restarts=1 -- --steps=1000000 --quiet >"$T/rl.log" 2>&1 &
    LP=$!; PIDS+=("$LP")
    launcher_coordinator "$T/rl.log"
    wait_iteration "$LADDR" 2 "$LTOK"
    kill -9 "$(rank_pid "$LADDR" "$LTOK" 1)"
    wait_generation "$LADDR" "$LTOK" 2
    wait_iteration "$LADDR" 2 "$LTOK"
    kill -9 "$(rank_pid "$LADDR" "$LTOK" 0)"
    wait_exit "$LP" 60
    [[ $rc == 137 ]] || fail "psync-launch exited $rc, want 137 (the killed worker's 128+9)"
    [[ $(grep -c "psync-launch: rank .* died" "$T/rl.log") == 1 ]] || fail "want one restart line: $(cat "$T/rl.log")"
    grep -q "psync-launch: rank [01] failed (.*) and all 1 restarts are used" "$T/rl.log" ||
      fail "no 'restarts are used' line: $(cat "$T/rl.log")"
    grep -q "rank 1: exit 4 (after 1 restart); exit 137" "$T/rl.log" || fail "closing line: $(tail -1 "$T/rl.log")"
    note "$(grep -E "died|restarts are used" "$T/rl.log" | tr '\n' ' ')" ;;

  launch_nodes)
    # Two launchers on one host with different --node-rank (as torchrun
    # allows): node 0 starts the coordinator, node 1 finds it through
    # MASTER_ADDR/MASTER_PORT and reads the token from --token-file. Each node
    # is its own host (PSYNC_HOST_ID .../node<I>: hier, shared memory within a
    # node) with its own relay (one host stream each) and temp folder; the job
    # equals one launcher with --nproc=4.
    tok=launch-nodes-token; echo "$tok" >"$T/token"; port=$(free_port); addr=127.0.0.1:$port
    "$LAUNCH" --nproc=4 -- --steps=600 --quiet --save="$T/one.st" 2>"$T/one.log" || fail "--nproc=4: $(tail -3 "$T/one.log")"
    PSYNC_TOKEN=$tok start_node n0 0 "$addr" --start-coordinator -- --steps=600 --progress-every=200 --save="$T/two.st"
    env -u PSYNC_TOKEN NNODES=2 NODE_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$LAUNCH" --nproc=2 --token-file="$T/token" -- --steps=600 >"$T/n1.log" 2>&1 &
    NPID[n1]=$!; PIDS+=("${NPID[n1]}")
    wait_iteration "$addr" 5 "$tok"
    st=$(PSYNC_TOKEN=$tok "$CTL" --coordinator="$addr" status)
    grep -q "^train streams 2: ranks 0,1 | ranks 2,3$" <<<"$st" || fail "not one host stream per node: $st"
    ids=$(PSYNC_TOKEN=$tok "$CTL" --coordinator="$addr" --json workers |
          /usr/bin/python3 -c 'import json,sys; print(" ".join(w["host_id"] for w in json.load(sys.stdin)["workers"]))')
    h=${PSYNC_HOST_ID:-$(hostname)}
    [[ $ids == "$h/node0 $h/node0 $h/node1 $h/node1" ]] || fail "host ids: $ids (want $h/node0 x2, $h/node1 x2)"
    wait_nodes n0 n1
    grep -q "rank 0 of 4, hier on cpu" "$T/n0.log" || fail "rank 0 did not pick hier: $(grep 'rank 0 of' "$T/n0.log")"
    grep -q "node 1 of 2, ranks 2..3 of 4: job psync at $addr" "$T/n1.log" || fail "node 1: $(head -3 "$T/n1.log")"
    r0=$(sed -n 's/.*plan relay \(127.0.0.1:[0-9]*\).*/\1/p' "$T/n0.log"); r1=$(sed -n 's/.*plan relay \(127.0.0.1:[0-9]*\).*/\1/p' "$T/n1.log")
    [[ -n $r0 && -n $r1 && $r0 != "$r1" ]] || fail "want one relay per node: '$r0' '$r1'"
    same_weights "$T/one.st" "$T/two.st" 1e-4
    note "$ids; $(grep '^train streams' <<<"$st"); relays $r0 $r1"
    # A node that never comes: node 0's ranks give up after the
    # coordinator's --join-timeout, naming the missing ranks, and node 0 ends.
    port=$(free_port)
    SECONDS=0
    PSYNC_TOKEN=$tok "$LAUNCH" --nnodes=2 --node-rank=0 --nproc=2 --coordinator=127.0.0.1:$port --start-coordinator \
      --join-timeout=3s -- --steps=10 >"$T/alone.log" 2>&1; rc=$?
    [[ $rc == 3 ]] || fail "node 0 alone: exit $rc, want 3: $(tail -5 "$T/alone.log")"
    ((SECONDS < 60)) || fail "node 0 alone took ${SECONDS}s"
    grep -q "still missing ranks 2,3" "$T/alone.log" || fail "the missing node is not named: $(cat "$T/alone.log")"
    note "node 0 alone: exit 3 after ${SECONDS}s: $(grep -o 'world incomplete[^(]*' "$T/alone.log" | head -1)"
    # Ctrl-C on node 1 stops the whole job through the coordinator: every
    # rank of both nodes stops after the same step and exits 0.
    port=$(free_port); addr=127.0.0.1:$port
    PSYNC_TOKEN=$tok start_node c0 0 "$addr" --start-coordinator -- --steps=1000000 --quiet --summary="$T/c{rank}.json"
    PSYNC_TOKEN=$tok start_node c1 1 "$addr" -- --steps=1000000 --quiet --summary="$T/c{rank}.json"
    wait_iteration "$addr" 20 "$tok"
    kill -INT "${NPID[c1]}"
    wait_nodes c1 c0
    grep -q "psync-launch: Interrupt: asking the coordinator to stop the job" "$T/c1.log" || fail "node 1: $(cat "$T/c1.log")"
    k=$(json_field "$T/c0.json" steps_completed)
    for r in 1 2 3; do
      [[ -n $k && $(json_field "$T/c$r.json" steps_completed) == "$k" ]] || fail "Ctrl-C: rank $r stopped elsewhere than rank 0 ($k)"
    done
    note "Ctrl-C on node 1: all 4 ranks stopped after $k steps"
    # Bad usage is refused before anything starts.
    out=$("$LAUNCH" --nnodes=2 --nproc=2 -- --steps=1 2>&1); rc=$?
    [[ $rc == 2 && $out == *"--nnodes=2: every node needs the job's coordinator"* ]] || fail "no --coordinator: $rc $out"
    out=$(env -u PSYNC_TOKEN "$LAUNCH" --nnodes=2 --nproc=2 --coordinator=127.0.0.1:1 -- --steps=1 2>&1); rc=$?
    [[ $rc == 2 && $out == *"needs the job's token on every node"* ]] || fail "no token: $rc $out" ;;

  launch_nodes_restart)
    # kill -9 of a rank of node 1 under --max-restarts=1, against an external
    # coordinator: node 1 names it, the coordinator opens generation 2 and
    # both nodes restart their ranks (node 0's were fine), the job finishes,
    # and the weights equal an uninterrupted run of the same topology bit for bit.
    export PSYNC_TOKEN=launch-nodes-token
    start_coord 4 --max-restarts=1 --recovery=restart
    flags=(--steps=3000 --quiet --save="$T/r.st" --checkpoint-dir="$T/ck" --checkpoint-every=100)
    start_node n0 0 "$CADDR" --max-restarts=1 --recovery=restart -- "${flags[@]}"
    start_node n1 1 "$CADDR" --max-restarts=1 --recovery=restart -- "${flags[@]}"
    wait_iteration "$CADDR" 5 "$PSYNC_TOKEN"
    victim=$(rank_pid "$CADDR" "$PSYNC_TOKEN" 3)
    [[ -n $victim ]] || fail "no pid for rank 3"
    # Right after a checkpoint: see netns/launch_nodes_test.sh (the restart race).
    ck=$(newest_checkpoint_after "$T/ck" "$(newest_checkpoint "$T/ck")" "${NPID[n0]}")
    [[ -n $ck ]] || fail "no checkpoint to kill after"
    kill -9 "$victim"
    wait_generation "$CADDR" "$PSYNC_TOKEN" 2
    wait_nodes n0 n1
    grep -q "psync-launch: rank 3 died (killed by signal 9 (Killed))" "$T/n1.log" || fail "node 1: $(grep psync-launch "$T/n1.log")"
    for n in n0 n1; do
      grep -q "psync-launch: the coordinator opened generation 2 (restart 1 of 1; generation 1: rank 3 (" "$T/$n.log" ||
        fail "$n did not restart: $(grep psync-launch "$T/$n.log")"
      grep -q "(after 1 restart); exit 0" "$T/$n.log" || fail "$n closing line: $(tail -1 "$T/$n.log")"
    done
    grep -q "resumed from .*$ck" "$T/n0.log" || fail "generation 2 did not resume from $ck"
    note "killed rank 3 after $ck; $(grep -o 'the coordinator opened generation 2 (restart 1 of 1' "$T/n0.log")"
    same_as_uninterrupted_nodes 3000 ;;

  launch_nodes_live)
    # Live recovery across two nodes (two launchers, ranks 0-1 and 2-3, the
    # hier backend over two host ids): kill -9 of rank 3. Node 1 starts a
    # replacement for it alone; ranks 0, 1 and 2 keep their processes and
    # rejoin generation 2 in place; the replacement is healed from a peer (no
    # checkpoint directory); the weights equal an uninterrupted run's.
    export PSYNC_TOKEN=launch-nodes-token
    start_coord 4 --max-restarts=1 --recovery=live
    flags=(--steps=3000 --quiet --save="$T/r.st")
    start_node n0 0 "$CADDR" --max-restarts=1 --recovery=live -- "${flags[@]}"
    start_node n1 1 "$CADDR" --max-restarts=1 --recovery=live -- "${flags[@]}"
    wait_iteration "$CADDR" 200 "$PSYNC_TOKEN"
    declare -A before
    for r in 0 1 2 3; do before[$r]=$(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r"); done
    kill -9 "${before[3]}"
    wait_generation "$CADDR" "$PSYNC_TOKEN" 2
    for r in 0 1 2; do
      [[ $(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r") == "${before[$r]}" ]] || fail "rank $r was restarted"
    done
    [[ $(rank_pid "$CADDR" "$PSYNC_TOKEN" 3) != "${before[3]}" ]] || fail "rank 3 has its old pid"
    wait_nodes n0 n1
    grep -q "psync-launch: rank 3 died; starting a replacement (killed by signal 9 (Killed))" "$T/n1.log" ||
      fail "node 1 started no replacement: $(grep psync-launch "$T/n1.log")"
    for n in n0 n1; do
      grep -q "psync-launch: the coordinator opened generation 2 (restart 1 of 1; generation 1: rank 3 (.*(live recovery): this node's running workers stay" "$T/$n.log" ||
        fail "$n: $(grep psync-launch "$T/$n.log")"
      grep -q "(after 1 restart); exit 0" "$T/$n.log" || fail "$n closing line: $(tail -1 "$T/$n.log")"
    done
    grep -q "healed from rank [0-2] at step" "$T/n1.log" || fail "rank 3 was not healed: $(grep -i heal "$T/n1.log")"
    note "$(grep -o "rank=3.*healed from rank [0-9] at step [0-9]*" "$T/n1.log" | head -1)"
    same_as_uninterrupted_nodes 3000 ;;
  launch_nodes_live_zero)
    # The same with --zero=2 and a whole node's workers lost (kill -9 of
    # ranks 2 and 3, node 1): their optimizer shards live on only in the
    # copies node 0 keeps (the replica distance crosses hosts); node 1
    # starts two replacements, ranks 0 and 1 keep their processes, every
    # rank rebuilds the state from node 0's shards and copies.
    export PSYNC_TOKEN=launch-nodes-token
    start_coord 4 --max-restarts=2 --recovery=live
    zflags=(--zero=2 --optimizer=adamw --lr=0.003)
    flags=(--steps=800 --quiet --save="$T/r.st" "${zflags[@]}")
    start_node n0 0 "$CADDR" --max-restarts=2 --recovery=live -- "${flags[@]}"
    start_node n1 1 "$CADDR" --max-restarts=2 --recovery=live -- "${flags[@]}"
    wait_iteration "$CADDR" 200 "$PSYNC_TOKEN"
    declare -A before
    for r in 0 1 2 3; do before[$r]=$(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r"); done
    kill -9 "${before[2]}" "${before[3]}"
    wait_nodes n0 n1
    for r in 0 1; do
      grep -q "rank=$r.*rebuilt the sharded state" "$T/n0.log" || fail "rank $r did not rebuild: $(grep -i rebuilt "$T/n0.log")"
    done
    grep -q "(after [12] restarts\?); exit 0" "$T/n0.log" || fail "node 0 closing line: $(tail -1 "$T/n0.log")"
    grep -q "exit 0$" "$T/n1.log" || fail "node 1 closing line: $(tail -1 "$T/n1.log")"
    if grep -q "starting it again" "$T/n0.log"; then fail "node 0 restarted a worker: $(grep psync-launch "$T/n0.log")"; fi
    note "$(grep -o "rank=0.*rebuilt the sharded state.*" "$T/n0.log" | head -1)"
    same_as_uninterrupted_nodes 800 "${zflags[@]}" ;;

  launch_elastic|launch_elastic_live)
    # launch_elastic_live: the same with --recovery=live: node 0's ranks keep
    # their processes and state when node 1 is lost (no resume), a regroup
    # still goes through its checkpoint.
    [[ $CASE == launch_elastic_live ]] && ELASTIC_RECOVERY=live
    # Issue 23 item 4, an elastic world: --min-nodes=1 of 2 nodes x 2 ranks.
    # Node 1 is killed whole (its launcher, relay and workers) right after a
    # checkpoint. Run "alone": it never comes back; after --rejoin-timeout
    # generation 2 goes on with node 0's 2 ranks from that checkpoint, the
    # same global batch in 2 micro-batches per rank, and the job ends within
    # 1e-4 of the uninterrupted 2-node job. Run "back": node 1 is started
    # again later; it asks for a regroup, every rank stops after one
    # iteration with its checkpoint, generation 3 runs all 4 ranks from there
    # (no restart counted), and the job again ends within 1e-4. Run "leave":
    # node 1's launcher gets SIGTERM (a drained pod): it asks for a regroup,
    # its ranks stop with the others at a checkpoint, it exits 143, and
    # generation 2 goes on with node 0 alone, no restart counted.
    export PSYNC_TOKEN=elastic-token
    # ELASTIC_FLAGS: more worker flags for every run (by hand, e.g. --zero=2).
    read -ra extra <<<"${ELASTIC_FLAGS:-}"
    flags=(--steps=1500 --quiet --checkpoint-every=100 "${extra[@]}")
    # ELASTIC_RECOVERY: restart (checkpoints and process restarts, what the
    # checks below expect) or live (launch_elastic_live).
    el=(--max-restarts=1 --min-nodes=1 --rejoin-timeout=5s --recovery="${ELASTIC_RECOVERY:-restart}")
    # The uninterrupted 2-node run.
    port=$(free_port)
    start_node full0 0 "127.0.0.1:$port" --start-coordinator -- "${flags[@]}" --checkpoint-dir="$T/ck-full" --save="$T/full.st"
    start_node full1 1 "127.0.0.1:$port" -- "${flags[@]}" --checkpoint-dir="$T/ck-full"
    wait_nodes full0 full1
    for run in alone back leave; do
      port=$(free_port); addr=127.0.0.1:$port; ckd=$T/ck-$run
      start_node "${run}0" 0 "$addr" --start-coordinator "${el[@]}" -- "${flags[@]}" --checkpoint-dir="$ckd" \
        --save="$T/$run.st" --summary="$T/$run{rank}.json"
      start_node "${run}1" 1 "$addr" "${el[@]}" -- "${flags[@]}" --checkpoint-dir="$ckd"
      wait_iteration "$addr" 5 "$PSYNC_TOKEN"
      if [[ $run == leave ]]; then
        kill -TERM "${NPID[leave1]}"
        wait_exit "${NPID[leave1]}" 60
        [[ $rc == 143 ]] || fail "leave: node 1 exited $rc, want 143: $(tail -5 "$T/leave1.log")"
        grep -q "node 1 leaves the elastic job" "$T/leave1.log" || fail "leave: $(cat "$T/leave1.log")"
        ck=$(newest_checkpoint "$ckd")
      else
        ck=$(newest_checkpoint_after "$ckd" "$(newest_checkpoint "$ckd")" "${NPID[${run}0]}")
        [[ -n $ck ]] || fail "$run: no checkpoint to kill after"
        pkill -9 -P "${NPID[${run}1]}"; kill -9 "${NPID[${run}1]}"; wait "${NPID[${run}1]}" 2>/dev/null
      fi
      wait_generation "$addr" "$PSYNC_TOKEN" 2
      st=$("$CTL" --coordinator="$addr" status)
      grep -q "^elastic: world 2 of 4 ranks (at least 2): 2 of 4 ranks: ranks 2,3 did not join within --rejoin-timeout (5s)" \
        <<<"$st" || fail "$run: status of generation 2: $st"
      if [[ $run == leave ]]; then
        grep -q "restarts 0/1" <<<"$st" || fail "leave: a node that left counted as a restart: $st"
      fi
      note "$run: node 1 gone after $ck; $(grep '^elastic' <<<"$st")"
      if [[ $run == back ]]; then
        start=$(status_field "$addr" "$PSYNC_TOKEN" start_iteration)
        wait_iteration "$addr" $((start + 50)) "$PSYNC_TOKEN"
        start_node back1b 1 "$addr" "${el[@]}" -- "${flags[@]}" --checkpoint-dir="$ckd"
        # Generation 3, or 4 when node 1's ranks came after generation 3's
        # rejoin timeout (their Joins then asked for one more regroup).
        for _ in $(seq 600); do
          [[ $(status_field "$addr" "$PSYNC_TOKEN" world_size) == 4 &&
             $(status_field "$addr" "$PSYNC_TOKEN" state) == JOB_RUNNING ]] && break
          sleep 0.1
        done
        st=$("$CTL" --coordinator="$addr" status)
        grep -q "^elastic: world 4 of 4 ranks (at least 2): all 4 ranks again (generation [0-9]* ran with 2)" <<<"$st" ||
          fail "back: not all 4 ranks again within 60 s: $st"
        grep -q "restarts 1/1" <<<"$st" || fail "back: a regroup counted as a restart: $st"
        grep -q "node 1: job psync runs generation 2 with 2 of 4 ranks; asking it to regroup" "$T/back1b.log" ||
          fail "back: node 1 did not ask for a regroup: $(cat "$T/back1b.log")"
        note "back: $(grep '^elastic' <<<"$st")"
        wait_nodes back1b
      fi
      wait_nodes "${run}0"
      want=2; [[ $run == back ]] && want=4
      [[ $(json_field "$T/${run}0.json" world_size) == "$want" ]] || fail "$run: rank 0 ended in a world of $(json_field "$T/${run}0.json" world_size), want $want"
      if [[ ${ELASTIC_RECOVERY:-restart} == live && $run != leave ]]; then
        grep -q "rank=0.*rejoining generation 2 with the state of step" "$T/${run}0.log" ||
          fail "$run: rank 0 did not keep its state into generation 2: $(grep -i "generation 2" "$T/${run}0.log" | head -3)"
      else
        grep -q "resumed from .*$ck" "$T/${run}0.log" || fail "$run: generation 2 did not resume from $ck"
      fi
      same_weights "$T/full.st" "$T/$run.st" 1e-4
    done ;;

  launch_restart_race)
    # Issue 23 item 2, the old restart race injected deterministically: two
    # nodes of one rank each. Rank 0 holds its checkpoint of step 300 until
    # generation 1 is aborted, then tries to write it (PSYNC_TEST_LATE_CHECKPOINT;
    # it used to land after the abort); rank 1's replacement lists the
    # directory as if before ckpt-200 landed (PSYNC_TEST_STALE_LISTING=100). Once
    # the ranks joined at different steps, the coordinator refused them and
    # exit 3 failed the job. Now: nothing is written after the abort, the
    # coordinator picks step 100 (the newest both can load), every rank loads
    # it, and the job ends with the weights of an uninterrupted run, bit for bit.
    export PSYNC_TOKEN=race-token NODE_NPROC=1
    steps=${RACE_STEPS:-400}
    start_coord 2 --max-restarts=1 --recovery=restart
    flags=(--steps="$steps" --quiet --save="$T/r.st" --checkpoint-dir="$T/ck" --checkpoint-every=100)
    PSYNC_TEST_LATE_CHECKPOINT=300 start_node n0 0 "$CADDR" --max-restarts=1 --recovery=restart -- "${flags[@]}"
    PSYNC_TEST_STALE_LISTING=100 start_node n1 1 "$CADDR" --max-restarts=1 --recovery=restart -- "${flags[@]}"
    for _ in $(seq 600); do grep -q "holds its checkpoint of step 300" "$T/n0.log" && break; sleep 0.1; done
    grep -q "holds its checkpoint of step 300" "$T/n0.log" || fail "rank 0 did not reach its checkpoint of step 300"
    victim=$(rank_pid "$CADDR" "$PSYNC_TOKEN" 1)
    [[ -n $victim ]] || fail "no pid for rank 1"
    kill -9 "$victim"
    wait_nodes n0 n1
    grep -q "not writing checkpoint .*ckpt-0*300.safetensors (step 300): the generation ended: generation 1 aborted" \
      "$T/n0.log" || fail "rank 0 did not refuse its late checkpoint: $(grep -i checkpoint "$T/n0.log")"
    for n in n0 n1; do
      grep -q "resumed from .*ckpt-0*100.safetensors (step 100," "$T/$n.log" ||
        fail "$n did not resume from the agreed step 100: $(grep -E 'resumed|resume' "$T/$n.log")"
      grep -q "(after 1 restart); exit 0" "$T/$n.log" || fail "$n closing line: $(tail -1 "$T/$n.log")"
    done
    timeout 20 "$CTL" --coordinator="$CADDR" watch >"$T/events.txt" 2>&1
    ev=$(grep -o "the newest checkpoint step every rank can load is 100; rank 0 lists step 200 but rank 1 ([^)]*) cannot load it" "$T/events.txt")
    [[ -n $ev ]] || fail "the coordinator's event log does not explain step 100: $(grep -i complete "$T/events.txt")"
    note "$(grep -o 'not writing checkpoint [^ ]*' "$T/n0.log"); $ev"
    kill "$CPID"; wait "$CPID" 2>/dev/null
    unset PSYNC_TEST_LATE_CHECKPOINT PSYNC_TEST_STALE_LISTING
    start_coord 2
    start_node u0 0 "$CADDR" -- --steps="$steps" --quiet --save="$T/u.st"
    start_node u1 1 "$CADDR" -- --steps="$steps" --quiet
    wait_nodes u0 u1
    same_weights "$T/u.st" "$T/r.st" 0 ;;

  hf_weights)  # --init of a GPT-2 in Hugging Face's layout (written by hf_gpt2.py from psync's own init) gives
               # the same first step, bit for bit; psync-export writes that layout and reads it back
    EXPORT=$B/worker/tools/psync-export
    SAMPLE=$B/worker/sample/psync-sample
    if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then echo "SKIP: no PyTorch"; exit 77; fi
    head -c 30000 /dev/urandom | tr -dc 'a-zA-Z0-9 .,\n' | head -c 6000 >"$T/text.txt"
    GPT=(--model=gpt --vocab-size=128 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 --seed=3 --data="$T/text.txt"
         --data-format=bytes --optimizer=adamw --lr=0.003 --global-batch=4)
    run_job 1 "$T/init.st" "${GPT[@]}" --steps=0
    /usr/bin/python3 "$HERE/hf_gpt2.py" to-hf "$T/init.st" "$T/hf" --lm-head --n-head=2 || fail "to-hf"
    /usr/bin/python3 "$HERE/hf_gpt2.py" to-hf "$T/init.st" "$T/hub" --no-prefix --buffers --n-head=2 || fail "to-hf hub"
    run_job 1 "$T/own.st" "${GPT[@]}" --steps=1 --metrics="$T/own.jsonl"
    run_job 1 "$T/hf.st" "${GPT[@]}" --steps=1 --metrics="$T/hf.jsonl" --init="$T/hf/model.safetensors"
    loss() { sed -n 's/^{"step": 1, "loss": \([^,]*\),.*/\1/p' "$1"; }
    [[ -n $(loss "$T/own.jsonl") && $(loss "$T/own.jsonl") == "$(loss "$T/hf.jsonl")" ]] ||
      fail "first-step loss: own $(loss "$T/own.jsonl"), hf $(loss "$T/hf.jsonl")"
    same_weights "$T/own.st" "$T/hf.st" 0
    note "first-step loss $(loss "$T/own.jsonl") from psync's init and from its HF layout"
    # psync-export --format=hf writes what hf_gpt2.py wrote (less the tied head); --format=psync reads it back.
    "$EXPORT" --checkpoint="$T/init.st" --format=hf --out="$T/exported" >"$T/export.log" 2>&1 || fail "psync-export hf: $(cat "$T/export.log")"
    /usr/bin/python3 "$HERE/hf_gpt2.py" to-hf "$T/init.st" "$T/plain" --n-head=2 || fail "to-hf plain"
    /usr/bin/python3 "$HERE/hf_gpt2.py" same-tensors "$T/plain/model.safetensors" "$T/exported/model.safetensors" ||
      fail "psync-export --format=hf differs from hf_gpt2.py's layout"
    grep -q '"n_head": 2' "$T/exported/config.json" || fail "config.json: $(cat "$T/exported/config.json")"
    # The hub's layout (no prefix, attn.bias buffers), named: the same weights as the init it came from.
    "$EXPORT" --checkpoint="$T/hub/model.safetensors" --input-format=hf --format=psync --out="$T/back.st" >"$T/export.log" 2>&1 ||
      fail "psync-export psync: $(cat "$T/export.log")"
    same_weights "$T/init.st" "$T/back.st" 0
    # psync-sample reads the HF file (n_head from config.json) like the psync file it came from.
    "$SAMPLE" --checkpoint="$T/hf/model.safetensors" --tokens=30 --prompt=ab >"$T/s_hf" || fail "psync-sample on an HF file"
    "$SAMPLE" --checkpoint="$T/init.st" --tokens=30 --prompt=ab >"$T/s_own" || fail "psync-sample on init.st"
    cmp -s "$T/s_hf" "$T/s_own" || fail "psync-sample: the HF file sampled other text"
    # Refusals, before joining (exit 2): an untied head; the layout named wrongly.
    /usr/bin/python3 "$HERE/hf_gpt2.py" to-hf "$T/init.st" "$T/untied" --untie --n-head=2 || fail "to-hf untied"
    out=$("$WORKER" "${GPT[@]}" --steps=1 --init="$T/untied/model.safetensors" --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *"lm_head.weight differs from wte.weight"* ]] || fail "untied head: rc=$rc out=$out"
    out=$("$WORKER" "${GPT[@]}" --steps=1 --init="$T/hub/model.safetensors" --init-format=psync --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *"h.0.attn.c_attn.weight"* ]] || fail "--init-format=psync on an HF file: rc=$rc out=$out"
    note "refused: $out" ;;

  hf_transformers)  # psync's logits on an exported HF directory == transformers' GPT2LMHeadModel (1e-4)
    if ! /usr/bin/python3 -c 'import transformers, torch' 2>/dev/null; then echo "SKIP: transformers is not importable"; exit 77; fi
    head -c 30000 /dev/urandom | tr -dc 'a-zA-Z0-9 .,\n' | head -c 6000 >"$T/text.txt"
    run_job 1 "$T/w.st" --model=gpt --vocab-size=128 --block-size=32 --n-layer=2 --n-head=4 --n-embd=64 --data="$T/text.txt" \
      --data-format=bytes --optimizer=adamw --lr=0.003 --global-batch=4 --steps=30
    "$B/worker/tools/psync-export" --checkpoint="$T/w.st" --format=hf --out="$T/hf" >/dev/null || fail "psync-export"
    IDS=5,17,99,3,64,64,0,127,42,8,1,2,3,4,5,6,7,8,9,10
    "$B/tests/integration/worker/gpt_logits" "$T/hf/model.safetensors" "$IDS" "$T/logits.st" || fail "gpt_logits"
    /usr/bin/python3 "$HERE/hf_gpt2.py" check-logits "$T/hf" "$T/logits.st" "$IDS" 1e-4 || fail "logits differ from transformers" ;;

  shards)  # a directory or glob of llm.c shards trains exactly like the one file they were cut from
    /usr/bin/python3 - "$T" <<'PY' || fail "writing shards"
import os, random, struct, sys
t = sys.argv[1]
rng = random.Random(4)
toks = [rng.randrange(64) if rng.random() < 0.3 else (i * 7) % 64 for i in range(5000)]
def write(path, part):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(part), *([0] * 253)) + struct.pack("<%dH" % len(part), *part))
write(os.path.join(t, "all.bin"), toks)
os.makedirs(os.path.join(t, "sh"))
for i, (a, b) in enumerate([(0, 1700), (1700, 1709), (1709, 5000)]):  # a 9-token shard: windows span three
    write(os.path.join(t, "sh", "x_train_%06d.bin" % i), toks[a:b])
PY
    GPT=(--model=gpt --vocab-size=64 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 --optimizer=adamw --lr=0.003
         --global-batch=8 --steps=8 --val-fraction=0.1 --eval-every=4)
    run_job 2 "$T/one.st" "${GPT[@]}" --data="$T/all.bin"
    run_job 2 "$T/dir.st" "${GPT[@]}" --data="$T/sh"
    run_job 2 "$T/glob.st" "${GPT[@]}" --data="$T/sh/x_train_*.bin" --data-format=tokens
    same_weights "$T/one.st" "$T/dir.st" 0
    same_weights "$T/one.st" "$T/glob.st" 0
    out=$("$WORKER" "${GPT[@]}" --data="$T/nothing_*.bin" --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *"no shard files match the pattern"* ]] || fail "empty glob: rc=$rc out=$out"
    note "empty glob: $out" ;;

  tokenizer)  # psync-tokenize train/encode/decode round trip; a GPT trains on the shards; psync-sample --tokenizer
    TOK=$B/worker/tools/psync-tokenize
    cat /usr/share/common-licenses/* >"$T/corpus.txt" 2>/dev/null
    [[ -s $T/corpus.txt ]] || head -c 200000 /dev/urandom | tr -dc 'a-z \n' >"$T/corpus.txt"
    "$TOK" train --input="$T/corpus.txt" --vocab-size=300 --out="$T/tok" >"$T/tok.log" 2>&1 || fail "train: $(cat "$T/tok.log")"
    "$TOK" train --input="$T/corpus.txt" --vocab-size=300 --out="$T/tok2" >/dev/null 2>&1 || fail "train again"
    cmp -s "$T/tok/merges.txt" "$T/tok2/merges.txt" && cmp -s "$T/tok/vocab.json" "$T/tok2/vocab.json" ||
      fail "training twice gave two tokenizers"
    "$TOK" encode --tokenizer="$T/tok" --input="$T/corpus.txt" --out="$T/enc/c" --shard-tokens=20000 >"$T/enc.log" 2>&1 ||
      fail "encode: $(cat "$T/enc.log")"
    note "$(cat "$T/enc.log")"
    "$TOK" decode --tokenizer="$T/tok/vocab.json" --input="$(ls "$T"/enc/c_*.bin | paste -sd,)" >"$T/decoded.txt" ||
      fail "decode"
    cmp -s "$T/corpus.txt" "$T/decoded.txt" || fail "decode(encode(corpus)) differs from the corpus"
    run_job 2 "$T/gpt.st" --model=gpt --vocab-size=300 --block-size=16 --n-layer=2 --n-head=2 --n-embd=32 \
      --data="$T/enc" --optimizer=adamw --lr=0.003 --global-batch=8 --steps=10
    "$B/worker/sample/psync-sample" --checkpoint="$T/gpt.st" --tokenizer="$T/tok" --prompt="The " --tokens=20 \
      >"$T/sample.txt" 2>&1 || fail "psync-sample --tokenizer: $(cat "$T/sample.txt")"
    [[ $(head -c 4 "$T/sample.txt") == "The " ]] || fail "the sample does not start with its prompt: $(cat "$T/sample.txt")"
    out=$("$B/worker/sample/psync-sample" --checkpoint="$T/gpt.st" 2>&1); rc=$?
    [[ $rc == 2 && $out == *"vocabulary of 300 tokens; without --tokenizer"* ]] || fail "V=300 without --tokenizer: rc=$rc $out"
    # A vocabulary llm.c shards cannot hold is refused by name.
    /usr/bin/python3 - "$T/tok/vocab.json" "$T/big" <<'PY' || fail "writing a big vocabulary"
import json, os, sys
v = json.load(open(sys.argv[1], encoding="utf-8"))
v = {k: i for k, i in v.items() if i < 256}
for i in range(256, 65537):
    v["<extra_%d>" % i] = i
os.makedirs(sys.argv[2])
json.dump(v, open(os.path.join(sys.argv[2], "vocab.json"), "w", encoding="utf-8"), ensure_ascii=False)
open(os.path.join(sys.argv[2], "merges.txt"), "w").write("#version: 0.2\n")
PY
    out=$("$TOK" encode --tokenizer="$T/big" --input="$T/corpus.txt" --out="$T/big/x" 2>&1); rc=$?
    [[ $rc == 2 && $out == *"65537 tokens, but llm.c shards hold uint16 ids: at most 65536 tokens"* ]] ||
      fail "a vocabulary of 65537: rc=$rc out=$out"
    note "sample: $(head -c 60 "$T/sample.txt" | tr '\n' ' ')" ;;

  val_ids)  # held-out token ids are checked against V before joining (exit 2, naming the file); shards
            # checked as read fail the final evaluation: exit 2, naming the shard, the checkpoint and --save written
    /usr/bin/python3 - "$T" <<'PY' || fail "writing tokens"
import os, struct, sys
t = sys.argv[1]
def write(path, toks):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)) + struct.pack("<%dH" % len(toks), *toks))
write(os.path.join(t, "train.bin"), [(i * 7) % 64 for i in range(2000)])
val = [(i * 5) % 64 for i in range(300)]
val[150] = 200
write(os.path.join(t, "val.bin"), val)
os.makedirs(os.path.join(t, "valsh"))
write(os.path.join(t, "valsh", "v_val_000000.bin"), val)
PY
    GPT=(--model=gpt --block-size=16 --n-layer=1 --n-head=2 --n-embd=16 --global-batch=4 --steps=3 --data="$T/train.bin")
    for vocab in --vocab-size=64 --vocab-size=0; do  # 0: V is --data's largest id + 1 = 64
      out=$("$WORKER" "${GPT[@]}" "$vocab" --val-data="$T/val.bin" --coordinator=127.0.0.1:1 2>&1); rc=$?
      [[ $rc == 2 && $out == *"--val-data $T/val.bin holds token id 200, outside the model's vocabulary of V=64"* ]] ||
        fail "$vocab, an id of 200 in --val-data: rc=$rc out=$out"
    done
    note "$out"
    start_coord 1
    start_worker 0 1 "${GPT[@]}" --vocab-size=64 --val-data="$T/valsh" --quiet --save="$T/s.st" --checkpoint-dir="$T/ck"
    wait_exit "${WPID[0]}" 60
    out=$(tail -1 "$T/w0.log")
    [[ $rc == 2 && $out == *"final evaluation"* && $out == *v_val_000000.bin*"is id 200"* ]] ||
      fail "a bad id in a held-out shard: rc=$rc: $out"
    [[ $out == *"the weights of all 3 steps are saved: --save $T/s.st"* && -f $T/s.st ]] || fail "--save not written: $out"
    [[ -f $T/ck/ckpt-00000003.safetensors ]] || fail "no final checkpoint: $(ls "$T/ck" 2>&1)"
    note "$out" ;;

  resume_shape)  # --resume from a checkpoint of the same --model but another shape: exit 2 before joining,
                 # naming the file, the tensor and both shapes (after Join it was exit 1, restarted over and over)
    head -c 5000 /dev/urandom >"$T/tokens.bin"
    GPT=(--model=gpt --vocab-size=256 --block-size=8 --n-layer=1 --n-head=2 --data="$T/tokens.bin" --data-format=bytes
         --global-batch=4 --checkpoint-dir="$T/ck")
    run_job 1 "$T/a.st" "${GPT[@]}" --n-embd=16 --steps=2
    out=$("$WORKER" "${GPT[@]}" --n-embd=32 --steps=4 --resume --coordinator=127.0.0.1:1 2>&1); rc=$?
    [[ $rc == 2 && $out == *ckpt-00000002.safetensors* && $out == *'"wte.weight" is '*'[256, 16]'*' in the checkpoint but '*'[256, 32]'*' in the model'* ]] ||
      fail "--resume of another shape: rc=$rc out=$out"
    note "$out" ;;

  skip_unused)  # --skip-layer without --find-unused-parameters: the error names the flag to pass, not DDP's option
    start_coord 2
    for r in 0 1; do start_worker $r 2 --skip-layer=1 --steps=3 --quiet; done
    wait_exit "${WPID[0]}" 60
    out=$(tail -1 "$T/w0.log")
    [[ $rc == 2 && $out == *"got no gradient"* && $out == *"pass --find-unused-parameters"* && $out != *DdpOptions* ]] ||
      fail "rank 0: exit $rc: $out"
    wait_exit "${WPID[1]}" 60
    note "$out" ;;

  coordinator_paused)  # the coordinator SIGSTOPped until its workers give up on it (exit 5), then SIGCONTed:
                       # psyncctl status shows them LOST (they failed), never DONE
    start_coord 2
    for r in 0 1; do start_worker $r 2 --steps=1000000 --quiet --coordinator-grace=2s; done
    wait_iteration "$CADDR" 2
    kill -STOP "$CPID"
    for r in 0 1; do
      wait_exit "${WPID[$r]}" 30
      [[ $rc == 5 ]] || { kill -CONT "$CPID"; fail "rank $r: exit $rc while the coordinator was stopped, want 5"; }
    done
    kill -CONT "$CPID"
    states=""
    for _ in $(seq 300); do  # until the coordinator has taken in both ends
      states=$("$CTL" --coordinator="$CADDR" --json workers 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; print(" ".join(w["state"] for w in json.load(sys.stdin)["workers"]))' 2>/dev/null)
      [[ -n $states && $states != *TRAINING* && $states != *JOINED* ]] && break
      sleep 0.1
    done
    "$CTL" --coordinator="$CADDR" status >"$T/status.txt" 2>&1
    [[ $states == "WORKER_LOST WORKER_LOST" ]] || fail "rank states after SIGCONT: '$states': $(cat "$T/status.txt")"
    grep -qw DONE "$T/status.txt" && fail "psyncctl status shows a rank DONE: $(cat "$T/status.txt")"
    note "$(grep -i "exit code 5\|lost" "$T/status.txt" | head -2 | tr '\n' ' ')" ;;

  launch_nodes_replaced)  # node mode: the coordinator is replaced at the same address while the workers run (held
                          # with SIGSTOP meanwhile); they re-register with the new one, past their relay (coordinator
                          # failover), the launcher follows it, and a shutdown through it ends the job cleanly
    export PSYNC_TOKEN=launch-nodes-token
    port=$(free_port)
    start_coord 2 --port="$port"
    old=$CPID
    "$LAUNCH" --nnodes=1 --node-rank=0 --nproc=2 --coordinator="$CADDR" -- --steps=1000000 --quiet >"$T/n0.log" 2>&1 &
    NPID[n0]=$!; PIDS+=("${NPID[n0]}")
    wait_iteration "$CADDR" 2 "$PSYNC_TOKEN"
    w0=$(rank_pid "$CADDR" "$PSYNC_TOKEN" 0); w1=$(rank_pid "$CADDR" "$PSYNC_TOKEN" 1)
    [[ -n $w0 && -n $w1 ]] || fail "no worker pids"
    # The workers are held (SIGSTOP) while the coordinator is replaced: they meet the new one only.
    kill -STOP "$w0" "$w1"
    kill -9 "$old"; wait "$old" 2>/dev/null
    start_coord 2 --port="$port"
    for _ in $(seq 100); do [[ -n $(status_field "$CADDR" "$PSYNC_TOKEN" state) ]] && break; sleep 0.1; done
    kill -CONT "$w0" "$w1"
    it=$(status_field "$CADDR" "$PSYNC_TOKEN" iteration)
    wait_iteration "$CADDR" $((${it:-0} + 20)) "$PSYNC_TOKEN"
    for _ in $(seq 100); do grep -q "a new coordinator (instance" "$T/n0.log" && break; sleep 0.1; done
    grep -q "psync-launch: a new coordinator (instance [0-9a-f]*) runs generation 1 on (coordinator failover)" "$T/n0.log" ||
      fail "the launcher did not follow the new coordinator: $(grep psync-launch "$T/n0.log")"
    [[ $(rank_pid "$CADDR" "$PSYNC_TOKEN" 0) == "$w0" && $(rank_pid "$CADDR" "$PSYNC_TOKEN" 1) == "$w1" ]] ||
      fail "the new coordinator knows other worker pids"
    "$CTL" --coordinator="$CADDR" shutdown >/dev/null || fail "psyncctl shutdown"
    wait_exit "${NPID[n0]}" 60
    [[ $rc == 0 ]] || fail "psync-launch: exit $rc: $(tail -3 "$T/n0.log")"
    note "$(grep "a new coordinator" "$T/n0.log")" ;;

  coordinator_failover)
    # The coordinator may die (coordinator.proto, "Coordinator failover"): a
    # coordinator started by hand at a fixed port, a 4-rank job launched
    # against it (node mode; --relay=false: every rank on its own stream).
    # It is killed with kill -9 three times at random iterations and started
    # again each time with the same command. Then: exit 0, no worker
    # restarted (the same pids), the new coordinator runs generation 1 on,
    # and the weights equal an uninterrupted run's bit for bit.
    export PSYNC_TOKEN=failover-token
    port=$(free_port)
    start_coord 4 --port="$port"
    "$LAUNCH" --nnodes=1 --node-rank=0 --nproc=4 --relay=false --coordinator="$CADDR" -- --steps=3000 --quiet \
      --save="$T/r.st" >"$T/n0.log" 2>&1 &
    NPID[n0]=$!; PIDS+=("${NPID[n0]}")
    again_by_hand() { kill -9 "$CPID"; wait "$CPID" 2>/dev/null; start_coord 4 --port="$port"; }
    coordinator_kills "$CADDR" "$PSYNC_TOKEN" again_by_hand
    [[ $(status_field "$CADDR" "$PSYNC_TOKEN" generation) == 1 ]] || fail "the new coordinator is not at generation 1"
    wait_exit "${NPID[n0]}" 180
    [[ $rc == 0 ]] || fail "psync-launch exited $rc: $(tail -5 "$T/n0.log")"
    if grep -q "starting\|restart" <(grep "psync-launch" "$T/n0.log" | grep -v "^psync-launch: node"); then
      fail "the launcher restarted a worker: $(grep psync-launch "$T/n0.log")"
    fi
    grep -q "rank=0.*re-registered with the coordinator" "$T/n0.log" ||
      fail "rank 0 did not re-register: $(grep -i coordinator "$T/n0.log" | tail -3)"
    same_as_uninterrupted_node 3000 ;;

  coordinator_journal)
    # The durable journal (--state-dir): a hand-started coordinator and a
    # job of 2 nodes x 2 ranks against it. kill -9 three times, each time
    # started again with the same command: (1) during the rendezvous (node
    # 0's ranks joined, node 1 not started: their Joins are retried and the
    # new coordinator forms the world), (2) at a random iteration, (3) right
    # after psyncctl heard that a shutdown was scheduled, before any plan
    # carried it to a worker (that coordinator holds its plans back 500 ms,
    # --test-only-plan-delay: the stop dies with it unless the journal keeps
    # it; the next one asks it again). Then: exit 0, the same worker pids,
    # the job FINISHED for the shutdown's reason, status counts 3
    # coordinator restarts, the event log goes back to the first
    # coordinators' events, and the weights equal an uninterrupted run's.
    export PSYNC_TOKEN=journal-token
    port=$(free_port)
    again_by_hand() { kill -9 "$CPID"; wait "$CPID" 2>/dev/null; start_coord 4 --port="$port" --state-dir="$T/state" "$@"; }
    start_coord 4 --port="$port" --state-dir="$T/state"
    start_node n0 0 "$CADDR" --relay=false -- --steps=3000 --quiet --save="$T/r.st"
    for _ in $(seq 600); do [[ $(status_field "$CADDR" "$PSYNC_TOKEN" joined) == 2 ]] && break; sleep 0.1; done
    [[ $(status_field "$CADDR" "$PSYNC_TOKEN" joined) == 2 ]] || fail "node 0's ranks did not join"
    again_by_hand
    start_node n1 1 "$CADDR" --relay=false -- --steps=3000 --quiet
    wait_iteration "$CADDR" 50 "$PSYNC_TOKEN"
    declare -A before
    for r in 0 1 2 3; do before[$r]=$(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r"); done
    at=$((100 + RANDOM % 300))
    wait_iteration "$CADDR" "$at" "$PSYNC_TOKEN"
    again_by_hand --test-only-plan-delay=500ms
    wait_iteration "$CADDR" $((at + 5)) "$PSYNC_TOKEN"
    "$CTL" --coordinator="$CADDR" shutdown --reason="journal test" >"$T/shutdown.txt" || fail "psyncctl shutdown: $(cat "$T/shutdown.txt")"
    again_by_hand
    wait_nodes n0 n1
    stop=$(sed -n 's/.*rank 0: stopped after iteration \([0-9]*\).*/\1/p' "$T/n0.log")
    [[ -n $stop ]] || fail "rank 0 did not stop: $(tail -3 "$T/n0.log")"
    for r in 0 1 2 3; do
      [[ $(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r") == "${before[$r]}" ]] || fail "rank $r has another pid"
    done
    [[ $(status_field "$CADDR" "$PSYNC_TOKEN" state) == JOB_FINISHED ]] || fail "the job is $(status_field "$CADDR" "$PSYNC_TOKEN" state)"
    [[ $(status_field "$CADDR" "$PSYNC_TOKEN" coordinator_restarts) == 3 ]] ||
      fail "status counts $(status_field "$CADDR" "$PSYNC_TOKEN" coordinator_restarts) coordinator restarts, not 3"
    [[ $(status_field "$CADDR" "$PSYNC_TOKEN" reason) == "journal test" ]] || fail "the reason is lost: $(status_field "$CADDR" "$PSYNC_TOKEN" reason)"
    "$CTL" --coordinator="$CADDR" watch >"$T/events.txt" 2>&1 || fail "psyncctl watch: $(tail -2 "$T/events.txt")"
    (($(grep -c "coordinator restarted (epoch .*state-dir" "$T/events.txt") == 3)) || fail "the event log lost a restart: $(cat "$T/events.txt")"
    grep -q "journal test (asked of the coordinator before it restarted; kept in its --state-dir): every rank stops after iteration $stop" \
      "$T/events.txt" || fail "the shutdown was not asked again: $(grep -i "stop" "$T/events.txt")"
    grep -q "WORLD_COMPLETE" "$T/events.txt" || fail "the first coordinators' events are gone: $(head -5 "$T/events.txt")"
    note "$(cat "$T/shutdown.txt"); stopped after iteration $stop"
    same_as_uninterrupted_nodes $((stop + 1)) ;;

  coordinator_fenced)
    # Fencing through the state dir: coordinator A runs a 4-rank job and is
    # stopped (SIGSTOP); B is started with the same command and state dir
    # (it takes a newer epoch and waits for the port A holds). A, continued
    # (SIGCONT), finds B's journal: it sends no plan and exits 1 by itself,
    # naming B's epoch. B gets the port and the workers resume with it. Then:
    # exit 0, the same worker pids, the weights equal an uninterrupted run's.
    export PSYNC_TOKEN=fence-token
    port=$(free_port)
    start_coord 4 --port="$port" --state-dir="$T/state"
    APID=$CPID
    "$LAUNCH" --nnodes=1 --node-rank=0 --nproc=4 --relay=false --coordinator="$CADDR" -- --steps=1500 --quiet \
      --save="$T/r.st" >"$T/n0.log" 2>&1 &
    NPID[n0]=$!; PIDS+=("${NPID[n0]}")
    wait_iteration "$CADDR" 200 "$PSYNC_TOKEN"
    declare -A before
    for r in 0 1 2 3; do before[$r]=$(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r"); done
    kill -STOP "$APID"
    "$COORD" --host=127.0.0.1 --port="$port" --world-size=4 --state-dir="$T/state" >"$T/coordB.log" 2>&1 &
    CPID=$!; PIDS+=("$CPID")
    for _ in $(seq 300); do grep -q "is in use" "$T/coordB.log" && break; sleep 0.1; done
    grep -q "is in use" "$T/coordB.log" || fail "B did not wait for the port: $(cat "$T/coordB.log")"
    epoch_b=$(ls "$T/state" | sed -n 's/^journal-\([0-9]*\)\.pb$/\1/p' | sort -n | tail -1)
    kill -CONT "$APID"
    wait_exit "$APID" 30
    [[ $rc == 1 ]] || fail "A exited $rc, not 1: $(tail -3 "$T/coord.log")"
    grep -q "fenced: coordinator epoch $epoch_b took over" "$T/coord.log" || fail "A did not name B's epoch $epoch_b: $(tail -3 "$T/coord.log")"
    wait_exit "${NPID[n0]}" 180
    [[ $rc == 0 ]] || fail "psync-launch exited $rc: $(tail -5 "$T/n0.log")"
    for r in 0 1 2 3; do
      [[ $(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r") == "${before[$r]}" ]] || fail "rank $r has another pid"
    done
    grep -q "(epoch $epoch_b)" "$T/coordB.log" || fail "B did not serve with epoch $epoch_b: $(head -3 "$T/coordB.log")"
    note "$(grep "fenced" "$T/coord.log")"
    same_as_uninterrupted_node 1500 ;;

  launch_coordinator_failover)
    # psync-launch starts its own coordinator again (coordinator failover):
    # --nproc=4 (through the plan relay), the coordinator killed with kill -9
    # three times at random iterations. The launcher starts it again on the
    # same port each time and the workers re-register with it (behind the
    # relay: straight to the coordinator). Then: exit 0, the same worker pids,
    # the weights equal an uninterrupted run's bit for bit.
    "$LAUNCH" --nproc=4 -- --steps=3000 --quiet --save="$T/r.st" >"$T/l.log" 2>&1 &
    LPID=$!; PIDS+=("$LPID")
    launcher_coordinator "$T/l.log"
    again_by_launcher() {
      kill -9 "$(grep -o "coordinator [0-9.:]* (pid [0-9]*" "$T/l.log" | tail -1 | sed 's/.*pid //')"
      for _ in $(seq 300); do (($(grep -c "starting it again on port" "$T/l.log") >= $1)) && return; sleep 0.1; done
      fail "the launcher did not start its coordinator again: $(grep psync-launch "$T/l.log")"
    }
    coordinator_kills "$LADDR" "$LTOK" again_by_launcher
    # Its journal (the launcher gives its coordinator a --state-dir) counts them.
    [[ $(status_field "$LADDR" "$LTOK" coordinator_restarts) == 3 ]] ||
      fail "status counts $(status_field "$LADDR" "$LTOK" coordinator_restarts) coordinator restarts, not 3"
    wait_exit "$LPID" 180
    [[ $rc == 0 ]] || fail "psync-launch exited $rc: $(tail -5 "$T/l.log")"
    if grep -q "restarting\|starting a replacement" "$T/l.log"; then fail "a worker restarted: $(grep psync-launch "$T/l.log")"; fi
    "$LAUNCH" --nproc=4 -- --steps=3000 --quiet --save="$T/u.st" >"$T/u.log" 2>&1 || fail "the uninterrupted run: $(tail -3 "$T/u.log")"
    same_weights "$T/u.st" "$T/r.st" 0 ;;

  coordinator_sigstop)
    # A coordinator stopped with SIGSTOP for 20 s while a 4-rank job runs:
    # the workers' streams break (keepalive), they train on while their plans
    # last and re-register once it runs again (SIGCONT); it blames nobody for
    # its own silence and holds their broken streams for the re-attach. Then:
    # exit 0, no worker restarted, the weights equal an uninterrupted run's.
    export PSYNC_TOKEN=sigstop-token
    start_coord 4
    "$LAUNCH" --nnodes=1 --node-rank=0 --nproc=4 --coordinator="$CADDR" -- --steps=2000 --quiet --save="$T/r.st" \
      >"$T/n0.log" 2>&1 &
    NPID[n0]=$!; PIDS+=("${NPID[n0]}")
    wait_iteration "$CADDR" 300 "$PSYNC_TOKEN"
    declare -A before
    for r in 0 1 2 3; do before[$r]=$(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r"); done
    kill -STOP "$CPID"
    sleep 20  # the scenario itself: stopped for 20 s
    kill -CONT "$CPID"
    wait_exit "${NPID[n0]}" 180
    [[ $rc == 0 ]] || fail "psync-launch exited $rc: $(tail -5 "$T/n0.log")"
    grep -q "re-registered with the coordinator" "$T/n0.log" || fail "no worker re-registered: $(grep -i coordinator "$T/n0.log" | tail -3)"
    for r in 0 1 2 3; do
      [[ $(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r") == "${before[$r]}" ]] || fail "rank $r has another pid"
    done
    [[ $(status_field "$CADDR" "$PSYNC_TOKEN" state) == JOB_FINISHED ]] || fail "the job is $(status_field "$CADDR" "$PSYNC_TOKEN" state)"
    note "$(grep "re-registered" "$T/n0.log" | head -1)"
    same_as_uninterrupted_node 2000 ;;

  coordinator_failover_worker_lost)
    # A worker lost while the coordinator is down (coordinator failover with
    # live recovery): a hand-started coordinator (--max-restarts=2), a 4-rank
    # job launched against it; the coordinator is killed, then rank 2, then
    # the coordinator is started again. The new one rebuilds generation 1
    # from the three survivors, loses rank 2 (it never re-attaches), and the
    # job goes on live as generation 2 with a replacement healed from a
    # survivor. Then: exit 0, the survivors' pids unchanged, the weights equal
    # an uninterrupted run's bit for bit.
    export PSYNC_TOKEN=failover-token
    port=$(free_port)
    start_coord 4 --port="$port" --max-restarts=2
    "$LAUNCH" --nnodes=1 --node-rank=0 --nproc=4 --max-restarts=2 --coordinator="$CADDR" -- --steps=2000 --quiet \
      --save="$T/r.st" >"$T/n0.log" 2>&1 &
    NPID[n0]=$!; PIDS+=("${NPID[n0]}")
    wait_iteration "$CADDR" 300 "$PSYNC_TOKEN"
    declare -A before
    for r in 0 1 2 3; do before[$r]=$(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r"); done
    kill -9 "$CPID"; wait "$CPID" 2>/dev/null
    kill -9 "${before[2]}"
    start_coord 4 --port="$port" --max-restarts=2
    wait_exit "${NPID[n0]}" 180
    [[ $rc == 0 ]] || fail "psync-launch exited $rc: $(tail -5 "$T/n0.log")"
    for r in 0 1 3; do
      [[ $(rank_pid "$CADDR" "$PSYNC_TOKEN" "$r") == "${before[$r]}" ]] || fail "rank $r has another pid"
    done
    grep -q "rank=2.*healed from rank [013] at step" "$T/n0.log" || fail "rank 2 was not healed: $(grep -i "heal\|psync-launch" "$T/n0.log")"
    note "$(grep -o "healed from rank [0-9] at step [0-9]*.*" "$T/n0.log" | head -1)"
    same_as_uninterrupted_node 2000 ;;

  watch_failover)
    # psyncctl watch outlives its coordinator: killed with kill -9 and
    # started again at the same port, the new one's events (its FINISHED
    # after a shutdown) still come, and watch exits 0 on it.
    port=$(free_port)
    start_coord 2 --port="$port"
    "$CTL" --coordinator="$CADDR" watch >"$T/watch.out" 2>"$T/watch.err" &
    wpid=$!; PIDS+=("$wpid")
    # Connected (a fresh coordinator has no event to print yet): its TCP connection is up.
    for _ in $(seq 100); do ss -tnpH state established "( dport = :$port )" | grep -q "pid=$wpid," && break; sleep 0.1; done
    ss -tnpH state established "( dport = :$port )" | grep -q "pid=$wpid," || fail "psyncctl watch did not connect"
    kill -9 "$CPID"; wait "$CPID" 2>/dev/null
    for _ in $(seq 100); do grep -q "waiting up to 60s" "$T/watch.err" && break; sleep 0.1; done
    grep -q "coordinator lost" "$T/watch.err" || fail "watch did not notice the loss: $(cat "$T/watch.err")"
    start_coord 2 --port="$port"
    "$CTL" --coordinator="$CADDR" shutdown >/dev/null || fail "psyncctl shutdown"
    wait_exit "$wpid" 30
    [[ $rc == 0 ]] || fail "watch: exit $rc: $(cat "$T/watch.err")"
    grep -q "FINISHED" "$T/watch.out" || fail "watch printed no FINISHED: $(cat "$T/watch.out")"
    note "$(tail -1 "$T/watch.out")" ;;

  *) echo "unknown case $CASE"; exit 2 ;;
esac
echo "PASS [$CASE${BACKEND:+ backend=$BACKEND}]"
