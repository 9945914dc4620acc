#!/usr/bin/env bash
# steps/nbest_rescore.sh: rescore the N-best lists of a Kaldi decode directory with a
# corpus-level neural LM (nbest-rescore), each utterance conditioned on the 1-best of
# the previous utterances of its document, and put the new LM costs back in Kaldi's
# N-best archive layout.
#
# Usage: steps/nbest_rescore.sh [options] <lm.pt[,lm2.pt,...]> <data-dir> <input-decode-dir> <output-decode-dir>
#   Several NN LMs (a comma-separated list) are combined log-linearly with the n-gram:
#   weights --interp (n-gram) and --nn-weights (one per LM, summing to 1 with --interp).
#   e.g. steps/nbest_rescore.sh --cmd "$decode_cmd" --lm-weight 12 --interp 0.5 \
#          exp/nnlm/gru.pt data/dev exp/tri3/decode_dev exp/tri3/decode_dev_gru
#
# Input (<input-decode-dir>, with its num_jobs file giving the number of jobs J), one of
# (--use-lattices; default: the archives when both are there):
#   * lat.JOB.gz lattices (--use-lattices true): stage 0 turns them into N-best archives
#     with Kaldi's binaries (lattice-to-nbest at acoustic scale 1/inv-acwt, the
#     first-pass LM subtracted through <lang>/G.carpa or G.fst, nbest-to-linear), as
#     steps/rnnlmrescore.sh does; this needs --lang and Kaldi on PATH (path.sh). Lattices
#     that sit beside archives with NN costs (lmwt.rnn, lmwt.interp, lmwt.nn) were
#     rescored already and are refused;
#   * archives.JOB/ folders as steps/rnnlmrescore.sh leaves them (--use-lattices false;
#     words_text, or words + a words.txt beside it; acwt; lmwt.withlm and lmwt.nolm), or
#     in any layout that nbest-rescore reads (text, ac_cost, lm_cost ...).
#   Nothing in <input-decode-dir> is ever written: the output archives are new folders
#   of links and files.
#   Documents (the 1-best history runs through a document and is reset between
#   documents) come from the archives' utt2doc / utt2spk, else from <data-dir>/utt2doc,
#   else <data-dir>/utt2spk, else every utterance is its own document.
#
# Stages:
#   0  <output-decode-dir>/archives.JOB/ for JOB = 1..J: made from the lattices, or
#      links to the input archives' files, plus the job's lines of the data dir's
#      utt2doc / utt2spk when the archives have none.
#   1  rescoring, one job per shard, with `$cmd --num-threads N JOB=1:$nj
#      $dir/log/rescore.JOB.log nbest-rescore score ... --threads N` (jobs run side by
#      side; N = --num-threads, default 1: one thread per job, the CPU Kaldi's queue
#      gives a job).
#      The shards are the J archives when --nj is J (the default) and no document is
#      split across Kaldi's jobs; otherwise the lists are re-sharded by whole
#      documents with `nbest-rescore split --nj $nj` into $dir/shards/1..nj.
#   2  the jobs merged (`nbest-rescore merge`, into $dir/score/) and, per Kaldi job,
#      archives.JOB/lmwt.nn (the NN LM cost of every hypothesis key) and
#      archives.JOB/lmwt.interp (the LM cost that replaces the graph's; see below).
#      When Kaldi's linear-to-nbest and nbest-to-lattice are on PATH and the archives
#      hold ali and words, lat.JOB.gz lattices are rebuilt with lmwt.interp.
#   3  <output-decode-dir>/text (the new 1-best at --lm-weight, Kaldi text) and, when
#      <data-dir>/text exists, score/wer at these weights in the format of Kaldi's
#      compute-wer ("%WER 26.87 [ 4515 / 16803, 300 ins, 600 del, 3615 sub ]"), made by
#      compute-wer when it is on PATH, else by nbest-rescore merge.
#   4  scoring as Kaldi reports it (unless --skip-scoring true; needs <data-dir>/text):
#      the egs directory's local/score.sh --cmd "$cmd" $scoring_opts <data> <lang> <dir>
#      when it exists and lattices were rebuilt, else nbest-rescore kaldi-score, which
#      does what steps/score_kaldi.sh does on the N-best lists (LMWT 7..17 x word
#      insertion penalty 0.0,0.5,1.0, local/wer_output_filter / wer_ref_filter /
#      wer_hyp_filter, wer_LMWT_WIP, scoring_kaldi/best_wer).
#   A failed job names its log and stops the script (exit 1) before anything is
#   merged; merged outputs of an earlier run are removed when stage 1 starts.
#
# Costs are Kaldi's: negated natural logs, the LM-side costs in LM-scale units.
# For every hypothesis key
#
#   lmwt.interp = lmwt.nolm + interp * lmwt.lmonly + (1 - interp) * lmwt.nn
#   (several LMs: + sum_k w_k * lmwt.nn.<name_k> with the --nn-weights w_k instead)
#
# with lmwt.lmonly = lmwt.withlm - lmwt.nolm the first-pass n-gram cost and
# lmwt.nolm the rest of the graph cost (transition and pronunciation costs; 0 for
# lists given with lm_cost, whose lm_cost is then the n-gram cost). This is
# steps/rnnlmrescore.sh's and steps/pytorchnn/lmrescore_nbest_pytorchnn.sh's
# interpolation with their NN weight = 1 - interp (--interp is the weight of the
# n-gram, as everywhere in nbest-rescore). The new 1-best in text maximises
#
#   -acoustic_scale * acwt - lm_weight * lmwt.interp + word_ins_penalty * words
#
# (nbest-rescore's score formula), i.e. with --acoustic-scale 1 and
# --word-ins-penalty 0 it is the best path of the lattice rebuilt from
# linear-to-nbest (acwt, lmwt.interp) | nbest-to-lattice at LMWT = --lm-weight.
# Kaldi's word insertion penalty p (added to the graph cost per word) is
# --word-ins-penalty = -p * LMWT here.

# Begin configuration section.
cmd=run.pl
nj=                       # rescoring jobs (default: num_jobs of <input-decode-dir>)
num_threads=1             # CPU threads per job (passed to $cmd as --num-threads, as Kaldi's steps do)
stage=0
use_lattices=             # true: lat.JOB.gz, false: archives.JOB/ (default: archives when both exist)
N=100                     # N-best size when lattices are converted
inv_acwt=10               # lattices: lattice-to-nbest runs at acoustic scale 1/inv_acwt
lang=                     # lattices: lang dir with words.txt and G.fst or G.carpa (the first-pass LM)
history=first-pass        # first-pass, rescored, interpolated or none (nbest-rescore score --history)
lm_weight=10              # LM weight (LMWT, grammar scale)
interp=0.5                # weight of the n-gram in the interpolation (1 = n-gram only, 0 = NN only)
nn_weights=               # several LMs: their weights, comma-separated (default: 1 - interp split equally)
acoustic_scale=1.0
word_ins_penalty=0.0      # nats per word, negative = penalty
device=cpu                # cpu, cuda or cuda:N
max_ngram_order=          # history merging as lmrescore_rnnlm_lat.sh's: histories of the same last N-1 words share one LM state (default or 0: exact)
score_opts=               # further options of nbest-rescore score, e.g. "--cache-size 500 --batch-size 128"
skip_scoring=false        # true: no LMWT x word-insertion-penalty scoring after the rescoring
scoring_opts=             # options of local/score.sh, or of nbest-rescore kaldi-score (--min-lmwt, --max-lmwt, --word-ins-penalty)
# End configuration section.

help_message="Usage: $0 [options] <lm.pt> <data-dir> <input-decode-dir> <output-decode-dir>
Rescores the N-best lists of a Kaldi decode directory with a neural LM (nbest-rescore).
 e.g.: $0 --lm-weight 12 exp/nnlm/gru.pt data/dev exp/tri3/decode_dev exp/tri3/decode_dev_gru
Options:
  --cmd <run.pl|queue.pl ...>   # how to run jobs (default: $cmd)
  --nj <n>                      # rescoring jobs (default: num_jobs of the input decode dir)
  --num-threads <n>             # CPU threads per job (default: $num_threads)
  --stage <n>                   # start at stage n (0 archives, 1 rescore, 2 merge + lmwt.* + lattices, 3 text, 4 scoring)
  --use-lattices <true|false>   # read lat.JOB.gz (true) or archives.JOB/ (false) (default: archives when both exist)
  --N <n>                       # N-best size when converting lattices (default: $N)
  --inv-acwt <x>                # lattices: N-best made at acoustic scale 1/x (default: $inv_acwt)
  --lang <dir>                  # lattices: lang dir (words.txt, G.fst or G.carpa)
  --history <policy>            # first-pass, rescored, interpolated, none (default: $history)
  --lm-weight <x>               # LM weight (LMWT) (default: $lm_weight)
  --interp <x>                  # weight of the n-gram, in [0, 1] (default: $interp)
  --nn-weights <w1,w2,...>      # several LMs: one weight each, interp + sum = 1 (default: equal split)
  --acoustic-scale <x>          # (default: $acoustic_scale)
  --word-ins-penalty <x>        # nats per word, negative = penalty (default: $word_ins_penalty)
  --device <cpu|cuda|cuda:N>    # (default: $device)
  --max-ngram-order <n>         # merge histories on their last n-1 words, as lmrescore_rnnlm_lat.sh (default or 0: exact)
  --score-opts \"<options>\"      # more nbest-rescore score options
  --skip-scoring <true|false>   # skip stage 4, the scoring like steps/score_kaldi.sh (default: $skip_scoring)
  --scoring-opts \"<options>\"    # options of local/score.sh or nbest-rescore kaldi-score"

echo "$0 $*"

# Kaldi's utils/ when run inside an egs directory, else the ones bundled beside this script.
kaldi_step_dir=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
bundled_utils=$(cd "$kaldi_step_dir/../utils" && pwd)
# As in Kaldi's steps: path.sh is sourced, cmd.sh is not (--cmd says how to run jobs).
[ -f ./path.sh ] && . ./path.sh
if [ -f utils/parse_options.sh ]; then . utils/parse_options.sh; else . "$bundled_utils/parse_options.sh"; fi
[ -x utils/run.pl ] && PATH=$PWD/utils:$PATH
PATH=$PATH:$bundled_utils
export LC_ALL=C

set -o pipefail

die() { echo "$0: ERROR: $*" >&2; exit 1; }
log() { echo "$0: $*"; }

if [ $# -ne 4 ]; then
  echo "$help_message" >&2
  exit 1
fi
lm=$1
data=$2
indir=$3
dir=$4

[[ $stage =~ ^-?[0-9]+$ ]] || die "--stage must be an integer, got '$stage'"
[ -z "$nj" ] || [[ $nj =~ ^[1-9][0-9]*$ ]] || die "--nj must be an integer >= 1, got '$nj'"
[[ $num_threads =~ ^[1-9][0-9]*$ ]] || die "--num-threads must be an integer >= 1, got '$num_threads'"
[[ $N =~ ^[1-9][0-9]*$ ]] || die "--N must be an integer >= 1, got '$N'"
[ -z "$max_ngram_order" ] || [[ $max_ngram_order =~ ^(0|[2-9]|[1-9][0-9]+)$ ]] \
  || die "--max-ngram-order must be 0 (exact) or an integer >= 2 (histories of n-1 words), got '$max_ngram_order'"
# the NN LMs: names as nbest-rescore score gives them (file stem, repeats made unique)
IFS=, read -r -a lms <<< "$lm"
[ ${#lms[@]} -ge 1 ] || die "no LM checkpoint given"
lm_names=()
for f in "${lms[@]}"; do
  if [[ $f == hf:* ]]; then  # a Hugging Face model directory (or a cached model id): named by its last part
    [ -n "${f#hf:}" ] || die "--lm hf: needs a path, e.g. hf:exp/nnlm/gpt"
    stem=$(basename "${f#hf:}")
  else
    [ -f "$f" ] || die "the LM checkpoint $f does not exist"
    stem=$(basename "$f"); stem=${stem%.*}
  fi
  name=$stem; i=1
  while [[ " ${lm_names[*]} " == *" $name "* ]]; do i=$((i + 1)); name=${stem}_$i; done
  lm_names+=("$name")
done
if [ -z "$nn_weights" ]; then
  nn_weights=$(awk -v L="$interp" -v k=${#lms[@]} 'BEGIN { for (i = 1; i <= k; i++) printf "%s%.10g", (i > 1 ? "," : ""), (1 - L) / k }')
fi
IFS=, read -r -a nn_w <<< "$nn_weights"
[ ${#nn_w[@]} -eq ${#lms[@]} ] || die "--nn-weights has ${#nn_w[@]} weights for ${#lms[@]} LMs ($lm): give one per LM"
awk -v L="$interp" -v w="$nn_weights" 'BEGIN { n = split(w, a, ","); s = L; for (i = 1; i <= n; i++) s += a[i]
  exit !(s > 1 - 1e-6 && s < 1 + 1e-6) }' || die "--interp $interp and --nn-weights $nn_weights must sum to 1"
lm_opts=()
for f in "${lms[@]}"; do lm_opts+=(--lm "$f"); done
[ ${#lms[@]} -gt 1 ] && lm_opts+=(--nn-weights "$nn_weights")
[ -d "$data" ] || die "the data directory $data does not exist"
[ -d "$indir" ] || die "the input decode directory $indir does not exist"
command -v nbest-rescore >/dev/null || \
  die "nbest-rescore is not on PATH: activate its environment (e.g. . /path/to/nbest-rescore/.venv/bin/activate) in path.sh"
[ ! -d "$dir" ] || [ "$(cd "$indir" && pwd -P)" != "$(cd "$dir" && pwd -P)" ] || \
  die "the output decode directory must differ from the input one ($indir)"
[ -f "$indir/num_jobs" ] || die "$indir/num_jobs not found: expected a Kaldi decode directory (lat.JOB.gz or archives.JOB/, and num_jobs saying how many jobs)"
num_jobs=$(cat "$indir/num_jobs")
[[ $num_jobs =~ ^[1-9][0-9]*$ ]] || die "$indir/num_jobs must hold a number >= 1, found '$num_jobs'"
[ -n "$nj" ] || nj=$num_jobs
abs() { echo "$(cd "$(dirname "$1")" && pwd -P)/$(basename "$1")"; }

# The file nbest-rescore reads for the words / documents of an archive folder (first match wins).
words_file() { local f; for f in text words_text words; do [ -f "$1/$f" ] && { echo "$f"; return 0; }; done; return 1; }
doc_file() { local f; for f in utt2doc utt2spk; do [ -f "$1/$f" ] && { echo "$f"; return 0; }; done; return 1; }
is_binary() { [ "$(tr -d '\000' < "$1" | wc -c)" -ne "$(wc -c < "$1")" ]; }

# The input: lattices or N-best archives, chosen before anything is written.
has_lattices=false; ls "$indir"/lat.*.gz >/dev/null 2>&1 && has_lattices=true
has_archives=false; [ -d "$indir/archives.1" ] && has_archives=true
case "$use_lattices" in
  "") if $has_archives; then use_lattices=false; elif $has_lattices; then use_lattices=true
      else die "$indir has no lattices (lat.*.gz) and no N-best archive folder archives.1/ (num_jobs is $num_jobs): give a decode directory with lat.JOB.gz or with the archives.JOB/ of steps/rnnlmrescore.sh"
      fi ;;
  true) $has_lattices || die "--use-lattices true, but $indir has no lattices (lat.*.gz): use --use-lattices false to read its archives.JOB/" ;;
  false) $has_archives || die "--use-lattices false, but $indir has no N-best archive folder archives.1/: use --use-lattices true to read its lat.JOB.gz" ;;
  *) die "--use-lattices takes true or false (or leave it out: archives when both exist), got '$use_lattices'" ;;
esac
if $use_lattices; then
  # lattices beside NN LM costs were rescored already (steps/rnnlmrescore.sh, or this step):
  # converting them again would count the old NN score twice
  for f in lmwt.interp lmwt.rnn lmwt.nn 'lmwt.nn.*'; do
    for a in "$indir"/archives.*/$f; do
      [ -e "$a" ] && die "the lattices of $indir sit beside $a: they already hold an NN LM score, which would be counted twice; use --use-lattices false to read the N-best archives (their first-pass lmwt.withlm / lmwt.nolm), or give the first-pass decode directory"
    done
  done
  missing=
  for b in lattice-to-nbest nbest-to-linear; do command -v $b >/dev/null || missing+=" $b"; done
  [ -z "$missing" ] || die "$indir holds lattices (lat.*.gz) but Kaldi's$missing not on PATH: run from a Kaldi egs directory whose path.sh puts Kaldi's binaries on PATH, or read the N-best archives (archives.JOB/) with --use-lattices false"
fi
# Kaldi's scripts trust num_jobs and leave later jobs out (a [PARTIAL] WER): refuse that here
if $use_lattices; then extra=$indir/lat.$((num_jobs + 1)).gz; else extra=$indir/archives.$((num_jobs + 1)); fi
[ ! -e "$extra" ] || die "$indir/num_jobs says $num_jobs but $extra exists: jobs after $num_jobs would be left out \
of the rescoring and the WER; write the number of jobs the decode ran into $indir/num_jobs, or remove the extra ones"
# stage 0's inputs, every job's, before anything is written
if [ $stage -le 0 ] && $use_lattices; then
  [ -n "$lang" ] || die "$indir holds lattices: give --lang <lang-dir> (its words.txt and G.fst or G.carpa, the first-pass LM, whose costs are replaced)"
  [ -f "$lang/words.txt" ] || die "$lang/words.txt not found (--lang)"
  for n in $(seq $num_jobs); do
    f=$indir/lat.$n.gz
    [ -f "$f" ] || die "$f not found (num_jobs is $num_jobs)"
    [ "$(head -c 2 "$f" | od -An -tx1 | tr -d ' \n')" = 1f8b ] || die "$f is not gzip-compressed (no gzip header): expected the lat.JOB.gz a Kaldi decode writes"
  done
  if [ -f "$lang/G.carpa" ]; then need="lattice-lmrescore-const-arpa"
  elif [ -f "$lang/G.fst" ]; then need="lattice-scale lattice-compose lattice-1best fstproject"
  else die "neither $lang/G.fst nor $lang/G.carpa exists (--lang): the first-pass LM is needed to remove its costs"
  fi
  for b in $need; do command -v $b >/dev/null || die "Kaldi's $b is not on PATH (needed to remove the first-pass LM costs)"; done
elif [ $stage -le 0 ]; then
  for n in $(seq $num_jobs); do
    [ -d "$indir/archives.$n" ] || die "$indir has no lattices (lat.*.gz) and no N-best archive folder archives.$n/ (num_jobs is $num_jobs): give a decode directory with lat.JOB.gz or with the archives.JOB/ of steps/rnnlmrescore.sh"
  done
fi
mkdir -p "$dir/log" || die "cannot create $dir"
log "input: $(if $use_lattices; then echo "lattices $indir/lat.JOB.gz"; else echo "N-best archives $indir/archives.JOB/"; fi)"

if [ $stage -le 0 ]; then
  if $use_lattices; then
    acwt=$(awk -v x="$inv_acwt" 'BEGIN { print 1 / x }')
    log "converting lattices to $N-best lists (acoustic scale $acwt)"
    $cmd JOB=1:$num_jobs "$dir/log/lat2nbest.JOB.log" \
      lattice-to-nbest --acoustic-scale=$acwt --n=$N "ark:gunzip -c $indir/lat.JOB.gz|" \
        "ark:|gzip -c >$dir/nbest_withlm.JOB.gz" || die "lattice-to-nbest failed (logs above)"
    log "removing the first-pass LM costs"
    if [ -f "$lang/G.carpa" ]; then
      $cmd JOB=1:$num_jobs "$dir/log/remove_lm.JOB.log" \
        lattice-lmrescore-const-arpa --lm-scale=-1.0 "ark:gunzip -c $dir/nbest_withlm.JOB.gz|" "$lang/G.carpa" \
          "ark:|gzip -c >$dir/nbest_nolm.JOB.gz" || die "removing the LM costs failed (logs above)"
    else
      # negate, take the best path through the LM (each N-best entry is one linear path), negate back
      # OpenFst >= 1.7.? knows --project_type=output, older ones --project_output=true
      # (fstproject --help exits 1, so its text is captured first)
      fsthelp=$(fstproject --help 2>&1 || true)
      case "$fsthelp" in *project_type*) project="--project_type=output" ;; *) project="--project_output=true" ;; esac
      $cmd JOB=1:$num_jobs "$dir/log/remove_lm.JOB.log" \
        lattice-scale --acoustic-scale=-1 --lm-scale=-1 "ark:gunzip -c $dir/nbest_withlm.JOB.gz|" ark:- \| \
        lattice-compose ark:- "fstproject $project $lang/G.fst |" ark:- \| \
        lattice-1best ark:- ark:- \| \
        lattice-scale --acoustic-scale=-1 --lm-scale=-1 ark:- "ark:|gzip -c >$dir/nbest_nolm.JOB.gz" \
        || die "removing the LM costs failed (logs above)"
    fi
    log "writing the N-best archives $dir/archives.JOB/"
    # a fresh folder: links left by an earlier run from archives must not be written through
    for n in $(seq $num_jobs); do rm -rf "$dir/archives.$n" || die "cannot remove $dir/archives.$n"; done
    $cmd JOB=1:$num_jobs "$dir/log/archives.JOB.log" \
      mkdir -p "$dir/archives.JOB" '&&' \
      nbest-to-linear "ark:gunzip -c $dir/nbest_nolm.JOB.gz|" "ark,t:$dir/archives.JOB/ali" \
        "ark,t:$dir/archives.JOB/words" "ark,t:$dir/archives.JOB/lmwt.nolm" "ark,t:$dir/archives.JOB/acwt" '&&' \
      nbest-to-linear "ark:gunzip -c $dir/nbest_withlm.JOB.gz|" ark:/dev/null ark:/dev/null \
        "ark,t:$dir/archives.JOB/lmwt.withlm" ark:/dev/null || die "nbest-to-linear failed (logs above)"
    for n in $(seq $num_jobs); do ln -sfn "$(abs "$lang/words.txt")" "$dir/archives.$n/words.txt"; done
  else
    log "linking the N-best archives of $indir ($num_jobs jobs) into $dir/archives.JOB/"
    for n in $(seq $num_jobs); do
      a=$dir/archives.$n
      rm -rf "$a" && mkdir -p "$a" || die "cannot create $a"
      for f in "$indir/archives.$n"/*; do
        case "$(basename "$f")" in lmwt.nn|lmwt.nn.*|lmwt.interp*|temp) continue ;; esac
        [ -f "$f" ] && ln -s "$(abs "$f")" "$a/"
      done
      words_file "$a" >/dev/null || die "$indir/archives.$n has no hypotheses: expected text, words_text, or words + words.txt"
    done
  fi

  # documents from the data dir where the archives have none
  src_map=
  for f in utt2doc utt2spk; do [ -f "$data/$f" ] && { src_map=$f; break; }; done
  for n in $(seq $num_jobs); do
    a=$dir/archives.$n
    doc_file "$a" >/dev/null && continue
    if [ -z "$src_map" ]; then
      [ $n -eq 1 ] && log "no utt2doc or utt2spk in the archives or in $data: every utterance is its own document"
      continue
    fi
    w=$(words_file "$a") || die "$a has no hypotheses: expected text, words_text, or words + words.txt"
    awk -v map="$data/$src_map" -v job=$n '
      FILENAME == map { doc[$1] = $2; next }
      { u = $1; sub(/-[0-9]+$/, "", u)
        if (u in seen) next
        seen[u] = 1
        if (!(u in doc)) { print "utterance " u " of job " job " has no line in " map > "/dev/stderr"; exit 1 }
        print u, doc[u] }' "$data/$src_map" "$a/$w" > "$a/$src_map" || die "documents for $a: see the message above"
  done
  echo $num_jobs > "$dir/num_jobs"
fi

if [ $stage -le 1 ]; then
  for n in $(seq $num_jobs); do [ -d "$dir/archives.$n" ] || die "$dir/archives.$n not found: run stage 0 first"; done
  # a rerun never leaves the merged outputs of an earlier run beside new partial ones
  rm -rf "$dir/score" "$dir/text" "$dir"/wer_* "$dir"/score.* "$dir/rescore_src" "$dir/scoring_kaldi" "$dir"/lat.*.gz
  for n in $(seq $num_jobs); do rm -f "$dir/archives.$n/lmwt.nn" "$dir/archives.$n"/lmwt.nn.* "$dir/archives.$n/lmwt.interp"; done

  reshard=false
  if [ "$nj" -ne "$num_jobs" ]; then
    log "--nj $nj differs from the $num_jobs jobs of $indir: re-sharding by document"
    reshard=true
  elif [ "$history" != none ]; then
    # one awk over every job's files (no pipe that a reader could close early): the
    # first document whose utterances lie in two jobs
    args=()
    for n in $(seq $num_jobs); do
      a=$dir/archives.$n
      w=$(words_file "$a") || die "$a has no hypotheses: expected text, words_text, or words + words.txt"
      args+=(job=$n)
      d=$(doc_file "$a") && args+=(ismap=1 "$a/$d")
      args+=(ismap=0 "$a/$w")
    done
    crossing=$(awk '
      ismap { doc[$1] = $2; next }
      found == "" {
        u = $1; sub(/-[0-9]+$/, "", u)
        d = (u in doc) ? doc[u] : u
        if ((d in jobof) && jobof[d] != job) found = d " (jobs " jobof[d] " and " job ")"
        jobof[d] = job }
      END { print found }' "${args[@]}") || die "cannot read the archives in $dir/archives.*"
    if [ -n "$crossing" ]; then
      log "document $crossing is split across Kaldi's jobs: re-sharding by document into $nj jobs"
      reshard=true
    fi
  fi

  if $reshard; then
    all=$dir/nbest_all
    rm -rf "$all" "$dir/shards" && mkdir -p "$all" || die "cannot create $all"
    for f in text words_text words ac_cost acwt lm_cost lmwt.lmonly lmwt.withlm lmwt.nolm utt2doc utt2spk; do
      [ -e "$dir/archives.1/$f" ] || continue
      files=()
      for n in $(seq $num_jobs); do
        [ -e "$dir/archives.$n/$f" ] || die "$dir/archives.$n has no $f but archives.1 has one: every job needs the same files"
        files+=("$dir/archives.$n/$f")
      done
      case $f in
        utt2doc|utt2spk) awk '!seen[$1]++' "${files[@]}" > "$all/$f" ;;
        *) cat "${files[@]}" > "$all/$f" ;;
      esac || die "cannot write $all/$f"
    done
    [ -e "$dir/archives.1/words.txt" ] && ln -s "$(readlink -f "$dir/archives.1/words.txt")" "$all/words.txt"
    nbest-rescore split --nj $nj "$all" "$dir/shards" > "$dir/log/split.log" 2>&1 || \
      die "nbest-rescore split failed: $(tail -n 1 "$dir/log/split.log") (log: $dir/log/split.log)"
    src=$dir/shards/JOB
  else
    src=$dir/archives.JOB
  fi
  echo $nj > "$dir/rescore_nj"

  log "rescoring with $lm in $nj jobs (history $history, lm-weight $lm_weight, interp $interp$([ ${#lms[@]} -gt 1 ] && echo ", nn-weights $nn_weights"))"
  $cmd --num-threads $num_threads JOB=1:$nj "$dir/log/rescore.JOB.log" \
    nbest-rescore -v score "${lm_opts[@]}" --nbest "$src" --out "$dir/score.JOB" --threads $num_threads --no-progress \
      --device "$device" --history "$history" --lm-weight "$lm_weight" --interp "$interp" \
      --acoustic-scale "$acoustic_scale" --word-ins-penalty "$word_ins_penalty" \
      ${max_ngram_order:+--max-ngram-order "$max_ngram_order"} $score_opts \
    || die "rescoring failed: see the log(s) named above ($dir/log/rescore.JOB.log); nothing was merged"
fi

if [ $stage -le 2 ]; then
  [ -f "$dir/rescore_nj" ] || die "$dir/rescore_nj not found: run stage 1 first"
  jobs_nj=$(cat "$dir/rescore_nj")
  job_dirs=()
  for n in $(seq $jobs_nj); do job_dirs+=("$dir/score.$n"); done
  ref_opt=()
  [ -f "$data/text" ] && ref_opt=(--ref "$data/text")
  log "merging the $jobs_nj jobs into $dir/score/"
  nbest-rescore merge --out "$dir/score" "${ref_opt[@]}" "${job_dirs[@]}" > "$dir/log/merge.log" 2>&1 || \
    die "nbest-rescore merge failed: $(tail -n 1 "$dir/log/merge.log") (log: $dir/log/merge.log)"

  # the merged NN costs: score/nn_cost for one LM, score/nn_cost.<name> for several;
  # written per Kaldi job as lmwt.nn, or lmwt.nn.<name>
  nn_in=() nn_out=()
  if [ ${#lms[@]} -eq 1 ]; then nn_in=("$dir/score/nn_cost"); nn_out=(lmwt.nn)
  else for name in "${lm_names[@]}"; do nn_in+=("$dir/score/nn_cost.$name"); nn_out+=("lmwt.nn.$name"); done
  fi
  for f in "${nn_in[@]}"; do [ -f "$f" ] || die "$f not found after merging (the LM names of nbest-rescore and this step differ?)"; done
  log "writing archives.JOB/${nn_out[*]} and archives.JOB/lmwt.interp (interp $interp$([ ${#lms[@]} -gt 1 ] && echo ", nn-weights $nn_weights"))"
  for n in $(seq $num_jobs); do
    a=$dir/archives.$n
    rm -f "$a/lmwt.nn" "$a"/lmwt.nn.* "$a/lmwt.interp"
    # the n-gram and graph costs, chosen as nbest-rescore reads them
    if [ -f "$a/lm_cost" ]; then ng=$a/lm_cost; graph=; sub=0
    elif [ -f "$a/lmwt.lmonly" ]; then ng=$a/lmwt.lmonly; graph=; sub=0; [ -f "$a/lmwt.nolm" ] && graph=$a/lmwt.nolm
    elif [ -f "$a/lmwt.withlm" ] && [ -f "$a/lmwt.nolm" ]; then ng=$a/lmwt.withlm; graph=$a/lmwt.nolm; sub=1
    else die "$a has no n-gram costs (lm_cost, lmwt.lmonly, or lmwt.withlm + lmwt.nolm)"
    fi
    for f in $ng $graph; do is_binary "$f" && die "$f is a binary archive: lmwt.interp is computed from text archives (write it with ark,t:)"; done
    # lmwt.interp = graph + interp * n-gram + sum_k w_k * nn_k
    awk -v L="$interp" -v weights="$(IFS=,; echo "${nn_w[*]}")" -v nnfiles="${nn_in[*]}" \
        -v outs="${nn_out[*]}" -v dir="$a" -v K=${#nn_in[@]} -v gf="$graph" -v sub_graph=$sub \
        -v out_interp="$a/lmwt.interp" '
      BEGIN { split(weights, w, ","); split(outs, o, " ") }
      function val() { return ($2 == "[") ? $3 : $2 }
      FNR == 1 { file++ }
      file <= K { nn[file, $1] = val(); nnt[file, $1] = $2; next }
      gf != "" && FILENAME == gf { g[$1] = val(); next }
      { k = $1
        gr = 0
        if (gf != "") {
          if (!(k in g)) { print "hypothesis " k " of " FILENAME " is not in " gf > "/dev/stderr"; exit 1 }
          gr = g[k]
        }
        s = gr + L * (val() - (sub_graph ? gr : 0))
        for (i = 1; i <= K; i++) {
          if (!((i, k) in nn)) { print "hypothesis " k " of " FILENAME " has no NN cost in the merged file " i " of: " nnfiles > "/dev/stderr"; exit 1 }
          print k, nnt[i, k] > (dir "/" o[i])
          s += w[i] * nn[i, k]
        }
        printf "%s %.6f\n", k, s > out_interp }' \
      "${nn_in[@]}" $graph "$ng" || die "cannot write the LM costs of $a (message above)"
  done

  if command -v linear-to-nbest >/dev/null && command -v nbest-to-lattice >/dev/null && \
     [ -f "$dir/archives.1/ali" ] && [ -f "$dir/archives.1/words" ]; then
    log "rebuilding lattices $dir/lat.JOB.gz with lmwt.interp"
    $cmd JOB=1:$num_jobs "$dir/log/to_lattice.JOB.log" \
      linear-to-nbest "ark:$dir/archives.JOB/ali" "ark:$dir/archives.JOB/words" \
        "ark:$dir/archives.JOB/lmwt.interp" "ark:$dir/archives.JOB/acwt" ark:- \| \
      nbest-to-lattice ark:- "ark:|gzip -c >$dir/lat.JOB.gz" || die "rebuilding the lattices failed (logs above)"
  fi
fi

if [ $stage -le 3 ]; then
  [ -f "$dir/score/text" ] || die "$dir/score/text not found: run stage 2 first"
  cp "$dir/score/text" "$dir/text" || die "cannot write $dir/text"
  if [ -f "$data/text" ]; then
    # the WER at this step's own weights (not a wer_* file: Kaldi's scoring owns those names)
    wer=$dir/score/wer
    if command -v compute-wer >/dev/null; then
      compute-wer --text --mode=present "ark:$data/text" "ark,p:$dir/text" > "$wer" 2> "$dir/log/compute_wer.log" || \
        die "compute-wer failed (log: $dir/log/compute_wer.log)"
    else
      grep -E '^(%WER|%SER|Scored) ' "$dir/log/merge.log" > "$wer" || die "no WER lines in $dir/log/merge.log"
    fi
    log "at --lm-weight $lm_weight: $(grep '^%WER' "$wer") $wer"
  fi
  log "new 1-best in $dir/text"
fi

# Scoring as Kaldi reports it: the egs directory's local/score.sh on the rebuilt
# lattices, else nbest-rescore kaldi-score, which does what steps/score_kaldi.sh does
# (LMWT x word insertion penalty sweep, local/wer_*_filter, scoring_kaldi/best_wer) over
# the N-best lists and archives.JOB/lmwt.interp.
if [ $stage -le 4 ] && ! $skip_scoring && [ -f "$data/text" ]; then
  rm -rf "$dir/scoring_kaldi" "$dir"/wer_*
  if [ -x local/score.sh ] && [ -f "$dir/lat.1.gz" ] && [ -n "$lang" ]; then
    log "scoring with local/score.sh $scoring_opts"
    local/score.sh --cmd "$cmd" $scoring_opts "$data" "$lang" "$dir" || die "local/score.sh failed"
  else
    if [ -x local/score.sh ]; then
      log "local/score.sh needs lattices and --lang; scoring the N-best lists with nbest-rescore kaldi-score"
    fi
    filters=()
    [ -x local/wer_output_filter ] && filters+=(--ref-filter local/wer_output_filter --hyp-filter local/wer_output_filter)
    [ -x local/wer_ref_filter ] && filters+=(--ref-filter local/wer_ref_filter)
    [ -x local/wer_hyp_filter ] && filters+=(--hyp-filter local/wer_hyp_filter)
    archive_dirs=()
    for n in $(seq $num_jobs); do archive_dirs+=("$dir/archives.$n"); done
    nbest-rescore kaldi-score --ref "$data/text" --lm-cost lmwt.interp "${filters[@]}" $scoring_opts \
      --out "$dir" "${archive_dirs[@]}" > "$dir/log/kaldi_score.log" 2>&1 || \
      die "nbest-rescore kaldi-score failed: $(tail -n 1 "$dir/log/kaldi_score.log") (log: $dir/log/kaldi_score.log)"
  fi
  [ -f "$dir/scoring_kaldi/best_wer" ] && log "best: $(cat "$dir/scoring_kaldi/best_wer")"
fi
log "done"
exit 0
