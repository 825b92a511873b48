#!/usr/bin/env bash
# Installs dependencies, builds librpc with warnings as errors and runs every
# test suite, then prints the skipped tests with their reasons and the counts
# (scripts/test_summary.py). Usage: bash scripts/test.sh [--quick]
# --quick: before a commit (under 10 minutes from scratch on 2 cores, about
# 1 once built): only the unit, protocol, integration and modules suites,
# and only the programs they need.
# Env: BUILD_DIR (default build), MESON_SETUP_ARGS (extra `meson setup`
# args, e.g. sanitizers), MESON_TEST_ARGS (extra `meson test` args),
# BUILD_ONLY_TESTED=1 (build only the programs the selected tests need,
# scripts/test_targets.py, instead of everything: for the sanitizer builds).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  --quick)
    MESON_TEST_ARGS="--suite unit --suite protocol --suite integration --suite modules ${MESON_TEST_ARGS:-}"
    BUILD_ONLY_TESTED=1
    ;;
  "") ;;
  *)
    echo "usage: bash scripts/test.sh [--quick]" >&2
    exit 2
    ;;
esac

bash scripts/install-deps.sh
build_dir=${BUILD_DIR:-build}
if [ ! -f "$build_dir/build.ninja" ]; then
  # shellcheck disable=SC2086
  meson setup "$build_dir" --werror -Dtests=true ${MESON_SETUP_ARGS:-}
else
  # A directory configured otherwise (by hand, or an older demo) gets the
  # same guarantees: warnings are errors and the suites are built.
  meson configure "$build_dir" -Dwerror=true -Dtests=true -Dapps=true -Dbench=true
fi
build_start=$(date +%s)
rebuild_args=()
if [ "${BUILD_ONLY_TESTED:-0}" = 1 ]; then
  # shellcheck disable=SC2086
  mapfile -t targets < <(python3 scripts/test_targets.py "$build_dir" ${MESON_TEST_ARGS:-})
  [ ${#targets[@]} -gt 0 ] || { echo "test.sh: no targets to build" >&2; exit 1; }
  echo "test.sh: building the ${#targets[@]} programs the selected tests need"
  ninja -C "$build_dir" "${targets[@]}"
  rebuild_args=(--no-rebuild)
else
  ninja -C "$build_dir"
fi
build_s=$(($(date +%s) - build_start))
test_start=$(date +%s)
# --print-errorlogs shows a failing test's output; the summary ends with
# "Ok: N  Fail: N ..." lines.
status=0
meson test -C "$build_dir" --print-errorlogs "${rebuild_args[@]}" ${MESON_TEST_ARGS:-} || status=$?
# One closing line counting Catch2 test cases across the suites.
python3 scripts/test_summary.py "$build_dir/meson-logs/testlog.json" || status=1
echo "test.sh: built in $build_s s, tests ran in $(($(date +%s) - test_start)) s"
exit $status
