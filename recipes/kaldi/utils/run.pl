#!/usr/bin/env bash
# run.pl: run a Kaldi-style parallel command on this machine (a bash stand-in for
# Kaldi's utils/run.pl, bundled with nbest-rescore for use outside a Kaldi egs
# directory; Kaldi's own run.pl, queue.pl or slurm.pl are used when they are on PATH).
#
#   run.pl [--max-jobs-run N] [--other-option VALUE ...] [JOB=1:N] LOGFILE COMMAND...
#
# With JOB=1:N (any variable name, any range START:END) the command runs once per
# value, all at the same time (at most --max-jobs-run at once; default: all), with
# every occurrence of the name in LOGFILE and in the command words replaced by the
# value. Each job's stdout and stderr go to its log file (its folder is created),
# between a header line with the command and a last line with the exit code.
# Command words are joined as Kaldi's run.pl joins them: a word without white space
# is passed as it is (so a quoted '|' or '&&' becomes a pipe or a list in the job's
# shell), a word with white space is quoted. Other --options (queue settings such as
# --mem, --num-threads, --gpu) are accepted and ignored.
#
# Exit status 0 when every job succeeded; otherwise 1, and the failed jobs' logs
# are named on stderr.

max_jobs=0
while [ $# -gt 0 ]; do
  case "$1" in
    --max-jobs-run) [ $# -ge 2 ] || { echo "run.pl: --max-jobs-run needs a value" >&2; exit 1; }
                    max_jobs=$2; shift 2 ;;
    --*) [ $# -ge 2 ] || { echo "run.pl: option $1 needs a value" >&2; exit 1; }
         shift 2 ;;
    *) break ;;
  esac
done
if ! [[ $max_jobs =~ ^[0-9]+$ ]]; then
  echo "run.pl: --max-jobs-run must be a number >= 0 (0 = no limit), got '$max_jobs'" >&2; exit 1
fi

var='' first=1 last=1
if [[ ${1:-} =~ ^([A-Za-z_][A-Za-z0-9_]*)=([0-9]+):([0-9]+)$ ]]; then
  var=${BASH_REMATCH[1]} first=${BASH_REMATCH[2]} last=${BASH_REMATCH[3]}; shift
elif [[ ${1:-} =~ ^([A-Za-z_][A-Za-z0-9_]*)=([0-9]+)$ ]]; then
  var=${BASH_REMATCH[1]} first=${BASH_REMATCH[2]} last=${BASH_REMATCH[2]}; shift
fi
if [ $# -lt 2 ]; then
  echo "usage: run.pl [--max-jobs-run N] [JOB=1:N] LOGFILE COMMAND..." >&2
  echo "e.g.:  run.pl JOB=1:4 exp/log/score.JOB.log nbest-rescore score --nbest data/split4/JOB ..." >&2
  exit 1
fi
if [ "$first" -gt "$last" ]; then
  echo "run.pl: empty job range $var=$first:$last" >&2; exit 1
fi
logfile=$1; shift

command=
for word in "$@"; do
  if [[ $word =~ ^[^[:space:]]+$ ]]; then command+="$word "
  elif [[ $word == *'"'* ]]; then command+="'$word' "
  else command+="\"$word\" "
  fi
done

run_one() {  # run_one ID: run the command for one job id into its log
  local id=$1 log=$logfile cmd=$command rc start
  if [ -n "$var" ]; then log=${log//$var/$id}; cmd=${cmd//$var/$id}; fi
  mkdir -p "$(dirname "$log")" || return 1
  start=$(date +%s)
  {
    echo "# $cmd"
    echo "# Started at $(date)"
  } > "$log" || return 1
  bash -c "$cmd" >> "$log" 2>&1 </dev/null
  rc=$?
  echo "# Ended (code $rc) at $(date), elapsed time $(( $(date +%s) - start )) seconds" >> "$log"
  return $rc
}

declare -a pids ids
for ((id = first; id <= last; id++)); do
  if [ "$max_jobs" -gt 0 ]; then
    while [ "$(jobs -rp | wc -l)" -ge "$max_jobs" ]; do wait -n 2>/dev/null || sleep 0.1; done
  fi
  run_one "$id" &
  pids+=($!) ids+=("$id")
done

failed=()
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    log=$logfile
    [ -n "$var" ] && log=${log//$var/${ids[$i]}}
    failed+=("$log")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run.pl: ${#failed[@]} / ${#pids[@]} failed, see ${failed[*]}" >&2
  exit 1
fi
exit 0
