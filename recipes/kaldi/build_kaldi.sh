#!/usr/bin/env bash
# build_kaldi.sh: build the Kaldi binaries that steps/nbest_rescore.sh and its tests use,
# from a Kaldi source tarball, into a cache folder outside the repository.
#
# Usage: recipes/kaldi/build_kaldi.sh [--tarball FILE] [--cache DIR] [--jobs N]
#   --tarball  Kaldi's sources: src/ and egs/wsj/s5/{utils,steps}
#              (default: ../shared/third_party/kaldi-57efb6b5e.tar.gz beside the repository)
#   --cache    where the build goes (default: $NBEST_KALDI_CACHE, else
#              ~/.cache/nbest-rescore/kaldi-<tarball name>)
#   --jobs     make -j (default: the number of CPUs)
#
# Result: CACHE/bin/ with lattice-to-nbest, nbest-to-linear, linear-to-nbest,
# nbest-to-lattice, lattice-lmrescore-const-arpa, lattice-scale, lattice-compose,
# lattice-1best, lattice-best-path, lattice-add-penalty, arpa2fst, arpa-to-const-arpa,
# compute-wer, align-text, compute-wer-bootci (plus OpenFst's fst* tools from Debian on PATH), and CACHE/kaldi/ the
# unpacked tree with egs/wsj/s5/{utils,steps} (Kaldi's real run.pl, parse_options.sh,
# score_kaldi.sh ...). A finished build leaves CACHE/bin/BUILD_OK; a second call with
# it present does nothing. Point the tests at another Kaldi with KALDI_ROOT instead.
#
# Needs Debian's libfst-dev, libfst-tools (OpenFst 1.7.9), libatlas-base-dev, gfortran
# and zlib1g-dev: installed with apt-get when missing and running as root, else the
# missing ones are named. OpenBLAS is not used: with Debian's LAPACK 3.11 prototypes
# Kaldi's matrix/ does not compile against it; ATLAS is Kaldi's other CPU math library.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
tarball=$here/../../../shared/third_party/kaldi-57efb6b5e.tar.gz
cache=
jobs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --tarball) tarball=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "$0: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$tarball" ] || { echo "$0: Kaldi tarball $tarball not found (--tarball FILE)" >&2; exit 1; }
tarball=$(cd "$(dirname "$tarball")" && pwd)/$(basename "$tarball")
name=$(basename "$tarball" .tar.gz)
cache=${cache:-${NBEST_KALDI_CACHE:-$HOME/.cache/nbest-rescore/$name}}
bins_lat="lattice-to-nbest nbest-to-linear linear-to-nbest nbest-to-lattice lattice-lmrescore-const-arpa
  lattice-scale lattice-compose lattice-1best lattice-best-path lattice-add-penalty"
bins_lm="arpa2fst arpa-to-const-arpa"
bins_bin="compute-wer align-text compute-wer-bootci"

if [ -f "$cache/bin/BUILD_OK" ]; then
  echo "$0: Kaldi binaries already built in $cache/bin"
  exit 0
fi
start=$(date +%s)

# 1. Debian's packages
pkgs="libfst-dev libfst-tools libatlas-base-dev gfortran zlib1g-dev"
missing=
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing+=" $p"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "$0: installing$missing"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "$0: these Debian packages are missing:$missing (sudo apt-get install$missing)" >&2
    exit 1
  fi
fi
fstver=$(dpkg-query -W -f '${Version}' libfst-dev | sed 's/-.*//')
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

# 2. sources and the link roots that Kaldi's configure expects
mkdir -p "$cache"
rm -rf "$cache/kaldi" "$cache/bin" "$cache/roots"
echo "$0: unpacking $tarball into $cache"
tar xzf "$tarball" -C "$cache"
fstroot=$cache/roots/openfst
atlasroot=$cache/roots/atlas
mkdir -p "$fstroot/include" "$atlasroot/include" "$atlasroot/lib"
ln -s /usr/include/fst "$fstroot/include/fst"
ln -s "/usr/lib/$multiarch" "$fstroot/lib"
ln -s "/usr/include/$multiarch/clapack.h" "$atlasroot/include/clapack.h"
ln -s "/usr/include/$multiarch/cblas-atlas.h" "$atlasroot/include/cblas.h"
for f in /usr/lib/$multiarch/atlas/* /usr/lib/$multiarch/libatlas* /usr/lib/$multiarch/libcblas* \
         /usr/lib/$multiarch/liblapack_atlas*; do
  [ -e "$f" ] && ln -sf "$f" "$atlasroot/lib/"
done

# 3. OpenFst 1.7.9's FstPrinter::Print takes the stream by reference
src=$cache/kaldi/src
sed -i 's/printer\.Print(&os, s);/printer.Print(os, s);/' "$src/fstext/openfst_compat.h"

# 4. configure and build only what is needed
cd "$src"
echo "$0: configuring (OpenFst $fstver, ATLAS)"
./configure --use-cuda=no --static --static-fst=no --fst-root="$fstroot" --fst-version="$fstver" \
  --mathlib=ATLAS --atlas-root="$atlasroot" > "$cache/configure.log" 2>&1 || {
  echo "$0: Kaldi's configure failed; last lines of $cache/configure.log:" >&2
  tail -n 20 "$cache/configure.log" >&2; exit 1; }
# configure picks C++14 for OpenFst < 1.8, but Debian's libfst is compiled as C++17: its
# SymbolTable takes std::string_view, and a C++14 Kaldi passes OpenFst's own stand-in
# (arpa2fst then crashes in SymbolTable::AddSymbol). Compile Kaldi as C++17 too.
sed -i 's/^CXXLANGVERSION = c++14$/CXXLANGVERSION = c++17/' kaldi.mk
# No debug information (kaldi.mk ends CXXFLAGS with -g): the same -O1 code, compiled in about
# 40% less CPU time (lat/lattice-functions.cc: 15.5 s against 9.3 s); the tests never debug it.
sed -i 's/^\( *\)-g$/\1/' kaldi.mk
build() {  # build LOGNAME make-arguments...
  local log=$cache/make.$1.log; shift
  make "$@" > "$log" 2>&1 || { echo "$0: make $* failed; last lines of $log:" >&2; tail -n 30 "$log" >&2; exit 1; }
}
for d in base matrix util tree hmm fstext lm lat; do
  echo "$0: building src/$d"
  build "$d" -C "$d" -j "$jobs"
done
libs="../lat/kaldi-lat.a ../lm/kaldi-lm.a ../fstext/kaldi-fstext.a ../hmm/kaldi-hmm.a ../tree/kaldi-tree.a
  ../util/kaldi-util.a ../matrix/kaldi-matrix.a ../base/kaldi-base.a"
echo "$0: building the binaries"
build latbin -C latbin -j "$jobs" $bins_lat ADDLIBS="$(echo $libs)"
build lmbin -C lmbin -j "$jobs" $bins_lm ADDLIBS="../lm/kaldi-lm.a ../fstext/kaldi-fstext.a ../util/kaldi-util.a ../matrix/kaldi-matrix.a ../base/kaldi-base.a"
build bin -C bin -j "$jobs" $bins_bin ADDLIBS="../util/kaldi-util.a ../matrix/kaldi-matrix.a ../base/kaldi-base.a"

mkdir -p "$cache/bin"
for b in $bins_lat; do cp "latbin/$b" "$cache/bin/"; done
for b in $bins_lm; do cp "lmbin/$b" "$cache/bin/"; done
for b in $bins_bin; do cp "bin/$b" "$cache/bin/"; done
# object files are not needed any more
find "$src" -name '*.o' -delete
elapsed=$(( $(date +%s) - start ))
echo "tarball=$name openfst=$fstver seconds=$elapsed" > "$cache/bin/BUILD_OK"
echo "$0: built $(ls "$cache/bin" | grep -vc BUILD_OK) Kaldi binaries into $cache/bin in $elapsed s"
