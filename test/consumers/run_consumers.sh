#!/usr/bin/env bash
# Builds and runs the consumer projects in test/consumers/ against this tree,
# the ways users consume librpc (README, "Using librpc from your project"):
#
#   1. a private prefix install (meson setup --prefix=DIR; meson install),
#      then consumer.cc built with plain PKG_CONFIG_PATH=DIR/.../pkgconfig;
#   2. cmake_package/: find_package(librpc CONFIG) with CMAKE_PREFIX_PATH=DIR;
#   3. meson_subproject/: librpc as a Meson subproject. It must not build
#      librpc's tests, apps or benchmarks, and `meson install` must install
#      only the runtime (librpc.so, the transport modules), no headers,
#      pkg-config or CMake files.
# Each consumer checks that its build system, the headers and the loaded
# library agree on the version, and echoes one request over udp. The
# prefix consumer also loads the fabric module from the prefix.
# (The Debian-package consumer is test/consumers/pkgconfig_deb.)
#
#   bash test/consumers/run_consumers.sh      exit 0 when all pass
# Env: KEEP=1 keeps the temporary directory.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/librpc-consumers.XXXXXX")
if [[ ${KEEP:-0} = 1 ]]; then echo "run_consumers: keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
failures=0
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# run LOG CMD...: runs CMD with its output in $tmp/LOG; shows it on failure.
run() {
  local log=$tmp/$1
  shift
  if "$@" >"$log" 2>&1; then return 0; fi
  tail -40 "$log"
  return 1
}
# The files of this tree as they are now: tracked (with uncommitted edits)
# and new ones not ignored.
copy_tree() { (cd "$root" && git ls-files -z --cached --others --exclude-standard | cpio -0pdm --quiet "$1"); }

echo "== 1. prefix install, then pkg-config with plain PKG_CONFIG_PATH"
prefix=$tmp/prefix
start=$(date +%s)
# No link-time optimization: these builds check how librpc is consumed, not
# its speed, and the LTO link is most of a library-only build's time.
run setup.log meson setup "$tmp/libbuild" "$root" --prefix="$prefix" \
  -Dtests=false -Dapps=false -Dbench=false -Dlto=disabled
run build.log ninja -C "$tmp/libbuild"
run install.log meson install -C "$tmp/libbuild"
echo "  library-only build and install into $prefix: $(($(date +%s) - start)) s"
pc_dir=$(dirname "$(find "$prefix" -name librpc.pc | head -1)")
export PKG_CONFIG_PATH=$pc_dir
version=$(pkg-config --modversion librpc)
libdir=$(pkg-config --variable=libdir librpc)
# shellcheck disable=SC2046  # pkg-config prints a list of arguments
if run pc_build.log c++ -std=c++20 "$here/consumer.cc" -o "$tmp/pc_consumer" \
    -DEXPECTED_LIBRPC_VERSION="\"$version\"" $(pkg-config --cflags --libs librpc) \
    -Wl,-rpath,"$libdir"; then
  if out=$(env -u LIBRPC_MODULE_DIR "$tmp/pc_consumer" --fabric 2>&1) && [[ $out = ok* ]]; then
    pass "pkg-config consumer (PKG_CONFIG_PATH=$pc_dir): $out, fabric module loaded from the prefix"
  else
    fail "pkg-config consumer printed: $out"
  fi
else
  fail "pkg-config consumer does not build"
fi
unset PKG_CONFIG_PATH

echo "== 2. CMake find_package(librpc CONFIG)"
if run cmake_config.log cmake -S "$here/cmake_package" -B "$tmp/cmake" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release &&
    run cmake_build.log cmake --build "$tmp/cmake"; then
  if out=$("$tmp/cmake/consumer" 2>&1) && [[ $out = ok* ]]; then
    pass "CMake consumer (librpc::librpc from $prefix): $out"
  else
    fail "CMake consumer printed: $out"
  fi
else
  fail "CMake consumer does not configure or build"
fi

echo "== 3. Meson subproject"
msub=$tmp/meson_subproject
mkdir -p "$msub/subprojects/librpc"
cp "$here/meson_subproject/meson.build" "$msub/"
cp "$here/consumer.cc" "$tmp/"
copy_tree "$msub/subprojects/librpc"
if run msub_setup.log meson setup "$msub/b" "$msub" --prefix=/usr/local -Dlibrpc:lto=disabled &&
    run msub_build.log ninja -C "$msub/b"; then
  if out=$("$msub/b/consumer" 2>&1) && [[ $out = ok* ]]; then
    pass "Meson subproject consumer: $out"
  else
    fail "Meson subproject consumer printed: $out"
  fi
  extra=$(meson introspect --targets "$msub/b" |
    python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin) if t["name"].startswith(("librpc-", "unit_tests", "catch_main", "bench_common", "minimal"))))')
  if [[ -z $extra ]]; then
    pass "the subproject builds no tests, apps or benchmarks"
  else
    fail "the subproject builds $extra"
  fi
  if [[ $(meson introspect --tests "$msub/b") = '[{'*'"name": "consumer"'*'}]' ]]; then
    pass "the subproject adds no tests to the parent's"
  else
    fail "the subproject adds tests: $(meson introspect --tests "$msub/b" | head -c 300)"
  fi
  run msub_install.log meson install -C "$msub/b" --destdir "$msub/root"
  installed=$(cd "$msub/root" && find . -type f -o -type l | sort | tr '\n' ' ')
  if [[ $installed = *librpc.so.0* && $installed != *include/librpc* &&
        $installed != *pkgconfig* && $installed != *cmake/librpc* && $installed != *bin/librpc-* ]]; then
    pass "the subproject installs only the runtime: $installed"
  else
    fail "the subproject installs: $installed"
  fi
else
  fail "Meson subproject consumer does not configure or build"
fi

if [[ $failures -gt 0 ]]; then
  echo "run_consumers: $failures check(s) FAILED"
  exit 1
fi
echo "run_consumers: all consumer projects passed (librpc $version)"
