#!/usr/bin/env bash
# Proves that an out-of-tree program builds and runs against an *installed*
# librpc, and that the installed library exports only its public API:
#
#   1. meson install --destdir $TMP from an existing build dir;
#   2. compiles $TMP/app.cc (Nexus on 127.0.0.1:0, an Rpc, a MsgBuffer,
#      prints "ok") with the flags of the installed librpc.pc, runs it with
#      LD_LIBRARY_PATH pointing into $TMP, and checks it prints "ok";
#   3. nm -D --defined-only on the installed librpc.so: prints the number of
#      exported symbols and fails if any rpc::detail::, asio or fmt symbol is
#      exported (other non-rpc:: symbols are listed as warnings; STRICT=1
#      makes them fatal too);
#   4. readelf -d: the SONAME must be librpc.so.0;
#   5. transport modules: librpc.so links no RDMA library; librpc-verbs.so
#      and librpc-fabric.so (where built) are installed in <libdir>/librpc
#      exporting only their entry point; an installed program loads the
#      fabric module from there by default, and with the modules removed
#      udp still works while fabric fails naming the module and where it
#      looked.
#
# Usage: scripts/install_check.sh [BUILD_DIR]      (default: build)
# Env:   KEEP=1    keep the temporary install tree (its path is printed)
#        STRICT=1  also fail on exported symbols outside rpc:: (std:: template
#                  instantiations and the like)
#        CXX       compiler for the test program (default: c++)
# Exit status: 0 when every check passes, 1 otherwise (2 for bad usage).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$root/build}
cxx=${CXX:-c++}

if [[ ! -f $build_dir/build.ninja ]]; then
  echo "install_check: '$build_dir' is not a configured meson build dir" >&2
  exit 2
fi
for tool in meson pkg-config nm c++filt readelf python3 "$cxx"; do
  if ! command -v "$tool" >/dev/null; then
    echo "install_check: '$tool' not found" >&2
    exit 2
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/librpc-install-check.XXXXXX")
if [[ ${KEEP:-0} = 1 ]]; then
  echo "install_check: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi

failures=0
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# --- 1. install -------------------------------------------------------------
echo "== meson install -C $build_dir --destdir $tmp/root"
if ! meson install -C "$build_dir" --destdir "$tmp/root" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "FAIL: meson install"
  exit 1
fi
destdir=$tmp/root

mapfile -t pcs < <(find "$destdir" -path '*/pkgconfig/librpc.pc' -type f)
if [[ ${#pcs[@]} -ne 1 ]]; then
  echo "FAIL: expected exactly one installed pkgconfig/librpc.pc under $destdir, found ${#pcs[@]}"
  find "$destdir" -name '*.pc'
  exit 1
fi
pc_dir=$(dirname "${pcs[0]}")
echo "pkg-config file: ${pcs[0]#"$destdir"}"

# The .pc names the final prefix (/usr/local/...); PKG_CONFIG_SYSROOT_DIR
# rewrites its -I/-L into the destdir. PKG_CONFIG_LIBDIR (not only _PATH)
# keeps any librpc.pc installed on this machine out of the search.
pc() { PKG_CONFIG_LIBDIR=$pc_dir PKG_CONFIG_PATH=$pc_dir PKG_CONFIG_SYSROOT_DIR=$destdir pkg-config "$@"; }
if ! flags=$(pc --cflags --libs librpc); then
  echo "FAIL: pkg-config --cflags --libs librpc"
  exit 1
fi
echo "pkg-config --cflags --libs librpc: $flags"
libdir=$(pc --variable=libdir librpc)
# pkgconf prefixes --variable output with the sysroot; pkg-config 0.29 does not.
[[ $libdir = "$destdir"/* ]] || libdir=$destdir$libdir
if [[ ! -e $libdir/librpc.so ]]; then
  echo "FAIL: no librpc.so in the .pc's libdir ($libdir)"
  exit 1
fi
case " $flags " in
  *" -I$destdir/"*) pass "pkg-config include path points into the destdir" ;;
  *) fail "pkg-config --cflags does not point into $destdir: $flags" ;;
esac

# --- 2. out-of-tree program -------------------------------------------------
cat >"$tmp/app.cc" <<'EOF'
// Out-of-tree user of an installed librpc.
#include <cstdio>
#include <exception>

#include "librpc/rpc_all.h"

int main() {
  try {
    rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"});
    rpc::Rpc rpc(nexus, rpc::RpcConfig{.rpc_id = 0});
    rpc::MsgBuffer buf = rpc.alloc_msg_buffer(64);
    if (!buf.valid() || buf.size() != 64) {
      std::puts("alloc_msg_buffer failed");
      return 1;
    }
    rpc.free_msg_buffer(buf);
    // An rpc::Error thrown inside the library must be catchable here.
    try {
      rpc::Nexus bad(rpc::NexusConfig{.uri = "not a uri"});
      std::puts("no rpc::Error for a bad URI");
      return 1;
    } catch (const rpc::Error&) {
    }
  } catch (const std::exception& e) {
    std::printf("exception: %s\n", e.what());
    return 1;
  }
  std::puts("ok");
  return 0;
}
EOF
echo "== $cxx -std=c++20 app.cc \$(pkg-config --cflags --libs librpc) -o app"
# shellcheck disable=SC2086  # $flags is a list of compiler arguments
if (cd "$tmp" && "$cxx" -std=c++20 app.cc $flags -o app) >"$tmp/compile.log" 2>&1; then
  pass "app.cc compiles and links against the installed librpc"
  resolved=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/app" | awk '/librpc\.so/ {print $3}')
  if [[ $resolved = "$destdir"/* ]]; then
    pass "app loads librpc from the destdir (${resolved#"$destdir"})"
  else
    fail "app resolves librpc.so.0 to '$resolved', not into $destdir"
  fi
  if output=$(LD_LIBRARY_PATH=$libdir "$tmp/app" 2>&1) && [[ $output = ok ]]; then
    pass "app prints \"ok\""
  else
    fail "app printed '$output' (expected \"ok\")"
  fi
else
  cat "$tmp/compile.log"
  fail "app.cc does not build against the installed librpc"
fi

# libtirpc's headers (-I/usr/include/tirpc) have an rpc/types.h; libc6-dev
# owns /usr/include/rpc. Ours live in librpc/, so neither shadows them.
if [[ -d /usr/include/tirpc/rpc ]]; then
  headers=$(find "$destdir" -path '*/include/librpc/*.h' -printf '%f\n' | sort)
  {
    for h in $headers; do echo "#include <librpc/$h>"; done
    echo 'int main() { return rpc::to_string(rpc::Errc::kOk).empty() ? 1 : 0; }'
  } >"$tmp/every_header.cc"
  # shellcheck disable=SC2086
  if (cd "$tmp" && "$cxx" -std=c++20 -I/usr/include/tirpc every_header.cc $flags -o every_header) \
      >"$tmp/compile_tirpc.log" 2>&1; then
    pass "every public header, included as <librpc/...> after -I/usr/include/tirpc, is ours"
  else
    cat "$tmp/compile_tirpc.log"
    fail "the public headers do not build with -I/usr/include/tirpc first"
  fi
fi
if grep -q -- '-std=' <<<"$flags"; then
  fail "pkg-config --cflags librpc sets a language standard: $flags"
else
  pass "pkg-config --cflags librpc sets no -std flag"
fi

# --- 3. exported symbols ----------------------------------------------------
so=$(readlink -f "$libdir/librpc.so")
echo "== exported symbols of ${so#"$destdir"}"
nm -D --defined-only "$so" | c++filt >"$tmp/exports.txt"
if ! python3 - "$tmp/exports.txt" "${STRICT:-0}" <<'EOF'; then
import collections, re, sys

path, strict = sys.argv[1], sys.argv[2] == "1"
# Prefixes the demangler puts before the name of the class or object.
special = re.compile(r"^(typeinfo name for |typeinfo for |vtable for |VTT for |"
                     r"construction vtable for |guard variable for |"
                     r"(non-)?virtual thunk to |covariant return thunk to )+")
# Symbols the linker defines in every shared object (older binutils export them).
linker = {"_edata", "_end", "__bss_start", "_init", "_fini"}

groups = collections.defaultdict(list)
total = 0
for line in open(path):
    parts = line.rstrip("\n").split(" ", 2)
    if len(parts) == 3:
        kind, name = parts[1], parts[2]
    elif len(parts) == 2:
        kind, name = parts[0], parts[1]
    else:
        continue
    total += 1
    base = special.sub("", name)
    if "rpc::detail::" in name:
        group = "rpc::detail"
    elif re.search(r"\basio(::|_)", name):
        group = "asio"
    elif re.search(r"\bfmt::", name):
        group = "fmt"
    elif base.startswith("rpc::"):
        group = "rpc"
    elif name in linker:
        group = "linker"
    else:
        group = "other"
    groups[group].append(f"{kind} {name}")

print(f"exported (defined) dynamic symbols: {total}")
for g in ("rpc", "rpc::detail", "asio", "fmt", "other", "linker"):
    print(f"  {g:12} {len(groups[g])}")
bad = [g for g in ("rpc::detail", "asio", "fmt") if groups[g]]
if strict and groups["other"]:
    bad.append("other")
for g in ("rpc::detail", "asio", "fmt", "other"):
    if not groups[g]:
        continue
    label = "LEAK" if g in bad else "warning"
    print(f"{label}: {len(groups[g])} {g} symbol(s) exported:")
    for s in sorted(set(groups[g])):
        print(f"    {s}")
sys.exit(1 if bad else 0)
EOF
  fail "librpc.so exports symbols outside its public API (see LEAK above)"
else
  pass "librpc.so exports no rpc::detail, asio or fmt symbols"
fi

# --- 4. soname --------------------------------------------------------------
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
if [[ $soname = librpc.so.0 ]]; then
  pass "SONAME is librpc.so.0"
else
  fail "SONAME is '${soname:-<none>}', expected librpc.so.0"
fi
if [[ -L $libdir/librpc.so.0 && $(readlink -f "$libdir/librpc.so.0") = "$so" ]]; then
  pass "librpc.so.0 -> $(basename "$so") installed"
else
  fail "no librpc.so.0 symlink to $(basename "$so") in ${libdir#"$destdir"}"
fi

# --- 5. transport modules ---------------------------------------------------
# librpc.so links no RDMA library; the verbs and fabric transports are
# modules in <libdir>/librpc, found there by default, exporting only their
# entry point; udp works with them gone.
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' | tr '\n' ' ')
if echo "$needed" | grep -Eqi 'fabric|ibverbs|mlx5|psm|rdmacm|efa'; then
  fail "librpc.so links an RDMA library: $needed"
else
  pass "librpc.so links no RDMA library (NEEDED: $needed)"
fi
moddir=$libdir/librpc
for name in verbs fabric; do
  [[ -e $build_dir/src/librpc-$name.so ]] || continue  # not built (dependency missing)
  module=$moddir/librpc-$name.so
  if [[ ! -f $module ]]; then
    fail "librpc-$name.so is not installed in ${moddir#"$destdir"}"
    continue
  fi
  exports=$(nm -D --defined-only "$module" | awk '{print $3}' | grep -v '^_' | tr '\n' ' ')
  if [[ $exports = "librpc_transport_module_v1 " ]]; then
    pass "librpc-$name.so installed in ${moddir#"$destdir"}, exporting only its entry point"
  else
    fail "librpc-$name.so exports more than its entry point: $exports"
  fi
done
if [[ -f $moddir/librpc-fabric.so ]]; then
  cat >"$tmp/fabric_app.cc" <<'EOF'
// An Rpc over fabric shm: the module must be found where it is installed.
#include <cstdio>
#include <exception>

#include "librpc/rpc_all.h"

int main() {
  try {
    rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"});
    rpc::Rpc rpc(nexus,
                 rpc::RpcConfig{.rpc_id = 0, .transport = "fabric", .fabric_provider = "shm"});
  } catch (const std::exception& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
  std::puts("ok");
  return 0;
}
EOF
  # shellcheck disable=SC2086  # $flags is a list of compiler arguments
  if (cd "$tmp" && "$cxx" -std=c++20 fabric_app.cc $flags -o fabric_app) >"$tmp/compile2.log" 2>&1; then
    if output=$(env -u LIBRPC_MODULE_DIR LD_LIBRARY_PATH="$libdir" "$tmp/fabric_app" 2>&1) &&
        [[ $output = ok ]]; then
      pass "an Rpc over fabric loads the installed module from the default path"
    else
      fail "an Rpc over fabric with the installed module: $output"
    fi
    mv "$moddir" "$moddir.away"
    if output=$(env -u LIBRPC_MODULE_DIR LD_LIBRARY_PATH="$libdir" "$tmp/app" 2>&1) &&
        [[ $output = ok ]]; then
      pass "udp works with the transport modules removed"
    else
      fail "udp without the transport modules: $output"
    fi
    if output=$(env -u LIBRPC_MODULE_DIR LD_LIBRARY_PATH="$libdir" "$tmp/fabric_app" 2>&1); then
      fail "an Rpc over fabric was created with its module removed"
    elif [[ $output = *librpc-fabric.so* && $output = *LIBRPC_MODULE_DIR* ]]; then
      pass "with its module removed, fabric fails naming the module and where it looked"
      echo "    $output"
    else
      fail "the error for a missing fabric module does not say which module and where: $output"
    fi
    mv "$moddir.away" "$moddir"
  else
    cat "$tmp/compile2.log"
    fail "fabric_app.cc does not build against the installed librpc"
  fi
fi

if [[ $failures -gt 0 ]]; then
  echo "install_check: $failures check(s) FAILED"
  exit 1
fi
echo "install_check: all checks passed"
