#!/usr/bin/env bash
# Dev WER of an hf: LM with and without a per-document context (issue 38): each
# document's genre (doc2genre: rural -> "rural news", science -> "science news", sotu ->
# "state of the union address") read before its 1-best history (--context-file), each
# run scored once and tuned with K-fold cross-validation by documents (tune --folds K).
# Prints one line per run: its cross-validated WER and that WER's bootstrap interval
# (REPLICATIONS, default 1000; 0: none), from OUT/tune_{plain,genre}/tune.json, then the
# table of both runs (nbest-rescore table: P(genre better than plain)) into OUT/table.md.
# Usage (from the repository root):
#   bash recipes/abc-nbest/local/genre_context.sh hf:DIR NBEST_DIR DOC2GENRE OUT [score options...]
#   e.g. bash recipes/abc-nbest/local/genre_context.sh hf:exp/gpt ../shared/data/abc-nbest/dev \
#          ../shared/data/abc-nbest/dev/doc2genre exp/genre_context --context-tokens 256
# FOLDS (default 5) sets K.
set -euo pipefail
lm=$1 nbest=$2 doc2genre=$3 out=$4
shift 4
folds=${FOLDS:-5}
replications=${REPLICATIONS:-1000}
wip=-0.629606  # the benchmark decoder's word insertion penalty (nats per word)
mkdir -p "$out"
# a context for each document of these lists (doc2genre may hold more documents)
awk 'NR == FNR { doc[$2] = 1; next }
     ($1 in doc) { print $1, ($2 == "sotu" ? "state of the union address" : $2 " news") }' \
  "$nbest/utt2doc" "$doc2genre" > "$out/genre_context.txt"
for run in plain genre; do
  extra=()
  if [ "$run" = genre ]; then extra=(--context-file "$out/genre_context.txt"); fi
  nbest-rescore score --lm "$lm" --nbest "$nbest" --ref "$nbest/ref.txt" --word-ins-penalty "$wip" \
    --out "$out/score_$run" --no-progress "${extra[@]}" "$@" > /dev/null
  nbest-rescore tune --nbest "$nbest" --ref "$nbest/ref.txt" --nn-cost "$out/score_$run/nn_cost" \
    --interps 0:1:0.1 --lm-weights 5:15:0.5 --word-ins-penalty "$wip" --folds "$folds" --replications "$replications" \
    --out "$out/tune_$run" > /dev/null
  python - "$out/tune_$run/tune.json" "$run" <<'PY'
import json, sys
tune = json.load(open(sys.argv[1]))
cv, boot = tune["cross_validation"], tune.get("bootstrap", {}).get("cross_validated")
ci = f", 95% interval [{boot['low']:.2f}, {boot['high']:.2f}]" if boot else ""
print(f"{sys.argv[2]}: cross-validated WER {cv['wer']:.2f}% ({cv['folds']} folds of documents{ci})")
PY
done
if [ "$replications" -gt 0 ]; then
  nbest-rescore table plain="$out/tune_plain/tune.json" genre="$out/tune_genre/tune.json" --baseline plain \
    > "$out/table.md"
fi
