#!/usr/bin/env bash
# Runs docs/guide-your-model.md's `bash` blocks, in order, in one shell with
# `set -e`, against the build installed into a temporary prefix
# (PSYNC_PREFIX) and a free port (PORT): the guide's commands are the ones
# that work.
#   guide_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
B=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
T=$(mktemp -d /tmp/psync-guide-XXXXXX)
trap 'pkill -9 -P $$ 2>/dev/null; rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1 no_proxy=127.0.0.1,localhost
cmake --install "$B" --prefix "$T/prefix" >"$T/install.log" 2>&1 || { echo "FAIL: cmake --install"; exit 1; }
/usr/bin/python3 - "$SRC/docs/guide-your-model.md" >"$T/guide.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
print("set -eo pipefail")
for i, b in enumerate(blocks, 1):
    print(f"echo '--- guide step {i}'")
    print(b)
PY
[[ $(grep -c -- '--- guide step' "$T/guide.sh") -ge 5 ]] || { echo "FAIL: the guide has fewer than 5 bash blocks"; exit 1; }
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
( cd "$T" && PSYNC_PREFIX=$T/prefix PORT=$PORT TMPDIR=$T timeout 600 bash "$T/guide.sh" ) >"$T/out.log" 2>&1
rc=$?
cat "$T/out.log"
[[ $rc == 0 ]] || { echo "FAIL: the guide's commands exited $rc"; exit 1; }
grep -q "resumed from" "$T/out.log" || { echo "FAIL: the resume step did not say it resumed"; exit 1; }
grep -q "stopped cleanly" "$T/out.log" || { echo "FAIL: the stop step did not end cleanly"; exit 1; }
echo "guide: every step ran"
