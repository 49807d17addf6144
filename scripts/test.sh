#!/usr/bin/env bash
# The whole test suite: install missing packages, build (CUDA code included
# when nvcc is present), run every test through ctest. GPU tests skip
# themselves when no GPU is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PSYNC_BUILD_DIR:-$root/build}
PSYNC_WITH_DEPLOY_TOOLS=1 PSYNC_WITH_TORCH=1 PSYNC_WITH_DOC_TOOLS=1 bash "$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure -j "${PSYNC_TEST_JOBS:-2}" --timeout 300 "$@"
