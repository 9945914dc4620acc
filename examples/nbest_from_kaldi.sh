#!/usr/bin/env bash
# Kaldi N-best lists -> the JSON Lines of nbest-rescore (docs/formats.md, "JSON Lines").
#
#   examples/nbest_from_kaldi.sh NBEST_DIR OUT.jsonl
#
# NBEST_DIR is a Kaldi N-best directory in the layout nbest-rescore reads (that of the
# abc-nbest ci/ folder): text (or words + words.txt), ac_cost (or acwt), lm_cost (or
# lmwt.lmonly, or lmwt.withlm + lmwt.nolm), and utt2doc (or utt2spk) for the documents.
# From a decode directory's lattices, Kaldi's lattice-to-nbest | nbest-to-linear write
# these archives; recipes/kaldi/steps/nbest_rescore.sh does it (its archives.JOB/
# folders, docs/kaldi-step.md); copy the data folder's utt2spk beside them so that the
# 1-best history follows the speakers (else each utterance is its own document).
#
# Costs stay negated natural logs (ac_cost, lm_cost and, with lmwt.nolm, graph_cost);
# the JSON numbers are the shortest decimals that read back as the same float64.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 NBEST_DIR OUT.jsonl" >&2
  exit 2
fi
nbest_dir=$1
out=$2

nbest-rescore convert --nbest "$nbest_dir" --to jsonl --out "$out"
# the same lists, read back from the JSON Lines (one line per utterance)
echo "$(wc -l <"$out") utterances in $out"
