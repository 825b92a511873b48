#!/usr/bin/env bash
# Fails unless every place that states librpc's version agrees:
#   - meson.build's project(... version : 'X.Y.Z' ...);
#   - debian/changelog's newest entry (upstream part: no epoch, no
#     Debian revision);
#   - CHANGELOG.md's newest release heading (## [X.Y.Z] - date; not
#     [Unreleased]);
#   - with BUILD_DIR given: the Version of the librpc.pc generated there
#     (BUILD_DIR/meson-private/librpc.pc; a path to a .pc file also works).
#
# Usage: scripts/check_version.sh [BUILD_DIR | PC_FILE]
# Exit status: 0 when all agree, 1 when they differ or one is missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
status=0
declare -A found

# meson.build: the first "version : '...'" (the project() call's).
found[meson.build]=$(sed -n "s/^[[:space:]]*version[[:space:]]*:[[:space:]]*'\([^']*\)'.*/\1/p" \
  "$root/meson.build" | head -n 1)

# debian/changelog: "librpc (VERSION) dist; urgency=..." on its first line.
if [[ -f $root/debian/changelog ]]; then
  v=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' "$root/debian/changelog")
  v=${v#*:}     # epoch
  [[ $v = *-* ]] && v=${v%-*}  # Debian revision (non-native versions)
  found[debian/changelog]=$v
else
  found[debian/changelog]=
fi

# CHANGELOG.md: the first "## [X.Y.Z]" heading that is not [Unreleased].
found[CHANGELOG.md]=$(sed -n 's/^##[[:space:]]*\[\([^]]*\)\].*/\1/p' "$root/CHANGELOG.md" 2>/dev/null |
  grep -vix 'unreleased' | head -n 1 || true)

names=(meson.build debian/changelog CHANGELOG.md)
if [[ $# -ge 1 ]]; then
  pc=$1
  [[ -d $pc ]] && pc=$pc/meson-private/librpc.pc
  if [[ -f $pc ]]; then
    found[librpc.pc]=$(sed -n 's/^Version:[[:space:]]*//p' "$pc" | head -n 1)
  else
    echo "check_version: no generated librpc.pc at $pc" >&2
    found[librpc.pc]=
  fi
  names+=(librpc.pc)
fi

want=${found[meson.build]}
for n in "${names[@]}"; do
  v=${found[$n]}
  if [[ -z $v ]]; then
    echo "FAIL: no version found in $n"
    status=1
  elif [[ $v != "$want" ]]; then
    echo "FAIL: $n says $v, meson.build says $want"
    status=1
  else
    echo "ok:   $n $v"
  fi
done
if [[ $status -eq 0 ]]; then
  echo "check_version: all agree on $want"
else
  echo "check_version: versions disagree"
fi
exit $status
