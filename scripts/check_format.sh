#!/usr/bin/env bash
# The C++ sources are in clang-format's style (.clang-format at the top):
# every .cc and .h under src/, include/, test/, bench/, apps/ and tools/.
# A meson test of the unit suite (test/meson.build), so CI and the README's
# test command check it. Prints the files out of style and how to fix them;
# exits 77 (skipped) where clang-format is not installed (a consumer's or
# packager's machine). Usage: scripts/check_format.sh [SOURCE_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
if ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format is not installed; skipped"
  exit 77
fi
cd "$root"
mapfile -t files < <(find src include test bench apps tools -type f \( -name '*.cc' -o -name '*.h' \) | sort)
if [ ${#files[@]} -eq 0 ]; then
  echo "check_format: no sources under $root" >&2
  exit 1
fi
mapfile -t bad < <(clang-format --dry-run "${files[@]}" 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning: .*clang-format-violations.*/\1/p' | sort -u)
if [ ${#bad[@]} -ne 0 ]; then
  echo "check_format: ${#bad[@]} file(s) not in clang-format's style ($(clang-format --version | head -n 1)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "check_format: fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files in clang-format's style"
