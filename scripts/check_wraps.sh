#!/usr/bin/env bash
# Checks the wrap files in subprojects/ without a network:
#   1. each .wrap parses with meson's own wrap parser, names an https source
#      with a sha256, and its patch_directory exists;
#   2. together they provide every dependency meson.build can fall back for
#      (fmt, asio, catch2, CLI11, nlohmann_json);
#   3. the overlay build files written for asio and catch2 work: a throw-away
#      project builds against them, with the release layout recreated from
#      the system's packaged headers (same files, Debian's version).
# fmt's overlay compiles fmt's sources, which no Debian package ships, and
# CLI11 and nlohmann_json use the upstream build files: those are checked
# only when WRAPS_ONLINE=1, which downloads every wrap and builds librpc
# with all five forced to the fallback (needs github.com).
#
#   bash scripts/check_wraps.sh        exit 0 when all checks pass
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The Python that runs meson, so that its modules can be imported (a pyenv
# python3 earlier in PATH would not have them).
meson_python=$(sed -n '1s/^#! *//p' "$(command -v meson)")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/librpc-wraps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== 1-2. parse subprojects/*.wrap"
"$meson_python" - "$root/subprojects" <<'PY'
import glob, os, re, sys
from mesonbuild.wrap import wrap

subprojects = sys.argv[1]
# meson lower-cases dependency names when it looks for a provider.
needed = {"fmt", "asio", "catch2", "cli11", "nlohmann_json"}
provided, bad = set(), []
for path in sorted(glob.glob(os.path.join(subprojects, "*.wrap"))):
    name = os.path.basename(path)
    w = wrap.PackageDefinition(path)
    v = w.values
    if w.type != "file":
        bad.append(f"{name}: type {w.type}, expected wrap-file")
    if not v.get("source_url", "").startswith("https://"):
        bad.append(f"{name}: source_url is not https")
    if not re.fullmatch(r"[0-9a-f]{64}", v.get("source_hash", "")):
        bad.append(f"{name}: source_hash is not a sha256")
    if "patch_directory" in v and not os.path.isfile(
            os.path.join(subprojects, "packagefiles", v["patch_directory"], "meson.build")):
        bad.append(f"{name}: packagefiles/{v['patch_directory']}/meson.build missing")
    deps = set(w.provided_deps)
    provided |= deps
    print(f"  {name}: {v['directory']} provides {', '.join(sorted(deps))}")
missing = needed - provided
if missing:
    bad.append(f"no wrap provides {', '.join(sorted(missing))}")
for b in bad:
    print(f"FAIL: {b}")
sys.exit(1 if bad else 0)
PY

echo "== 3. the asio and catch2 overlays, on the packaged headers"
proj=$tmp/overlay
mkdir -p "$proj/subprojects/asio/asio/include" "$proj/subprojects/catch2/single_include"
cp -r /usr/include/asio /usr/include/asio.hpp "$proj/subprojects/asio/asio/include/"
cp -r /usr/include/catch2 "$proj/subprojects/catch2/single_include/"
cp "$root/subprojects/packagefiles/asio/meson.build" "$proj/subprojects/asio/"
cp "$root/subprojects/packagefiles/catch2/meson.build" "$proj/subprojects/catch2/"
cat >"$proj/meson.build" <<'MESON'
project('wrap_overlays', 'cpp', default_options : ['cpp_std=c++20'])
asio_dep = dependency('asio', fallback : ['asio', 'asio_dep'])
catch2_dep = dependency('catch2', version : '>= 2.13', fallback : ['catch2', 'catch2_dep'])
executable('t', 't.cc', dependencies : [asio_dep, catch2_dep],
           cpp_args : ['-DASIO_STANDALONE'])
MESON
cat >"$proj/t.cc" <<'CC'
#define CATCH_CONFIG_MAIN
#include <asio.hpp>
#include <catch2/catch.hpp>
TEST_CASE("asio io_context runs a posted handler") {
  asio::io_context io;
  bool ran = false;
  asio::post(io, [&] { ran = true; });
  io.run();
  CHECK(ran);
}
CC
(cd "$proj" && meson setup b --wrap-mode=nodownload --force-fallback-for=asio,catch2 \
   >"$tmp/setup.log" 2>&1 && ninja -C b >"$tmp/build.log" 2>&1 && ./b/t >"$tmp/run.log" 2>&1) || {
  cat "$tmp"/*.log
  echo "FAIL: the asio/catch2 overlays do not build"
  exit 1
}
grep -q "Subproject asio finished" "$tmp/setup.log" && grep -q "Subproject catch2 finished" "$tmp/setup.log" || {
  cat "$tmp/setup.log"
  echo "FAIL: meson did not use the overlay subprojects"
  exit 1
}
echo "  a project built and ran against the asio and catch2 overlays"

if [[ ${WRAPS_ONLINE:-0} = 1 ]]; then
  echo "== online: download every wrap and build librpc with all of them"
  git -C "$root" ls-files -z | (cd "$root" && cpio -0pdm --quiet "$tmp/src")
  (cd "$tmp/src" && meson setup b --wrap-mode=forcefallback -Dtests=true &&
     ninja -C b && meson test -C b --suite unit)
fi
echo "check_wraps: all checks passed"
