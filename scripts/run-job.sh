#!/usr/bin/env bash
# The main job: build psync (scripts/build.sh installs missing packages
# first), then psync-launch starts a local coordinator and 2 CPU workers
# (--backend=auto: shared memory on one host) that train a small GPT on
# Debian's fortunes corpus (installed when missing, as root) through a
# byte-level BPE of 1024 tokens trained on it (psync-tokenize: about 2 s),
# print a progress line (step, loss, val loss, tokens/s, ETA), a text sample
# from the trained weights (psync-sample --tokenizer) and a closing summary.
#
#   scripts/run-job.sh [worker flags]        e.g. --steps=4000 --n-layer=6
#   scripts/run-job.sh --model=cnn           the CNN on Fashion-MNIST
#   scripts/run-job.sh --model=mlp           the MLP on Fashion-MNIST
#
# Flags given here come after the defaults, so they win. Environment:
# PSYNC_BPE_VOCAB (1024; 0 = the character-level job on raw bytes, 1500 steps),
# PSYNC_BUILD_DIR (build/), PSYNC_NPROC (2 workers), PSYNC_OUT (a fresh
# directory under /tmp) for the weights (final.safetensors), checkpoints,
# per-rank summaries, metrics (metrics-RANK.jsonl: scripts/plot-run.sh OUT
# draws them) and Chrome traces.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PSYNC_BUILD_DIR:-$root/build}
nproc_workers=${PSYNC_NPROC:-2}
out=${PSYNC_OUT:-$(mktemp -d /tmp/psync-job-XXXXXX)}
mkdir -p "$out"

model=gpt
for a in "$@"; do
  case $a in --model=*) model=${a#--model=} ;; esac
done

bash "$root/scripts/build.sh"
launch=$build/client/launch/psync-launch
sample=$build/worker/sample/psync-sample
tokenize=$build/worker/tools/psync-tokenize
bpe_vocab=${PSYNC_BPE_VOCAB:-1024}
for bin in "$launch" "$build/server/psync-coordinator" "$build/worker/runtime/psync-worker" "$sample" "$tokenize"; do
  [[ -x $bin ]] || { echo "run-job: $bin was not built" >&2; exit 1; }
done

# fortunes-min has a few files; fortunes has the corpus (about 2.5 MB of text).
fortunes_corpus() {
  local dir=/usr/share/games/fortunes
  if [[ ! -f $dir/computers ]]; then
    if [[ $(id -u) -eq 0 ]]; then
      echo "run-job: installing Debian's fortunes corpus" >&2
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends fortunes >&2 \
        || { apt-get -o DPkg::Lock::Timeout=900 update -q >&2 &&
             DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends fortunes >&2; }
    else
      echo "run-job: the fortunes corpus is missing: sudo apt-get install -y fortunes" >&2
      exit 1
    fi
  fi
  # Every fortune file as text (not the .dat indexes or the .u8 links), one
  # fortune per record, shuffled in a fixed order (the same file every run):
  # in file order the held-out tail (--val-fraction) would be all of "zippy",
  # a style the model never trained on. Fortunes are separated by blank lines.
  local f
  for f in "$dir"/*; do
    case $f in *.dat | *.u8) continue ;; esac
    [[ -f $f && ! -L $f ]] && { cat "$f"; echo "%"; }
  done | awk '$0 == "%" { if (r != "") print r; r = ""; next } { r = r (r == "" ? "" : "\001") $0 }' |
    shuf --random-source=<(yes psync) | awk '{ gsub(/\001/, "\n"); print; print "" }' >"$out/fortunes.txt"
}

# The GPT's data: a BPE of $bpe_vocab tokens trained on the corpus and the
# corpus as llm.c shards (out/tokenizer, out/tokens), or the raw bytes.
# Why BPE: at the same wall time (1330 BPE steps cost what 1500 byte steps
# do: +13% CPU per step for the 1024-wide head), held-out text costs 2.37
# bits per byte instead of 2.64, and the samples are mostly real words.
sample_flags=(--tokens=400)
gpt_data() {
  if [[ $bpe_vocab == 0 ]]; then
    data_flags=(--data="$out/fortunes.txt" --data-format=bytes --steps=1500)
    return
  fi
  "$tokenize" train --input="$out/fortunes.txt" --vocab-size="$bpe_vocab" --out="$out/tokenizer"
  "$tokenize" encode --tokenizer="$out/tokenizer" --input="$out/fortunes.txt" --out="$out/tokens/fortunes"
  data_flags=(--data="$out/tokens" --data-format=tokens --vocab-size="$bpe_vocab" --steps=1330)
  sample_flags=(--tokenizer="$out/tokenizer" --tokens=200)
}

defaults=()
case $model in
  gpt)
    fortunes_corpus
    gpt_data
    # About 2.5 minutes of training on an idle 2-core machine (2 workers, one
    # core each, 4 under load); held-out text at about 2.4 bits per byte
    # (1.8 nats per character for the byte-level job).
    defaults=(--model=gpt "${data_flags[@]}" --val-fraction=0.02
              --block-size=64 --n-layer=4 --n-head=4 --n-embd=128
              --global-batch=32 --optimizer=adamw --lr=3e-3 --lr-schedule=cosine --warmup-steps=50
              --weight-decay=0.1 --clip-grad-norm=1 --eval-every=500 --eval-examples=512 --progress-every=100) ;;
  cnn)
    defaults=(--model=cnn --data=fashion-mnist --shuffle --global-batch=64 --steps=2000 --optimizer=adamw --lr=2e-3
              --lr-schedule=cosine --warmup-steps=50 --eval-every=500 --progress-every=100) ;;
  mlp)
    defaults=(--model=mlp --data=fashion-mnist --widths=784,256,256,10 --shuffle --global-batch=64 --steps=2000
              --optimizer=adamw --lr=1e-3 --eval-every=500 --progress-every=100) ;;
  *)
    defaults=(--progress-every=50) ;;
esac

echo "run-job: psync-launch --nproc=$nproc_workers, model $model, outputs in $out"
start=$(date +%s.%N)
set +e
"$launch" --nproc="$nproc_workers" --port=0 -- \
  "${defaults[@]}" --save="$out/final.safetensors" --summary="$out/summary-{rank}.json" \
  --checkpoint-dir="$out/checkpoints" --checkpoint-every=500 \
  --metrics="$out/metrics-{rank}.jsonl" --trace="$out/trace-{rank}.json" "$@"
rc=$?
set -e
end=$(date +%s.%N)

if [[ $rc == 0 && $model == gpt && -f $out/final.safetensors ]]; then
  echo
  echo "==================== sample (psync-sample, temperature 0.8) ===================="
  "$sample" --checkpoint="$out/final.safetensors" "${sample_flags[@]}" --prompt=$'\n' --temperature=0.8 --seed=1 || true
fi

field() { sed -n "s/.*\"$2\": *\\([^,}]*\\).*/\\1/p" "$1" | head -1 | tr -d '"'; }
# A summary number with D decimals, or "-" when the run has none (null).
num() { [[ -z $1 || $1 == null ]] && echo - || awk -v v="$1" -v d="$2" 'BEGIN { printf "%.*f", d, v }'; }
echo
echo "==================== psync job summary ===================="
printf "%-6s %-8s %-12s %-10s %-10s %-12s %s\n" rank steps final_loss val_loss val_acc median_ms exit
for ((r = 0; r < nproc_workers; r++)); do
  f=$out/summary-$r.json
  if [[ -f $f ]]; then
    printf "%-6s %-8s %-12s %-10s %-10s %-12s %s\n" "$r" "$(field "$f" steps_completed)" \
      "$(num "$(field "$f" final_loss)" 4)" "$(num "$(field "$f" val_loss)" 4)" "$(num "$(field "$f" val_accuracy)" 4)" \
      "$(num "$(field "$f" median_step_ms)" 1)" "$(field "$f" exit_reason)"
  else
    printf "%-6s (no summary written)\n" "$r"
  fi
done
echo "wall time: $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s;  exit code: $rc"
[[ -f $out/final.safetensors ]] && echo "weights: $out/final.safetensors (psync-sample --checkpoint=... prints more text)"
echo "metrics: $out/metrics-*.jsonl (scripts/plot-run.sh $out draws them)"
echo "traces:  $out/trace-*.json (open in https://ui.perfetto.dev)"
echo "==========================================================="
exit "$rc"
