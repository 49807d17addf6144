#!/usr/bin/env bash
# Multi-host test of psync on Linux network namespaces (one "host" per
# process), the same scenario as deploy/compose/docker-compose.yml:
#
#   hub namespace: bridge br0
#     C  (coordinator)  10.77.0.1/24  --veth-- br0
#     W0 (worker rank 0) 10.77.0.10/24 --veth-- br0
#     W1 (worker rank 1) 10.77.0.11/24 --veth-- br0
#
# Phase 1  run to completion: both workers exit 0, Gloo traffic flows
#          worker-to-worker between 10.77.0.10 and 10.77.0.11, psyncctl status
#          from C (loopback) and from W0 (across the bridge) reports the job.
# Phase 2  the compose runner (deploy/compose/check-job.sh) from C: waits for
#          progress, shuts the job down; both workers exit 0.
# Phase 4  hierarchical allreduce across hosts: 2 workers per worker namespace
#          (PSYNC_HOST_ID per namespace), --backend=auto picks hier: shared
#          memory within each "host", Gloo between 10.77.0.10 and 10.77.0.11.
#          All 4 exit 0, the weights equal a 1-process run on the full batch,
#          nothing of theirs is left in /dev/shm.
# Phase 3  partition: W1's link goes down mid-run (no TCP reset). W0 blocks in
#          the allreduce with W1 but keeps heartbeating; W1 falls silent, so
#          the coordinator blames rank 1 (--heartbeat-timeout=1500ms, before the
#          3 s report timeout) and W0 aborts with a named error (exit 4) within
#          10 s; the coordinator reports rank 1 lost (psyncctl workers / status),
#          W1 exits by itself (keepalive: coordinator lost, and no coordinator
#          back within its 10 s of --coordinator-grace), nothing hangs.
#
# usage: netns_test.sh [BIN_OR_DIR...]  each a binary or a directory holding
#        psync-coordinator / psync-worker / psyncctl (else they come from $PATH);
#        weights_diff too, for phase 4's comparison (skipped without it)
# Needs root and permission for `ip netns add`; otherwise prints SKIP and exits 77.
# Every process runs under `timeout`; an EXIT trap kills them and deletes the namespaces.
set -uo pipefail

SKIP=77
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)

ID=$$
NS_HUB=psync-hub-$ID
NS_C=psync-c-$ID
NS_W0=psync-w0-$ID
NS_W1=psync-w1-$ID
ALL_NS=("$NS_HUB" "$NS_C" "$NS_W0" "$NS_W1")
NET=10.77.0
IP_C=$NET.1
IP_W0=$NET.10
IP_W1=$NET.11
PORT=29500
TOKEN="netns-test-token-$ID"
WORK=""
PIDS=()
# Debian's interpreter: the python3 first on PATH may be a slow wrapper (pyenv shim).
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

log() { printf '[netns %(%H:%M:%S)T] %s\n' -1 "$*"; }
skip() { echo "SKIP: $*"; exit "$SKIP"; }
fail() { echo "FAIL: $*" >&2; dump_logs; exit 1; }

dump_logs() {
  [[ -n "$WORK" && -d "$WORK" ]] || return 0
  local f
  for f in "$WORK"/*.log; do
    [[ -f "$f" ]] || continue
    echo "----- $(basename "$f") (last 40 lines)" >&2
    tail -n 40 "$f" >&2
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p ns
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  for ns in "${ALL_NS[@]}"; do
    if ip netns list 2>/dev/null | grep -qw -- "$ns"; then
      # Whatever still runs inside our own namespaces was started by this script.
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
      ip netns del "$ns" 2>/dev/null
    fi
  done
  [[ -n "$WORK" ]] && rm -rf "$WORK"
  exit "$rc"
}

# in NS CMD...: run CMD inside namespace NS (bounded by the caller's `timeout`).
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# ---------------------------------------------------------------- topology
setup_topology() {
  ip netns add "$NS_HUB" 2>"$WORK/netns.err" || skip "cannot create network namespaces ($(head -n1 "$WORK/netns.err"))"
  ip netns add "$NS_C" && ip netns add "$NS_W0" && ip netns add "$NS_W1" || skip "ip netns add failed"
  ip -n "$NS_HUB" link add br0 type bridge 2>"$WORK/bridge.err" || skip "no bridge support ($(head -n1 "$WORK/bridge.err"))"
  ip -n "$NS_HUB" link set br0 up
  ip -n "$NS_HUB" link set lo up
  local ns addr port
  for spec in "$NS_C:$IP_C:vc" "$NS_W0:$IP_W0:vw0" "$NS_W1:$IP_W1:vw1"; do
    IFS=: read -r ns addr port <<<"$spec"
    # hub side named $port, host side eth0; created directly in the namespaces.
    ip -n "$NS_HUB" link add "$port" type veth peer name eth0 netns "$ns" 2>"$WORK/veth.err" \
      || skip "no veth support ($(head -n1 "$WORK/veth.err"))"
    ip -n "$NS_HUB" link set "$port" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  # Reachability C <- W0, W1 and W1 <- W0 over the bridge (bounded; no ping needed).
  reach "$NS_C" "$IP_C" "$NS_W0" "$NS_W1" || fail "W0/W1 cannot reach C ($IP_C) over the bridge"
  reach "$NS_W1" "$IP_W1" "$NS_W0" || fail "W0 cannot reach W1 ($IP_W1) over the bridge"
  log "topology up: C=$IP_C W0=$IP_W0 W1=$IP_W1 (namespaces ${ALL_NS[*]})"
}

# reach LISTEN_NS LISTEN_IP FROM_NS...: a TCP listener in LISTEN_NS accepts one
# connection from each FROM_NS. The listener says when it listens; each client
# is bash's /dev/tcp (no interpreter start-up), retried until a 20 s deadline.
# The bounds are generous because a loaded 2-core host (a docker build, other
# test processes) can take seconds just to start a process: a 2 s bound on a
# python3 client (a pyenv shim on PATH takes ~2 s to start there) once made
# this check fail with every link up.
reach() {
  local lns=$1 lip=$2; shift 2
  local ready="$WORK/reach-$lns.ready"
  rm -f "$ready"
  timeout 40 ip netns exec "$lns" "$PY" -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 29999)); s.listen(8); s.settimeout(35)
open(sys.argv[3], "w").close()
for _ in range(int(sys.argv[2])): s.accept()[0].close()
' "$lip" "$#" "$ready" 2>"$WORK/reach-$lns.err" &
  local lpid=$! ns ok until=$((SECONDS + 20))
  while [[ ! -e "$ready" ]]; do
    kill -0 "$lpid" 2>/dev/null && ((SECONDS < until)) || {
      kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null
      echo "reach: no listener on $lip in $lns: $(head -c 300 "$WORK/reach-$lns.err")" >&2; return 1; }
    sleep 0.05
  done
  for ns in "$@"; do
    ok=0 until=$((SECONDS + 20))
    while ((SECONDS < until)); do
      if timeout 5 ip netns exec "$ns" bash -c 'exec 3<>"/dev/tcp/$0/29999"' "$lip" 2>/dev/null; then
        ok=1; break
      fi
      sleep 0.1
    done
    ((ok)) || {
      kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null
      echo "reach: $ns cannot connect to $lip:29999 within 20 s" >&2; net_state >&2; return 1; }
  done
  wait "$lpid"
}

# The bridge's state for a failed reach: links, neighbours, and the hub's own
# FORWARD chain (bridged packets go through the hub namespace's iptables when
# br_netfilter is on; the host's FORWARD policy, e.g. Docker's DROP, is not
# involved: the bridge is not in the host's namespace).
net_state() {
  local ns
  echo "--- hub $NS_HUB: links"; ip -n "$NS_HUB" -br link 2>&1
  echo "--- hub FORWARD: $(ip netns exec "$NS_HUB" iptables -S FORWARD 2>&1 | tr '\n' ' ')"
  echo "--- hub bridge-nf-call-iptables: $(ip netns exec "$NS_HUB" cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>&1)"
  for ns in "$NS_C" "$NS_W0" "$NS_W1"; do
    echo "--- $ns: $(ip -n "$ns" -br addr show dev eth0 2>&1); neigh: $(ip -n "$ns" neigh 2>&1 | tr '\n' ' ')"
  done
}

# start NAME LIMIT_S NS CMD...: start CMD in NS in the background under
# `timeout LIMIT_S`; its pid goes to PID_<NAME>, its output to $WORK/NAME.log.
start() {
  local name=$1 limit=$2 ns=$3; shift 3
  timeout -k 5 "$limit" ip netns exec "$ns" env PATH="$PATH" PSYNC_TOKEN="$TOKEN" "$@" >"$WORK/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  printf -v "PID_$name" '%s' "$pid"
}

# wait_exit PID LIMIT_S: waits for PID (a child of this shell) at most LIMIT_S
# seconds; sets RC to its exit code, or to "timeout" (then kills it).
# Not for $(...): a subshell cannot wait for its parent's children.
RC=""
wait_exit() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null; do
    if (( t >= limit * 10 )); then
      kill -TERM "$pid" 2>/dev/null; sleep 0.5; kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      RC=timeout; return
    fi
    sleep 0.1; t=$((t + 1))
  done
  wait "$pid"; RC=$?
}

ctl() {  # ctl NS ARGS...: psyncctl against the coordinator, bounded
  local ns=$1; shift
  local target=$IP_C:$PORT
  [[ "$ns" == "$NS_C" ]] && target=127.0.0.1:$PORT
  timeout -k 2 15 ip netns exec "$ns" env PSYNC_TOKEN="$TOKEN" psyncctl --coordinator="$target" "$@"
}

start_coordinator() {  # JOB_ID LOG_NAME EXTRA_FLAGS...  (world size: $CWORLD, default 2)
  local job=$1 name=$2; shift 2
  start "$name" 240 "$NS_C" psync-coordinator --host=0.0.0.0 --port="$PORT" --world-size="${CWORLD:-2}" --job-id="$job" \
    --join-timeout=60s "$@"
  local i
  for i in $(seq 1 100); do
    grep -q "listening on" "$WORK/$name.log" 2>/dev/null && return 0
    local pvar=PID_$name
    kill -0 "${!pvar}" 2>/dev/null || fail "coordinator ($name) exited before listening"
    sleep 0.1
  done
  fail "coordinator ($name) not listening after 10 s"
}

start_workers() {  # JOB_ID PREFIX WORKER_FLAGS...
  local job=$1 prefix=$2; shift 2
  start "${prefix}0" 240 "$NS_W0" psync-worker --coordinator="$IP_C:$PORT" --rank=0 --world-size=2 --job-id="$job" \
    --gloo-host="$IP_W0" --device=cpu "$@"
  start "${prefix}1" 240 "$NS_W1" psync-worker --coordinator="$IP_C:$PORT" --rank=1 --world-size=2 --job-id="$job" \
    --gloo-host="$IP_W1" --device=cpu "$@"
}

stop_coordinator() {  # NAME
  local pvar=PID_$1
  kill -TERM "${!pvar}" 2>/dev/null
  wait_exit "${!pvar}" 10
  [[ "$RC" != timeout ]] || fail "coordinator ($1) did not stop within 10 s of SIGTERM"
}

# json_field JSON_TEXT KEY: first value of "KEY": in JSON_TEXT (numbers/strings).
json_field() { "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); print(d.get(sys.argv[2], ""))' "$1" "$2"; }

# ---------------------------------------------------------------- phases
phase_complete() {
  log "phase 1: run to completion across hosts"
  start_coordinator netns-complete coord1 --report-timeout=20s
  start_workers netns-complete w1_ --steps=300 --timeout=20s --progress-every=50
  # While it runs: the Gloo pair must be worker-to-worker over the bridge.
  local i seen=0 st
  for i in $(seq 1 100); do
    if in_ns "$NS_W0" ss -Htn state established "( dst $IP_W1 or src $IP_W1 )" 2>/dev/null | grep -q .; then
      seen=1; break
    fi
    kill -0 "$PID_w1_0" 2>/dev/null || break
    sleep 0.1
  done
  st=$(ctl "$NS_W0" status) || fail "psyncctl status from W0 (across the bridge) failed"
  log "psyncctl status from W0: $(echo "$st" | head -n1)"
  local rc0 rc1
  wait_exit "$PID_w1_0" 120; rc0=$RC
  wait_exit "$PID_w1_1" 120; rc1=$RC
  [[ "$rc0" == 0 && "$rc1" == 0 ]] || fail "phase 1: worker exit codes rank0=$rc0 rank1=$rc1 (want 0 0)"
  ((seen)) || fail "phase 1: no TCP connection between W0 ($IP_W0) and W1 ($IP_W1): Gloo did not use the workers' own addresses"
  # Why poll (up to 10 s): a worker exits once it has sent Done, which the
  # coordinator may not have read yet; the job finishes with the last Done.
  local state=""
  for i in $(seq 1 100); do
    st=$(ctl "$NS_C" --json status) || fail "psyncctl status from C failed after the job"
    state=$(json_field "$st" state)
    [[ "$state" == JOB_FINISHED || "$state" == FINISHED ]] && break
    sleep 0.1
  done
  [[ "$state" == JOB_FINISHED || "$state" == FINISHED ]] || fail "phase 1: job state '$state' 10 s after the workers exited (want FINISHED): $st"
  log "phase 1 ok: workers exit 0/0, Gloo over $IP_W0<->$IP_W1, coordinator says $state"
  stop_coordinator coord1
}

phase_runner() {
  log "phase 2: the compose runner (status, then shutdown) against hosts"
  start_coordinator netns-runner coord2 --report-timeout=20s
  start_workers netns-runner w2_ --steps=1000000 --timeout=20s --progress-every=0
  timeout -k 2 120 ip netns exec "$NS_C" env PATH="$PATH" PSYNC_TOKEN="$TOKEN" PSYNC_COORDINATOR="127.0.0.1:$PORT" \
    PSYNC_CHECK_MIN_ITERATION=10 PSYNC_CHECK_TIMEOUT_S=90 sh "$root/deploy/compose/check-job.sh" >"$WORK/runner2.log" 2>&1 \
    || fail "phase 2: check-job.sh failed (rc=$?)"
  local rc0 rc1
  wait_exit "$PID_w2_0" 60; rc0=$RC
  wait_exit "$PID_w2_1" 60; rc1=$RC
  [[ "$rc0" == 0 && "$rc1" == 0 ]] || fail "phase 2: worker exit codes after shutdown rank0=$rc0 rank1=$rc1 (want 0 0)"
  log "phase 2 ok: runner passed, workers stopped cleanly (0/0)"
  stop_coordinator coord2
}

phase_partition() {
  log "phase 3: partition W1 mid-run"
  start_coordinator netns-partition coord3 --report-timeout=3s --heartbeat-timeout=1500ms
  # --coordinator-grace=10s: the cut-off rank cannot tell its partition from
  # a dead coordinator, so it rides through that long before it ends.
  start_workers netns-partition w3_ --steps=1000000 --timeout=4s --progress-every=0 --coordinator-grace=10s
  # Wait for real progress before cutting the link.
  local i it=-1 st
  for i in $(seq 1 300); do
    st=$(ctl "$NS_C" --json status 2>/dev/null) && it=$(json_field "$st" iteration)
    [[ "$it" =~ ^[0-9]+$ ]] && (( it >= 20 )) && break
    kill -0 "$PID_w3_0" 2>/dev/null || fail "phase 3: rank 0 exited before the partition"
    sleep 0.1
  done
  [[ "$it" =~ ^[0-9]+$ ]] && (( it >= 20 )) || fail "phase 3: no progress before the partition (iteration=$it)"
  log "cutting W1's link at iteration $it"
  local t0=$SECONDS
  ip -n "$NS_HUB" link set vw1 down
  local rc0 dt
  wait_exit "$PID_w3_0" 10; rc0=$RC; dt=$((SECONDS - t0))
  [[ "$rc0" != timeout ]] || fail "phase 3: rank 0 still running 10 s after the partition"
  [[ "$rc0" == 4 ]] || fail "phase 3: rank 0 exit code $rc0 (want 4: peer lost / job aborted)"
  grep -Eiq 'lost|abort' "$WORK/w3_0.log" || fail "phase 3: rank 0's error does not name the failure"
  grep -Eq 'rank 1 \(.*lost' "$WORK/w3_0.log" || fail "phase 3: rank 0's error does not name rank 1 as the lost rank"
  log "rank 0 aborted after ${dt}s (exit 4): $(grep -Ei 'lost|abort' "$WORK/w3_0.log" | tail -n1)"
  # The coordinator (still reachable on C's loopback) names the lost rank.
  local wk
  wk=$(ctl "$NS_C" --json workers) || fail "phase 3: psyncctl workers failed after the partition"
  "$PY" - "$wk" <<'EOF' || fail "phase 3: coordinator does not report rank 1 as lost: $wk"
import json, sys
d = json.loads(sys.argv[1])
ws = d.get("workers", d if isinstance(d, list) else [])
r1 = [w for w in ws if int(w.get("rank", -1)) == 1]
assert r1 and "LOST" in str(r1[0].get("state", "")).upper(), r1
EOF
  st=$(ctl "$NS_C" status) || fail "phase 3: psyncctl status failed after the partition"
  log "coordinator after the partition: $(echo "$st" | tr '\n' ' ' | cut -c1-200)"
  # The cut-off rank must end by itself (its own collective / coordinator timeouts).
  local rc1; wait_exit "$PID_w3_1" 60; rc1=$RC
  [[ "$rc1" != timeout ]] || fail "phase 3: partitioned rank 1 hung (> 60 s after the cut)"
  [[ "$rc1" == 4 || "$rc1" == 5 ]] || fail "phase 3: partitioned rank 1 exit code $rc1 (want 4 or 5)"
  log "phase 3 ok: rank 0 exit 4 in ${dt}s, rank 1 exit $rc1, coordinator reports rank 1 lost"
  stop_coordinator coord3
}

phase_hier() {
  log "phase 4: hierarchical allreduce, 2 hosts x 2 ranks"
  local flags=(--steps=60 --timeout=20s --progress-every=20 --global-batch=64 --widths=16,64,64,8 --backend=auto)
  CWORLD=4 start_coordinator netns-hier coord4 --report-timeout=20s
  local r ns host
  for r in 0 1 2 3; do
    if ((r < 2)); then ns=$NS_W0; host=$IP_W0; else ns=$NS_W1; host=$IP_W1; fi
    start "w4_$r" 240 "$ns" env PSYNC_HOST_ID="netns-host-$((r / 2))" psync-worker --coordinator="$IP_C:$PORT" \
      --rank="$r" --world-size=4 --job-id=netns-hier --gloo-host="$host" --device=cpu --save="$WORK/hier4.st" "${flags[@]}"
  done
  local seen=0 i pvar
  for i in $(seq 1 200); do
    if in_ns "$NS_W0" ss -Htn state established "( dst $IP_W1 or src $IP_W1 )" 2>/dev/null | grep -q .; then
      seen=1; break
    fi
    kill -0 "$PID_w4_0" 2>/dev/null || break
    sleep 0.05
  done
  for r in 0 1 2 3; do
    pvar=PID_w4_$r
    wait_exit "${!pvar}" 120
    [[ "$RC" == 0 ]] || fail "phase 4: rank $r exit $RC (want 0)"
  done
  grep -q "hier on cpu" "$WORK/w4_0.log" || fail "phase 4: rank 0 did not pick hier: $(grep 'rank 0 of' "$WORK/w4_0.log")"
  ((seen)) || fail "phase 4: no Gloo connection between the hosts ($IP_W0 <-> $IP_W1)"
  log "phase 4: $(grep 'rank 0 of' "$WORK/w4_0.log" | head -n1)"
  local p
  for p in "${pids[@]}"; do
    [[ -n "$p" ]] || continue
    ls /dev/shm | grep -q "^psync\.[0-9]*\.$p\." && fail "phase 4: worker pid $p left a segment in /dev/shm"
  done
  stop_coordinator coord4
  if command -v weights_diff >/dev/null; then
    CWORLD=1 start_coordinator netns-hier1 coord5 --report-timeout=20s
    start w5_0 240 "$NS_W0" psync-worker --coordinator="$IP_C:$PORT" --rank=0 --world-size=1 --job-id=netns-hier1 \
      --gloo-host="$IP_W0" --device=cpu --save="$WORK/hier1.st" "${flags[@]}"
    wait_exit "$PID_w5_0" 120
    [[ "$RC" == 0 ]] || fail "phase 4: the 1-process reference exited $RC"
    local diff; diff=$(weights_diff "$WORK/hier1.st" "$WORK/hier4.st" 1e-5) || fail "phase 4: weights differ: $diff"
    log "phase 4: 4 ranks on 2 hosts vs 1 process: $diff"
    stop_coordinator coord5
  else
    log "phase 4: weights_diff not given; skipping the comparison with a 1-process run"
  fi
  log "phase 4 ok: hier across namespaces, all exit 0"
}

# prepare NAME... -- BIN_OR_DIR...: puts each BIN_OR_DIR (a binary or the
# folder holding it) on PATH, skips without root / ip / timeout, fails when a
# NAME is not found, then makes $WORK and the EXIT trap that cleans up.
# (launch_nodes_test.sh sources this file and prepares the same way.)
prepare() {
  local need=() a b
  while [[ $# -gt 0 && $1 != -- ]]; do need+=("$1"); shift; done
  shift
  for a in "$@"; do
    if [[ -d "$a" ]]; then PATH="$(cd "$a" && pwd):$PATH"; else PATH="$(cd "$(dirname "$a")" && pwd):$PATH"; fi
  done
  [[ $(id -u) -eq 0 ]] || skip "needs root for network namespaces (uid $(id -u))"
  command -v ip >/dev/null || skip "iproute2 (ip) not installed"
  command -v timeout >/dev/null || skip "coreutils timeout not found"
  for b in "${need[@]}"; do
    command -v "$b" >/dev/null || fail "$b not found (give the built binaries, or their folder, as arguments)"
  done
  WORK=$(mktemp -d /tmp/psync-netns.XXXXXX)
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

main() {
  prepare psync-coordinator psync-worker psyncctl -- "$@"
  setup_topology
  phase_complete
  phase_runner
  phase_hier
  phase_partition
  echo "netns: 4 passed, 0 failed"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
