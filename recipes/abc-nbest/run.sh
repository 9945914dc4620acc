#!/usr/bin/env bash
# abc-nbest recipe: train a GRU and an Active Memory Network on the benchmark's LM
# text, measure perplexity, rescore the dev 100-best lists with and without 1-best
# history, tune lambda (interpolation weight) and delta (LM weight) on dev, and print
# the WER table. Kaldi-style stages; run from the repository root:
#
#   bash recipes/abc-nbest/run.sh [--stage N] [--stop-stage M] [--data DIR] [--exp DIR]
#        [--conf DIR] [--models "gru amn ..."] [--device cpu|cuda] [--threads N]
#
# Each model m trains from $conf/$m.yaml into $exp/$m.pt. A model written "m+cache"
# is the trained m wrapped at scoring time in the neural cache (--cache-size,
# --cache-theta, --cache-lambda). The model zoo of README.md is
#
#   bash recipes/abc-nbest/run.sh --conf examples --exp exp/abc-nbest-zoo [--device cuda --train-seconds 200] \
#     --models "lstm gru gru+cache amn-vanilla amn attention key-value-predict ngram-rnn hornn dnc transformer"
#
# Every stage skips work whose output already exists (delete it to redo).
set -euo pipefail

stage=0
stop_stage=100
data=../shared/data/abc-nbest
exp=exp/abc-nbest
models="gru amn"
conf=recipes/abc-nbest/conf
cache_size=500
cache_theta=0.1
cache_lambda=0.1
histories="first-pass none"
device=cpu
train_seconds=        # per model (empty: the config's max_seconds)
threads=             # torch threads for training (empty: all cores)

while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --exp) exp=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --conf) conf=$2; shift 2 ;;
    --cache-size) cache_size=$2; shift 2 ;;
    --cache-theta) cache_theta=$2; shift 2 ;;
    --cache-lambda) cache_lambda=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --train-seconds) train_seconds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

# checkpoint of model spec $1 ("m" or "m+cache") and the extra scoring options
ckpt() { echo "$exp/${1%+cache}.pt"; }
lm_opts() { case "$1" in *+cache) echo "--cache-size $cache_size --cache-theta $cache_theta --cache-lambda $cache_lambda" ;; esac; }

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') [run.sh stage $1] ${*:2}" >&2; }
mkdir -p "$exp"

if [ $stage -le 0 ] && [ $stop_stage -ge 0 ]; then
  log 0 "check the data"
  for f in lm/lm_train.txt lm/lm_valid.txt dev/text dev/ac_cost dev/lm_cost dev/ref.txt dev/utt2doc; do
    [ -f "$data/$f" ] || { echo "missing $data/$f" >&2; exit 1; }
  done
fi

if [ $stage -le 1 ] && [ $stop_stage -ge 1 ]; then
  for m in $models; do
    case "$m" in *+cache) continue ;; esac
    if [ -f "$exp/$m.pt" ]; then log 1 "$exp/$m.pt exists, skipping"; continue; fi
    log 1 "train $m ($conf/$m.yaml)"
    nbest-rescore -v train --config $conf/$m.yaml --out "$exp/$m.pt" --device "$device" \
      ${train_seconds:+--max-seconds $train_seconds} ${threads:+--threads $threads} --no-progress \
      2> "$exp/train_$m.log" > "$exp/train_$m.json"
  done
fi

if [ $stage -le 2 ] && [ $stop_stage -ge 2 ]; then
  for m in $models; do
    log 2 "perplexity of $m on lm_valid"
    [ -f "$exp/ppl_$m.json" ] || { nbest-rescore ppl --lm "$(ckpt $m)" $(lm_opts $m) --text "$data/lm/lm_valid.txt" \
      --device "$device" > "$exp/ppl_$m.json.tmp" && mv "$exp/ppl_$m.json.tmp" "$exp/ppl_$m.json"; }
    cat "$exp/ppl_$m.json"
  done
fi

if [ $stage -le 3 ] && [ $stop_stage -ge 3 ]; then
  for m in $models; do
    for h in $histories; do
      out=$exp/score_${m}_$h
      if [ -f "$out/wer.json" ]; then log 3 "$out exists, skipping"; continue; fi
      log 3 "rescore dev with $m, --history $h"
      nbest-rescore score --lm "$(ckpt $m)" $(lm_opts $m) --nbest "$data/dev" --ref "$data/dev/ref.txt" --out "$out" \
        --history "$h" --interp 0.5 --device "$device" --no-progress
    done
  done
fi

if [ $stage -le 4 ] && [ $stop_stage -ge 4 ]; then
  if [ -f "$exp/tune_first_pass/tune.json" ]; then
    log 4 "$exp/tune_first_pass exists, skipping"
  else
    log 4 "tune the LM weight alone for the first pass (lambda = 1)"
    nbest-rescore tune --nbest "$data/dev" --ref "$data/dev/ref.txt" --lm-weights 0:20:0.5 \
      --out "$exp/tune_first_pass" | tail -n 1
  fi
  for m in $models; do
    for h in $histories; do
      log 4 "tune lambda and delta for $m, --history $h"
      nbest-rescore tune --nbest "$data/dev" --ref "$data/dev/ref.txt" --nn-cost "$exp/score_${m}_$h/nn_cost" \
        --interps 0:1:0.1 --lm-weights 5:15:0.5 --out "$exp/tune_${m}_$h" | tail -n 1
    done
  done
fi

if [ $stage -le 5 ] && [ $stop_stage -ge 5 ]; then
  log 5 "WER table (dev; lambda and delta tuned on dev)"
  rows=("first-pass (3-gram, lw 9.5)=$exp/score_${models%% *}_first-pass/wer.json:first_pass"
        "3-gram, tuned lw=$exp/tune_first_pass/tune.json")
  for m in $models; do
    for h in $histories; do
      rows+=("${m^^} + 3-gram, history $h=$exp/tune_${m}_$h/tune.json")
    done
  done
  rows+=("oracle=$exp/score_${models%% *}_first-pass/wer.json:oracle")
  nbest-rescore table "${rows[@]}" | tee "$exp/wer_table.md"
  log 5 "model sizes and training (parameters with and without embeddings)"
  ckpts=()
  for m in $models; do case "$m" in *+cache) ;; *) ckpts+=("$exp/$m.pt") ;; esac; done
  nbest-rescore info "${ckpts[@]}" | tee "$exp/model_table.md"
  log 5 "perplexity on lm_valid"
  for m in $models; do
    python3 -c "import json,sys; d=json.load(open(sys.argv[2])); print(f'{sys.argv[1]}: perplexity {d[\"perplexity\"]:.1f}, OOV {d[\"oov_rate\"]:.1f}%')" "$m" "$exp/ppl_$m.json"
  done | tee "$exp/ppl_table.txt"
  log 5 "summary: size, training, perplexity, tuned WER"
  python3 recipes/abc-nbest/local/summary.py "$exp" $models | tee "$exp/summary.md"
fi
