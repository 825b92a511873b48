#!/usr/bin/env bash
# Instructions per small RPC in librpc's own code (client + server, one
# thread, udp on 127.0.0.1), counted exactly by callgrind. Runs
# bench/cpu_cost/cpu_cost for N1 and N2 RPCs and divides the difference of
# the instructions executed inside librpc.so by N2 - N1, which cancels
# start-up and shutdown. System calls, libc and the app's own handler and
# continuation are excluded. Usage: scripts/cpu_cost.sh [BUILD_DIR] [SIZE]
# Env: N1 (default 2000), N2 (default 4000), JSON (write {"instructions_per_rpc": ...}),
# OFFLOAD (on, the default, or off: RpcConfig::udp_offload), CC (on, off, or
# default: RpcConfig::congestion_control), API (fnptr, the default, closure
# or coro: the client's continuation style). Also prints the instructions of
# librpc.so and the program together: closures and coroutines are inline
# code compiled into the program, so only that total compares the APIs.
# The program pushes the engine's wall-clock timers (loss scan, Timely's
# thresholds) out of the run: callgrind's 50-100x slowdown made them fire
# every few RPCs instead of every few hundred, and the count swung by 400
# from run to run (bench/cpu_cost/cpu_cost.cc says more). Callgrind counts
# only while the program's run_measured_rpcs runs (--toggle-collect), in
# that thread: the connect and the wait for it, whose loop iterations
# depend on when the Nexus thread gets the CPU, and the Nexus thread's own
# work (heartbeats on a wall-clock timer) stay out; with them in, two runs
# of one build differed by up to 15 per RPC. One timer is left: the loop
# clock renews its anchor every real millisecond (common/loop_clock.h),
# every few RPCs under callgrind, so the count varies by a few
# instructions between runs (more on a loaded machine) and includes some
# 40 instructions per RPC that natively come once per thousands of RPCs.
# To compare two builds, run both with LIBRPC_LOOP_CLOCK=monotonic: the
# count is then exact to an instruction (the clock is read through
# clock_gettime, outside librpc.so).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$root/build}
size=${2:-32}
n1=${N1:-2000}
n2=${N2:-4000}
command -v valgrind >/dev/null || { echo "cpu_cost: valgrind not installed" >&2; exit 1; }
bin="$build_dir/bench/cpu_cost/cpu_cost"
[ -x "$bin" ] || { echo "cpu_cost: $bin not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
api=${API:-fnptr}
count() {
  valgrind --tool=callgrind --toggle-collect='*run_measured_rpcs*' --callgrind-out-file="$tmp/cg.$1" "$bin" "$1" "$size" "${OFFLOAD:-on}" "${CC:-default}" "$api" \
    >/dev/null 2>&1
}
self_cost() { python3 "$root/bench/cpu_cost/callgrind_self_cost.py" "$tmp/cg.$1" "$2"; }
count "$n1"
count "$n2"
per_rpc=$(( ($(self_cost "$n2" librpc.so) - $(self_cost "$n1" librpc.so)) / (n2 - n1) ))
app_per_rpc=$(( ($(self_cost "$n2" bench/cpu_cost/cpu_cost) - $(self_cost "$n1" bench/cpu_cost/cpu_cost)) / (n2 - n1) ))
echo "cpu_cost: ${per_rpc} instructions per ${size}-byte RPC in librpc (client + server; callgrind, N=${n1}/${n2}, API ${api})"
echo "cpu_cost: $((per_rpc + app_per_rpc)) instructions per RPC in librpc and the program together (API ${api})"
if [ -n "${JSON:-}" ]; then
  printf '{"size": %s, "api": "%s", "instructions_per_rpc": %s, "with_program": %s, "n1": %s, "n2": %s}\n' \
    "$size" "$api" "$per_rpc" "$((per_rpc + app_per_rpc))" "$n1" "$n2" > "$JSON"
fi
