#!/usr/bin/env bash
# Configures and builds psync into ${PSYNC_BUILD_DIR:-build} with Ninja.
# Extra arguments go to cmake's configure step (e.g. -DWITH_CUDA=OFF).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PSYNC_BUILD_DIR:-$root/build}
bash "$root/scripts/install-deps.sh"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja "$@"
elif (($# > 0)); then
  cmake "$build" "$@"
fi
cmake --build "$build" -j "${PSYNC_JOBS:-$(nproc)}"
