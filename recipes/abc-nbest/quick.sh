#!/usr/bin/env bash
# The main job in a few minutes on 2 CPU cores: train a tiny GRU on a prefix of the
# benchmark's LM text, rescore the dev 100-best lists with 1-best history
# conditioning, tune lambda and delta on the stored NN costs, and report WER.
# Usage (from the repository root): bash recipes/abc-nbest/quick.sh [data-dir]
set -euo pipefail
data=${1:-../shared/data/abc-nbest}
exp=exp/abc-nbest-quick
wip=-0.629606  # the benchmark decoder's word insertion penalty (nats per word; the toolkit's default is 0)
log() { echo "$(date '+%H:%M:%S') [quick] $*" >&2; }
mkdir -p $exp

log "train a tiny GRU (examples/tiny.yaml)"
nbest-rescore train --config examples/tiny.yaml --out $exp/tiny.pt --no-progress
log "perplexity on lm_valid"
nbest-rescore ppl --lm $exp/tiny.pt --text $data/lm/lm_valid.txt
log "rescore dev with --history first-pass"
nbest-rescore score --lm $exp/tiny.pt --nbest $data/dev --ref $data/dev/ref.txt --out $exp/score_dev \
  --history first-pass --interp 0.8 --word-ins-penalty $wip
log "tune lambda and delta on the stored NN costs"
nbest-rescore tune --nbest $data/dev --ref $data/dev/ref.txt --nn-cost $exp/score_dev/nn_cost \
  --interps 0.5:1:0.1 --lm-weights 8:14:1 --word-ins-penalty $wip --out $exp/tune_dev | tail -n 2
