#!/usr/bin/env bash
# Builds librpc's Debian binary packages (librpc0, librpc-dev,
# librpc-transport-verbs, librpc-transport-fabric, librpc-tools) from this
# source tree, checks them with lintian and lists them with their sizes.
#
#   1. installs the build dependencies (scripts/install-deps.sh --packaging:
#      the packaging tools and debian/control's Build-Depends; nothing is
#      installed when they are all present);
#   2. copies the source tree to a temporary directory (`git archive HEAD`
#      in a git checkout, so build directories and uncommitted changes stay
#      out; otherwise a copy without build*/ directories);
#   3. dpkg-buildpackage -b -us -uc there, with
#      DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)", plus
#      $LIBRPC_DEB_BUILD_OPTIONS (CI adds noopt: it checks the packaging,
#      and compiles twice as fast without optimization);
#   4. moves the .deb files to OUT_DIR (default: build-debs/ here);
#   5. lintian on them: warnings are printed, errors fail the script;
#   6. prints the packages with their sizes.
#
# Usage: scripts/build-debs.sh [OUT_DIR]
# Env:   KEEP=1  keep the temporary build tree (its path is printed)
#        DIRTY=1 in a git checkout, build the working tree (tracked and
#                untracked files that git does not ignore) instead of HEAD
# Exit status: 0 when the packages were built and lintian found no error.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=${1:-$root/build-debs}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

# --- 1. build dependencies ----------------------------------------------------
bash "$root/scripts/install-deps.sh" --packaging

# --- 2. source tree -----------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/librpc-debs.XXXXXX")
if [[ ${KEEP:-0} = 1 ]]; then
  echo "build-debs.sh: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
src=$tmp/librpc
mkdir -p "$src"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  if [[ ${DIRTY:-0} = 1 ]]; then
    echo "build-debs.sh: copying the working tree (DIRTY=1)"
    (cd "$root" && git ls-files -z --cached --others --exclude-standard |
      xargs -0 -r tar -cf - --no-recursion --ignore-failed-read) | tar -xf - -C "$src"
  else
    echo "build-debs.sh: copying git HEAD ($(git -C "$root" rev-parse --short HEAD))"
    if [[ -n $(git -C "$root" status --porcelain --untracked-files=no) ]]; then
      echo "build-debs.sh: note: uncommitted changes are not in the packages (DIRTY=1 builds them)"
    fi
    git -C "$root" archive --format=tar HEAD | tar -xf - -C "$src"
  fi
else
  echo "build-debs.sh: not a git checkout; copying $root without build directories"
  tar -C "$root" --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C "$src"
fi

# --- 3. build -----------------------------------------------------------------
log=$tmp/dpkg-buildpackage.log
echo "build-debs.sh: dpkg-buildpackage -b -us -uc in $src (log: $log)"
start=$(date +%s)
if ! (cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc) ${LIBRPC_DEB_BUILD_OPTIONS:-}" \
      dpkg-buildpackage -b -us -uc) >"$log" 2>&1; then
  tail -n 80 "$log"
  echo "build-debs.sh: dpkg-buildpackage FAILED (the last 80 lines of its log are above)" >&2
  if [[ ${KEEP:-0} != 1 ]]; then
    cp "$log" "$out_dir/dpkg-buildpackage.log"
    echo "build-debs.sh: full log: $out_dir/dpkg-buildpackage.log" >&2
  fi
  exit 1
fi
echo "build-debs.sh: built in $(( $(date +%s) - start )) s"

# --- 4. collect ---------------------------------------------------------------
shopt -s nullglob
debs=("$tmp"/*.deb)
if [ ${#debs[@]} -eq 0 ]; then
  echo "build-debs.sh: no .deb files were built" >&2
  exit 1
fi
rm -f "$out_dir"/*.deb
mv "${debs[@]}" "$out_dir"/
for f in "$tmp"/*.buildinfo "$tmp"/*.changes; do mv "$f" "$out_dir"/; done
cp "$log" "$out_dir/dpkg-buildpackage.log"

# --- 5. lintian ---------------------------------------------------------------
# Warnings and errors are printed (and informational tags, -I); lintian's
# own failure (exit status 2 and above) fails the script. Run as root,
# lintian says that it should not be; it still checks.
echo "== lintian -I $out_dir/*.deb"
lint=$tmp/lintian.txt
lint_rc=0
lintian -I "$out_dir"/*.deb >"$lint" 2>&1 || lint_rc=$?
grep -v '^running with root privileges is not recommended!$' "$lint" || echo "(no tags)"
if [[ $lint_rc -ge 2 ]]; then
  echo "build-debs.sh: lintian itself failed (exit status $lint_rc)" >&2
  exit 1
fi
errors=$(grep -c '^E: ' "$lint" || true)
warnings=$(grep -c '^W: ' "$lint" || true)
echo "lintian: $errors error(s), $warnings warning(s)"

# --- 6. list ------------------------------------------------------------------
echo "== packages in $out_dir"
for deb in "$out_dir"/*.deb; do
  printf '%-48s %8s bytes  (installed %s KiB)\n' "$(basename "$deb")" \
    "$(stat -c %s "$deb")" "$(dpkg-deb -f "$deb" Installed-Size)"
done

if [[ $errors -gt 0 ]]; then
  echo "build-debs.sh: lintian reported $errors error(s)" >&2
  exit 1
fi
echo "build-debs.sh: done"
