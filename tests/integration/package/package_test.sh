#!/usr/bin/env bash
# psync as a user gets it: `cmake --install` into a temporary prefix, the
# examples built out of tree against it (find_package(psync)), and run from
# the prefix's programs, with real processes on 127.0.0.1 and bounded waits.
#
#   package_test.sh CASE BUILD_DIR SOURCE_DIR
#     install       the prefix has every program, libpsync.so, the public headers
#                   and a CMake package; psync-worker from it runs (--help)
#     custom_loop   examples/custom_loop, 2 ranks, stopped by `psyncctl shutdown`
#                   at the same iteration on both (exit 0)
#     your_model    examples/your_model (a model registered from outside, its own
#                   flags) through `psync-launch --nproc=2 --worker-bin`: trains to
#                   the end == one process on the full batch (1e-5), resumes from its
#                   checkpoint bit for bit, stops on shutdown, shows on /metrics
#     job_loop      tests/integration/package/job_loop (its own loop on control::Job): 2 ranks ==
#                   1 process on the full batch (1e-5) plain, with --zero=1 and 2, with a
#                   branch unused on even iterations (find_unused_parameters), and with 2
#                   micro-batches under no_sync, and starting at iteration 5 (a resumed job);
#                   live recovery in the loop (Job::Rejoin): one of 2 ranks killed and
#                   started again, the other keeps its pid, the weights are an
#                   uninterrupted run's bit for bit
#     llama         examples/llama (a Llama-style decoder with custom autograd functions):
#                   llama_gradcheck passes; 2 ranks x 10 AdamW steps == one PyTorch process
#                   on the full batch (llama_reference.py, 1e-4)
# Exit: 0 pass, 1 fail.
set -uo pipefail
CASE=$1
B=$(cd "$2" && pwd)
SRC=$(cd "$3" && pwd)
DIFF=$B/tests/integration/worker/weights_diff
T=$(mktemp -d /tmp/psync-pkg-XXXXXX)
export OPENBLAS_NUM_THREADS=1 no_proxy=127.0.0.1,localhost
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [[ -n ${KEEP_T:-} ]] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL [$CASE]: $*"; for f in "$T"/*.log; do [[ -f $f ]] && { echo "--- $f"; tail -8 "$f"; }; done; exit 1; }
note() { echo "[$CASE] $*"; }

# The prefix and the examples, as a user would make them.
P=$T/prefix
cmake --install "$B" --prefix "$P" >"$T/install.log" 2>&1 || fail "cmake --install"
BIN=$P/bin
build_examples() {  # build_examples TARGET...: examples/ configured against the prefix, TARGETs built
  cmake -S "$SRC/examples" -B "$T/ex" -G Ninja -DCMAKE_PREFIX_PATH="$P" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$T/ex-configure.log" 2>&1 || fail "configuring examples/ against the prefix"
  cmake --build "$T/ex" --target "$@" >"$T/ex-build.log" 2>&1 || fail "building examples/ against the prefix"
}
wait_exit() {  # wait_exit PID SECONDS: sets rc (or "timeout")
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null; do
    [[ $(ps -o stat= -p "$pid" 2>/dev/null) == Z* ]] && break
    sleep 0.1; t=$((t + 1)); ((t > limit * 10)) && { rc=timeout; return; }
  done
  wait "$pid"; rc=$?
}
wait_for() {  # wait_for FILE PATTERN SECONDS
  for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "no '$2' in $1 within $3 s"
}

case $CASE in
  install)
    for prog in psync-coordinator psync-worker psyncctl psync-launch psync-relay psync-tokenize psync-export psync-sample; do
      [[ -x $BIN/$prog ]] || fail "$prog not installed"
    done
    ls "$P"/lib*/libpsync.so* >/dev/null 2>&1 || fail "libpsync.so not installed"
    [[ -f $P/include/psync/psync.h && -f $P/include/psync/version.h ]] || fail "public headers not installed"
    ls "$P"/lib*/cmake/psync/psyncConfig.cmake "$P"/lib*/cmake/psync/psyncConfigVersion.cmake >/dev/null 2>&1 \
      || fail "CMake package not installed"
    if find "$P/include" -path '*/worker/*' -o -path '*/psync/v1/*' | grep -q .; then fail "private headers installed"; fi
    "$BIN/psync-worker" --help >"$T/help.log" 2>&1 || fail "psync-worker --help from the prefix"
    grep -q "models (--model)" "$T/help.log" || fail "psync-worker --help lists no models"
    # The programs find libpsync.so through their RUNPATH, wherever the prefix is.
    mv "$P" "$T/moved" && P=$T/moved && BIN=$P/bin
    "$BIN/psync-worker" --help >/dev/null 2>&1 || fail "psync-worker from a moved prefix"
    note "installed: $(ls "$BIN" | tr '\n' ' '); $(find "$P/include/psync" -name '*.h' | wc -l) public headers" ;;

  custom_loop)
    build_examples custom_loop
    rm -f "$T/port"
    "$BIN/psync-coordinator" --host=127.0.0.1 --port=0 --world-size=2 --port-file="$T/port" >"$T/coord.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 200); do [[ -s $T/port ]] && break; sleep 0.05; done
    [[ -s $T/port ]] || fail "coordinator wrote no port file"
    ADDR=127.0.0.1:$(cat "$T/port")
    "$T/ex/custom_loop/custom_loop" --coordinator="$ADDR" >"$T/r0.log" 2>&1 & R0=$!; PIDS+=($R0)
    "$T/ex/custom_loop/custom_loop" --coordinator="$ADDR" >"$T/r1.log" 2>&1 & R1=$!; PIDS+=($R1)
    wait_for "$T/r0.log" "iteration 200 " 120
    "$BIN/psyncctl" --coordinator="$ADDR" shutdown --reason="package test" >"$T/ctl.log" 2>&1 || fail "psyncctl shutdown"
    wait_exit "$R0" 60; rc0=$rc
    wait_exit "$R1" 60; rc1=$rc
    [[ $rc0 == 0 && $rc1 == 0 ]] || fail "custom_loop exits: $rc0 $rc1"
    s0=$(sed -n 's/.*stopped by the coordinator before iteration \([0-9]*\).*/\1/p' "$T/r0.log")
    s1=$(sed -n 's/.*stopped by the coordinator before iteration \([0-9]*\).*/\1/p' "$T/r1.log")
    [[ -n $s0 && $s0 == "$s1" ]] || fail "the ranks stopped at different iterations: '$s0' vs '$s1'"
    first=$(sed -n 's/.*iteration 0 loss \([0-9.]*\).*/\1/p' "$T/r0.log"); last=$(grep -o 'loss [0-9.]*' "$T/r0.log" | tail -1)
    note "both ranks stopped before iteration $s0; rank 0 loss $first -> ${last#loss }" ;;

  your_model)
    build_examples your_model
    YM=$T/ex/your_model/your_model
    "$YM" --help >"$T/help.log" 2>&1 || fail "your_model --help"
    grep -q -- "--res-hidden=64" "$T/help.log" || fail "--help does not list the model's own flags"
    out=$("$YM" --model=gpt --res-hidden=8 2>&1); rc=$?
    [[ $rc == 2 && $out == *"--res-hidden belongs to --model=resmlp"* ]] || fail "a model flag for another model: rc=$rc $out"
    M=(--model=resmlp --res-hidden=24 --res-blocks=2 --widths=12,3 --synthetic-rows=512 --global-batch=16
       --optimizer=adamw --lr=0.01 --quiet)
    launch() {  # launch NPROC LOG WORKER-FLAGS...
      local n=$1 log=$2; shift 2
      timeout 300 "$BIN/psync-launch" --nproc="$n" --worker-bin="$YM" -- "$@" >"$log" 2>&1
    }
    launch 2 "$T/two.log" "${M[@]}" --steps=20 --save="$T/two.st" || fail "2 ranks: exit $?"
    launch 1 "$T/one.log" "${M[@]}" --steps=20 --save="$T/one.st" || fail "1 rank: exit $?"
    "$DIFF" "$T/one.st" "$T/two.st" 1e-5 >"$T/diff1.log" 2>&1 || fail "2 ranks differ from one process: $(cat "$T/diff1.log")"
    # --zero=3 gathers the model's layers from its forward hooks (it calls them through operator())
    launch 2 "$T/z3.log" "${M[@]}" --steps=20 --zero=3 --bucket-cap-mb=0.002 --first-bucket-mb=0.001 \
      --save="$T/z3.st" || fail "2 ranks, --zero=3: exit $?"
    "$DIFF" "$T/two.st" "$T/z3.st" 1e-5 >"$T/diff3.log" 2>&1 || fail "--zero=3 differs: $(cat "$T/diff3.log")"
    launch 2 "$T/cut.log" "${M[@]}" --steps=10 --checkpoint-dir="$T/ckpt" --checkpoint-every=5 || fail "cut run"
    launch 2 "$T/resumed.log" "${M[@]}" --steps=20 --checkpoint-dir="$T/ckpt" --resume --save="$T/resumed.st" \
      || fail "resumed run"
    "$DIFF" "$T/two.st" "$T/resumed.st" 0 >"$T/diff2.log" 2>&1 || fail "resumed != uninterrupted: $(cat "$T/diff2.log")"
    # A long run: /metrics shows it, `psyncctl shutdown` stops it cleanly.
    MPORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$BIN/psync-launch" --nproc=2 --worker-bin="$YM" --coordinator-args="--metrics-port=$MPORT" \
      -- "${M[@]}" --steps=1000000 >"$T/long.log" 2>&1 & LP=$!; PIDS+=($LP)
    wait_for "$T/long.log" "token in " 60
    LADDR=$(sed -n 's/.*coordinator \([0-9.]*:[0-9]*\) (pid [0-9]*; token in \([^)]*\)).*/\1/p' "$T/long.log")
    LTOK=$(cat "$(sed -n 's/.*coordinator [0-9.]*:[0-9]* (pid [0-9]*; token in \([^)]*\)).*/\1/p' "$T/long.log")")
    for _ in $(seq 600); do
      it=$(PSYNC_TOKEN=$LTOK "$BIN/psyncctl" --coordinator="$LADDR" --json status 2>/dev/null |
           sed -n 's/.*"iteration":"\{0,1\}\(-\{0,1\}[0-9]*\).*/\1/p')
      [[ -n $it ]] && ((it >= 5)) && break; sleep 0.1
    done
    /usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
      "http://127.0.0.1:$MPORT/metrics" >"$T/metrics.txt" 2>&1 || fail "GET /metrics: $(cat "$T/metrics.txt")"
    grep -q '^psync_rank_iteration{.*rank="1"' "$T/metrics.txt" || fail "/metrics shows no rank 1 iteration"
    PSYNC_TOKEN=$LTOK "$BIN/psyncctl" --coordinator="$LADDR" shutdown >"$T/ctl.log" 2>&1 || fail "psyncctl shutdown"
    wait_exit "$LP" 60
    [[ $rc == 0 ]] || fail "psync-launch after shutdown: exit $rc"
    note "2 ranks == 1 process (1e-5), --zero=3 == --zero=0 (1e-5), resume bit for bit, shutdown after iteration ${it:-?}" ;;

  llama)
    build_examples llama llama_gradcheck
    LM=$T/ex/llama/llama
    "$T/ex/llama/llama_gradcheck" >"$T/gradcheck.log" 2>&1 || fail "llama_gradcheck: $(cat "$T/gradcheck.log")"
    "$LM" --help >"$T/help.log" 2>&1 || fail "llama --help"
    grep -q -- "--n-kv-head=2" "$T/help.log" || fail "--help does not list --n-kv-head"
    head -c 20000 /dev/urandom >"$T/data.bin"  # random bytes: V = 256
    out=$(timeout 60 "$LM" --model=llama --data="$T/data.bin" --data-format=bytes --block-size=16 --n-embd=32 --n-kv-head=3 2>&1); rc=$?
    [[ $rc == 2 && $out == *"--n-kv-head=3 must divide --n-head=4"* ]] || fail "a bad --n-kv-head: rc=$rc $out"
    # Weight decay on (the reference decays 2+-dim parameters only, as psync). --eps=1e-6, not the
    # default 1e-8: an element whose gradient is about eps turns float32 round-off in the gradient
    # (~1e-9, in torch as in psync) into an update difference of lr * round-off / (4 eps), which at
    # 1e-8 reached 9e-5 on 1 of 15 random files; at 1e-6 the worst of 18 was 1.8e-5.
    M=(--model=llama --data="$T/data.bin" --data-format=bytes --vocab-size=256 --block-size=16 --n-layer=2 --n-head=4
       --n-kv-head=2 --n-embd=32 --global-batch=8 --optimizer=adamw --lr=0.003 --weight-decay=0.1 --eps=1e-6 --quiet)
    timeout 300 "$BIN/psync-launch" --nproc=1 --worker-bin="$LM" -- "${M[@]}" --steps=0 --save="$T/init.st" >"$T/init.log" 2>&1 \
      || fail "initial weights (--steps=0 --save): exit $?"
    timeout 300 "$BIN/psync-launch" --nproc=2 --worker-bin="$LM" -- "${M[@]}" --init="$T/init.st" --steps=10 --save="$T/two.st" \
      >"$T/two.log" 2>&1 || fail "2 ranks: exit $?"
    /usr/bin/python3 "$SRC/tests/integration/package/llama_reference.py" --init "$T/init.st" --data "$T/data.bin" \
      --block-size 16 --n-head 4 --world-size 2 --global-batch 8 --steps 10 --lr 0.003 --weight-decay 0.1 \
      --eps 1e-6 --out "$T/torch.st" >"$T/torch.log" 2>&1 || fail "llama_reference.py"
    "$DIFF" "$T/torch.st" "$T/two.st" 1e-4 >"$T/diff.log" 2>&1 || fail "2 ranks differ from PyTorch: $(cat "$T/diff.log")"
    note "llama_gradcheck: $(grep -c ' ok$' "$T/gradcheck.log") checks ok; 2 ranks x 10 AdamW steps vs one PyTorch process: $(cat "$T/diff.log") (limit 1e-4)" ;;

  job_loop)
    JL=$B/tests/integration/package/job_loop
    run_loop() {  # run_loop WORLD OUT FLAGS...: a coordinator and WORLD ranks of job_loop
      local w=$1 out=$2; shift 2
      rm -f "$T/port"
      "$BIN/psync-coordinator" --host=127.0.0.1 --port=0 --world-size="$w" --port-file="$T/port" >"$T/coord.log" 2>&1 &
      local cp=$!; PIDS+=($cp)
      for _ in $(seq 200); do [[ -s $T/port ]] && break; sleep 0.05; done
      local addr=127.0.0.1:$(cat "$T/port") pids=() r
      for ((r = 0; r < w; r++)); do "$JL" --coordinator="$addr" --out="$out" "$@" >"$T/jl$r.log" 2>&1 & pids+=($!); PIDS+=($!); done
      for p in "${pids[@]}"; do wait_exit "$p" 120; [[ $rc == 0 ]] || fail "job_loop $* (world $w): exit $rc"; done
      kill "$cp" 2>/dev/null; wait "$cp" 2>/dev/null
    }
    close() {  # close A B TOL
      /usr/bin/python3 - "$@" <<'PY' || fail "weights differ: $*"
import sys
a = {tuple(l.split()[:2]): float(l.split()[2]) for l in open(sys.argv[1])}
b = {tuple(l.split()[:2]): float(l.split()[2]) for l in open(sys.argv[2])}
assert a.keys() == b.keys() and a, "different parameters"
d = max(abs(a[k] - b[k]) for k in a)
print(f"max |diff| {d:.3g} over {len(a)} values ({sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]})")
sys.exit(0 if d <= float(sys.argv[3]) else 1)
PY
    }
    for cfg in "plain|" "zero1|--zero=1" "zero2|--zero=2" "unused|--find-unused" "accumulate|--accumulate=2" \
               "all|--zero=1 --find-unused --accumulate=2" "start|--start=5"; do
      name=${cfg%%|*}; flags=${cfg#*|}
      run_loop 1 "$T/$name.1" $flags
      run_loop 2 "$T/$name.2" $flags
      note "$name: $(close "$T/$name.1" "$T/$name.2" 1e-5)"
    done
    # Live recovery in a user's loop: 2 ranks of job_loop --live against a
    # coordinator with --max-restarts=1 (--recovery=live, its default); one
    # is killed with kill -9 mid-run and the same program started again. The
    # other keeps its pid and goes on through Job::Rejoin, the new process is
    # healed at its Join, and the weights are an uninterrupted run's, bit for bit.
    run_loop 2 "$T/live.u" --live --steps=3000
    rm -f "$T/port"
    "$BIN/psync-coordinator" --host=127.0.0.1 --port=0 --world-size=2 --max-restarts=1 --port-file="$T/port" \
      >"$T/coord.log" 2>&1 &
    cp=$!; PIDS+=($cp)
    for _ in $(seq 200); do [[ -s $T/port ]] && break; sleep 0.05; done
    addr=127.0.0.1:$(cat "$T/port")
    live=(--coordinator="$addr" --out="$T/live.r" --live --steps=3000)
    "$JL" "${live[@]}" >"$T/jl0.log" 2>&1 & p0=$!; PIDS+=($p0)
    "$JL" "${live[@]}" >"$T/jl1.log" 2>&1 & p1=$!; PIDS+=($p1)
    it=0
    for _ in $(seq 600); do
      it=$("$BIN/psyncctl" --coordinator="$addr" status 2>/dev/null | sed -n 's/.*  iteration \([0-9]*\).*/\1/p' | head -1)
      ((${it:-0} >= 300)) && break
      sleep 0.1
    done
    ((${it:-0} >= 300)) || fail "the live job did not reach iteration 300: $("$BIN/psyncctl" --coordinator="$addr" status 2>&1)"
    kill -9 "$p1"
    "$JL" "${live[@]}" >"$T/jl2.log" 2>&1 & p2=$!; PIDS+=($p2)
    for p in "$p0" "$p2"; do wait_exit "$p" 120; [[ $rc == 0 ]] || fail "job_loop --live: exit $rc after the kill"; done
    kill "$cp" 2>/dev/null; wait "$cp" 2>/dev/null
    grep -q "job_loop: rank [01] rejoined at iteration [0-9]*" "$T/jl0.log" ||
      fail "the surviving process did not rejoin in-process: $(cat "$T/jl0.log")"
    note "live: killed at iteration $it; $(grep -o "rank [01] rejoined at iteration [0-9]*" "$T/jl0.log"); $(close "$T/live.u" "$T/live.r" 0)" ;;

  *) echo "unknown case $CASE"; exit 1 ;;
esac
