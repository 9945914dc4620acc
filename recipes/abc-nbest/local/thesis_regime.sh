#!/usr/bin/env bash
# Experiment 1 of docs/amn_convergence.md (issue 35): the thesis's own regime (000 section
# 6.3: PTB-sized text, 10k vocabulary, full softmax, batch 30, BPTT 20, clip 10, Adam), each
# row of recipes/abc-nbest/conf/cpu-thesis trained to early stopping (a validation point every
# 300k words, patience 4) on one thread, one run per ROW:SEED argument, one after another:
#
#   bash recipes/abc-nbest/local/thesis_regime.sh [--exp DIR] [--max-seconds S] gru-dropout:0 amn-anneal-dropmem-itl:0 ...
#
# --max-seconds S replaces the configs' cap on a run's wall time (optim.max_seconds, 2400);
# a run stopped by SIGTERM resumes under the new cap when the line is run again.
# Run two of these side by side on a 2-core machine. Each run writes DIR/ROW_sSEED.pt (best
# weights), .last.pt (resumable), .json (the train summary with its learning curve) and .log;
# a stopped run resumes when the same line is run again (--resume auto); a finished one
# (its .json written) is skipped. Plot the curves with
#   nbest-rescore curves DIR/*.json --out docs/amn_convergence_curves.png
set -euo pipefail
exp=exp/cpu-thesis
conf=recipes/abc-nbest/conf/cpu-thesis
cap=()
while [ $# -gt 0 ]; do
  case "$1" in
    --exp) exp=$2; shift 2 ;;
    --max-seconds) cap=(--max-seconds "$2"); shift 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--exp DIR] ROW:SEED ... (ROW a config of $conf)" >&2; exit 2; }
python -c "import torch, nbest_rescore" 2>/dev/null || {
  echo "$0: $(command -v python || echo python) cannot import torch and nbest_rescore: activate the project's virtual environment (. .venv/bin/activate)" >&2; exit 1; }
mkdir -p "$exp"
for run in "$@"; do
  row=${run%%:*}; seed=${run##*:}
  [ -f "$conf/$row.yaml" ] || { echo "$0: no config $conf/$row.yaml (rows: $(cd $conf && ls *.yaml | sed 's/.yaml//' | tr '\n' ' '))" >&2; exit 2; }
  name=${row}_s$seed
  if [ -s "$exp/$name.json" ]; then echo "$name: done ($exp/$name.json)"; continue; fi
  echo "$(date +%T) $name: training ($exp/$name.log)"
  python -m nbest_rescore -v --seed "$seed" train --config "$conf/$row.yaml" --out "$exp/$name.pt" \
    --resume auto "${cap[@]}" > "$exp/$name.json.tmp" 2>> "$exp/$name.log"
  mv "$exp/$name.json.tmp" "$exp/$name.json"
done
