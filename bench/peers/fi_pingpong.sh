#!/usr/bin/env bash
# libfabric peer: runs the packaged fi_pingpong, server in the background and
# client to 127.0.0.1, over the providers a user would try on a host without
# RDMA hardware, and writes one bench/compare/SCHEMA.md latency file per
# provider into OUTDIR:
#
#   fi_pingpong_udp.json           -p udp          -e dgram  -d lo
#   fi_pingpong_shm.json           -p shm          -e rdm
#   fi_pingpong_tcp_ofi_rxm.json   -p 'tcp;ofi_rxm' -e rdm   -d lo
#
# fi_pingpong sends 32-byte messages back and forth (-S 32) and reports only
# usec/xfer = elapsed / iterations / 2, i.e. the MEAN one-way time. rtt_p50_us is
# the mean round trip (2 x usec/xfer), which "setup" says; p90..max are not
# available and are left out. fi_pingpong has no warmup: every iteration is
# timed. Each run's full output is kept in OUTDIR/logs.
#
# Usage: bench/peers/fi_pingpong.sh OUTDIR
# Env:   FI_PP_PORT     fi_pingpong's TCP control port (47592); each run uses the next one
#        ITERS          round trips per provider (100000)
#        RUN_TIMEOUT_S  limit for each fi_pingpong process (120)
#        NO_PIN=1       do not pin (default: server on CPU 1, client on CPU 0)
set -euo pipefail

prog=fi_pingpong.sh
. "$(dirname "${BASH_SOURCE[0]}")/result_lib.sh"
die() {
  echo "$prog: error: $*" >&2
  exit 1
}
if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: bench/peers/fi_pingpong.sh OUTDIR" >&2
  exit 2
fi
outdir=$1

port=${FI_PP_PORT:-47592}
iters=${ITERS:-100000}
run_timeout=${RUN_TIMEOUT_S:-120}
size=32
for v in port iters run_timeout; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
((iters > 0)) || die "ITERS must be positive"

command -v fi_pingpong >/dev/null || die "fi_pingpong not found (install libfabric-bin: bench/peers/install-peer-deps.sh)"
command -v ss >/dev/null || die "ss not found (install iproute2)"
fi_version=$(fi_info --version 2>/dev/null | sed -n 's/^libfabric: //p' | head -n1)
fi_version=${fi_version:-unknown}

server_pin=() client_pin=() placement="two processes over 127.0.0.1, not pinned"
if [[ ${NO_PIN:-0} != 1 ]] && taskset -c 0,1 true 2>/dev/null; then
  server_pin=(taskset -c 1) client_pin=(taskset -c 0)
  placement="two processes over 127.0.0.1, server pinned to CPU 1 and client to CPU 0 (taskset)"
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

# measure NAME PROVIDER FI_PINGPONG_ARGS...: one server + client pair, one JSON file.
measure() {
  local name=$1 provider=$2
  shift 2
  local args=(-p "$provider" "$@" -S "$size" -I "$iters")
  result_start "${args[@]}"
  local slog="$outdir/logs/fi_pingpong_$name.server.log"
  local clog="$outdir/logs/fi_pingpong_$name.client.log"
  # The *_IFACE variables keep the udp and tcp providers on lo as well.
  local env_vars=(FI_UDP_IFACE=lo FI_TCP_IFACE=lo)
  echo "$prog: $name: fi_pingpong ${args[*]}"
  if ss -Hltn "sport = :$port" | grep -q .; then
    die "$name: TCP port $port is already in use; choose another with FI_PP_PORT"
  fi
  env "${env_vars[@]}" timeout "$run_timeout" "${server_pin[@]}" fi_pingpong "${args[@]}" \
    -B "$port" >"$slog" 2>&1 &
  server_pid=$!
  local tries=0
  until ss -Hltn "sport = :$port" | grep -q .; do
    kill -0 "$server_pid" 2>/dev/null || die "$name: server exited early; see $slog"
    ((++tries <= 100)) || die "$name: server not listening on port $port after 10 s; see $slog"
    sleep 0.1
  done
  local rc=0
  env "${env_vars[@]}" timeout "$run_timeout" "${client_pin[@]}" fi_pingpong "${args[@]}" \
    -P "$port" 127.0.0.1 >"$clog" 2>&1 &
  client_pid=$!
  wait "$client_pid" || rc=$?
  client_pid=""
  if ((rc != 0)); then
    ((rc == 124)) && die "$name: client timed out after $run_timeout s; see $clog"
    die "$name: client failed (exit $rc); see $clog"
  fi
  rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  ((rc == 0)) || die "$name: server failed (exit $rc); see $slog"
  port=$((port + 1))

  # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
  local line
  line=$(awk '$1 == "bytes" { getline; print; exit }' "$clog")
  [[ $(wc -w <<<"$line") -eq 8 && $(awk '{ print $1 }' <<<"$line") == "$size" ]] ||
    die "$name: no result line for $size B in $clog"
  local usec_per_xfer ack
  usec_per_xfer=$(awk '{ print $7 }' <<<"$line") ack=$(awk '{ print $3 }' <<<"$line")
  [[ $ack == =* ]] || die "$name: sent and acknowledged counts differ ('$line'); see $clog"
  local rtt
  rtt=$(awk -v u="$usec_per_xfer" 'BEGIN { printf "%.3f", 2 * u }')
  local setup="fi_pingpong from libfabric $fi_version, fi_pingpong ${args[*]}; $placement; FI_UDP_IFACE=lo FI_TCP_IFACE=lo; no warmup (fi_pingpong has none), all $iters round trips timed; rtt_p50_us is NOT a median: fi_pingpong reports only the mean, usec/xfer = $usec_per_xfer us (elapsed / iterations / 2, one-way), and rtt_p50_us = 2 x usec/xfer, the mean round trip; other percentiles are not available"
  printf '{"system":"fi_pingpong","transport":%s,"workload":"latency","setup":%s,"results":[{"size":%d,"iters":%d,"rtt_p50_us":%s,"rtt_mean_us":%s}]}\n' \
    "$(json_str "$provider")" "$(json_str "$setup")" "$size" "$iters" "$rtt" "$rtt" \
    >"$outdir/fi_pingpong_$name.json" || die "cannot write $outdir/fi_pingpong_$name.json"
  result_wrap "$outdir/fi_pingpong_$name.json" "{\"args\":$(json_str "${args[*]}")}" 2 ||
    die "cannot write $outdir/fi_pingpong_$name.json"
  echo "$prog: $provider 32 B: mean round trip $rtt us (usec/xfer $usec_per_xfer)"
}

measure udp udp -e dgram -d lo
measure shm shm -e rdm
measure tcp_ofi_rxm 'tcp;ofi_rxm' -e rdm -d lo
echo "$prog: wrote 3 files to $outdir"
