# parse_options.sh: command-line options for Kaldi-style shell scripts.
#
# nbest-rescore's own small implementation of the interface of Kaldi's
# utils/parse_options.sh (a subset of it: what it accepts, it sets as Kaldi's does);
# scripts use Kaldi's when they run inside an egs directory. Source it after the
# script's "name=default" configuration lines:
#
#   nj=4
#   use_gpu=false
#   . utils/parse_options.sh      # consumes the leading --options of "$@"
#
# Options have the form --some-name VALUE (--some-name=VALUE is refused, as Kaldi's
# refuses it) and set the shell variable some_name, which must already be set (an
# unknown option is an error, as is a value other than true/false for a variable
# whose value is true or false). The value is stored as it is (Kaldi's parse_options
# evaluates it inside double quotes, so it would expand a $ or ` in it).
# --config FILE sources FILE (name=value lines) and sets config=FILE; as in Kaldi's,
# every "--config FILE" in the arguments is read first, left to right, before any
# other option is set, so the options on the command line win over the config files
# wherever they are.
# --help (or -h) prints $help_message on stderr and exits 0. Parsing stops at the
# first argument that does not start with -- (or is empty); the positional arguments
# are left in "$@". "--" is refused (Kaldi's has no end-of-options marker), as is an
# option without a value. Finally, an empty $cmd (e.g. --cmd "") is an error.

__po_fail() { echo "$0: $*" >&2; exit 1; }

# The config files first (they have the lowest priority), in the order given: as in
# Kaldi's, every "--config" followed by another argument is one, wherever it is.
__po_i=1
while [ "$__po_i" -lt $# ]; do
  __po_arg=${!__po_i}
  __po_i=$((__po_i + 1))
  if [ "$__po_arg" = --config ]; then
    __po_val=${!__po_i}
    [ -r "$__po_val" ] || __po_fail "missing config '$__po_val' (--config $__po_val: no readable file)"
    config=$__po_val
    . "$__po_val"
  fi
done

while [ $# -gt 0 ] && [ -n "$1" ]; do
  case $1 in
    -h|--help)
      if [ -n "${help_message:-}" ]; then printf '%s\n' "$help_message" >&2
      else echo "No help found." >&2; fi
      exit 0 ;;
    --) __po_fail "invalid option --: options end at the first argument that does not start with --" ;;
    --*=*) __po_fail "options to scripts must be of the form --name value, got '$1'" ;;
    --*) ;;
    *) break ;;
  esac
  [ $# -ge 2 ] || __po_fail "option $1 needs a value ($1 VALUE)"
  __po_name=${1#--}
  __po_name=${__po_name//-/_}
  if ! [[ $__po_name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || [ -z "${!__po_name+set}" ]; then
    __po_fail "invalid option $1 (run $0 --help for the options)"
  fi
  case ${!__po_name} in
    true|false)
      case $2 in
        true|false) ;;
        *) __po_fail "expected \"true\" or \"false\": $1 $2" ;;
      esac ;;
  esac
  printf -v "$__po_name" '%s' "$2"
  shift 2
done

if [ -n "${cmd+set}" ] && [ -z "$cmd" ]; then
  __po_fail "empty argument to --cmd option"
fi
unset -f __po_fail
unset __po_i __po_arg __po_val __po_name
true
