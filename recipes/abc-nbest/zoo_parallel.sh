#!/usr/bin/env bash
# The model zoo of README.md with every model in its own process, for a machine with
# one GPU and many cores (how the README table was made: 11 models on one H100, about
# 5 minutes end to end). Each model runs stages 1-4 of run.sh; models written
# "m+cache" start once m has trained; stage 5 then prints the tables.
#
#   bash recipes/abc-nbest/zoo_parallel.sh [--device cuda] [--train-seconds 200] [--exp DIR] [--data DIR]
#        [--models "lstm gru ..."] [--cached "gru+cache"]
set -euo pipefail

device=cuda
train_seconds=200
exp=exp/abc-nbest-zoo
data=../shared/data/abc-nbest
models="lstm gru amn-vanilla amn attention key-value-predict ngram-rnn hornn dnc transformer"
cached="gru+cache"
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --train-seconds) train_seconds=$2; shift 2 ;;
    --exp) exp=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --cached) cached=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
run=(bash recipes/abc-nbest/run.sh --conf examples --exp "$exp" --data "$data" --device "$device" --threads 1
     --train-seconds "$train_seconds")
mkdir -p "$exp"
"${run[@]}" --stage 0 --stop-stage 0 --models "$models"
# the first pass alone is tuned once here, not by every model's process
"${run[@]}" --stage 4 --stop-stage 4 --models ""
pids=()
for m in $models; do
  "${run[@]}" --stage 1 --stop-stage 4 --models "$m" > "$exp/run_$m.log" 2>&1 &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || { echo "a model failed: see $exp/run_*.log" >&2; exit 1; }
pids=()
for m in $cached; do
  "${run[@]}" --stage 2 --stop-stage 4 --models "$m" > "$exp/run_$m.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || { echo "a cached model failed: see $exp/run_*.log" >&2; exit 1; }
"${run[@]}" --stage 5 --models "$models $cached"
