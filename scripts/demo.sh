#!/usr/bin/env bash
# The quick start: builds librpc and its example programs (nothing else:
# no test suites, no benchmarks) and runs them over the udp transport on
# 127.0.0.1:
#   1. librpc-hello-server + librpc-hello-client: one "hello", then 32-byte
#      round-trip latency;
#   2. librpc-reverse server + client: "Hello, world!" comes back reversed.
# Exits non-zero when any step fails. Servers run in the background and are
# stopped on exit, whatever happens. Prints how long the build and the whole
# demo took (the target is 2 minutes on 2 cores once the packages are in).
#
#   bash scripts/demo.sh        (as root, or as a user with sudo, for the deps)
#
# Environment: BUILD_DIR (default build-demo; the test suites use build),
# SKIP_DEPS=1 to skip install-deps.sh, MESON_SETUP_ARGS (extra `meson setup`
# args for a new build directory; CI passes --werror and builds into build/,
# which scripts/test.sh then reuses), HELLO_PORT (default 31850) and
# REVERSE_PORT (default 31851): the first free UDP port from there is used.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build_dir=${BUILD_DIR:-build-demo}
apps="$build_dir/apps"
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/librpc-demo.XXXXXX")
server_pids=()

# terminate PID SECONDS: SIGTERM, then SIGKILL if PID is still alive after
# SECONDS. Returns PID's exit status, or 1 (and says so) when it had to be
# killed.
terminate() {
  local pid=$1 tenths=$(($2 * 10)) i rc=0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < tenths; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "demo: pid $pid still running $2 s after SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  wait "$pid" 2>/dev/null || rc=$?
  return "$rc"
}

cleanup() {
  local pid
  for pid in "${server_pids[@]}"; do terminate "$pid" 5 || true; done 2>/dev/null
  rm -rf "$log_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # run the EXIT trap on ^C too

step() { printf '\n==> %s\n' "$*"; }
fail() {
  echo "demo: FAILED: $*" >&2
  exit 1
}

# The first UDP port from $1 on that nothing listens on. Without ss, $1.
free_udp_port() {
  local port=$1
  if command -v ss >/dev/null 2>&1; then
    while [ -n "$(ss -Hlun "sport = :$port")" ]; do port=$((port + 1)); done
  fi
  echo "$port"
}

# start_server NAME CMD...: starts CMD in the background with its output in
# $log_dir/NAME.log, and waits for its "listening on HOST:PORT" line. Sets
# server_pid and server_addr (the address the server reports).
start_server() {
  local name=$1 log="$log_dir/$1.log" i
  shift
  : >"$log"  # exists before the server starts, so polling it cannot race
  "$@" >"$log" 2>&1 &
  server_pid=$!
  server_pids+=("$server_pid")
  for ((i = 0; i < 100; i++)); do
    server_addr=$(sed -n 's/.* listening on \([^ ]*\).*/\1/p' "$log")
    if [ -n "$server_addr" ]; then
      cat "$log"
      return 0
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      cat "$log" >&2
      fail "$name exited before it was ready"
    fi
    sleep 0.1
  done
  cat "$log" >&2
  fail "$name did not report 'listening on' within 10 s"
}

# stop_server NAME: stops the last started server with SIGTERM and shows
# what it printed; fails unless it exits cleanly within 10 s.
stop_server() {
  local name=$1 rc=0
  terminate "$server_pid" 10 || rc=$?
  unset 'server_pids[-1]'
  echo "--- $name output:"
  cat "$log_dir/$name.log"
  [ "$rc" -eq 0 ] || fail "$name did not exit cleanly after SIGTERM (status $rc)"
}

# retry N SECONDS CMD...: runs CMD, killed after SECONDS, up to N times until
# it succeeds. The servers report "listening" only once bound, so a retry is
# only a safety net; a command that timed out is not retried.
retry() {
  local attempts=$1 seconds=$2 i rc
  shift 2
  for ((i = 1; i <= attempts; i++)); do
    rc=0
    timeout --foreground --kill-after=5 "$seconds" "$@" || rc=$?
    [ "$rc" -eq 0 ] && return 0
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "demo: timed out after $seconds s: $*" >&2
      return 1
    fi
    echo "demo: attempt $i of $attempts failed (status $rc): $*" >&2
    sleep 0.5
  done
  return 1
}

step "installing dependencies"
if [ "${SKIP_DEPS:-0}" = 1 ]; then
  echo "skipped (SKIP_DEPS=1)"
else
  bash scripts/install-deps.sh || fail "scripts/install-deps.sh"
fi

demo_start=$(date +%s)  # the quick-start time counts from here
step "building the library and the example programs into $build_dir/"
build_start=$(date +%s)
if [ -f "$build_dir/build.ninja" ]; then
  echo "reusing the existing build directory"
else
  # Only what the demo runs: the test suites and benchmarks take minutes to
  # compile (scripts/test.sh builds them, in build/).
  # shellcheck disable=SC2086 # MESON_SETUP_ARGS: extra words, e.g. --werror
  meson setup "$build_dir" -Dtests=false -Dbench=false ${MESON_SETUP_ARGS:-} || fail "meson setup"
fi
meson compile -C "$build_dir" apps/librpc-hello-server apps/librpc-hello-client apps/librpc-reverse ||
  fail "build"
build_s=$(($(date +%s) - build_start))
echo "built in $build_s s"

step "librpc-hello-server and librpc-hello-client"
hello_port=$(free_udp_port "${HELLO_PORT:-31850}")
# --seconds bounds a server that outlives this script by accident.
start_server librpc-hello-server "$apps/librpc-hello-server" --uri "127.0.0.1:$hello_port" --seconds 600
retry 3 120 "$apps/librpc-hello-client" --server "$server_addr" --count 1000 || fail "librpc-hello-client"
stop_server librpc-hello-server

step "librpc-reverse server and client"
reverse_port=$(free_udp_port "${REVERSE_PORT:-31851}")
start_server reverse_server "$apps/librpc-reverse" server --uri "127.0.0.1:$reverse_port"
retry 3 60 "$apps/librpc-reverse" client "$server_addr" || fail "reverse client"
retry 3 60 "$apps/librpc-reverse" client "$server_addr" "librpc: eRPC-style RPCs in userspace" ||
  fail "reverse client"
stop_server reverse_server

step "demo passed"
echo "quick start: built in $build_s s, whole demo $(($(date +%s) - demo_start)) s after the packages"
