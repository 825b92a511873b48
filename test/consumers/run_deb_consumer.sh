#!/usr/bin/env bash
# Proves that the Debian packages built by scripts/build-debs.sh are
# consumable the usual way:
#
#   1. apt-get install -y ./librpc0_*.deb ./librpc-dev_*.deb and the
#      transport packages (and librpc-tools when present), so that their
#      dependencies resolve from the archive;
#   2. builds test/consumers/pkgconfig_deb (a plain Makefile using
#      `pkg-config --cflags --libs librpc`) and checks that the flags, the
#      headers and the librpc.so.0 the program loads all come from the
#      packages;
#   3. runs it: one echo request over udp, "ok"; builds and runs
#      test/consumers/cmake_package with no prefix path (find_package finds
#      the packaged CMake config);
#   4. runs it as "consumer --fabric": an Rpc over fabric's shm provider,
#      which loads librpc-fabric.so from where librpc-transport-fabric put
#      it (LIBRPC_MODULE_DIR unset);
#   5. librpc-tools (when installed): every program answers --help and
#      has its man page;
#   6. always (trap), purges the librpc packages and whatever the install
#      pulled in, leaving the installed package set as it was.
#
# Usage: test/consumers/run_deb_consumer.sh [DEB_DIR]   (default: build-debs)
# Needs root (or sudo), a C++20 compiler, make and pkg-config. Refuses to run
# when a librpc package is installed already (it would purge it).
# Exit status: 0 when every check passes, 1 otherwise (2 for bad usage).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deb_dir=${1:-$root/build-debs}
if [[ ! -d $deb_dir ]]; then
  echo "run_deb_consumer: no directory $deb_dir (run scripts/build-debs.sh first)" >&2
  exit 2
fi
deb_dir=$(cd "$deb_dir" && pwd)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "run_deb_consumer: must run as root or with sudo available" >&2
    exit 2
  fi
fi
for tool in apt-get dpkg-query make pkg-config "${CXX:-c++}"; do
  if ! command -v "$tool" >/dev/null; then
    echo "run_deb_consumer: '$tool' not found" >&2
    exit 2
  fi
done

packages=(librpc0 librpc-dev librpc-transport-verbs librpc-transport-fabric librpc-tools)
debs=()
names=()
for p in "${packages[@]}"; do
  shopt -s nullglob
  files=("$deb_dir/${p}_"*.deb)
  shopt -u nullglob
  if [[ ${#files[@]} -eq 0 ]]; then
    [[ $p = librpc-tools ]] && continue
    echo "run_deb_consumer: no ${p}_*.deb in $deb_dir" >&2
    exit 2
  fi
  if [[ ${#files[@]} -gt 1 ]]; then
    echo "run_deb_consumer: more than one ${p}_*.deb in $deb_dir: ${files[*]}" >&2
    exit 2
  fi
  debs+=("${files[0]}")
  names+=("$p")
done
for p in "${names[@]}"; do
  if dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed; then
    echo "run_deb_consumer: $p is installed already; purge it first (this script would remove it)" >&2
    exit 2
  fi
done

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$multiarch
tmp=$(mktemp -d "${TMPDIR:-/tmp}/librpc-deb-consumer.XXXXXX")
installed_before=$tmp/installed-before.txt
dpkg-query -W -f '${db:Status-Status} ${binary:Package}\n' | awk '$1 == "installed" {print $2}' |
  sort >"$installed_before"

cleanup() {
  local rc=$?
  echo "== purging the packages again"
  local now extra=()
  now=$(dpkg-query -W -f '${db:Status-Status} ${binary:Package}\n' | awk '$1 == "installed" {print $2}' | sort)
  # What the install added: the librpc packages and any dependency pulled in.
  mapfile -t extra < <(comm -13 "$installed_before" <(echo "$now"))
  if [[ ${#extra[@]} -gt 0 ]]; then
    echo "purging: ${extra[*]}"
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get purge -y -qq "${extra[@]}" >"$tmp/purge.log" 2>&1 ||
      { cat "$tmp/purge.log"; echo "FAIL: apt-get purge"; rc=1; }
  fi
  for p in "${names[@]}"; do
    status=$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null || true)
    if [[ $status = installed || $status = config-files ]]; then
      echo "FAIL: $p is still $status after the purge"
      rc=1
    fi
  done
  if cmp -s "$installed_before" <(dpkg-query -W -f '${db:Status-Status} ${binary:Package}\n' |
      awk '$1 == "installed" {print $2}' | sort); then
    echo "the installed package set is as it was before"
  else
    echo "FAIL: the installed package set differs from before"
    rc=1
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT

failures=0
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# --- 1. install ---------------------------------------------------------------
echo "== apt-get install -y ${debs[*]##*/}"
start=$(date +%s)
if ! DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${debs[@]}" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "FAIL: apt-get install of the packages"
  exit 1
fi
pass "installed ${names[*]} in $(( $(date +%s) - start )) s"

# --- 2. build the consumer ----------------------------------------------------
owner() { dpkg-query -S "$1" 2>/dev/null | cut -d: -f1; }
# Only the system's pkg-config search path: nothing from /usr/local or the
# caller's PKG_CONFIG_PATH.
export PKG_CONFIG_PATH=
unset LD_LIBRARY_PATH LIBRPC_MODULE_DIR
pc_libdir=$(pkg-config --variable=libdir librpc || true)
pc_version=$(pkg-config --modversion librpc || true)
if [[ $pc_libdir = "$libdir" ]]; then
  pass "pkg-config librpc $pc_version: libdir $pc_libdir"
else
  fail "pkg-config librpc's libdir is '$pc_libdir', expected $libdir"
fi
for f in "$libdir/pkgconfig/librpc.pc" /usr/include/librpc/rpc_all.h "$libdir/librpc.so"; do
  o=$(owner "$f")
  if [[ $o = librpc-dev ]]; then
    pass "$f is librpc-dev's"
  else
    fail "$f belongs to '${o:-no package}', expected librpc-dev"
  fi
done

cp -r "$root/test/consumers/pkgconfig_deb" "$tmp/consumer"
cp "$root/test/consumers/consumer.cc" "$tmp/"
echo "== make -C consumer (pkg-config --cflags --libs librpc: $(pkg-config --cflags --libs librpc))"
if make -C "$tmp/consumer" >"$tmp/make.log" 2>&1; then
  pass "the consumer builds with the flags of the packaged librpc.pc"
else
  cat "$tmp/make.log"
  fail "the consumer does not build"
  exit 1
fi
so=$(ldd "$tmp/consumer/consumer" | awk '/librpc\.so\.0/ {print $3}')
so_owner=$(owner "$(readlink -f "$so")")
if [[ $so_owner = librpc0 ]]; then
  pass "the consumer loads $so (librpc0's)"
else
  fail "the consumer loads '$so', which belongs to '${so_owner:-no package}', not librpc0"
fi

# --- 3. echo over udp ---------------------------------------------------------
if output=$(cd "$tmp" && timeout 60 ./consumer/consumer 2>&1) && [[ $output = ok* ]]; then
  pass "consumer: one echo request over udp, \"ok\""
else
  fail "consumer printed '$output' (expected \"ok\")"
fi

# --- 3b. CMake, with no prefix path: the package's config is found ----------
if command -v cmake >/dev/null; then
  if cmake -S "$root/test/consumers/cmake_package" -B "$tmp/cmake" >"$tmp/cmake.log" 2>&1 &&
      cmake --build "$tmp/cmake" >>"$tmp/cmake.log" 2>&1 &&
      output=$(timeout 60 "$tmp/cmake/consumer" 2>&1) && [[ $output = ok* ]]; then
    pass "CMake find_package(librpc CONFIG) finds the packaged librpc: $output"
  else
    cat "$tmp/cmake.log"
    fail "the CMake consumer against the packages: ${output:-did not build}"
  fi
fi

# --- 4. the transport modules from their packages ----------------------------
for name in fabric verbs; do
  module=$libdir/librpc/librpc-$name.so
  if [[ $(owner "$module") = librpc-transport-$name ]]; then
    pass "$module is librpc-transport-$name's"
  else
    fail "$module is not installed by librpc-transport-$name"
  fi
done
if output=$(cd "$tmp" && timeout 60 ./consumer/consumer --fabric 2>&1) && [[ $output = ok* ]]; then
  pass "an Rpc over fabric (shm) loads the packaged module from its default path"
else
  fail "an Rpc over fabric (shm) with the packaged module: $output"
fi

# --- 5. tools -----------------------------------------------------------------
if [[ " ${names[*]} " = *" librpc-tools "* ]]; then
  mapfile -t progs < <(dpkg-query -L librpc-tools | grep '^/usr/bin/librpc-' | sort)
  echo "== librpc-tools: ${#progs[@]} programs"
  tool_failures=0
  for prog in "${progs[@]}"; do
    name=${prog##*/}
    if ! timeout 20 "$prog" --help >/dev/null 2>&1; then
      fail "$name --help does not exit 0"
      tool_failures=$((tool_failures + 1))
    elif [[ ! -f /usr/share/man/man1/$name.1.gz ]]; then
      fail "$name has no man page"
      tool_failures=$((tool_failures + 1))
    fi
  done
  if [[ ${#progs[@]} -gt 0 && $tool_failures -eq 0 ]]; then
    pass "every program of librpc-tools answers --help and has a man page: ${progs[*]##*/}"
  fi
fi

if [[ $failures -gt 0 ]]; then
  echo "run_deb_consumer: $failures check(s) FAILED"
  exit 1
fi
echo "run_deb_consumer: all checks passed"
