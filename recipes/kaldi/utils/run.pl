#!/usr/bin/env bash
# run.pl: run a Kaldi-style parallel command on this machine (a bash stand-in for
# Kaldi's utils/run.pl, bundled with nbest-rescore for use outside a Kaldi egs
# directory; Kaldi's own run.pl, queue.pl or slurm.pl are used when they are on PATH).
# It implements a subset of Kaldi's run.pl: what it accepts, it runs as Kaldi's does.
#
#   run.pl [OPTIONS] [JOB=START:END] [OPTIONS] LOGFILE COMMAND...
#
# With JOB=START:END (any variable name; START >= 1) or JOB=N the command runs once
# per value, with every occurrence of the name in LOGFILE and in the command words
# replaced by the value. A range of several jobs needs the name in LOGFILE (one log
# file for many jobs is refused). Each job's stdout and stderr go to its log file
# (its folder is created), between a header line with the command and a last line
# "# Ended (code N) ...". Command words are joined as Kaldi's run.pl joins them: a
# word without white space is passed as it is (so a quoted '|' or '&&' becomes a
# pipe or a list in the job's shell), a word with white space is quoted.
#
# Jobs run side by side, at most as many at once as:
#   --max-jobs-run N, or its GridEngine form -tc N (N >= 1; the smallest one given);
#   else with --gpu G (G not empty and not 0), the GPUs that nvidia-smi -L lists (1
#   if none); else the processors of /proc/cpuinfo (getconf/nproc elsewhere), raised
#   to the number of jobs when that is below 1.4 times the processors.
# --pick all|failed|incomplete (default all): failed reruns only the jobs whose log
# does not end in "# Ended (code 0)"; incomplete reruns only the jobs whose log has
# no "# Ended" line (or is missing), a job whose log says it failed counting as failed.
# The queue options of queue.pl / slurm.pl are accepted and ignored, as Kaldi's run.pl
# does: -V, and any other option starting with '-' with one value (--mem 4G,
# --num-threads 4, --config conf/queue.conf, -l arch=*64, -sync y, ...), -pe with
# two (-pe smp 4). Options are read only while at least two arguments are left.
#
# Exit status 0 when every job succeeded; otherwise 1, and the failed jobs' logs are
# named on stderr ("run.pl: F / N failed, see LOG ..."); bad usage is refused (1).

die() { echo "run.pl: $*" >&2; exit 1; }
warn() { echo "run.pl: WARNING: $*" >&2; }

max_jobs=      # from --max-jobs-run / -tc
gpu=           # from --gpu
pick=all
var='' first=1 last=1

for pass in 1 2; do  # options, JOB=..., options, JOB=... (as Kaldi's run.pl reads them)
  while [ $# -ge 2 ] && [[ $1 == -* ]]; do
    opt=$1; shift
    case $opt in
      -V) continue ;;
      --max-jobs-run|-tc)
        n=$1; shift
        [[ $n =~ ^[0-9]+$ ]] && [ "$((10#$n))" -gt 0 ] || \
          die "invalid option $opt '$n': the number of jobs at once must be an integer >= 1"
        n=$((10#$n))
        if [ -z "$max_jobs" ] || [ "$n" -lt "$max_jobs" ]; then max_jobs=$n; fi
        continue ;;
    esac
    value=$1; shift
    [[ $value == --* ]] && warn "the value '$value' of option $opt starts with '--'"
    case $opt in
      -pe) [ $# -ge 1 ] || die "option -pe needs two values (e.g. -pe smp 4)"
           shift ;;
      --gpu) gpu=$value ;;
      --pick)
        case $value in
          all|failed|incomplete) pick=$value ;;
          *) die "--pick must be all, failed or incomplete, got '$value'" ;;
        esac ;;
    esac  # any other option is a queue setting, ignored
  done
  if [[ ${1:-} =~ ^([A-Za-z0-9_]+)=([0-9]+):([0-9]+)$ ]]; then
    var=${BASH_REMATCH[1]} first=$((10#${BASH_REMATCH[2]})) last=$((10#${BASH_REMATCH[3]}))
    [ "$first" -le "$last" ] || die "invalid job range $1 (START > END)"
    [ "$first" -ge 1 ] || die "invalid job range $1: START must be >= 1 (as GridEngine needs)"
    shift
  elif [[ ${1:-} =~ ^([A-Za-z0-9_]+)=([0-9]+)$ ]]; then
    var=${BASH_REMATCH[1]} first=$((10#${BASH_REMATCH[2]})) last=$first
    shift
  elif [[ ${1:-} =~ .=.*: ]]; then
    warn "suspicious argument '$1': not a job range such as JOB=1:4, taken as the log file"
  fi
done

if [ $# -lt 2 ]; then
  echo "usage: run.pl [options] [JOB=1:N] LOGFILE COMMAND..." >&2
  echo "e.g.:  run.pl JOB=1:4 exp/log/score.JOB.log nbest-rescore score --nbest data/split4/JOB ..." >&2
  exit 1
fi
logfile=$1; shift
if [ -n "$var" ] && [ "$last" -gt "$first" ] && [[ $logfile != *"$var"* ]]; then
  die "$var=$first:$last runs $((last - first + 1)) jobs in parallel but the log file $logfile" \
      "does not contain $var: they would all write to one log file"
fi

num_jobs=$((last - first + 1))
if [ -z "$max_jobs" ]; then
  if [ -n "$gpu" ] && [ "$gpu" != 0 ]; then
    max_jobs=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "$max_jobs" -eq 0 ]; then
      max_jobs=1
      warn "--gpu $gpu: nvidia-smi lists no GPU, running 1 job at a time"
    fi
  else
    max_jobs=$(grep -c '^processor' /proc/cpuinfo 2>/dev/null)
    [[ $max_jobs =~ ^[1-9][0-9]*$ ]] || max_jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)
    [[ $max_jobs =~ ^[1-9][0-9]*$ ]] || max_jobs=10
    # a few jobs more than processors: run them all rather than leave a short last round
    if [ "$num_jobs" -gt "$max_jobs" ] && [ $((10 * num_jobs)) -lt $((14 * max_jobs)) ]; then
      max_jobs=$num_jobs
    fi
  fi
fi

command=
for word in "$@"; do
  if [[ $word =~ ^[^[:space:]]+$ ]]; then command+="$word "
  elif [[ $word == *'"'* ]]; then command+="'$word' "
  else command+="\"$word\" "
  fi
done

job_log() {  # job_log ID: the log file of job ID
  if [ -n "$var" ]; then echo "${logfile//$var/$1}"; else echo "$logfile"; fi
}

picked() {  # picked LOG: 0 = run the job, 1 = skip it as done, 2 = skip it as failed
  local ended
  [ "$pick" = all ] && return 0
  [ -f "$1" ] || return 0
  ended=$(grep '# Ended (code ' "$1" | tail -n 1)
  case $ended in
    '') return 0 ;;
    *'# Ended (code 0)'*) return 1 ;;
    *'# Ended (code '[0-9]*) [ "$pick" = failed ] && return 0; return 2 ;;
  esac
  return 0
}

run_one() {  # run_one ID: run the command for one job id into its log
  local id=$1 log cmd=$command rc start
  log=$(job_log "$id")
  [ -n "$var" ] && cmd=${cmd//$var/$id}
  picked "$log"
  case $? in 1) return 0 ;; 2) return 1 ;; esac
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

status_dir=$(mktemp -d "${TMPDIR:-/tmp}/run.pl.XXXXXX") || die "cannot create a temporary folder"
trap 'rm -rf "$status_dir"' EXIT
if [ "${BASH_VERSINFO[0]}" -gt 4 ] || { [ "${BASH_VERSINFO[0]}" -eq 4 ] && [ "${BASH_VERSINFO[1]}" -ge 3 ]; }; then
  wait_any() { wait -n 2>/dev/null; }
else
  wait_any() { sleep 0.05; }
fi
running=()
for ((id = first; id <= last; id++)); do
  while [ ${#running[@]} -ge "$max_jobs" ]; do
    wait_any
    still=()
    for pid in "${running[@]}"; do kill -0 "$pid" 2>/dev/null && still+=("$pid"); done
    running=("${still[@]}")
  done
  ( run_one "$id"; echo $? > "$status_dir/$id" ) &
  running+=($!)
done
wait

failed=()
for ((id = first; id <= last; id++)); do
  [ "$(cat "$status_dir/$id" 2>/dev/null)" = 0 ] || failed+=("$(job_log "$id")")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run.pl: ${#failed[@]} / $num_jobs failed, see ${failed[*]}" >&2
  exit 1
fi
exit 0
