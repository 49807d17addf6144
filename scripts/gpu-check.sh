#!/usr/bin/env bash
# One-shot check of psync's GPU path, for a machine with an NVIDIA GPU.
#
#   scripts/gpu-check.sh                 # build dir: <repo>/build-gpu
#   BUILD_DIR=/tmp/b STEPS=200 GPT_STEPS=50 GPU_CHECK_LOGS=/tmp/logs scripts/gpu-check.sh
#   PREBUILT=1 BUILD_DIR=<tree> PSYNC_PYTHON=python3 scripts/gpu-check.sh
#        # binaries built elsewhere with CUDA (a GPU host without psync's
#        # build dependencies); PSYNC_PYTHON: the interpreter with torch;
#        # scripts/bundle-libs.sh <tree> on the build machine first copies the
#        # Debian libraries they load into <tree>/bundled-libs (put on
#        # LD_LIBRARY_PATH here)
#
# 1. builds with CUDA (fails if nvcc is missing: there is nothing to check),
#    unless PREBUILT=1;
# 2. runs every CUDA/NCCL test (ctest -R "Cuda|Nccl|cuda_shm": the bf16
#    and cuBLASLt kernels against the CPU, shm carrying CUDA tensors, two
#    ranks sharing one GPU over shm), listing skipped ones
#    (a skip on a GPU machine means a test could not see the device);
# 3. psync-launch end to end, --device=cuda, world 1 (and world 2 when there
#    are >= 2 GPUs): the MLP (SGD) and the GPT (AdamW, clipping), each
#    compared with the same job on CPU (weights_diff);
#    and the GPT at --precision=bf16 on cuda vs on cpu;
# 4. psync-step-bench and psync-optim-bench --device=cuda next to
#    bench/torch_step.py and bench/torch_optim.py on CUDA (when $PSYNC_PYTHON,
#    default /usr/bin/python3, has torch with CUDA);
# 5. the GPT-2 small training step (124M, batch 8 x 1024; issue 21) at each
#    precision (fp32, tf32, bf16, bf16 + --cuda-graph; PSYNC_CUBLASLT_EPILOGUES=0
#    for the unfused epilogues) beside PyTorch (the same precision, fused or
#    foreach AdamW, scaled_dot_product_attention, and torch.compile at bf16):
#    ms per step, tokens/s, MFU (against 989.4 TFLOP/s dense bf16) and peak
#    memory; GPT2_STEPS, GPT2_ROUNDS;
# 6. prints a short report. Exit 0 when every check passed, 1 otherwise.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
STEPS="${STEPS:-100}"
OUT="${GPU_CHECK_LOGS:-$(mktemp -d /tmp/psync-gpu-check.XXXXXX)}"; mkdir -p "$OUT"
PY="${PSYNC_PYTHON:-/usr/bin/python3}"
declare -a REPORT=()
FAILED=0
ok()   { REPORT+=("PASS  $*"); }
bad()  { REPORT+=("FAIL  $*"); FAILED=1; }
info() { REPORT+=("INFO  $*"); }
report() {
  echo
  echo "==================== psync GPU check ===================="
  printf '%s\n' "${REPORT[@]}"
  echo "logs: $OUT"
  exit "$FAILED"
}

command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
if [[ ${PREBUILT:-0} != 1 ]] && ! command -v nvcc >/dev/null; then bad "nvcc not found (install the CUDA toolkit)"; report; fi
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader > "$OUT/gpus.txt" 2>&1
  NGPU=$(grep -c . "$OUT/gpus.txt" || true)
  while read -r line; do info "gpu: $line"; done < "$OUT/gpus.txt"
else
  NGPU=0
fi
if [[ "$NGPU" -lt 1 ]]; then bad "no GPU visible (nvidia-smi)"; report; fi

# ---- 1. build
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ${PREBUILT:-0} == 1 && -d "$BUILD_DIR/bundled-libs" ]]; then
  export LD_LIBRARY_PATH="$BUILD_DIR/bundled-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [[ ${PREBUILT:-0} == 1 ]]; then
  if [[ -x "$BUILD_DIR/worker/runtime/psync-worker" ]]; then info "prebuilt binaries in $BUILD_DIR"
  else bad "PREBUILT=1 but $BUILD_DIR/worker/runtime/psync-worker is missing"; report; fi
elif cmake -S "$ROOT" -B "$BUILD_DIR" "${gen[@]}" > "$OUT/cmake.log" 2>&1 &&
   cmake --build "$BUILD_DIR" -j "$(nproc)" > "$OUT/build.log" 2>&1; then
  if grep -q "psync: CUDA" "$OUT/cmake.log"; then ok "build with CUDA ($(grep -o 'psync: CUDA.*' "$OUT/cmake.log"))"
  else bad "configured WITHOUT CUDA (see $OUT/cmake.log)"; report; fi
else
  bad "build failed (tail of $OUT/build.log below)"; tail -30 "$OUT/build.log"; report
fi
BIN="$BUILD_DIR"

# ---- 2. CUDA / NCCL tests
if ctest --test-dir "$BUILD_DIR" -R "Cuda|Nccl|cuda_shm" --output-on-failure -j 1 > "$OUT/ctest.log" 2>&1; then
  ok "ctest -R 'Cuda|Nccl|cuda_shm': $(grep -o '[0-9]*% tests passed.*' "$OUT/ctest.log")"
else
  bad "ctest -R 'Cuda|Nccl|cuda_shm': $(grep -o '[0-9]*% tests passed.*' "$OUT/ctest.log"); see $OUT/ctest.log"
  grep -E '\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Exception' "$OUT/ctest.log" | sed 's/^/      /' | head -20
fi
skipped=$(grep -cE '\*\*\*Skipped' "$OUT/ctest.log" || true)
[[ "$skipped" -gt 0 ]] && info "$skipped CUDA/NCCL test(s) skipped (expected only for '2 CUDA devices' / 8 GiB tests on small GPUs):" &&
  grep -E '\(Skipped\)' "$OUT/ctest.log" | sed 's/^[[:space:]]*/      /' | head -20 | while read -r l; do info "$l"; done

# ---- 3. end to end: psync-launch, cuda vs cpu with the same job
LAUNCH="$BIN/client/launch/psync-launch"
WDIFF="$BIN/tests/integration/worker/weights_diff"
# The MLP with SGD, and the GPT with AdamW on random bytes (the same file for
# both devices). AdamW normalises each update, so a rounding difference can
# move a weight by up to lr per step: a small lr keeps the bound meaningful.
head -c 100000 /dev/urandom > "$OUT/tokens.bin"
mlp_job=(--widths=32,64,64,16 --global-batch=64 --steps="$STEPS" --progress-every=0)
gpt_job=(--model=gpt --data="$OUT/tokens.bin" --data-format=bytes --block-size=32 --n-layer=2 --n-head=2
         --n-embd=64 --global-batch=8 --steps="${GPT_STEPS:-20}" --optimizer=adamw --lr=1e-4
         --weight-decay=0.1 --clip-grad-norm=1 --progress-every=0)
run_job() {  # name nproc device job-flags...
  local name=$1 n=$2 dev=$3; shift 3
  timeout 300 "$LAUNCH" --nproc="$n" -- "$@" --device="$dev" --save="$OUT/$name.safetensors" \
    --summary="$OUT/$name.rank{rank}.json" > "$OUT/$name.log" 2>&1
}
check_job() {  # model nproc job-flags...: the job on cuda, then on cpu, weights compared
  local model=$1 n=$2; shift 2
  local c="$model-cuda-w$n" p="$model-cpu-w$n"
  if ! run_job "$c" "$n" cuda "$@"; then
    bad "$model: psync-launch --nproc=$n --device=cuda failed: $(tail -2 "$OUT/$c.log" | tr '\n' ' ')"; return
  fi
  local loss
  loss=$(grep -ho '"final_loss": *[0-9.eE+-]*' "$OUT/$c.rank0.json" 2>/dev/null | head -1)
  ok "$model: psync-launch --nproc=$n --device=cuda ($loss)"
  if ! run_job "$p" "$n" cpu "$@"; then bad "$model: psync-launch --nproc=$n --device=cpu failed (see $OUT/$p.log)"; return; fi
  # Same contract on both devices: cuBLAS FP32 and OpenBLAS round
  # differently, so allow a small drift after the job's steps.
  local d tol=${BF16_TOL:-1e-3}
  if d=$("$WDIFF" "$OUT/$c.safetensors" "$OUT/$p.safetensors" "$tol" 2>&1); then
    ok "$model world $n: cuda weights == cpu weights within $tol ($(tail -1 <<<"$d"))"
  else
    bad "$model world $n: cuda and cpu weights differ: $(tail -1 <<<"$d")"
  fi
}
for n in 1 2; do
  if [[ $n -eq 2 && $NGPU -lt 2 ]]; then info "world 2 on CUDA skipped: $NGPU GPU"; continue; fi
  check_job mlp "$n" "${mlp_job[@]}"
  check_job gpt "$n" "${gpt_job[@]}"
done
# bf16: cuBLASLt and oneDNN round their bf16 products differently, and a
# flipped bf16 rounding moves AdamW's step on the (zero-gradient) key bias:
# at lr 1e-4 x GPT_STEPS steps a weight can drift ~2e-3; bound 5e-3.
BF16_TOL=5e-3 check_job gpt_bf16 1 "${gpt_job[@]}" --precision=bf16

# ---- 4. benches next to PyTorch: an MLP training step, and AdamW over a
# GPT-2 small's parameters (124M)
bench_gpu() {  # name command...
  local name=$1; shift
  if BUILD_DIR="$BUILD_DIR" "$@" > "$OUT/$name.log" 2>&1; then
    ok "$name (cuda) vs PyTorch:"
    sed -n '/^\(MLP\|optimizer step\)/,$p' "$OUT/$name.log" | while read -r l; do info "  $l"; done
  else
    bad "$name failed (see $OUT/$name.log)"; tail -5 "$OUT/$name.log"
  fi
}
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  bench_gpu step_bench env DEVICE=cuda THREADS=1 ROUNDS=3 "$ROOT/bench/run_step_bench.sh"
  bench_gpu optim_bench env THREADS=1 ROUNDS=3 \
    GPT="--vocab-size=50257 --block-size=1024 --n-layer=12 --n-embd=768" "$ROOT/bench/run_optim_bench.sh" --device=cuda
else
  if "$BIN/bench/psync-step-bench" --device=cuda > "$OUT/step_bench.log" 2>&1; then
    ok "psync-step-bench --device=cuda: $(grep '^RESULT' "$OUT/step_bench.log")"
  else
    bad "psync-step-bench --device=cuda failed (see $OUT/step_bench.log)"
  fi
  info "no PyTorch with CUDA at $PY: psync alone"
fi

# ---- 5. GPT-2 small, one training step, each precision, beside PyTorch
GPT2=(--vocab-size=50257 --block-size=1024 --n-layer=12 --n-head=12 --n-embd=768 --batch=8
      --steps="${GPT2_STEPS:-10}" --warmup=3 --rounds="${GPT2_ROUNDS:-2}" --device=cuda)
gpt2_run() {  # name command...: one configuration; its RESULT line goes to $OUT/gpt2.results
  local name=$1; shift
  if "$@" > "$OUT/gpt2_$name.log" 2>&1; then
    grep '^RESULT' "$OUT/gpt2_$name.log" | sed "s/^RESULT /RESULT config=$name /" >> "$OUT/gpt2.results"
  else
    bad "GPT-2 small $name failed: $(tail -2 "$OUT/gpt2_$name.log" | tr '\n' ' ')"
  fi
}
: > "$OUT/gpt2.results"
PSB="$BIN/bench/psync-gpt-step-bench"
have_torch_cuda=0
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && have_torch_cuda=1
for p in fp32 tf32 bf16; do
  gpt2_run "psync-$p" "$PSB" "${GPT2[@]}" --precision=$p
  if ((have_torch_cuda)); then
    gpt2_run "torch-$p" "$PY" "$ROOT/bench/gpt_torch.py" "${GPT2[@]}" --precision=$p --adamw=best --attention=sdpa
  fi
done
gpt2_run psync-bf16-graph "$PSB" "${GPT2[@]}" --precision=bf16 --cuda-graph
gpt2_run psync-bf16-unfused env PSYNC_CUBLASLT_EPILOGUES=0 "$PSB" "${GPT2[@]}" --precision=bf16
if ((have_torch_cuda)); then
  gpt2_run torch-bf16-compile "$PY" "$ROOT/bench/gpt_torch.py" "${GPT2[@]}" --precision=bf16 --adamw=best \
    --attention=sdpa --compile
fi
if [[ -s "$OUT/gpt2.results" ]]; then
  ok "GPT-2 small step (batch 8 x 1024), median of the best round; MFU = 7.006 TFLOP / (s x 989.4 TFLOP/s):"
  awk '{
      delete v
      for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      ms = v["median_ms"]
      printf "  %-22s %8.2f ms  %9.0f tok/s  MFU %5.1f%%  peak %s MiB\n", v["config"], ms, 8192 / (ms / 1e3),
             100 * 7.006e12 / (ms / 1e3) / 989.4e12, ("peak_mib" in v) ? v["peak_mib"] : "-"
    }' "$OUT/gpt2.results" | while read -r l; do info "$l"; done
fi

report
