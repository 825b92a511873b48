#!/usr/bin/env bash
# UCX peer: runs the packaged ucx_perftest, server in the background and
# client to 127.0.0.1, over TCP (UCX_TLS=tcp on device lo) and shared memory
# (UCX_TLS=sm: every shared-memory transport UCX has here, which on Debian 12
# is posix/sysv for small messages and cma for large ones), and writes one
# bench/compare/SCHEMA.md JSON file per transport and workload into OUTDIR:
#
#   ucx_<tcp|shm>_latency.json   ucp_am_lat, 32 B ping-pong
#   ucx_<tcp|shm>_rate.json      ucp_am_bw,  32 B one-way stream (message rate)
#   ucx_<tcp|shm>_goodput.json   ucp_am_bw,  8 MiB one-way stream (bandwidth)
#
# UCP active messages (ucp_am_*) are used when the installed ucx_perftest has
# them (UCX >= 1.11), tag matching (tag_lat / tag_bw) otherwise. Each run's
# full output is kept in OUTDIR/logs.
#
# What ucx_perftest reports, and how it maps to the schema:
#   latency: ucx_perftest's "typical" latency is a percentile (default 50th,
#     its -R option) of its ring buffer of recent iteration times, halved
#     because it reports one-way latency for ping-pong tests. rtt_p50_us is twice
#     that (a round trip, like every other latency file); p90..max are not
#     available and are left out. Its one-way typical and whole-run average
#     are recorded in "setup".
#   rate: overall msg/s -> rps (a one-way message rate: no responses).
#   goodput: overall MB/s (MiB/s: ucx_perftest divides by 2^20) -> gbps.
#
# Usage: bench/peers/ucx_perf.sh OUTDIR
# Env:   UCX_PERF_PORT   first TCP port for ucx_perftest's setup channel (13337);
#                        each run uses the next one
#        LAT_ITERS       latency iterations (100000), LAT_WARMUP (10000)
#        RATE_ITERS_TCP  32 B messages over tcp (1000000), RATE_ITERS_SHM (10000000)
#        BW_ITERS        8 MiB messages per transport (500)
#        RUN_TIMEOUT_S   limit for each ucx_perftest process (120)
#        TRANSPORTS      which of tcp,shm to measure (both)
#        WORKLOADS       which of latency,rate,goodput to measure (all three);
#                        bench/compare/run.sh interleaves them with librpc's runs
#        NO_PIN=1        do not pin (default: server on CPU 1, client on CPU 0)
set -euo pipefail

prog=ucx_perf.sh
. "$(dirname "${BASH_SOURCE[0]}")/result_lib.sh"
die() {
  echo "$prog: error: $*" >&2
  exit 1
}
if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: bench/peers/ucx_perf.sh OUTDIR" >&2
  exit 2
fi
outdir=$1

port=${UCX_PERF_PORT:-13337}
lat_iters=${LAT_ITERS:-100000}
lat_warmup=${LAT_WARMUP:-10000}
rate_iters_tcp=${RATE_ITERS_TCP:-1000000}
rate_iters_shm=${RATE_ITERS_SHM:-10000000}
bw_iters=${BW_ITERS:-500}
run_timeout=${RUN_TIMEOUT_S:-120}
for v in port lat_iters lat_warmup rate_iters_tcp rate_iters_shm bw_iters run_timeout; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
transports=${TRANSPORTS:-tcp,shm}
workloads=${WORKLOADS:-latency,rate,goodput}
[[ $transports =~ ^(tcp|shm)(,(tcp|shm))*$ ]] || die "TRANSPORTS must list tcp and/or shm, got '$transports'"
[[ $workloads =~ ^(latency|rate|goodput)(,(latency|rate|goodput))*$ ]] ||
  die "WORKLOADS must list latency, rate and/or goodput, got '$workloads'"
wanted() { [[ ,$1, == *,$2,* ]]; }

command -v ucx_perftest >/dev/null || die "ucx_perftest not found (install ucx-utils: bench/peers/install-peer-deps.sh)"
command -v ss >/dev/null || die "ss not found (install iproute2)"
ucx_version=$(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p' | head -n1)
ucx_version=${ucx_version:-unknown}

perftest_help=$(ucx_perftest -h 2>&1 || true)  # -h exits non-zero
if grep -qw ucp_am_lat <<<"$perftest_help"; then
  lat_test=ucp_am_lat bw_test=ucp_am_bw api="UCP active messages"
else
  lat_test=tag_lat bw_test=tag_bw api="UCP tag matching (this ucx_perftest has no ucp_am_*)"
fi

server_cpu=() client_cpu=() placement="two processes over 127.0.0.1, not pinned"
if [[ ${NO_PIN:-0} != 1 ]] && taskset -c 0,1 true 2>/dev/null; then
  server_cpu=(-c 1) client_cpu=(-c 0)
  placement="two processes over 127.0.0.1, server pinned to CPU 1 and client to CPU 0 (ucx_perftest -c)"
fi

mkdir -p "$outdir/logs" || die "cannot create $outdir/logs"

# Both sides run in the background, so that a signal's trap runs at once
# (bash defers traps while a foreground child runs); cleanup stops them.
server_pid="" client_pid=""
cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  server_pid="" client_pid=""
}
trap cleanup EXIT
trap 'echo "$prog: interrupted" >&2; exit 130' INT
trap 'echo "$prog: terminated" >&2; exit 143' TERM

json_str() {
  local s=${1//\\/\\\\}
  printf '"%s"' "${s//\"/\\\"}"
}

# run_perftest LABEL TLS TEST SIZE ITERS WARMUP: one server + client pair;
# sets `final` to the client's "Final:" line and `lanes` to UCX's ep_cfg.
run_perftest() {
  local label=$1 tls=$2 test=$3 size=$4 iters=$5 warmup=$6
  local slog="$outdir/logs/$label.server.log" clog="$outdir/logs/$label.client.log"
  local env_vars=(UCX_TLS="$tls" UCX_NET_DEVICES=lo UCX_LOG_LEVEL=info)
  local args=(-p "$port" -t "$test" -s "$size" -n "$iters" -w "$warmup")
  echo "$prog: $label: UCX_TLS=$tls ucx_perftest ${args[*]}"
  if ss -Hltn "sport = :$port" | grep -q .; then
    die "$label: TCP port $port is already in use; choose another with UCX_PERF_PORT"
  fi
  env "${env_vars[@]}" timeout "$run_timeout" ucx_perftest "${server_cpu[@]}" "${args[@]}" \
    >"$slog" 2>&1 &
  server_pid=$!
  local tries=0
  until ss -Hltn "sport = :$port" | grep -q .; do
    kill -0 "$server_pid" 2>/dev/null || die "$label: server exited early; see $slog"
    ((++tries <= 100)) || die "$label: server not listening on port $port after 10 s; see $slog"
    sleep 0.1
  done
  local rc=0
  env "${env_vars[@]}" timeout "$run_timeout" ucx_perftest 127.0.0.1 "${client_cpu[@]}" \
    "${args[@]}" >"$clog" 2>&1 &
  client_pid=$!
  wait "$client_pid" || rc=$?
  client_pid=""
  if ((rc != 0)); then
    ((rc == 124)) && die "$label: client timed out after $run_timeout s; see $clog"
    die "$label: client failed (exit $rc); see $clog"
  fi
  rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  ((rc == 0)) || die "$label: server failed (exit $rc); see $slog"
  port=$((port + 1))
  final=$(grep '^Final:' "$clog" | tail -n1) || die "$label: no 'Final:' line in $clog"
  lanes=$(sed -n 's/.*ep_cfg\[[0-9]*\]: //p' "$clog" | head -n1)
  # Final: iters typical avg overall bw_avg bw_overall mr_avg mr_overall
  [[ $(wc -w <<<"$final") -eq 9 ]] || die "$label: unexpected summary '$final' in $clog"
}

field() { awk -v i="$1" '{print $i}' <<<"$final"; }

write_json() {  # FILE TRANSPORT WORKLOAD SETUP RESULT
  printf '{"system":"ucx","transport":"%s","workload":"%s","setup":%s,"results":[%s]}\n' \
    "$2" "$3" "$(json_str "$4")" "$5" >"$1" || die "cannot write $1"
  result_wrap "$1" "{\"UCX_TLS\":$(json_str "$tls")}" 2 || die "cannot write $1"
}

files=0
measure_transport() {  # NAME TLS RATE_ITERS
  local name=$1 tls=$2 rate_iters=$3 common
  common="ucx_perftest from UCX $ucx_version, $api; UCX_TLS=$tls UCX_NET_DEVICES=lo; $placement"
  wanted "$transports" "$name" || return 0
  if wanted "$workloads" latency; then measure_latency; fi
  if wanted "$workloads" rate; then measure_rate; fi
  if wanted "$workloads" goodput; then measure_goodput; fi
}

# The three measurements of one transport; they read measure_transport's
# name, tls, rate_iters and common (bash's dynamic scoping).
measure_latency() {
  result_start "$lat_test" 32
  run_perftest "${name}_latency" "$tls" "$lat_test" 32 "$lat_iters" "$lat_warmup"
  local typical avg iters
  typical=$(field 3) avg=$(field 5) iters=$(field 2)
  local p50
  p50=$(awk -v t="$typical" 'BEGIN { printf "%.3f", 2 * t }')
  write_json "$outdir/ucx_${name}_latency.json" "$name" latency \
    "$common; lanes: $lanes; $lat_test 32 B, $lat_warmup warmup iterations; rtt_p50_us = 2 x ucx_perftest's typical one-way latency ($typical us = 50th percentile of its ring buffer of recent iterations, halved); its one-way average over the whole run was $avg us; other percentiles are not reported by ucx_perftest" \
    "{\"size\":32,\"iters\":$iters,\"rtt_p50_us\":$p50}"
  echo "$prog: ucx $name latency 32 B: rtt p50 (2 x typical) $p50 us round trip; one-way typical $typical us, average $avg us"
  files=$((files + 1))
}

measure_rate() {
  result_start "$bw_test" 32
  run_perftest "${name}_rate" "$tls" "$bw_test" 32 "$rate_iters" 100000
  local rps iters
  iters=$(field 2) rps=$(field 9)
  local result
  result=$(awk -v n="$iters" -v r="$rps" 'BEGIN {
    printf "{\"size\":32,\"sessions\":1,\"client_threads\":1,\"server_threads\":1,\"duration_s\":%.3f,\"requests\":%d,\"rps\":%.1f,\"rps_per_client_thread\":%.1f,\"rps_per_server_thread\":%.1f}", n / r, n, r, r, r }')
  write_json "$outdir/ucx_${name}_rate.json" "$name" rate \
    "$common; lanes: $lanes; $bw_test 32 B, 100000 warmup messages, ucx_perftest's default outstanding-send limit (-O); a one-way stream of messages with no responses, so rps is a message rate, not an RPC rate" \
    "$result"
  echo "$prog: ucx $name rate 32 B: $rps msg/s"
  files=$((files + 1))
}

measure_goodput() {
  local big=$((8 << 20))
  result_start "$bw_test" "$big"
  run_perftest "${name}_goodput" "$tls" "$bw_test" "$big" "$bw_iters" 20
  local mibps iters result
  iters=$(field 2) mibps=$(field 7)
  result=$(awk -v n="$iters" -v m="$mibps" -v s="$big" 'BEGIN {
    b = m * 1048576; printf "{\"size\":%d,\"duration_s\":%.3f,\"messages\":%d,\"gbps\":%.3f}", s, n * s / b, n, b * 8 / 1e9 }')
  write_json "$outdir/ucx_${name}_goodput.json" "$name" goodput \
    "$common; lanes: $lanes; $bw_test 8 MiB messages, 20 warmup messages, one-way; gbps from ucx_perftest's overall MB/s, which are MiB/s" \
    "$result"
  echo "$prog: ucx $name goodput 8 MiB: $mibps MiB/s = $(awk -v m="$mibps" 'BEGIN { printf "%.2f", m * 1048576 * 8 / 1e9 }') Gbit/s"
  files=$((files + 1))
}

measure_transport tcp tcp "$rate_iters_tcp"
measure_transport shm sm "$rate_iters_shm"
echo "$prog: wrote $files files to $outdir"
