#!/usr/bin/env bash
# Builds the libFuzzer targets in test/fuzz/ with clang (ASan + UBSan),
# replays every saved regression input, then fuzzes each target for
# SECONDS_PER_TARGET seconds (default 20) starting from the committed seeds.
# Exits non-zero if any target crashes; new crash inputs are copied to
# test/fuzz/regressions/<target>/ so they are replayed from then on.
#
#   test/fuzz/build_and_run.sh [SECONDS_PER_TARGET]
#
# Build output, the growing corpora and artifacts go to build-fuzz/ at the
# top of the source tree. Needs clang++ and its libFuzzer runtime
# (libclang-rt-14-dev on Debian 12), fmt and standalone asio.
set -euo pipefail

secs=${1:-20}
root=$(cd "$(dirname "$0")/../.." && pwd)
bdir=$root/build-fuzz
fuzz_src=$root/test/fuzz
targets=(fuzz_pkt_hdr fuzz_sm_msg fuzz_engine_rx fuzz_verbs_routing fuzz_kv_protocol fuzz_samehost
         fuzz_tagged_read)
# Largest input worth mutating, per target: a header plus lengths; one SM
# datagram and a bit more; a few dozen 128-byte packets; one routing info.
declare -A max_len=([fuzz_pkt_hdr]=64 [fuzz_sm_msg]=128 [fuzz_engine_rx]=4096
                    [fuzz_verbs_routing]=48 [fuzz_kv_protocol]=600
                    [fuzz_samehost]=2200 [fuzz_smr_raft_msg]=4096
                    [fuzz_tagged_read]=64)
# Sources a target needs beyond the library's (from the top of the tree).
declare -A extra_srcs=([fuzz_kv_protocol]="apps/kv/protocol.cc")
# apps/smr's raft message decoder: its own source and libraft, not librpc.
smr_targets=()
if pkg-config --exists raft 2>/dev/null; then
  smr_targets=(fuzz_smr_raft_msg)
fi

CXX=${CXX:-clang++}
command -v "$CXX" >/dev/null || { echo "build_and_run.sh: $CXX not found" >&2; exit 2; }
command -v ninja >/dev/null || { echo "build_and_run.sh: ninja not found" >&2; exit 2; }

mkdir -p "$bdir/obj"
# The build configuration header meson would generate: no RDMA transports.
cfg=$bdir/gen/rpc_build_config.h
mkdir -p "$bdir/gen"
{
  printf '#pragma once\n#define RPC_VERSION "fuzz"\n#define RPC_MODULE_INSTALL_DIR "/nonexistent"\n'
  # Every module of the transport table, not built.
  sed -n 's/^RPC_MODULE(\([a-z0-9_]*\),.*/#define RPC_MODULE_BUILT_\1 0/p' "$root/src/transport/transports.def"
} >"$cfg.tmp"
cmp -s "$cfg.tmp" "$cfg" 2>/dev/null && rm "$cfg.tmp" || mv "$cfg.tmp" "$cfg"
# <librpc/version.h>, which meson generates from include/librpc/version.h.in.
version=$(sed -n "s/^ *version : '\([0-9.]*\)',.*/\1/p" "$root/meson.build" | head -1)
IFS=. read -r v_major v_minor v_patch <<<"$version"
mkdir -p "$bdir/gen/librpc"
sed -e "s/@MAJOR@/$v_major/; s/@MINOR@/$v_minor/; s/@PATCH@/$v_patch/; s/@VERSION@/$version/" \
  "$root/include/librpc/version.h.in" >"$bdir/gen/librpc/version.h.tmp"
cmp -s "$bdir/gen/librpc/version.h.tmp" "$bdir/gen/librpc/version.h" 2>/dev/null &&
  rm "$bdir/gen/librpc/version.h.tmp" || mv "$bdir/gen/librpc/version.h.tmp" "$bdir/gen/librpc/version.h"

# The library sources, from src/meson.build so the list never drifts.
mapfile -t lib_srcs < <(sed -n '/^rpc_sources = files(/,/^)/p' "$root/src/meson.build" |
  grep -o "'[^']*\.cc'" | tr -d "'")
[ ${#lib_srcs[@]} -gt 0 ] || { echo "build_and_run.sh: no sources found in src/meson.build" >&2; exit 2; }

san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
common="-std=c++20 -O1 -g $san -DASIO_STANDALONE -DASIO_NO_DEPRECATED -DASIO_DISABLE_VISIBILITY"
common+=" -I$root/include -I$root/src -I$root -I$bdir/gen -I$root/test"
common+=" $(pkg-config --cflags fmt 2>/dev/null || true)"
libs="$(pkg-config --libs fmt 2>/dev/null || echo -lfmt) -pthread"

# A ninja file, so rebuilds are incremental (header dependencies included).
{
  echo "cxx = $CXX"
  echo "common = $common"
  echo "libs = $libs"
  echo "rule cxx"
  echo "  command = \$cxx \$common \$extra -MD -MF \$out.d -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "  description = CXX \$out"
  echo "rule link"
  echo "  command = \$cxx \$common -fsanitize=fuzzer \$in -o \$out \$libs"
  echo "  description = LINK \$out"
  objs=()
  for s in "${lib_srcs[@]}"; do
    o="obj/lib/${s%.cc}.o"
    objs+=("$o")
    echo "build $o: cxx $root/src/$s"
    echo "  extra = -fsanitize=fuzzer-no-link"
  done
  for t in "${targets[@]}"; do
    echo "build obj/$t.o: cxx $fuzz_src/$t.cc"
    echo "  extra = -fsanitize=fuzzer-no-link"
    extra_objs=()
    for s in ${extra_srcs[$t]:-}; do
      extra_objs+=("obj/extra/${s%.cc}.o")
      echo "build obj/extra/${s%.cc}.o: cxx $root/$s"
      echo "  extra = -fsanitize=fuzzer-no-link"
    done
    echo "build $t: link obj/$t.o ${extra_objs[*]} ${objs[*]}"
  done
  for t in "${smr_targets[@]}"; do
    echo "build obj/$t.o: cxx $fuzz_src/$t.cc"
    echo "  extra = -fsanitize=fuzzer-no-link"
    echo "build obj/smr/raft_codec.o: cxx $root/apps/smr/raft_codec.cc"
    echo "  extra = -fsanitize=fuzzer-no-link"
    echo "build $t: link obj/$t.o obj/smr/raft_codec.o"
    echo "  libs = $libs $(pkg-config --libs raft)"
  done
} >"$bdir/build.ninja.tmp"
targets+=("${smr_targets[@]}")
mv "$bdir/build.ninja.tmp" "$bdir/build.ninja"
ninja -C "$bdir" "${targets[@]}"

status=0

# 1. Regression inputs: every crash ever found, replayed on every run.
for t in "${targets[@]}"; do
  dir=$fuzz_src/regressions/$t
  [ -d "$dir" ] || continue
  mapfile -t files < <(find "$dir" -type f ! -name '.*' | sort)
  [ ${#files[@]} -gt 0 ] || continue
  echo "== $t: replaying ${#files[@]} regression input(s)"
  if ! "$bdir/$t" -runs=1 "${files[@]}" >"$bdir/$t.regressions.log" 2>&1; then
    echo "!! $t: a regression input fails again; see $bdir/$t.regressions.log" >&2
    tail -30 "$bdir/$t.regressions.log" >&2
    status=1
  fi
done

# 2. Fuzzing, from the committed seeds plus the corpus grown by earlier runs.
for t in "${targets[@]}"; do
  corpus=$bdir/corpus/$t
  artifacts=$bdir/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  seeds=()
  [ -d "$fuzz_src/corpus/$t" ] && seeds=("$fuzz_src/corpus/$t")
  echo "== $t: fuzzing for ${secs}s"
  set +e
  "$bdir/$t" -max_total_time="$secs" -max_len="${max_len[$t]}" -timeout=30 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$corpus" "${seeds[@]}" >"$bdir/$t.log" 2>&1
  rc=$?
  set -e
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$bdir/$t.log" || true
  echo "   corpus: $(find "$corpus" -type f | wc -l) inputs"
  if [ $rc -ne 0 ]; then
    echo "!! $t crashed (exit $rc); log: $bdir/$t.log" >&2
    grep -E 'ERROR|FUZZ_CHECK|fuzz_engine_rx:|SUMMARY|runtime error' "$bdir/$t.log" | head -20 >&2 || true
    mkdir -p "$fuzz_src/regressions/$t"
    for a in "$artifacts"/*; do
      [ -f "$a" ] || continue
      cp "$a" "$fuzz_src/regressions/$t/"
      echo "   saved $(basename "$a") to test/fuzz/regressions/$t/" >&2
      rm "$a"
    done
    status=1
  fi
done

if [ $status -eq 0 ]; then
  echo "build_and_run.sh: all targets clean"
fi
exit $status
