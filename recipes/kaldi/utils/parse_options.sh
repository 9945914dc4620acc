# parse_options.sh: command-line options for Kaldi-style shell scripts.
#
# nbest-rescore's own small implementation of the interface of Kaldi's
# utils/parse_options.sh; scripts use Kaldi's when they run inside an egs directory.
# Source it after the script's "name=default" configuration lines:
#
#   nj=4
#   use_gpu=false
#   . utils/parse_options.sh      # consumes the leading --options of "$@"
#
# Every leading --some-name VALUE (or --some-name=VALUE) sets the shell variable
# some_name, which must already exist (an unknown option is an error, as is a value
# other than true/false for a variable whose default is true or false).
# --config FILE sources FILE (name=value lines); --help (or -h) prints $help_message
# and exits 0. Parsing stops at the first argument that does not start with --, or
# after a bare "--"; the positional arguments are left in "$@".

__po_fail() { echo "$0: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -h|--help)
      if [ -n "${help_message:-}" ]; then printf '%s\n' "$help_message" >&2
      else echo "$0: no help message defined" >&2; fi
      exit 0 ;;
    --config|--config=*)
      if [ "$1" = --config ]; then
        [ $# -ge 2 ] || __po_fail "option --config needs a file name"
        __po_val=$2; shift 2
      else
        __po_val=${1#--config=}; shift
      fi
      [ -f "$__po_val" ] || __po_fail "--config $__po_val: no such file"
      . "$__po_val" || __po_fail "--config $__po_val: could not be read"
      continue ;;
    --*=*) __po_opt=${1%%=*}; __po_val=${1#*=}; shift ;;
    --*)
      [ $# -ge 2 ] || __po_fail "option $1 needs a value (e.g. $1 VALUE)"
      __po_opt=$1; __po_val=$2; shift 2 ;;
    *) break ;;
  esac
  __po_name=${__po_opt#--}
  __po_name=${__po_name//-/_}
  if ! [[ $__po_name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || ! declare -p "$__po_name" >/dev/null 2>&1; then
    __po_fail "invalid option $__po_opt (run $0 --help for the options)"
  fi
  case "${!__po_name}" in
    true|false)
      case "$__po_val" in
        true|false) ;;
        *) __po_fail "option $__po_opt takes true or false, got '$__po_val'" ;;
      esac ;;
  esac
  printf -v "$__po_name" '%s' "$__po_val"
done
unset -f __po_fail
unset __po_opt __po_val __po_name
true
