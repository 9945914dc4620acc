#!/usr/bin/env bash
# abc-nbest recipe: train a GRU and an Active Memory Network on the benchmark's LM
# text, measure perplexity, rescore the dev 100-best lists with and without 1-best
# history, tune lambda (interpolation weight) and delta (LM weight) on dev, and print
# the WER table. Kaldi-style stages; run from the repository root:
#
#   bash recipes/abc-nbest/run.sh [--stage N] [--stop-stage M] [--data DIR] [--exp DIR]
#        [--conf DIR | --conf-set gpu|cpu|gpu-equal|cpu-equal|cpu-twins|cpu-ensemble|cpu-ablation|cpu-converged|cpu-trio]
#        [--models "gru amn ..."] [--device cpu|cuda]
#        [--threads N] [--train-seconds S] [--eval-sets "DIR ..."] [--histories "first-pass none"]
#
# Stages: 0 check the data, 1 train, 2 lm_valid perplexity, 3 rescore dev, 4 tune on
# dev, 5 tables (wer_table.md, model_table.md, ppl_table.txt, summary.md), 6 score
# the --eval-sets at the weights tuned on dev (eval_table.md), 7 model combination
# (with two or more models): every non-empty subset of the models combined
# log-linearly with the n-gram (first-pass history), tuned on dev by the grid (one or
# two LMs, the word insertion penalty fixed as in stage 4) and by the exact line search
# (any number, the penalty tuned too), into $exp/ensemble_first-pass/ and the table
# $exp/ensemble_table.md (each model alone, each pair, all; the words each model
# trained on; how often the single models' 1-bests disagree).
#
# Each model m trains from $conf/$m.yaml into $exp/$m.pt (a Hugging Face model, model: hf,
# into the folder $exp/$m, scored as --lm hf:$exp/$m; its BPE tokenizer is learned first).
# A training that was stopped (killed, or preempted: exit 75) resumes from its
# $exp/$m.last.pt when the script is run again; it is done once $exp/train_$m.json is
# written. A model written "m+cache"
# is the trained m wrapped at scoring time in the neural cache (--cache-size,
# --cache-theta, --cache-lambda). The model zoo of README.md is
#
#   bash recipes/abc-nbest/run.sh --conf examples --exp exp/abc-nbest-zoo [--device cuda --train-seconds 200] \
#     --models "lstm gru gru+cache amn-vanilla amn attention key-value-predict ngram-rnn hornn dnc transformer"
#
# --conf-set gpu|cpu picks the full-corpus, full-vocabulary configs of
# recipes/abc-nbest/conf/{gpu,cpu}/ and, unless given explicitly, --models ("lstm gru
# amn" for gpu, "gru lstm" for cpu), --exp (exp/abc-nbest-gpu, exp/abc-nbest-cpu) and
# --device (cuda for gpu, cpu for cpu):
#
#   bash recipes/abc-nbest/run.sh --conf-set gpu --eval-sets "/path/to/test"
#
# --conf-set gpu-equal|cpu-equal: GRU, LSTM and AMN at equal parameter counts without
# embeddings (conf/gpu-equal, conf/cpu-equal; the counts are in their headers), and the AMN
# with Drop-Mem, annealing and the ITL (amn-anneal.yaml, the same size).
#
# --conf-set cpu-ensemble: a forward GRU, a backward GRU and an AMN (adaptive softmax,
# 43k vocabulary, 2 epochs capped at 30 minutes each, one thread each); train them side
# by side (one run.sh --stop-stage 1 per model), then run stages 2-7 once.
#
# --conf-set cpu-ablation: the thesis's ablation (000 Table 6.2/6.6) on this benchmark
# (docs/amn_ablation.md): GRU, LSTM and the AMN vanilla, + Anneal, + Drop-Mem, + Drop-Mem +
# ITL and + Anneal + Drop-Mem + ITL (memcells as wide as the GRU), each trained for 10
# minutes on one thread, two side by side (one run.sh --stop-stage 3 per model, then stages
# 4-7 once); amn-full-costeq / amn-full-eqparams are the same training at two other shapes,
# and amn-full-{itl2,floor,balance,detach} the options beyond the thesis.
#
# --conf-set cpu-converged: experiment 2 of docs/amn_convergence.md: the GRU 256 of cpu-ensemble
# and the AMN of experiment 1 scaled to the 43k vocabulary, each at most 1 hour on one thread with
# a validation point every 500k words and early stopping; train them side by side (one run.sh
# --stop-stage 1 per model), then run stages 2-7 once. --models "gru amn-memvec" uses the AMN with
# Drop-Mem 0.5 on the memcell vectors instead (amn-memvec.yaml, issue 46).
#
# --conf-set cpu-trio: the configs of cpu-converged with the backward GRU (gru-bwd.yaml) beside
# the GRU and the AMN, each capped at 40 minutes on one thread (--train-seconds 2400 unless
# given): the three models in 2 core-hours (issue 46). Train two side by side, then the third
# (one run.sh --stop-stage 1 per model), then run stages 2-7 once.
#
# --conf-set cpu-twins: the same GRU 256 with the adaptive softmax (gru-adaptive) and
# the full softmax (gru-softmax), 30 minutes each; train them side by side with
# --threads 1 (one run.sh per model) for an equal-time comparison.
#
# --eval-sets "DIR ..." names extra N-best directories in the layout of dev (a
# ref.txt in the directory is used if present). Stage 6 scores each with every model
# and history at the lambda, delta and word insertion penalty tuned on dev for that
# model and history (from $exp/tune_<m>_<history>/tune.json; nothing is tuned on these
# sets: this is how a test set is reported) into $exp/eval_<basename of DIR>/, and
# writes the WER table $exp/eval_table.md (first pass at the decoder scale, the
# 3-gram at its dev-tuned LM weight, each model at its dev-tuned weights, oracle).
#
# Every tune of stages 4 and 7 cross-validates its search over 2 folds of dev documents
# (--folds 2): each tune.json also holds the cross-validated WER, bootstrap intervals and
# per-utterance errors, and the tables show them (docs/evaluation.md). Stage 7 also
# applies each combination's dev-tuned weights to the --eval-sets (from the NN costs
# stage 6 stored there; no LM is run) and adds those rows to the eval tables.
#
# Every stage skips work whose output already exists (delete it to redo; stage 6
# rescores when the dev-tuned weights changed).
set -euo pipefail

stage=0
stop_stage=100
data=../shared/data/abc-nbest
exp=exp/abc-nbest
models="gru amn"
conf=recipes/abc-nbest/conf
conf_set=
cache_size=500
cache_theta=0.1
cache_lambda=0.1
histories="first-pass none"
fp_wip=-0.629606     # the benchmark decoder's word insertion penalty (nats per word; the toolkit's default
                     # is 0): stages 3-7 score and tune with it, stage 7's line search tunes it
device=cpu
train_seconds=        # per model (empty: the config's max_seconds)
threads=             # torch threads for training (empty: all cores)
ngpu=1               # training processes (GPUs): > 1 trains data-parallel under torchrun (stage 1)
eval_sets=           # extra N-best directories scored at the dev-tuned weights (stage 6)
given=" "            # options given on the command line (--conf-set does not override them)

while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "option $1 needs a value" >&2; exit 2; }
  case "$1" in
    --stage) stage=$2 ;;
    --stop-stage) stop_stage=$2 ;;
    --data) data=$2 ;;
    --exp) exp=$2 ;;
    --models) models=$2 ;;
    --conf) conf=$2 ;;
    --conf-set) conf_set=$2 ;;
    --cache-size) cache_size=$2 ;;
    --cache-theta) cache_theta=$2 ;;
    --cache-lambda) cache_lambda=$2 ;;
    --device) device=$2 ;;
    --train-seconds) train_seconds=$2 ;;
    --threads) threads=$2 ;;
    --ngpu) ngpu=$2 ;;
    --eval-sets) eval_sets=$2 ;;
    --histories) histories=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  given+="$1 "
  shift 2
done
[[ $ngpu =~ ^[1-9][0-9]*$ ]] || { echo "--ngpu: expected a positive integer, got '$ngpu'" >&2; exit 2; }

if [ -n "$conf_set" ]; then
  case "$conf_set" in
    gpu) set_models="lstm gru amn"; set_device=cuda ;;
    cpu) set_models="gru lstm"; set_device=cpu ;;
    gpu-equal) set_models="gru lstm amn amn-anneal"; set_device=cuda ;;
    cpu-equal) set_models="gru lstm amn amn-anneal"; set_device=cpu ;;
    cpu-twins) set_models="gru-adaptive gru-softmax"; set_device=cpu ;;
    cpu-ensemble) set_models="gru-fwd gru-bwd amn"; set_device=cpu ;;
    cpu-ablation) set_models="gru lstm amn-vanilla amn-anneal amn-dropmem amn-dropmem-itl amn-full"; set_device=cpu ;;
    cpu-converged) set_models="gru amn"; set_device=cpu ;;
    cpu-trio) set_models="gru gru-bwd amn"; set_device=cpu; set_conf=cpu-converged
              [[ $given == *" --train-seconds "* ]] || train_seconds=2400 ;;
    *) echo "--conf-set: expected gpu, cpu, gpu-equal, cpu-equal, cpu-twins, cpu-ensemble, cpu-ablation, cpu-converged or cpu-trio, got '$conf_set'" >&2; exit 2 ;;
  esac
  [[ $given == *" --conf "* ]] || conf=recipes/abc-nbest/conf/${set_conf:-$conf_set}
  [[ $given == *" --models "* ]] || models=$set_models
  [[ $given == *" --exp "* ]] || exp=exp/abc-nbest-$conf_set
  [[ $given == *" --device "* ]] || device=$set_device
fi

read -ra model_list <<< "$models"
read -ra history_list <<< "$histories"
read -ra eval_list <<< "$eval_sets"
first_model=${model_list[0]:-}

# one output directory per eval set, named after its last path component
eval_names=()
for d in "${eval_list[@]}"; do
  name=$(basename "$d")
  for n in "${eval_names[@]}"; do
    [ "$n" != "$name" ] || { echo "--eval-sets: two directories named '$name'" >&2; exit 2; }
  done
  eval_names+=("$name")
done

# the output of model m: $exp/m.pt, or the folder $exp/m of a Hugging Face model (model: hf)
is_hf() { grep -q '^model: *hf *$' "$conf/${1%+cache}.yaml" 2>/dev/null; }
model_out() { if is_hf "$1"; then echo "$exp/$1"; else echo "$exp/$1.pt"; fi; }

# lm=(--lm checkpoint [cache options]) for model spec $1 ("m" or "m+cache"; hf:$exp/m for model: hf)
lm_args() {
  if is_hf "$1"; then lm=(--lm "hf:$exp/$1"); return; fi
  lm=(--lm "$exp/${1%+cache}.pt")
  case "$1" in
    *+cache) lm+=(--cache-size "$cache_size" --cache-theta "$cache_theta" --cache-lambda "$cache_lambda") ;;
  esac
}

# "acoustic_scale interp lm_weight word_ins_penalty" of the best point of a tune.json
tuned_weights() {
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); b = d["best"]
print(d.get("acoustic_scale", 1.0), b["interp"], b["lm_weight"], b["word_ins_penalty"])' "$1"
}

# WER of N-best dir $1 with reference $2 at the single point acoustic scale $3,
# lambda 1 (no NN), delta $4, word insertion penalty $5, into $6/tune.json (no LM is
# run; skipped when $6/weights records the same point)
ngram_point() {
  local want="acoustic_scale=$3 interp=1 lm_weight=$4 word_ins_penalty=$5"
  if [ -f "$6/tune.json" ] && [ "$(cat "$6/weights" 2>/dev/null)" = "$want" ]; then return 0; fi
  rm -f "$6/weights"
  nbest-rescore tune --nbest "$1" --ref "$2" --acoustic-scale "$3" --interps 1 --lm-weights "$4" \
    --word-ins-penalties "$5" --out "$6" | tune_log
  echo "$want" > "$6/weights"
}

# the lines of tune's output worth logging: best WER, cross-validated WER, P(better than first pass)
tune_log() { grep -E '^(best: WER|cross-validated WER|  P\()' || true; }

# the WER table of every eval set with rows (stage 6's table_rows, stage 7's ensemble_rows;
# P(better than ...) for each row name in baselines) into $exp/eval_<name>/eval_table.md,
# then all of them into $exp/eval_table.md
write_eval_tables() {
  local i ev rows bases tables=()
  for i in "${!eval_list[@]}"; do
    ev=$exp/eval_${eval_names[$i]}
    [ -f "$ev/table_rows" ] || continue
    mapfile -t rows < "$ev/table_rows"
    [ ! -f "$ev/ensemble_rows" ] || mapfile -t -O "${#rows[@]}" rows < "$ev/ensemble_rows"
    mapfile -t bases < "$ev/baselines"
    {
      echo "### ${eval_names[$i]} (${eval_list[$i]}): WER at the weights tuned on dev"
      echo
      nbest-rescore table --ref "${eval_list[$i]}/ref.txt" "${bases[@]/#/--baseline=}" "${rows[@]}"
    } > "$ev/eval_table.md"
    tables+=("$ev/eval_table.md")
  done
  if [ ${#tables[@]} -gt 0 ]; then
    for t in "${tables[@]}"; do cat "$t"; echo; done > "$exp/eval_table.md"
    cat "$exp/eval_table.md"
  fi
}

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') [run.sh stage $1] ${*:2}" >&2; }
mkdir -p "$exp"

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log 0 "check the data"
  for f in lm/lm_train.txt lm/lm_valid.txt dev/text dev/ac_cost dev/lm_cost dev/ref.txt dev/utt2doc; do
    [ -f "$data/$f" ] || { echo "missing $data/$f" >&2; exit 1; }
  done
  for d in "${eval_list[@]}"; do
    [ -d "$d" ] || { echo "missing eval set $d" >&2; exit 1; }
    [ -f "$d/ref.txt" ] || log 0 "$d has no ref.txt: stage 6 writes its rescored 1-best but no WER"
  done
fi

if [ "$stage" -le 1 ] && [ "$stop_stage" -ge 1 ]; then
  # --ngpu N > 1: N data-parallel processes on this machine (one GPU each with --device
  # cuda); optim.batch_size is the global batch and must be divisible by N
  trainer=(nbest-rescore)
  [ "$ngpu" -le 1 ] || trainer=(torchrun --standalone --nproc_per_node "$ngpu" -m nbest_rescore)
  for m in "${model_list[@]}"; do
    case "$m" in *+cache) continue ;; esac
    out=$(model_out "$m")
    last=${out%.pt}.last.pt  # the resumable state, written during and after every epoch
    # done: the summary printed at the end; a checkpoint without its .last.pt was put there by hand
    if [ -s "$exp/train_$m.json" ] || { [ -e "$out" ] && [ ! -e "$last" ]; }; then
      log 1 "$out exists, skipping"; continue
    fi
    [ ! -e "$last" ] || log 1 "$last exists: resuming the interrupted training of $m"
    if is_hf "$m"; then  # its byte-level BPE first (hf.tokenizer), learned from the training text
      bpe=$(sed -n 's/^ *tokenizer: *//p' "$conf/$m.yaml" | sed 's/ *#.*//')
      [ -z "$bpe" ] || [ -d "$bpe" ] || python recipes/abc-nbest/local/train_bpe.py --text "$data/lm/lm_train.txt" \
        --vocab-size 8000 --out "$bpe"
    fi
    log 1 "train $m ($conf/$m.yaml)${trainer[1]:+ on $ngpu processes (torchrun)}"
    # --resume auto: from $last when it exists; a SIGTERM/SIGINT (Slurm preemption, Ctrl-C)
    # saves it and exits 75 (torchrun: non-zero): rerun this script to continue
    status=0
    "${trainer[@]}" -v train --config "$conf/$m.yaml" --out "$out" --device "$device" --resume auto \
      ${train_seconds:+--max-seconds "$train_seconds"} ${threads:+--threads "$threads"} \
      2>> "$exp/train_$m.log" > "$exp/train_$m.json.tmp" || status=$?
    if [ "$status" -ne 0 ]; then
      [ ! -e "$last" ] || log 1 "training of $m stopped (exit $status; $exp/train_$m.log); rerun to resume from $last"
      exit "$status"
    fi
    mv "$exp/train_$m.json.tmp" "$exp/train_$m.json"
  done
fi

if [ "$stage" -le 2 ] && [ "$stop_stage" -ge 2 ]; then
  for m in "${model_list[@]}"; do
    log 2 "perplexity of $m on lm_valid"
    lm_args "$m"
    [ -f "$exp/ppl_$m.json" ] || { nbest-rescore ppl "${lm[@]}" --text "$data/lm/lm_valid.txt" \
      --device "$device" > "$exp/ppl_$m.json.tmp" && mv "$exp/ppl_$m.json.tmp" "$exp/ppl_$m.json"; }
    cat "$exp/ppl_$m.json"
  done
fi

if [ "$stage" -le 3 ] && [ "$stop_stage" -ge 3 ]; then
  for m in "${model_list[@]}"; do
    lm_args "$m"
    for h in "${history_list[@]}"; do
      out=$exp/score_${m}_$h
      if [ -f "$out/wer.json" ]; then log 3 "$out exists, skipping"; continue; fi
      log 3 "rescore dev with $m, --history $h"
      nbest-rescore score "${lm[@]}" --nbest "$data/dev" --ref "$data/dev/ref.txt" --out "$out" \
        --history "$h" --interp 0.5 --word-ins-penalty "$fp_wip" --device "$device"
    done
  done
fi

if [ "$stage" -le 4 ] && [ "$stop_stage" -ge 4 ]; then
  if [ -f "$exp/tune_first_pass/tune.json" ]; then
    log 4 "$exp/tune_first_pass exists, skipping"
  else
    log 4 "tune the LM weight alone for the first pass (lambda = 1)"
    nbest-rescore tune --nbest "$data/dev" --ref "$data/dev/ref.txt" --lm-weights 0:20:0.5 --folds 2 \
      --word-ins-penalty "$fp_wip" --out "$exp/tune_first_pass" | tune_log
  fi
  for m in "${model_list[@]}"; do
    for h in "${history_list[@]}"; do
      log 4 "tune lambda and delta for $m, --history $h"
      nbest-rescore tune --nbest "$data/dev" --ref "$data/dev/ref.txt" --nn-cost "$exp/score_${m}_$h/nn_cost" \
        --interps 0:1:0.1 --lm-weights 5:15:0.5 --word-ins-penalty "$fp_wip" --folds 2 --out "$exp/tune_${m}_$h" \
        | tune_log
    done
  done
fi

if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
  log 5 "WER table (dev; lambda and delta tuned on dev; cross-validated WER and bootstrap intervals)"
  ngram_point "$data/dev" "$data/dev/ref.txt" 1 9.5 "$fp_wip" "$exp/first_pass_dev"
  rows=("first-pass (3-gram, lw 9.5)=$exp/first_pass_dev/tune.json"
        "3-gram, tuned lw=$exp/tune_first_pass/tune.json")
  for m in "${model_list[@]}"; do
    for h in "${history_list[@]}"; do
      rows+=("${m^^} + 3-gram, history $h=$exp/tune_${m}_$h/tune.json")
    done
  done
  rows+=("oracle=$exp/score_${first_model}_first-pass/wer.json:oracle")
  nbest-rescore table --baseline "first-pass (3-gram, lw 9.5)" "${rows[@]}" | tee "$exp/wer_table.md"
  log 5 "model sizes and training (parameters with and without embeddings)"
  ckpts=()
  for m in "${model_list[@]}"; do case "$m" in *+cache) ;; *) is_hf "$m" || ckpts+=("$exp/$m.pt") ;; esac; done
  nbest-rescore info "${ckpts[@]}" | tee "$exp/model_table.md"
  log 5 "perplexity on lm_valid"
  for m in "${model_list[@]}"; do
    python3 -c "import json,sys; d=json.load(open(sys.argv[2])); print(f'{sys.argv[1]}: perplexity {d[\"perplexity\"]:.1f}, OOV {d[\"oov_rate\"]:.1f}%')" "$m" "$exp/ppl_$m.json"
  done | tee "$exp/ppl_table.txt"
  log 5 "summary: size, training, perplexity, tuned WER"
  python3 recipes/abc-nbest/local/summary.py "$exp" "${model_list[@]}" | tee "$exp/summary.md"
fi

if [ "$stage" -le 6 ] && [ "$stop_stage" -ge 6 ]; then
  if [ ${#eval_list[@]} -eq 0 ]; then
    log 6 "no --eval-sets, nothing to do"
  else
    for i in "${!eval_list[@]}"; do
      d=${eval_list[$i]}
      ev=$exp/eval_${eval_names[$i]}
      ref=
      [ -f "$d/ref.txt" ] && ref=$d/ref.txt
      mkdir -p "$ev"
      rm -f "$ev/table_rows" "$ev/ensemble_rows"  # stage 7 adds its rows again
      rows=()
      if [ -n "$ref" ]; then
        log 6 "$d: first pass at the decoder scale and the 3-gram at its dev-tuned LM weight"
        ngram_point "$d" "$ref" 1 9.5 "$fp_wip" "$ev/first_pass"
        rows+=("first pass (3-gram, lw 9.5)=$ev/first_pass/tune.json")
        if [ -f "$exp/tune_first_pass/tune.json" ]; then
          w=$(tuned_weights "$exp/tune_first_pass/tune.json")
          read -r as _ lw wip <<< "$w"
          ngram_point "$d" "$ref" "$as" "$lw" "$wip" "$ev/ngram_dev_tuned"
          rows+=("3-gram, lw tuned on dev=$ev/ngram_dev_tuned/tune.json")
        else
          log 6 "no $exp/tune_first_pass/tune.json (stage 4): no dev-tuned 3-gram row"
        fi
      fi
      for m in "${model_list[@]}"; do
        lm_args "$m"
        for h in "${history_list[@]}"; do
          tj=$exp/tune_${m}_$h/tune.json
          [ -f "$tj" ] || { echo "missing $tj: run stage 4 (tuning on dev) first" >&2; exit 1; }
          w=$(tuned_weights "$tj")
          read -r as lam lw wip <<< "$w"
          want="acoustic_scale=$as interp=$lam lm_weight=$lw word_ins_penalty=$wip"
          out=$ev/score_${m}_$h
          rows+=("${m^^} + 3-gram, history $h=$out/wer.json:rescored")
          if [ -f "$out/nn_cost" ] && [ "$(cat "$out/weights" 2>/dev/null)" = "$want" ] \
               && { [ -z "$ref" ] || [ -f "$out/wer.json" ]; }; then
            log 6 "$out exists (same dev-tuned weights), skipping"; continue
          fi
          log 6 "rescore $d with $m, --history $h at the dev-tuned $want"
          rm -f "$out/weights"
          nbest-rescore score "${lm[@]}" --nbest "$d" ${ref:+--ref "$ref"} --out "$out" --history "$h" \
            --acoustic-scale "$as" --interp "$lam" --lm-weight "$lw" --word-ins-penalty "$wip" \
            --device "$device"
          echo "$want" > "$out/weights"
        done
      done
      if [ -z "$ref" ]; then
        log 6 "$d has no ref.txt: rescored 1-best in $ev/score_*/text, no WER table"
        continue
      fi
      [ -z "$first_model" ] || rows+=("oracle=$ev/score_${first_model}_${history_list[0]}/wer.json:oracle")
      printf '%s\n' "${rows[@]}" > "$ev/table_rows"
      echo "first pass (3-gram, lw 9.5)" > "$ev/baselines"
    done
    log 6 "WER tables of the eval sets (weights tuned on dev, none on these sets)"
    write_eval_tables
  fi
fi

if [ "$stage" -le 7 ] && [ "$stop_stage" -ge 7 ] && [ ${#model_list[@]} -ge 2 ]; then
  h=first-pass
  ens=$exp/ensemble_$h
  mkdir -p "$ens/costs"
  for m in "${model_list[@]}"; do  # nn_cost.<m>: tune names each LM after its cost file
    [ -f "$exp/score_${m}_$h/nn_cost" ] || { echo "missing $exp/score_${m}_$h/nn_cost: run stage 3 first" >&2; exit 1; }
    ln -sfn "$(cd "$exp/score_${m}_$h" && pwd)/nn_cost" "$ens/costs/nn_cost.$m"
  done
  n=${#model_list[@]}
  for ((mask = 1; mask < (1 << n); mask++)); do
    args=() name=
    for ((i = 0; i < n; i++)); do
      if (( (mask >> i) & 1 )); then
        args+=(--nn-cost "$ens/costs/nn_cost.${model_list[i]}"); name+=${name:++}${model_list[i]}
      fi
    done
    searches="line"; [ ${#args[@]} -le 4 ] && searches="grid line"
    for search in $searches; do
      out=$ens/$name/$search
      if [ -f "$out/tune.json" ]; then log 7 "$out exists, skipping"; continue; fi
      log 7 "tune $name by $search search"
      nbest-rescore tune --nbest "$data/dev" --ref "$data/dev/ref.txt" "${args[@]}" --search "$search" \
        --interps 0:1:0.1 --lm-weights 5:15:0.5 --word-ins-penalty "$fp_wip" --folds 2 --out "$out" | tune_log
    done
  done
  python3 recipes/abc-nbest/local/ensemble_table.py "$exp" "$data/dev" "$h" "${model_list[@]}" | tee "$exp/ensemble_table.md"
  for i in "${!eval_list[@]}"; do
    ev=$exp/eval_${eval_names[$i]}
    [ -f "$ev/table_rows" ] || continue  # stage 6 made no table (no ref.txt, or not run)
    log 7 "${eval_list[$i]}: each combination at its dev-tuned weights (stage 6's NN costs, no LM run)"
    python3 recipes/abc-nbest/local/eval_combinations.py "$exp" "${eval_list[$i]}" "$ev" "$h" "${model_list[@]}"
  done
  write_eval_tables
fi
