# Shared by the bench/run_*.sh scripts: source it after setting ROOT and
# BUILD_DIR. PSYNC_PYTHON names the interpreter that has PyTorch (default
# /usr/bin/python3, where Debian's python3-torch lives).
PY="${PSYNC_PYTHON:-/usr/bin/python3}"

# bench_build TARGET: configures BUILD_DIR if needed, builds only TARGET and
# prints the path of the binary. A BUILD_DIR without build files that holds
# the binary already (a prebuilt tree copied to a GPU host) is used as is.
bench_build() {
  if [[ ! -f "$BUILD_DIR/build.ninja" && ! -f "$BUILD_DIR/Makefile" && -x "$BUILD_DIR/bench/$1" ]]; then
    echo "$BUILD_DIR/bench/$1"; return 0
  fi
  if [[ ! -f "$BUILD_DIR/build.ninja" && ! -f "$BUILD_DIR/Makefile" ]]; then
    local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S "$ROOT" -B "$BUILD_DIR" "${gen[@]}" >&2
  fi
  cmake --build "$BUILD_DIR" --target "$1" -j "$(nproc)" >&2
  echo "$BUILD_DIR/bench/$1"
}

# bench_have_torch [PYTHON-CHECK]: succeeds when $PY can run the check
# (default: import torch). As root, with the default interpreter, it installs
# Debian's python3-torch first when missing; otherwise it says how and fails,
# and the caller runs psync alone.
bench_have_torch() {
  local check=${1:-import torch}
  "$PY" -c "$check" 2>/dev/null && return 0
  if [[ $(id -u) -eq 0 && $PY == /usr/bin/python3 ]]; then
    echo "python3-torch missing: installing it with apt" >&2
    apt-get update -q -o DPkg::Lock::Timeout=900 >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=900 python3-torch >&2
    "$PY" -c "$check" 2>/dev/null && return 0
  fi
  echo "PyTorch is not usable by $PY (sudo apt-get install -y python3-torch, or PSYNC_PYTHON=<python with torch>); running psync alone" >&2
  return 1
}

# bench_side LABEL CMD...: one side of an alternating round: runs CMD,
# shows its output under "== LABEL: CMD", and appends its RESULT lines to
# the caller's RESULTS array (the table is made from them at the end).
bench_side() {
  local label=$1 out; shift
  echo "== $label: $*"
  out=$("$@")
  echo "$out"
  RESULTS+=("$(grep '^RESULT' <<<"$out")")
}

# bench_same_kernels BENCH: the same OpenBLAS kernels for both sides. Where
# OpenBLAS does not recognise the CPU, psync's binaries re-run themselves with
# OPENBLAS_CORETYPE set (worker/tensor/cpu/blas_core.h); torch loads the same
# libopenblas (Debian's torch uses the system BLAS), so it gets the core the
# psync binary ends up with. Kept when OPENBLAS_CORETYPE is set already.
bench_same_kernels() {
  [[ -n ${OPENBLAS_CORETYPE:-} ]] && return 0
  local core
  core=$(OPENBLAS_VERBOSE=2 "$1" --help 2>&1 >/dev/null | sed -n 's/^Core: //p' | tail -1 || true)
  if [[ -n $core ]]; then export OPENBLAS_CORETYPE=$core; echo "OpenBLAS kernels for both sides: $core" >&2; fi
}

# bench_same_threads N: the same thread budget for both sides: OpenBLAS
# (psync's matmuls, and torch's BLAS on Debian) and OpenMP (torch's intra-op
# pool); the binaries also get --threads.
bench_same_threads() {
  export OMP_NUM_THREADS="$1" OPENBLAS_NUM_THREADS="$1" MKL_NUM_THREADS="$1"
}
