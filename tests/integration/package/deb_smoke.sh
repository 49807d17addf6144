#!/usr/bin/env bash
# Inside a clean debian:bookworm-slim container (scripts/compose-test.sh,
# scenario deb): installs psync's Debian package with apt (which pulls in
# what it declares), runs psync-worker --help, builds examples/ against the
# installed package and runs examples/custom_loop on 2 ranks until
# `psyncctl shutdown` stops both at the same iteration. Mounts: /pkg (the
# .deb), /examples (read-only).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive OPENBLAS_NUM_THREADS=1
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends /pkg/psync_*.deb ninja-build >/tmp/apt.log 2>&1 || { tail -20 /tmp/apt.log; exit 1; }
echo "installed: $(dpkg-query -W -f '${Package} ${Version}' psync)"
psync-worker --help | grep -q 'models (--model)'
echo "psync-worker --help: ok"
cmake -S /examples -B /tmp/ex -G Ninja >/tmp/cmake.log 2>&1 || { cat /tmp/cmake.log; exit 1; }
cmake --build /tmp/ex >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "examples built against /usr"
psync-coordinator --host=127.0.0.1 --port=0 --world-size=2 --port-file=/tmp/port >/tmp/coord.log 2>&1 &
for _ in $(seq 100); do [[ -s /tmp/port ]] && break; sleep 0.1; done
addr=127.0.0.1:$(cat /tmp/port)
/tmp/ex/custom_loop/custom_loop --coordinator="$addr" >/tmp/r0.log 2>&1 & r0=$!
/tmp/ex/custom_loop/custom_loop --coordinator="$addr" >/tmp/r1.log 2>&1 & r1=$!
for _ in $(seq 600); do grep -q "iteration 100 " /tmp/r0.log && break; sleep 0.1; done
psyncctl --coordinator="$addr" shutdown --reason="deb smoke" >/dev/null
wait "$r0"; wait "$r1"
s0=$(sed -n 's/.*before iteration \([0-9]*\).*/\1/p' /tmp/r0.log); s1=$(sed -n 's/.*before iteration \([0-9]*\).*/\1/p' /tmp/r1.log)
[[ -n $s0 && $s0 == "$s1" ]] || { echo "ranks stopped at '$s0' and '$s1'"; cat /tmp/r0.log /tmp/r1.log; exit 1; }
echo "custom_loop from the package: both ranks stopped before iteration $s0"
