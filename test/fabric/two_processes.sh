#!/usr/bin/env bash
# The fabric transport between two processes: a latency server and a client
# over one libfabric provider, as a user on two EFA hosts would run them.
#
#   two_processes.sh BENCH_DIR PROVIDER PORT [LATENCY_ARGS...]
#
# LATENCY_ARGS go to both processes, after the script's own (e.g. longer
# session-management timeouts where the CPU is emulated).
#
# Fails if the client fails (every request must come back intact) or the
# server does not stop cleanly.
set -u
bench=${1:?usage: two_processes.sh BENCH_DIR PROVIDER PORT}
provider=${2:?usage: two_processes.sh BENCH_DIR PROVIDER PORT}
port=${3:?usage: two_processes.sh BENCH_DIR PROVIDER PORT}
shift 3
log=$(mktemp)
trap 'kill -KILL "$server" 2>/dev/null; rm -f "$log"' EXIT
"$bench/librpc-latency" --mode server --server-uri "127.0.0.1:$port" --transport fabric \
  --fabric-provider "$provider" "$@" >"$log" 2>&1 &
server=$!
for _ in $(seq 100); do
  grep -q "latency server" "$log" && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.05
done
"$bench/librpc-latency" --mode client --server-uri "127.0.0.1:$port" --transport fabric \
  --fabric-provider "$provider" --sizes 32,64K,1M --iters 2000 --warmup 100 --duration 5 "$@"
rc=$?
kill -INT "$server"
wait "$server"
src=$?
cat "$log"
[ "$rc" -eq 0 ] && [ "$src" -eq 0 ]
